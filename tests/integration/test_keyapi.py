# SPDX-License-Identifier: Apache-2.0
"""What an operator needs on day two (issue 13), on the stats listener:
GET /config (the configuration in force, as --check --print prints it, with
a header: hash, load time, restart-only settings the file changed), GET
/key?rule=R&key=K (one client's state: bucket, lease entry, Redis bucket,
backstop) and POST /reset?rule=R&key=K (clear it), the counterparts of
HAProxy's "show table" and "clear table".

Standalone and against a real redis-server; with two agents holding leases,
a reset keeps the bound: from the reset on, no interval of length T admits
more than b + r*T, and Redis holds t + H <= b. Every agent must exit 0 on
SIGTERM (checked at cleanup)."""
import http.client
import json
import os
import re
import signal
import subprocess
import time
import unittest
import urllib.parse

import fleet
from fleet import LoadClient, Seq, redis_ini, unique, worst_window
import harness
from harness import AGENT, Agent, Redis, raw_http


def wait_for(pred, timeout=10.0, step=0.02):
    """harness.wait_for, with this module's defaults."""
    return harness.wait_for(pred, timeout, step)


def call(agent, method, path, timeout=5):
    """(status, headers lower-cased, body text) of one request to the stats port."""
    c = http.client.HTTPConnection("127.0.0.1", agent.stats_port, timeout=timeout)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def q(rule, key, **more):
    return urllib.parse.urlencode(dict(rule=rule, key=key, **more))


def key_state(agent, rule, key, **more):
    status, _, body = call(agent, "GET", "/key?" + q(rule, key, **more))
    if status != 200:
        raise AssertionError("GET /key: %d %s" % (status, body))
    return json.loads(body)


def reset(agent, rule, key, expect=200):
    status, _, body = call(agent, "POST", "/reset?" + q(rule, key))
    if status != expect:
        raise AssertionError("POST /reset: %d %s" % (status, body))
    return json.loads(body)


def check_print(path):
    p = subprocess.run([AGENT, "-c", path, "--check", "--print"], capture_output=True,
                       text=True, timeout=10)
    if p.returncode != 0:
        raise AssertionError("--check --print: %s" % p.stderr)
    return p.stdout


def header_and_body(page):
    """/config: the header (its leading comment lines, up to the first blank
    line) and the rest."""
    head, _, body = page.partition("\n\n")
    return head, body


def reloaded(agent, before, timeout=10.0):
    return wait_for(lambda: (agent.metric("spoa_ratelimit_reloads_total") or 0) > before,
                    timeout)


# One SPOE message per rule, so that each is driven alone.
STANDALONE = """
[rule:api]
message = m-api
key = key
rate = 5/1m

[rule:win]
message = m-win
key = key
rate = 5/1m
algorithm = sliding-window

[rule:pair]
message = m-pair
key = key, ip
rate = 3/1m

[rule:global]
message = m-global
rate = 2/1m
"""


class Config(unittest.TestCase):
    def test_config_is_check_print_and_follows_reloads(self):
        """GET /config is what --check --print prints for the file, under a
        header: the hash of the config_hash gauge, the load time, the
        restart-only settings the file changed since start."""
        a = Agent(STANDALONE, workers=2)
        self.addCleanup(a.stop)
        status, hdrs, page = call(a, "GET", "/config")
        self.assertEqual(status, 200)
        self.assertTrue(hdrs["content-type"].startswith("text/plain"))
        head, body = header_and_body(page)
        self.assertEqual(page[len(head) + 2:], check_print(a.ini))
        self.assertTrue(all(line.startswith(";") for line in head.splitlines()), head)
        gauge = int(a.metric("spoa_ratelimit_config_hash"))
        self.assertIn("; config_hash = %d " % gauge, head)
        loaded = int(re.search(r"\(unix (\d+)\)", head).group(1))
        self.assertEqual(loaded, a.metric("spoa_ratelimit_last_reload_seconds"))
        self.assertIn("; restart pending: none", head)
        # HEAD: the headers of GET, no body
        status, hdrs, text = call(a, "HEAD", "/config")
        self.assertEqual((status, text), (200, ""))
        self.assertEqual(int(hdrs["content-length"]), len(page.encode()))

        # SIGHUP with a new rate (applied) and new workers and [lease] ttl
        # (restart only): the page shows the file, and says what is not in force
        with open(a.ini) as f:
            text = f.read()
        text = text.replace("workers = 2", "workers = 3").replace("rate = 5/1m", "rate = 7/1m", 1)
        text += "\n[lease]\nttl = 2s\n"
        with open(a.ini, "w") as f:
            f.write(text)
        before = a.metric("spoa_ratelimit_reloads_total")
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(reloaded(a, before), a.output()[-2000:])
        status, _, page = call(a, "GET", "/config")
        head, body = header_and_body(page)
        self.assertEqual(page[len(head) + 2:], check_print(a.ini))
        self.assertIn("rate = 7/1m", body)
        self.assertIn(";   workers = 2 in force; the file says 3", head)
        self.assertIn(";   [lease] ttl = 1000ms in force; the file says 2000ms", head)
        self.assertNotIn("restart pending: none", head)
        self.assertIn("; config_hash = %d " % int(a.metric("spoa_ratelimit_config_hash")), head)
        self.assertNotEqual(int(a.metric("spoa_ratelimit_config_hash")), gauge)
        self.assertIn('"workers changed; takes effect at restart"', a.output())
        # the rule really changed: 7 pass now
        s = Seq(a.addr)
        self.addCleanup(s.close)
        got = [s.decide("m-api", key="after-reload") for _ in range(8)]
        self.assertEqual([g.get("blocked") for g in got], [False] * 7 + [True])

        # back to what is in force: nothing pending any more
        with open(a.ini, "w") as f:
            f.write(text.replace("workers = 3", "workers = 2").replace("\n[lease]\nttl = 2s\n",
                                                                       ""))
        before = a.metric("spoa_ratelimit_reloads_total")
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(reloaded(a, before), a.output()[-2000:])
        self.assertIn("; restart pending: none", call(a, "GET", "/config")[2])

    def test_methods_and_errors(self):
        a = Agent(STANDALONE)
        self.addCleanup(a.stop)
        status, hdrs, _ = call(a, "GET", "/reset?" + q("api", "x"))
        self.assertEqual(status, 405)
        self.assertEqual(hdrs.get("allow"), "POST")
        for path in ("/key?" + q("api", "x"), "/config"):
            status, hdrs, _ = call(a, "POST", path)
            self.assertEqual(status, 405, path)
            self.assertEqual(hdrs.get("allow"), "GET, HEAD")
        cases = [
            ("GET", "/key?" + q("nope", "x"), 404),
            ("POST", "/reset?" + q("nope", "x"), 404),
            ("GET", "/key?key=x", 400),
            ("GET", "/key?rule=api", 400),
            ("POST", "/reset?rule=api&key=", 400),
            ("GET", "/key?rule=api&key=%zz", 400),
            ("GET", "/key?" + q("api", "x", limit="10/1m"), 400),  # fixed limits
            ("GET", "/key?" + q("global", "x"), 400),  # a rule without key
            ("GET", "/keys", 404),
        ]
        for method, path, want in cases:
            status, _, body = call(a, method, path)
            self.assertEqual(status, want, "%s %s: %s" % (method, path, body))
            if path.startswith("/key?") or path.startswith("/reset?"):
                self.assertIn("error", json.loads(body))
        # a rule without key: one bucket for everyone, under the empty key
        s = Seq(a.addr)
        self.addCleanup(s.close)
        s.decide("m-global")
        st = key_state(a, "global", "")
        self.assertEqual((st["client_key"], st["bucket"]["remaining"]), ("", 1))
        call(a, "GET", "/key?rule=global")  # key= may be left out
        self.assertEqual(json.loads(call(a, "GET", "/key?rule=global")[2])["bucket"]["remaining"],
                         1)

    def test_stats_allow_applies(self):
        """/config, /key and /reset sit behind stats_allow like /metrics."""
        a = Agent(STANDALONE, extra_agent="stats_allow = 10.0.0.0/8\n", wait=False)
        self.addCleanup(a.stop)
        self.assertTrue(wait_for(lambda: '"started"' in a.output() or a.p.poll() is not None))
        for method, path in (("GET", "/config"), ("GET", "/key?" + q("api", "x")),
                             ("POST", "/reset?" + q("api", "x"))):
            data = raw_http(a.stats_port, method, path)
            self.assertEqual(data, b"", "%s %s answered a refused peer" % (method, path))
        self.assertEqual(a.output().count('"client reset"'), 0)


class StandaloneKeys(unittest.TestCase):
    def setUp(self):
        self.a = Agent(STANDALONE, extra_agent="max_key = 32\n")
        self.addCleanup(self.a.stop)
        self.s = Seq(self.a.addr)
        self.addCleanup(self.s.close)

    def decide(self, n, rule="api", **args):
        return [self.s.decide("m-" + rule, **args) for _ in range(n)]

    def test_token_bucket_show_and_clear(self):
        self.assertIsNone(key_state(self.a, "api", "tenant-1")["bucket"])
        got = self.decide(7, key="tenant-1")
        self.assertEqual([g["blocked"] for g in got], [False] * 5 + [True] * 2)
        st = key_state(self.a, "api", "tenant-1")
        self.assertEqual((st["mode"], st["algorithm"], st["client_key"]),
                         ("standalone", "token-bucket", "tenant-1"))
        self.assertEqual((st["limit"], st["period_ms"], st["burst"]), (5, 60000, 5))
        b = st["bucket"]
        self.assertEqual((b["remaining"], b["blocked"], b["burst"]), (0, True, 5))
        self.assertLess(b["tokens"], 1)
        self.assertTrue(0 < b["retry_after_ms"] <= 12000, b)
        self.assertTrue(48000 < b["reset_ms"] <= 60000, b)
        self.assertIsNone(st["backstop"])
        self.assertNotIn("lease", st)
        self.assertNotIn("redis", st)
        # peeking changed nothing
        self.assertIs(self.decide(1, key="tenant-1")[0]["blocked"], True)

        r = reset(self.a, "api", "tenant-1")
        self.assertIs(r["bucket_dropped"], True)
        self.assertIn('"client reset" rule=api key="tenant-1"', self.a.output())
        self.assertIsNone(key_state(self.a, "api", "tenant-1")["bucket"])
        got = self.decide(6, key="tenant-1")
        self.assertEqual([g["blocked"] for g in got], [False] * 5 + [True])
        self.assertEqual(got[0]["remaining"], 4)
        self.assertIs(reset(self.a, "api", "nobody")["bucket_dropped"], False)

    def test_sliding_window(self):
        self.decide(6, "win", key="w1")
        b = key_state(self.a, "win", "w1")["bucket"]
        self.assertEqual(b["previous"] + b["current"], 5)
        # (a window may have ended since: the previous count then fades)
        self.assertLessEqual(b["estimate"], 5)
        self.assertEqual(b["blocked"], b["estimate"] + 1 > 5, b)
        self.assertEqual(b["blocked"], b["retry_after_ms"] > 0, b)
        reset(self.a, "win", "w1")
        self.assertIsNone(key_state(self.a, "win", "w1")["bucket"])
        got = self.decide(1, "win", key="w1")
        self.assertIs(got[0]["blocked"], False)

    def test_keys_as_requests_build_them(self):
        """Several key args are joined with '|'; a key past max_key (32
        here) is hashed as requests hash it."""
        self.decide(2, "pair", key="t", ip="10.0.0.1")
        st = key_state(self.a, "pair", "t|10.0.0.1")
        self.assertEqual(st["bucket"]["remaining"], 1)
        long_key = "k" * 100
        self.decide(3, key=long_key)
        st = key_state(self.a, "api", long_key)
        self.assertTrue(st["client_key"].startswith("#") and len(st["client_key"]) == 33, st)
        self.assertEqual(st["key"], long_key)
        self.assertEqual(st["bucket"]["remaining"], 2)
        # a client sending the stored form of that key gets a bucket of its
        # own (issue 24: it shared the hashed client's bucket): keys that
        # start with '#' are hashed too, and the hash is SHA-256
        import hashlib
        self.assertEqual(st["client_key"],
                         "#" + hashlib.sha256(long_key.encode()).hexdigest()[:32])
        aimed = self.decide(6, key=st["client_key"])
        self.assertEqual([g["blocked"] for g in aimed], [False] * 5 + [True])
        self.assertEqual(key_state(self.a, "api", long_key)["bucket"]["remaining"], 2)
        other = key_state(self.a, "api", st["client_key"])
        self.assertNotEqual(other["client_key"], st["client_key"])
        self.assertEqual(other["bucket"]["remaining"], 0)
        reset(self.a, "api", long_key)
        self.assertIsNone(key_state(self.a, "api", long_key)["bucket"])
        # odd bytes survive the query string and the JSON
        odd = 'a"b\\c d&e=f'
        self.decide(1, key=odd)
        st = key_state(self.a, "api", odd)
        self.assertEqual((st["key"], st["bucket"]["remaining"]), (odd, 4))

    def test_key_bytes_in_json(self):
        """A key is bytes: a control byte, DEL, a byte past ASCII, a quote
        and a backslash come back escaped in an all-ASCII answer, one code
        point per byte (Latin-1), and name the bucket requests use."""
        raw = b'\x01\x7f\xe9"\\'
        self.decide(2, key=raw)  # a binary sample: the bytes as they are
        path = "/key?rule=api&key=" + urllib.parse.quote_from_bytes(raw)
        c = http.client.HTTPConnection("127.0.0.1", self.a.stats_port, timeout=5)
        self.addCleanup(c.close)
        c.request("GET", path)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        body = r.read()
        body.decode("ascii")  # nothing past ASCII on the wire
        st = json.loads(body)
        self.assertEqual(st["key"], raw.decode("latin-1"))
        self.assertEqual(st["client_key"], raw.decode("latin-1"))
        self.assertEqual(st["bucket"]["remaining"], 3)
        c.request("POST", path.replace("/key?", "/reset?"))
        r = json.loads(c.getresponse().read())
        self.assertEqual((r["key"], r["bucket_dropped"]), (raw.decode("latin-1"), True))
        # the log line escapes them as \xHH
        self.assertIn('"client reset" rule=api key="\\x01\\x7f\\xe9\\x22\\x5c"', self.a.output())


# ---- with Redis -----------------------------------------------------------------

RULES = """
[rule:api]
message = m-api
key = key
rate = 5/1m
burst = 5

[rule:win]
message = m-win
key = key
rate = 5/1m
algorithm = sliding-window

[rule:fleet]
message = m-fleet
key = key
rate = 100/1s
burst = 40
"""
B, R = 40, 100.0
ACK_SLACK = R * 0.020  # as test_redis.Fleet: ACK timestamps lag decisions by < 20 ms


class RedisKeys(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.addCleanup(self.redis.kill)  # registered first: runs after the agents stopped

    def agent(self, **kw):
        a = Agent(redis_ini(self.redis.port, **kw) + RULES, extra_agent="max_key = 32\n")

        def stop():
            rc = a.stop(timeout=8)
            if rc != 0:
                raise AssertionError("agent exit %s:\n%s" % (rc, a.output()[-3000:]))
        self.addCleanup(stop)
        fleet.wait_redis_up(a)
        s = Seq(a.addr)
        self.addCleanup(s.close)
        return a, s

    def hash(self, key):
        """The bucket's fields: a hash's, or those of a token bucket kept as
        a string "1 t ts [bu]" (tb_exact.lua: no lease claimed on it), or
        "2 t px" (a new key's plain SET: ts is its creation, expiry - px)."""
        if self.redis.cli("TYPE", key).strip() == "string":
            v = self.redis.cli("GET", key).split()
            # (else it changed meanwhile: gone, or a hash now: WRONGTYPE)
            if v[:1] == ["2"]:
                v[2] = str((int(self.redis.cli("PEXPIRETIME", key)) - int(v[2])) * 1000)
            if v[:1] in (["1"], ["2"]):
                return dict(zip(("t", "ts", "bu"), v[1:]))
        out = self.redis.cli("HGETALL", key).splitlines()
        return dict(zip(out[0::2], out[1::2]))

    def test_show_lease_and_redis_bucket(self):
        a, s = self.agent()
        key = unique("show")
        got = [s.decide("m-api", key=key) for _ in range(3)]
        self.assertTrue(all(g["blocked"] is False for g in got), got)
        st = key_state(a, "api", key)
        self.assertEqual((st["mode"], st["redis_key"]), ("redis", "rl:t2:api:" + key))
        lease, rb = st["lease"], st["redis"]
        # burst 5: each request was one exact call (a claim may take 1 at
        # most), allowed, holding nothing here: no lease record is kept
        self.assertIsNone(lease)
        self.assertNotIn("error", rb)
        self.assertIs(rb["exists"], True)
        self.assertLessEqual(rb["t"] + rb["held"], 5 + 1e-9)  # one HGETALL: one state
        self.assertGreater(rb["ttl_ms"], 0)
        for x in rb["leases"]:
            self.assertIs(x["this_agent"], True, rb)  # the only agent
            self.assertTrue(x["expires_in_ms"] <= 1000, rb)
        self.assertIsNone(st["backstop"])
        # once idle, the lease goes back: then the page and Redis agree exactly.
        # Both reads in one look: the agent may still top up and give back
        # between two reads (a key seen 3 times in a tick gets a prefetch).
        seen = []

        def settled():
            seen[:] = [key_state(a, "api", key)]
            seen.append(self.hash(seen[0]["redis_key"]))
            return seen[0]["redis"]["held"] == 0 and seen[0]["redis"]["t"] == float(seen[1]["t"])
        self.assertTrue(wait_for(settled), seen)
        st, h = seen
        self.assertEqual(st["redis"]["t"], float(h["t"]))
        self.assertEqual(st["redis"]["remaining"], 2)  # 3 spent, refill negligible
        self.assertIsNone(st["lease"])
        # two more empty the bucket and the next is denied: its record stays,
        # to answer the key's next requests here (the negative cache)
        got = [s.decide("m-api", key=key) for _ in range(3)]
        self.assertEqual([g["blocked"] for g in got], [False, False, True], got)
        lease = key_state(a, "api", key)["lease"]
        self.assertIsNotNone(lease)
        self.assertEqual((lease["blocked"], lease["tokens"], lease["in_flight"]), (True, 0, None))
        self.assertGreater(lease["blocked_left_ms"], 0)
        # a key never seen: nothing here, a full bucket in Redis
        st = key_state(a, "api", unique("never"))
        self.assertIsNone(st["lease"])
        self.assertEqual((st["redis"]["exists"], st["redis"]["tokens_now"]), (False, 5))

    def test_reset_of_a_key_seen_once(self):
        """A key allowed once leaves no lease entry, only its trace for
        ttl: a reset still finds it (lease_cache_cleared), and the key's
        next request is a script call on the reset bucket. A key this agent
        never decided has no record."""
        a, s = self.agent()
        key = unique("once")
        self.assertIs(s.decide("m-api", key=key)["blocked"], False)
        self.assertIsNone(key_state(a, "api", key)["lease"])
        r = reset(a, "api", key)
        self.assertIs(r["redis"]["reset"], True)
        self.assertEqual(r["redis"]["remaining_before"], 4)
        self.assertEqual((r["redis"]["remaining"], r["redis"]["held"]), (5, 0))
        self.assertIs(r["lease_cache_cleared"], True)
        got = s.decide("m-api", key=key)
        self.assertEqual((got["blocked"], got["remaining"]), (False, 4), got)
        r = reset(a, "api", unique("never"))
        self.assertIs(r["lease_cache_cleared"], False)

    def test_reset_clears_this_agents_negative_cache_only(self):
        """Both agents blocked on one key; a reset through agent A lets A's
        next request through at once. B keeps answering from its negative
        cache until its retry time (as a stick table is cleared per node),
        until it is reset through B as well."""
        a, sa = self.agent()
        b, sb = self.agent()
        key = unique("neg")
        got = [sa.decide("m-api", key=key) for _ in range(6)]
        self.assertEqual([g["blocked"] for g in got], [False] * 5 + [True])
        self.assertIs(sb.decide("m-api", key=key)["blocked"], True)
        for agent in (a, b):
            lease = key_state(agent, "api", key)["lease"]
            self.assertIs(lease["blocked"], True, lease)
            self.assertGreater(lease["blocked_left_ms"], 1000)
        r = reset(a, "api", key)
        self.assertIs(r["redis"]["reset"], True)
        self.assertEqual(r["redis"]["remaining_before"], 0)
        self.assertEqual(r["redis"]["remaining"] + r["redis"]["held"], 5)
        self.assertIs(r["lease_cache_cleared"], True)
        self.assertIs(sa.decide("m-api", key=key)["blocked"], False)
        self.assertIs(sb.decide("m-api", key=key)["blocked"], True)  # its negative cache
        self.assertIs(key_state(b, "api", key)["lease"]["blocked"], True)
        reset(b, "api", key)
        self.assertIs(sb.decide("m-api", key=key)["blocked"], False)

    def test_sliding_window_and_long_key(self):
        a, s = self.agent()
        key = unique("w") + "x" * 40  # past max_key: hashed
        if 60 - time.time() % 60 < 5:  # windows are minutes of Redis time: not at the end of one
            time.sleep(60 - time.time() % 60 + 0.1)
        got = [s.decide("m-win", key=key) for _ in range(6)]
        self.assertIs(got[-1]["blocked"], True)
        st = key_state(a, "win", key)
        self.assertTrue(st["client_key"].startswith("#"))
        self.assertEqual(st["redis_key"], "rl:sw:win:" + st["client_key"])
        self.assertIs(st["redis"]["exists"], True)
        self.assertIs(st["redis"]["blocked"], True)
        self.assertEqual(st["redis"]["current"] + st["redis"]["previous"], 5)
        r = reset(a, "win", key)
        self.assertEqual(r["redis"]["remaining_before"], 0)
        self.assertEqual(r["redis"]["remaining"] + r["redis"]["held"], 5)
        # only what leases hold stays counted (a top-up may have come since:
        # pre-charged, unspent, so c is still what they hold)
        h = self.hash(st["redis_key"])
        held = sum(int(v) for k, v in h.items() if k.startswith("h:"))
        self.assertEqual(int(h.get("c", 0)), held)
        self.assertEqual(int(h.get("p", 0)), 0)
        self.assertIs(s.decide("m-win", key=key)["blocked"], False)

    def test_redis_down(self):
        """Redis unreachable: /key says so for the Redis part, /reset answers
        503 (the backstop bucket, local, is dropped anyway)."""
        a, s = self.agent()
        key = unique("down")
        self.redis.kill()
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 0), a.output())
        got = [s.decide("m-api", key=key) for _ in range(2)]
        self.assertTrue(all(g.get("degraded") for g in got), got)
        st = key_state(a, "api", key)
        self.assertIn("error", st["redis"])
        self.assertIsNotNone(st["backstop"])  # the fail-open bucket this key now uses
        r = reset(a, "api", key, expect=503)
        self.assertIs(r["redis"]["reset"], False)
        self.assertIs(r["backstop_dropped"], True)
        self.assertIsNone(key_state(a, "api", key)["backstop"])

    def test_reset_with_leases_out_keeps_the_bound(self):
        """Two agents hold leases on one key (paced load), then a reset,
        then both are driven hard: from the reset on no interval of length T
        admits more than b + r*T, and Redis keeps t + H <= b."""
        a, _ = self.agent()
        b, _ = self.agent()
        key = unique("bound")
        agents = (a, a, b, b)
        # 4 x 20/s = 80/s under r = 100/s: the agents hold leases (top-ups)
        paced = [LoadClient(ag.addr, {"key": key}, [(1.5, "paced", 20.0)], name=i,
                            message="m-fleet") for i, ag in enumerate(agents)]
        # then a flood that starts the moment the reset is done, while the
        # leases are still out: a reset that forgot them (t = b, or the key
        # deleted) would let their tokens through on top of a full bucket
        flood = [LoadClient(ag.addr, {"key": key}, [(2.0, "flood", 4)], name=4 + i,
                            message="m-fleet") for i, ag in enumerate(agents)]
        for c in paced + flood:
            c.start()
        t0 = time.monotonic() + 0.05
        for c in paced:
            c.start_at(t0)
        while time.monotonic() < t0 + 0.8:
            time.sleep(0.01)
        while time.monotonic() < t0 + 1.4:  # both agents hold a lease, as /key shows
            if key_state(a, "fleet", key)["redis"].get("holders") == 2:
                break
        t_reset = time.monotonic()
        r = reset(a, "fleet", key)
        t_done = time.monotonic()
        for c in flood:
            c.start_at(t_done)
        h = self.hash("rl:t2:fleet:" + key)
        for c in paced + flood:
            c.join(30)
        recs = fleet.collect(paced + flood)
        z = r["redis"]
        print("\n  reset with leases out: held %d by %d agents, remaining %d (before %d)"
              % (z["held"], z["holders"], z["remaining"], z["remaining_before"]))
        self.assertIs(z["reset"], True)
        self.assertGreater(z["held"], 0, "no lease out at the reset: %r" % z)
        self.assertEqual(z["remaining"] + z["held"], B)  # t = b - H: full, less what is held
        # as stored (leases expired since are still counted: t + H can only be smaller)
        stored = float(h["t"]) + sum(float(v) for k, v in h.items() if k.startswith("h:"))
        self.assertLessEqual(stored, B + 1e-9, h)
        after = [x for x in recs if x.sent >= t_done]
        admitted = sum(1 for x in after if x.allowed)
        T = max(x.acked for x in after) - t_reset
        print("  after the reset: %d decisions, %d admitted in %.3f s, bound %.1f"
              % (len(after), admitted, T, B + R * T))
        self.assertGreater(len(after), 2 * R * T, "load too slow to test the bound")
        self.assertLessEqual(admitted, B + R * T)
        for rigorous, slack in ((True, 0.0), (False, ACK_SLACK)):
            ex, count, T, _, _ = worst_window(after, B, R, rigorous)
            self.assertLessEqual(ex, slack + 1e-9, "%d admitted in %.4f s after the reset"
                                 % (count, T))
        self.assertGreater(admitted, B / 2, "the reset let nothing through")


if __name__ == "__main__":
    unittest.main()
