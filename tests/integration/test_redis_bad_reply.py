# SPDX-License-Identifier: Apache-2.0
"""A Redis that breaks the protocol (issue 43, item 5), played by
fake_redis.py, with the real agent:

  - malformed script replies (nil, an integer, too few values, a nil
    element, "nan", a negative count, more granted than asked): the warning
    redis_errors within 5 s, spoa_ratelimit_redis_error_replies_total
    {kind="bad_reply"} counting, redis_up 0, every NOTIFY still answered
    (from the fallback), fewer than 20 log lines in 10 s; once replies are
    well-formed again redis_up goes back to 1 and the warning clears;
  - NOSCRIPT always, even right after SCRIPT LOAD: decisions answered from
    the fallback at once (median < 20 ms; 42 ms before, waiting on reload
    round trips), scripts reloaded after NOSCRIPT far fewer than the 146
    times in 8 s seen before;
  - bytes that are no RESP: reconnects backed off (fewer than 15 connections
    in 10 s, ~90 before) and "rules fall back" logged at most twice in 10 s.

Every wait is a poll with a deadline; the counts bounded are the agent's own
pacing (its backoff, its log gates), not the machine's speed. The measured
figures are printed."""
import statistics
import time
import unittest

from fake_redis import FakeRedis
from fleet import Seq, redis_ini, unique, wait_redis_up
from harness import Agent, stop_cleanly

RULES = """
[rule:leased]
key = key
match = path ^/leased/
rate = 100/1s
burst = 50

[rule:exact]
key = key
match = path ^/exact/
rate = 100/1s
burst = 50
lease = off
"""
WINDOW = 10.0


def poll(cond, timeout, step=0.05, what="condition"):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("%s not met within %.1f s" % (what, timeout))
        time.sleep(step)


class BadReply(unittest.TestCase):
    def setUp(self):
        self.fake = FakeRedis("good")
        self.addCleanup(self.fake.close)
        ini = redis_ini(self.fake.port, prefix="bad:", timeout="1s")
        ini = ini.replace("[redis]\n", "[redis]\nerrors_quiet = 5s\n", 1)
        self.agent = Agent(ini + RULES, workers=1)
        stop_cleanly(self, self.agent)
        wait_redis_up(self.agent)
        self.c = Seq(self.agent.addr)
        self.addCleanup(self.c.close)
        self.keys = (unique("l"), unique("e"))
        # decisions go through the scripts while replies are well-formed
        for _ in range(3):
            for g in self.both():
                self.assertIsNot(g.get("degraded"), True, g)

    def both(self):
        return [self.c.decide(key=self.keys[0], path="/leased/x"),
                self.c.decide(key=self.keys[1], path="/exact/x")]

    def metric(self, name, **labels):
        return self.agent.metric(name, **labels)

    def lines(self):
        return self.agent.output().splitlines()

    def drive(self, seconds, every=0.02, sample=None):
        """Decide on both rules for seconds, one pair per `every`: the
        latencies; sample(elapsed) runs about every 0.25 s."""
        lat, t0, next_sample = [], time.monotonic(), 0.0
        while True:
            now = time.monotonic()
            if now - t0 >= seconds:
                return lat
            for g in (self.c.decide, ):
                a = time.monotonic()
                r = g(key=self.keys[1], path="/exact/x")
                lat.append(time.monotonic() - a)
                self.assertIn("blocked", r, r)
                a = time.monotonic()
                r = g(key=self.keys[0], path="/leased/x")
                lat.append(time.monotonic() - a)
                self.assertIn("blocked", r, r)
            if sample and now - t0 >= next_sample:
                sample(now - t0)
                next_sample += 0.25
            time.sleep(every)

    def test_malformed(self):
        log0 = len(self.lines())
        self.fake.mode = "malformed"
        seen = {}

        def sample(t):
            if "warning" not in seen and self.metric("spoa_ratelimit_warning",
                                                     kind="redis_errors") == 1:
                seen["warning"] = t
            seen["up"] = self.metric("spoa_ratelimit_redis_up")

        lat = self.drive(WINDOW, sample=sample)
        logged = self.lines()[log0:]
        bad = self.metric("spoa_ratelimit_redis_error_replies_total", kind="bad_reply")
        print("\nmalformed: warning after %s s, bad_reply %s, redis_up %s, %d decisions, "
              "%d log lines in %.0f s, fake: %s"
              % (seen.get("warning"), bad, seen.get("up"), len(lat), len(logged), WINDOW,
                 self.fake.counts()))
        self.assertIn("warning", seen, "redis_errors never raised")
        self.assertLessEqual(seen["warning"], 5.0)
        self.assertGreater(bad or 0, 0)
        self.assertEqual(seen["up"], 0)
        self.assertLess(len(logged), 20, "\n".join(logged))
        self.assertTrue(any("bad_reply" in l or "malformed" in l for l in logged),
                        "\n".join(logged))
        # well-formed again: up after the probe passes, the warning clears
        self.fake.mode = "good"
        poll(lambda: self.metric("spoa_ratelimit_redis_up") == 1, 15, what="redis_up 1")
        poll(lambda: all(g.get("degraded") is not True for g in self.both()), 10, step=0.1,
             what="decisions not degraded")
        poll(lambda: self.metric("spoa_ratelimit_warning", kind="redis_errors") == 0, 20,
             step=0.25, what="redis_errors cleared")

    def test_noscript_always(self):
        c0 = self.fake.counts()
        self.fake.mode = "noscript"
        lat = self.drive(8.0)
        c1 = self.fake.counts()
        reloads = c1["reloads"] - c0["reloads"]
        med = statistics.median(lat)
        print("\nnoscript: %d decisions, median %.2f ms, max %.1f ms, %d reloads after "
              "NOSCRIPT, %d connections, %d SCRIPT/FUNCTION LOADs in 8 s"
              % (len(lat), med * 1000, max(lat) * 1000, reloads,
                 c1["connections"] - c0["connections"], c1["script_loads"] - c0["script_loads"]))
        self.assertLess(med, 0.020)
        self.assertLess(reloads, 20)
        self.assertEqual(self.metric("spoa_ratelimit_redis_up"), 0)
        self.assertEqual(self.metric("spoa_ratelimit_warning", kind="redis_errors"), 1)

    def test_protocol_garbage(self):
        log0 = len(self.lines())
        c0 = self.fake.counts()
        self.fake.mode = "garbage"
        lat = self.drive(WINDOW)
        c1 = self.fake.counts()
        logged = self.lines()[log0:]
        conns = c1["connections"] - c0["connections"]
        fall_back = [l for l in logged if '"redis down: rules fall back"' in l]
        print("\ngarbage: %d decisions, %d connections and %d log lines (%d 'rules fall "
              "back') in %.0f s" % (len(lat), conns, len(logged), len(fall_back), WINDOW))
        self.assertLess(conns, 15)
        self.assertLessEqual(len(fall_back), 2, "\n".join(logged))
        self.assertEqual(self.metric("spoa_ratelimit_redis_up"), 0)
        self.assertGreater(self.metric("spoa_ratelimit_redis_error_replies_total",
                                       kind="bad_reply") or 0, 0)


if __name__ == "__main__":
    unittest.main()
