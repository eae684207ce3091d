# SPDX-License-Identifier: Apache-2.0
"""What an operator relies on: live reload, graceful stop, metrics, /top,
logs, and clear start-up failures."""
import json
import os
import signal
import socket
import subprocess
import time
import unittest

import fleet
import spop
import harness
from harness import AGENT, Agent, Redis, free_port

RULE_A = """
[rule:a]
key = key
rate = 3/1m
"""
RULE_B = """
[rule:b]
key = ip
rate = 1/1m
"""


def wait_for(pred, timeout=5.0, step=0.02):
    """harness.wait_for, with this module's defaults."""
    return harness.wait_for(pred, timeout, step)


class Reload(unittest.TestCase):
    """SIGHUP on an open connection. Each reload's file also carries a probe
    rule of its own (message probe-N): the test waits until the worker that
    owns its connection answers with rules of that file, instead of sleeping
    and hoping the workers are done."""

    def setUp(self):
        self.agent = Agent(RULE_A)
        self.c = spop.Client(self.agent.addr)
        self.c.handshake()
        self.sid = 0
        self.gen = 0

    def tearDown(self):
        self.c.close()
        self.agent.stop()  # checks the exit code

    def decide(self, msg="check-rate", **args):
        self.sid += 1
        return self.c.decide(args, stream=self.sid, fid=1, message=msg)

    def probe_rule(self, gen):
        return "\n[rule:probe-%d]\nmessage = probe-%d\nkey = key\nrate = 1/1h\n" % (gen, gen)

    def has_rules_of(self, gen):
        """The second request for a fresh key under probe-gen's 1/1h is
        denied (blocked, or would_block under [agent] shadow): only when this
        connection's worker has that file's rules (else nothing matches)."""
        key = unique_key()
        self.decide(msg="probe-%d" % gen, key=key)
        r = self.decide(msg="probe-%d" % gen, key=key)
        return r.get("blocked") is True or r.get("would_block") is True

    def reload(self, ini, extra_agent=None, valid=True):
        before = self.agent.metric("spoa_ratelimit_reloads_total")
        failed = self.agent.metric("spoa_ratelimit_reload_failures_total")
        self.gen += 1
        self.agent.rewrite(ini + self.probe_rule(self.gen), extra_agent)
        self.agent.p.send_signal(signal.SIGHUP)
        if not valid:
            self.assertTrue(wait_for(lambda: self.agent.metric(
                "spoa_ratelimit_reload_failures_total") > failed, timeout=10))
            self.assertEqual(self.agent.metric("spoa_ratelimit_reloads_total"), before)
            return
        self.assertTrue(wait_for(lambda: self.agent.metric("spoa_ratelimit_reloads_total")
                                 > before, timeout=10), self.agent.output()[-2000:])
        self.assertTrue(wait_for(lambda: self.has_rules_of(self.gen), timeout=10),
                        "the connection's worker never answered with the new rules")

    def test_add_change_remove_on_open_connection(self):
        ip = ("ipv4", "192.0.2.1")
        self.assertEqual(self.decide(key="k", ip=ip)["remaining"], 2)
        self.assertEqual(self.decide(key="k", ip=ip)["remaining"], 1)
        # add rule b: applies on the connection already open; a keeps its bucket
        self.reload(RULE_A + RULE_B)
        r = self.decide(key="k", ip=ip)
        self.assertEqual(r["rule"], "a")
        self.assertEqual(r["remaining"], 0)
        r = self.decide(key="other", ip=ip)  # b's first decision for this ip
        self.assertEqual(r["rule"], "b")
        r = self.decide(key="other2", ip=ip)
        self.assertIs(r["blocked"], True)
        self.assertEqual(r["rule"], "b")
        # a broken file leaves the old rules in force
        self.reload(RULE_A + RULE_B + "\n[rule:c]\nkey = key\nrate = lots/1s\n", valid=False)
        self.assertEqual(self.agent.metric("spoa_ratelimit_reload_failures_total"), 1)
        self.assertRegex(self.agent.output(), r"agent\.ini:\d+: ")
        self.assertEqual(self.decide(key="other3", ip=ip)["rule"], "b")
        self.assertTrue(self.has_rules_of(self.gen - 1), "the rules in force changed")
        # remove b, change a's rate
        self.reload(RULE_A.replace("3/1m", "100/1m"))
        r = self.decide(key="fresh", ip=ip)
        self.assertEqual(r["rule"], "a")
        self.assertEqual(r["limit"], 100)
        self.assertIsNone(self.agent.p.poll())

    def test_agent_shadow_reloaded(self):
        """[agent] shadow = yes turns every rule into a dry run, and back."""
        key = unique_key()
        got = [self.decide(key=key) for _ in range(4)]
        self.assertEqual([g["blocked"] for g in got], [False, False, False, True])
        self.reload(RULE_A, extra_agent="shadow = yes\n")
        r = self.decide(key=key)  # over the limit: would block, does not
        self.assertIs(r["blocked"], False, r)
        self.assertIs(r["would_block"], True, r)
        self.assertNotIn("rule", r)
        self.reload(RULE_A, extra_agent="shadow = no\n")
        r = self.decide(key=key)
        self.assertIs(r["blocked"], True, r)
        self.assertEqual(r["rule"], "a")

    def refused(self):
        """A new connection from 127.0.0.1 gets no AGENT-HELLO: closed at accept."""
        sk = socket.create_connection(self.agent.addr, timeout=10)
        try:
            sk.sendall(spop.hello())
            return sk.recv(4096) == b""
        except ConnectionResetError:
            return True
        finally:
            sk.close()

    def test_allow_reloaded(self):
        """allow reloaded: new peers outside it are refused at accept, the
        connection already open keeps working; and allowed again after."""
        self.assertFalse(self.refused())
        self.reload(RULE_A, extra_agent="allow = 10.0.0.0/8\n")
        # every worker accepts; each takes the new list on its next wake-up
        self.assertTrue(wait_for(self.refused, timeout=10), "127.0.0.1 still served")
        self.assertEqual([self.refused() for _ in range(10)], [True] * 10)
        self.assertIn("blocked", self.decide(key="still-open"))
        self.reload(RULE_A, extra_agent="allow = 127.0.0.0/8\n")
        self.assertTrue(wait_for(lambda: not self.refused(), timeout=10))
        self.assertEqual([self.refused() for _ in range(10)], [False] * 10)


class ReloadFallback(Reload):
    """[fallback] reloaded while Redis is unreachable (the agent points at a
    port where nothing listens, so every decision falls back)."""

    def setUp(self):
        self.dead = free_port()  # reserved: nothing will listen there
        self.redis_ini = "[redis]\nurl = redis://127.0.0.1:%d/0\n" % self.dead
        self.rule = "\n[rule:f]\nkey = key\nrate = 100/1m\n"
        self.agent = Agent(self.fallback("open", "0.5"))
        self.c = spop.Client(self.agent.addr)
        self.c.handshake()
        self.sid = 0
        self.gen = 0

    def fallback(self, mode, share):
        return self.redis_ini + "[fallback]\nmode = %s\nshare = %s\n" % (mode, share) + self.rule

    def allowed_of_fresh_key(self, n=60):
        key = unique_key()
        got = [self.decide(key=key) for _ in range(n)]
        for g in got:
            self.assertIs(g.get("degraded"), True, g)
        return sum(1 for g in got if g["blocked"] is False), got

    def test_fallback_reloaded(self):
        # open, share 0.5: the backstop bucket holds 0.5 x burst = 50
        n, _ = self.allowed_of_fresh_key()
        self.assertEqual(n, 50)
        self.reload(self.fallback("closed", "0.5"))
        n, got = self.allowed_of_fresh_key(5)
        self.assertEqual(n, 0, got)
        self.assertTrue(all(g.get("retry_after", 0) >= 1 for g in got), got)
        self.reload(self.fallback("open", "0.05"))
        n, _ = self.allowed_of_fresh_key()
        self.assertEqual(n, 5)

    # the inherited tests run in Reload
    test_add_change_remove_on_open_connection = None
    test_agent_shadow_reloaded = None
    test_allow_reloaded = None


def unique_key():
    return "k-" + os.urandom(6).hex()


class Stop(unittest.TestCase):
    def test_sigterm_with_open_connections(self):
        agent = Agent(RULE_A)
        c = spop.Client(agent.addr)
        c.handshake()
        c.decide({"key": "x"})
        idle = socket.create_connection(agent.addr)  # a peer that never spoke
        t0 = time.time()
        rc = agent.stop(signal.SIGTERM, timeout=10)
        self.assertEqual(rc, 0, agent.output())
        self.assertLess(time.time() - t0, 5.0)
        f = c.recv_frame()
        self.assertEqual(f["type"], spop.AGENT_DISCONNECT)
        self.assertEqual(spop.decode_kv(f["payload"])["status-code"], 0)
        c.close()
        idle.close()

    def test_sigterm_returns_leases(self):
        """A key kept busy until SIGTERM holds a lease then (a lease that
        sees no request for a tick is given back anyway, so the traffic must
        go on until the signal); after the agent exits none is held."""
        redis = Redis()
        try:
            agent = Agent(RULE_A.replace("3/1m", "1000/1s\nburst = 1000") +
                          "[redis]\nurl = redis://127.0.0.1:%d/0\ntimeout = 1s\n"
                          "[lease]\nttl = 5s\n" % redis.port)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            busy = fleet.LoadClient(agent.addr, {"key": "lk"}, [(None, "paced", 200.0)])
            busy.start()
            busy.start_at(time.monotonic())
            try:
                def held():
                    keys = redis.cli("--scan", "--pattern", "rl:t2:*").split()
                    return keys and [f for f in redis.cli("hkeys", keys[0]).split()
                                     if f.startswith("h:")]
                self.assertTrue(wait_for(held, timeout=10),
                                "the agent should hold a lease while busy")
                self.assertEqual(len(redis.cli("--scan", "--pattern", "rl:t2:*").split()), 1)
                self.assertEqual(agent.stop(), 0, agent.output())
            finally:
                busy.stop()
                busy.join(10)
            self.assertGreater(len(busy.records), 0)
            keys = redis.cli("--scan", "--pattern", "rl:t2:*").split()
            left = [f for f in redis.cli("hkeys", keys[0]).split() if f.startswith("h:")]
            self.assertEqual(left, [], "leases must be given back at SIGTERM")
        finally:
            redis.stop()


class Metrics(unittest.TestCase):
    def run_25(self, extra=""):
        agent = Agent("[rule:hourly]\nkey = key\nrate = 10/1h\n" + extra)
        try:
            if "[redis]" in extra:
                self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            c = spop.Client(agent.addr)
            c.handshake()
            got = [c.decide({"key": "m"}, stream=i, fid=1) for i in range(25)]
            c.close()
            self.assertEqual(sum(not g["blocked"] for g in got), 10)
            # decision_seconds is observed once the ACK is written: the client
            # may read the last ACK a moment before the agent records it
            self.assertTrue(wait_for(lambda: "spoa_ratelimit_decision_seconds_count 25\n"
                                     in agent.metrics(), 5), agent.metrics()[-3000:])
            m = agent.metrics()
            self.assertIn('spoa_ratelimit_decisions_total{rule="hourly",result="allowed"} 10\n', m)
            self.assertIn('spoa_ratelimit_decisions_total{rule="hourly",result="blocked"} 15\n', m)
            self.assertIn('spoa_ratelimit_decision_seconds_bucket{le="+Inf"} 25\n', m)
            self.assertIn("spoa_ratelimit_decision_seconds_count 25\n", m)
            self.assertIn("# TYPE spoa_ratelimit_decision_seconds histogram", m)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_connections") == 0))
            top = json.loads(agent.get("/top"))
            self.assertEqual(top["rules"]["hourly"][0]["key"], "m")
            self.assertEqual(top["rules"]["hourly"][0]["blocked"], 15)
            return m
        finally:
            self.assertEqual(agent.stop(), 0, agent.output())

    def test_standalone(self):
        m = self.run_25()
        self.assertIn("spoa_ratelimit_redis_up 0\n", m)

    def test_with_redis(self):
        redis = Redis()
        try:
            m = self.run_25("[redis]\nurl = redis://127.0.0.1:%d/0\ntimeout = 1s\n" % redis.port)
            self.assertIn("spoa_ratelimit_redis_up 1\n", m)
            self.assertIn("spoa_ratelimit_redis_latency_seconds_count", m)
        finally:
            redis.stop()

    def test_404_and_methods(self):
        agent = Agent(RULE_A)
        try:
            import urllib.error
            import urllib.request
            with self.assertRaises(urllib.error.HTTPError) as e:
                agent.get("/nope")
            self.assertEqual(e.exception.code, 404)
        finally:
            agent.stop()


class Logs(unittest.TestCase):
    def test_shadow_rule_logs_counts_not_lines(self):
        agent = Agent("[rule:sh]\nkey = key\nrate = 1/1m\nshadow = yes\n")
        try:
            c = spop.Client(agent.addr)
            c.handshake()
            for i in range(30):
                self.assertIs(c.decide({"key": "noisy"}, stream=i, fid=1)["blocked"], False)
            c.close()
            self.assertTrue(wait_for(lambda: "shadow rule would have blocked" in agent.output(),
                                     timeout=15, step=0.2))
            out = agent.output()
            self.assertEqual(out.count("shadow rule would have blocked"), 1, out)
            self.assertIn("rule=sh would_block=29", out)
            self.assertIn('top_key="noisy"', out)
            for line in out.splitlines():
                self.assertRegex(line, r"^ts=\S+ level=(error|warn|info|debug) msg=")
        finally:
            agent.stop()


class StartupFailures(unittest.TestCase):
    def test_port_in_use(self):
        sk = socket.socket()
        sk.bind(("127.0.0.1", 0))
        sk.listen(1)
        port = sk.getsockname()[1]
        path = "/tmp/spoa-inuse-%d.ini" % os.getpid()
        with open(path, "w") as f:
            f.write("[agent]\nlisten = 127.0.0.1:%d\n%s" % (port, RULE_A))
        try:
            p = subprocess.run([AGENT, "-c", path], capture_output=True, text=True, timeout=10)
        finally:
            os.unlink(path)
            sk.close()
        self.assertNotEqual(p.returncode, 0)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("127.0.0.1:%d" % port, lines[0])
        self.assertIn("in use", lines[0])

    def test_bad_redis_url(self):
        path = "/tmp/spoa-badurl-%d.ini" % os.getpid()
        with open(path, "w") as f:
            f.write("[agent]\nlisten = 127.0.0.1:%d\n[redis]\nurl = redis://host:99999/0\n%s"
                    % (free_port(), RULE_A))
        try:
            p = subprocess.run([AGENT, "-c", path], capture_output=True, text=True, timeout=10)
        finally:
            os.unlink(path)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()


class RedisConnection(unittest.TestCase):
    """AUTH and db from the URL; unix sockets. ([redis] timeout = 1s where
    an answer must not be degraded: 100ms is one stall of a loaded machine.)"""

    def start_redis(self, *args):
        r = Redis(args=args)
        return r, r.port

    def decide_10(self, agent):
        c = spop.Client(agent.addr)
        c.handshake()
        got = [c.decide({"key": "u"}, stream=i, fid=1) for i in range(12)]
        c.close()
        self.assertEqual([g["blocked"] for g in got], [False] * 10 + [True] * 2)
        self.assertTrue(all("degraded" not in g for g in got), got)

    def test_password_and_db(self):
        redis, port = self.start_redis("--requirepass", "s3cret")
        try:
            agent = Agent("[rule:u]\nkey = key\nrate = 10/1m\n"
                          "[redis]\nurl = redis://:s3cret@127.0.0.1:%d/3\ntimeout = 1s\n" % port)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            self.decide_10(agent)
            cli = ["redis-cli", "-p", str(port), "-a", "s3cret", "--no-auth-warning"]
            in3 = subprocess.run(cli + ["-n", "3", "--scan"], capture_output=True, text=True)
            in0 = subprocess.run(cli + ["-n", "0", "--scan"], capture_output=True, text=True)
            # (rl:agents and {rl:agents}:stats, the fleet's heartbeats and rows, are there too)
            self.assertEqual([k for k in in3.stdout.split() if k not in ("rl:agents", "{rl:agents}:stats", "rl:epoch")],
                             ["rl:t2:u:u"])
            self.assertEqual(in0.stdout.split(), [])
            self.assertEqual(agent.stop(), 0, agent.output())
        finally:
            redis.stop()

    def test_wrong_password_is_reported_and_falls_back(self):
        redis, port = self.start_redis("--requirepass", "s3cret")
        try:
            agent = Agent("[rule:u]\nkey = key\nrate = 10/1m\n"
                          "[redis]\nurl = redis://:wrong@127.0.0.1:%d/0\n" % port)
            try:
                self.assertTrue(wait_for(lambda: "(WRONGPASS)" in agent.output()))
                c = spop.Client(agent.addr)
                c.handshake()
                r = c.decide({"key": "u"})
                self.assertIs(r["degraded"], True)
                c.close()
                self.assertEqual(agent.metric("spoa_ratelimit_redis_up"), 0)
                time.sleep(0.5)  # several reconnection attempts: still one line
                self.assertEqual(agent.output().count('msg="redis refused the password '
                                                      '(WRONGPASS)'), 1, agent.output())
            finally:
                self.assertEqual(agent.stop(), 0, agent.output())
        finally:
            redis.stop()

    def test_unix_socket(self):
        import tempfile
        d = tempfile.mkdtemp()
        sock = os.path.join(d, "redis.sock")
        redis, port = self.start_redis("--unixsocket", sock, "--unixsocketperm", "700")
        try:
            self.assertTrue(wait_for(lambda: os.path.exists(sock)))
            agent = Agent("[rule:u]\nkey = key\nrate = 10/1m\n"
                          "[redis]\nurl = unix:%s\ntimeout = 1s\n" % sock)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            self.decide_10(agent)
            self.assertEqual(agent.stop(), 0, agent.output())
        finally:
            redis.stop()
