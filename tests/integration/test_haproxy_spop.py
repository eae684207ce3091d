# SPDX-License-Identifier: Apache-2.0
"""What real HAProxy does on the wire with the shipped kit, once per HAProxy
found (Debian's 2.6, and a 3.1+ build where one is found; see haproxies.py), seen
through a tap between HAProxy and the agent (taps.py):

- connection reuse: a handful of SPOP connections for 100 requests, with the
  kit's SPOE backend declared after the frontend (as shipped) or before it (on
  3.1+ only `mode spop` gives that; `mode tcp` opens one connection per request);
- health checks (`option spop-check`): the HELLO HAProxy sends, the agent's
  answer, and HAProxy's verdict (L7OK) read from its admin socket;
- pipelining: with decisions that wait on Redis for some requests and not for
  others, the agent answers out of order on one connection and HAProxy gives
  every request its own answer."""
import json
import re
import socket
import sys
import threading
import unittest

import spop
import harness
from harness import Agent, Redis
from haproxies import KitHAProxy, backend_first, per_haproxy, plain_mode_tcp, spoe_processing
from taps import DelayTap, SpopTap

RULES = """
[rule:api]
message = check-rate
key = key
rate = 1000000/1s
"""


def wait_for(cond, timeout=20.0, what="condition"):
    """harness.wait_for's value, or an AssertionError naming what was awaited."""
    v = harness.wait_for(cond, timeout)
    if not v:
        raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
    return v


def spoe_log(text):
    """HAProxy's SPOE log lines as (status code, errors, processed): 2.6 writes
    `sid=N st=S t/t/t/t/t i/a s/w E/P`, 3.1+ `sid=N st=S t E/P`."""
    return [(int(m.group(1)), int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"SPOE: \[ratelimit-agent\] <GROUP:check> sid=\d+ st=(\d+) "
                                 r".*?(\d+)/(\d+)$", text, re.M)]


def spoe_log_everything(spoe):
    new = spoe.replace("    option dontlog-normal\n", "")
    assert new != spoe
    return new


def decided(haproxy, path="/warmup", key="warmup"):
    """One request answered by the agent (the SPOE connects lazily)."""
    st, h, _ = haproxy.request(path, {"x-api-key": key})
    return "ratelimit-status" not in h


class KitRun:
    """SPOP connections HAProxy opens for 100 sequential requests."""

    REQUESTS = 100

    def run_kit(self, cfg_edits, spoe_edits=()):
        agent = Agent(RULES)
        tap = SpopTap(agent.port)
        haproxy = KitHAProxy(self.build, tap.port, cfg_edits=cfg_edits, spoe_edits=spoe_edits)
        try:
            wait_for(lambda: decided(haproxy), what="a first decision through " + repr(self.build))
            before = agent.metric("spoa_ratelimit_connections_accepted_total")
            for i in range(self.REQUESTS):
                st, h, _ = haproxy.request("/api/%d" % i, {"x-api-key": "reuse"})
                self.assertEqual(st, 200)
                self.assertEqual(h.get("ratelimit-policy"), '"api";q=1000000;w=1', h)
            accepted = agent.metric("spoa_ratelimit_connections_accepted_total") - before
            mode = haproxy.server("spoe-ratelimit", "agent1")["mode"]
            self.spoe_log = spoe_log(haproxy.output())
            # HAProxy drops a log line rather than wait for another thread
            # writing to the same fd, and counts it here
            self.dropped_logs = int(haproxy.show_info()["DroppedLogs"])
            return tap.requests(), tap.healthchecks(), accepted, mode
        finally:
            haproxy.stop()
            tap.stop()
            agent.stop()


class Reuse(KitRun):
    HANDFUL = 8  # 2.6 and 3.4 open 1-2 (one per thread); one per request would be ~100

    def check_handful(self, cfg_edits, where):
        # the kit logs only SPOE errors (dontlog-normal): log every message here
        conns, checks, accepted, mode = self.run_kit(cfg_edits, (spoe_log_everything,))
        notifies = sum(len(c.of("h2a", spop.NOTIFY)) for c in conns)
        self.assertGreaterEqual(notifies, self.REQUESTS)
        self.assertLessEqual(len(conns), self.HANDFUL,
                             "%s, backend %s: %d SPOP connections (each with a HELLO) for %d "
                             "requests" % (self.build, where, len(conns), self.REQUESTS + 1))
        # the agent's own count agrees (health checks are connections too)
        self.assertLessEqual(accepted, self.HANDFUL + len(checks))
        print("[%s, backend %s: %d SPOP connections for %d requests] "
              % (self.build.text, where, len(conns), self.REQUESTS + 1),
              end="", file=sys.stderr, flush=True)
        self.assertEqual(mode, "spop" if self.build.atleast(3, 1) else "tcp")
        # HAProxy's SPOE log: one line per request (or counted as dropped),
        # every one with status 0
        self.assertGreaterEqual(len(self.spoe_log) + self.dropped_logs, self.REQUESTS)
        self.assertTrue(self.spoe_log)
        self.assertEqual({st for st, _, _ in self.spoe_log}, {0})
        _, errors, processed = self.spoe_log[-1]
        if self.build.atleast(3, 1):
            # 3.4 counts every stream teardown as an error (doc/haproxy.md says so)
            self.assertGreaterEqual(errors, processed - 2, self.spoe_log[-3:])
        else:
            self.assertEqual(errors, 0, self.spoe_log[-3:])

    def test_backend_after_frontend(self):
        self.check_handful((), "after the frontend (as shipped)")

    def test_backend_before_frontend(self):
        self.check_handful((backend_first,), "before the frontend")


class ReuseControl(KitRun):
    """The control, 3.1+ only: what the kit's `.if version_atleast(3.1)` avoids.
    (2.6 runs the old SPOE engine, where mode tcp is right.)"""

    min_version = (3, 1)

    def test_mode_tcp_backend_first_is_one_connection_per_request(self):
        # a connection and a HELLO per request: give each more than the kit's
        # 150ms, which a loaded machine may need for all that
        conns, _, _, _ = self.run_kit((plain_mode_tcp, backend_first), (spoe_processing("1s"),))
        self.assertGreaterEqual(len(conns), self.REQUESTS // 2,
                                "%s: mode tcp declared first no longer opens a connection per "
                                "request; update doc/haproxy.md, HAProxy 2.6 vs 3.1+" % self.build)


class HealthCheck:
    """option spop-check: HAProxy's health-check HELLO and the agent's answer."""

    def test_spop_check_passes(self):
        agent = Agent(RULES)
        tap = SpopTap(agent.port)
        haproxy = KitHAProxy(self.build, tap.port)
        try:
            conn = wait_for(lambda: next((c for c in tap.healthchecks()
                                          if c.of("a2h", spop.AGENT_HELLO)), None),
                            what="a health check answered")
            row = wait_for(lambda: (lambda r: r if r["check_status"] == "L7OK" else None)(
                haproxy.server("spoe-ratelimit", "agent1")), what="check_status L7OK")
            self.assertEqual(row["check_desc"], "Layer7 check passed")
            self.assertEqual(row["status"], "UP")
        finally:
            haproxy.stop()
            tap.stop()
            agent.stop()
        _, _, f, raw = conn.frames[0]
        self.assertEqual((f["type"], f["flags"], f["stream"], f["fid"]),
                         (spop.HAPROXY_HELLO, spop.FIN, 0, 0))
        # the same fixed 82-byte HELLO in 2.6 and 3.4: no engine-id, no capability
        self.assertEqual(len(raw), 82, raw)
        self.assertEqual(spop.decode_kv(f["payload"]),
                         {"supported-versions": "2.0", "max-frame-size": 16380,
                          "capabilities": "", "healthcheck": True})
        _, _, f, raw = conn.frames[1]
        self.assertEqual((f["type"], f["flags"], f["stream"], f["fid"]),
                         (spop.AGENT_HELLO, spop.FIN, 0, 0))
        kv = spop.decode_kv(f["payload"])
        self.assertEqual(kv["version"], "2.0")
        self.assertTrue(256 <= kv["max-frame-size"] <= 16384 - 4, kv)
        self.assertEqual(kv["capabilities"], "")  # present (3.1+ needs it), nothing offered
        self.assertEqual(len(conn.frames), 2, "nothing but HELLO and AGENT-HELLO")



class HealthCheckControl:
    """The control, 3.1+ only: HAProxy really reads the answer (an AGENT-HELLO
    without `capabilities` fails the check), so L7OK above means something."""

    min_version = (3, 1)

    def test_check_fails_without_capabilities(self):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(16)
        ls.settimeout(0.2)
        stop = threading.Event()

        def fake_agent():
            while not stop.is_set():
                try:
                    c, _ = ls.accept()
                except socket.timeout:
                    continue
                c.settimeout(2)
                try:
                    c.recv(65536)
                    c.sendall(spop.frame(spop.AGENT_HELLO, spop.kv(
                        [("version", "2.0"), ("max-frame-size", ("uint32", 16380))])))
                except OSError:
                    pass
                c.close()
        t = threading.Thread(target=fake_agent, daemon=True)
        t.start()
        haproxy = KitHAProxy(self.build, ls.getsockname()[1])
        try:
            row = wait_for(lambda: (lambda r: r if r["check_status"].startswith("L7")
                                    and r["check_status"] != "L7OK" else None)(
                haproxy.server("spoe-ratelimit", "agent1")), what="a failed layer-7 check")
            self.assertNotEqual(row["check_status"], "L7OK")
        finally:
            haproxy.stop()
            stop.set()
            t.join(5)
            ls.close()


def purge_delay(delay):
    def edit(cfg):
        new = cfg.replace("default-server check", "default-server pool-purge-delay %s check" % delay)
        assert new != cfg
        return new
    return edit


class IdleClose:
    """3.1+ only: idle SPOP connections are closed by the server's idle-pool
    purge (a share every `pool-purge-delay`, 5 s by default, shortened here),
    without a HAPROXY-DISCONNECT; the agent takes that as a normal close."""

    min_version = (3, 1)

    def test_idle_connections_purged_without_disconnect(self):
        agent = Agent(RULES)
        tap = SpopTap(agent.port)
        haproxy = KitHAProxy(self.build, tap.port, cfg_edits=(purge_delay("1s"),))
        try:
            wait_for(lambda: decided(haproxy), what="a first decision")

            def burst():  # concurrent requests: HAProxy opens more than one connection
                ts = [threading.Thread(target=haproxy.request, args=("/b", {"x-api-key": "b"}))
                      for _ in range(20)]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join(30)
                return len(tap.requests()) >= 2
            wait_for(burst, timeout=60, what="two SPOP connections")
            closed = wait_for(lambda: [c for c in tap.requests() if c.eof], timeout=60,
                              what="an idle SPOP connection closed")
            for c in closed:
                self.assertEqual(c.of("h2a", spop.HAPROXY_DISCONNECT), [],
                                 "3.4 sent a DISCONNECT before closing: update doc/haproxy.md")
                self.assertEqual(c.of("a2h", spop.AGENT_DISCONNECT), [])
            # a normal close for the agent: no protocol error counted
            errors = [line for line in agent.metrics().splitlines()
                      if line.startswith("spoa_ratelimit_protocol_errors_total{")]
            self.assertTrue(errors)
            self.assertEqual(sum(float(line.split()[-1]) for line in errors), 0, errors)
            # and the next request still gets its decision
            st, h, _ = haproxy.request("/after", {"x-api-key": "after"})
            self.assertEqual(h.get("ratelimit-policy"), '"api";q=1000000;w=1', h)
        finally:
            haproxy.stop()
            tap.stop()
            agent.stop()


SLOW_RULES = """
[redis]
url = redis://127.0.0.1:%d/0
timeout = 2s

[rule:slow]
message = check-rate
key = key
match = path ^/slow/
rate = 1000000/1s
lease = off
"""


class Pipelining:
    """/slow/ requests wait on Redis (a 50 ms delay line in front of it, lease
    = off: one call per decision); /fast/ requests match no rule and are
    answered at once. Sent concurrently, they share SPOP connections."""

    THREADS, ROUNDS = 20, 6

    def test_acks_out_of_order(self):
        redis = Redis()
        delay = DelayTap(redis.port, 0.05)
        agent = Agent(SLOW_RULES % delay.port)
        tap = SpopTap(agent.port)
        # a wide `timeout processing`: a busy machine must not turn slow answers into none
        haproxy = KitHAProxy(self.build, tap.port, spoe_edits=(spoe_processing("3s"),))
        try:
            wait_for(lambda: decided(haproxy, "/slow/warmup"), what="a first decision")
            wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1, what="redis up")
            results, errors = [], []

            def client(n):
                try:
                    for r in range(self.ROUNDS):
                        kind = "slow" if (n + r) % 2 else "fast"
                        path = "/%s/%d/%d" % (kind, n, r)
                        st, h, _ = haproxy.request(path, {"x-api-key": "k%d" % n})
                        results.append((kind, path, st, h))
                except Exception as e:  # reported below, with the others
                    errors.append(repr(e))
            threads = [threading.Thread(target=client, args=(n,)) for n in range(self.THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            self.assertEqual(errors, [])
            self.assertEqual(len(results), self.THREADS * self.ROUNDS)
            for kind, path, st, h in results:
                self.assertEqual(st, 200, (path, h))
                # each request got its own answer: the rule that its path selects
                if kind == "slow":
                    self.assertEqual(h.get("ratelimit-policy"), '"slow";q=1000000;w=1',
                                     (path, h))
                    self.assertNotIn("ratelimit-status", h, (path, h))
                else:
                    self.assertNotIn("ratelimit-policy", h, (path, h))
                    self.assertNotIn("ratelimit-status", h, (path, h))  # answered, not failed open
            conns = tap.requests()
            orders = [c.ack_order() for c in conns]
            report = json.dumps([{"notifies": n, "acks_out_of_order": late} for n, late in orders])
            print("[%s: %d NOTIFYs on %d SPOP connections, %d ACKs out of order] "
                  % (self.build.text, sum(n for n, _ in orders), len(conns),
                     sum(late for _, late in orders)), end="", file=sys.stderr, flush=True)
            self.assertGreater(sum(late for _, late in orders), 0,
                               "%s: no ACK answered out of order: %s" % (self.build, report))
            for c in conns:  # every NOTIFY answered once, on its own connection
                sent = sorted((f["stream"], f["fid"]) for f in c.of("h2a", spop.NOTIFY))
                acked = sorted((f["stream"], f["fid"]) for f in c.of("a2h", spop.ACK))
                self.assertEqual(sent, acked)
            if self.build.atleast(3, 1):
                # 3.1+ numbers streams per connection: odd stream-ids, frame-id 1
                ids = [(f["stream"], f["fid"]) for c in conns for f in c.of("h2a", spop.NOTIFY)]
                self.assertTrue(all(s % 2 == 1 and fid == 1 for s, fid in ids), ids[:10])
        finally:
            haproxy.stop()
            tap.stop()
            delay.stop()
            redis.stop()
            agent.stop()  # last: it raises unless the agent exits 0


per_haproxy(Reuse, globals())
per_haproxy(ReuseControl, globals())
per_haproxy(HealthCheck, globals())
per_haproxy(HealthCheckControl, globals())
per_haproxy(IdleClose, globals())
per_haproxy(Pipelining, globals())

if __name__ == "__main__":
    unittest.main()
