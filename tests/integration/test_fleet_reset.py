# SPDX-License-Identifier: Apache-2.0
"""A reset for the whole fleet (issue 45, item 1): two agents on one Redis,
a key blocked on both (a small burst and block_for: each holds the key in its
negative cache, the penalty box, until the block ends); POST /reset on agent
A makes agent B allow the key, and A's answer counts B's confirmation; a
key not reset stays blocked on B. spoa-ratelimit -c FILE --reset RULE KEY
does the same through the agent of FILE, exits 0 and prints the count. A
standalone agent clears its own (1 of 1); without a stats listener --reset
exits 1."""
import os
import subprocess
import time
import unittest

from fleet import unique
from harness import AGENT, Agent, stop_cleanly, wait_for
from test_keyapi import reset
from test_redis import RedisCase

RULES = """
[rule:tb]
key = key
match = path ^/tb/
rate = 60/1m
burst = 5
block_for = 30s
"""


def cli_reset(agent, rule, key):
    return subprocess.run([AGENT, "-c", agent.ini, "--reset", rule, key], capture_output=True,
                          text=True, timeout=30)


class FleetReset(RedisCase):
    def setUp(self):
        super().setUp()
        r = self.start_redis()
        self.a = self.start_agent(r, RULES, prefix="fr:")
        self.b = self.start_agent(r, RULES, prefix="fr:")
        # both in the heartbeat set, as each counts it
        for x in (self.a, self.b):
            self.assertTrue(
                wait_for(lambda: x.metric("spoa_ratelimit_fleet_agents") == 2, 15, 0.1),
                x.output()[-2000:])
        self.ca, self.cb = self.seq(self.a), self.seq(self.b)

    def blocked_on_both(self):
        """A fresh key: A allows it once and starts its block; B then denies
        it too (from Redis, then from its negative cache)."""
        key = unique("fr")
        self.assertFalse(self.ca.decide(key=key, path="/tb/x")["blocked"])
        for _ in range(20):  # the burst spent: the block starts
            if self.ca.decide(key=key, path="/tb/x")["blocked"]:
                break
        else:
            self.fail("never blocked on A")
        for _ in range(3):
            got = self.cb.decide(key=key, path="/tb/x")
            self.assertTrue(got["blocked"], got)
            self.assertNotEqual(got.get("degraded"), True, got)
        return key

    def allowed_on_b(self, key):
        return wait_for(lambda: not self.cb.decide(key=key, path="/tb/x")["blocked"], 5, 0.05)

    def test_post_reset_clears_every_agent(self):
        key, other = self.blocked_on_both(), self.blocked_on_both()
        started = time.monotonic()
        got = reset(self.a, "tb", key)
        self.assertTrue(got["redis"]["reset"], got)
        self.assertEqual(got["fleet"], {"agents": 2, "confirmed": 2}, got)
        self.assertTrue(self.allowed_on_b(key), self.b.output()[-2000:])
        # (for the record; confirmed = 2 is the proof that B applied it
        # within the resetter's 2 s wait)
        print("B allowed %.2f s after the reset was sent" % (time.monotonic() - started))
        self.assertIn('"fleet reset" rule=tb', self.b.output())
        self.assertNotIn('"fleet reset" rule=tb', self.a.output())  # A cleared its own
        # A allows too; the key not reset stays blocked on both
        self.assertFalse(self.ca.decide(key=key, path="/tb/x")["blocked"])
        self.assertTrue(self.cb.decide(key=other, path="/tb/x")["blocked"])
        self.assertTrue(self.ca.decide(key=other, path="/tb/x")["blocked"])

    def test_cli_reset(self):
        key = self.blocked_on_both()
        p = cli_reset(self.a, "tb", key)
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertIn("Redis bucket reset", p.stdout)
        self.assertIn("confirmed by 2 of 2 agents", p.stdout)
        self.assertTrue(self.allowed_on_b(key), self.b.output()[-2000:])
        # an unknown rule: refused, exit 1
        p = cli_reset(self.a, "nope", key)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("404", p.stderr)


class Standalone(unittest.TestCase):
    def test_cli_reset_standalone(self):
        a = Agent(RULES, workers=2)
        stop_cleanly(self, a)
        from fleet import Seq
        c = Seq(a.addr)
        self.addCleanup(c.close)
        key = unique("s")
        # burst 5: the sixth is the first blocked
        self.assertTrue(any(c.decide(key=key, path="/tb/x")["blocked"] for _ in range(20)))
        p = cli_reset(a, "tb", key)
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertIn("standalone agent cleared", p.stdout)
        self.assertIn("confirmed by 1 of 1 agents", p.stdout)
        self.assertFalse(c.decide(key=key, path="/tb/x")["blocked"])

    def test_cli_reset_needs_the_stats_listener(self):
        a = Agent(RULES, workers=2, stats=False)
        stop_cleanly(self, a)
        p = cli_reset(a, "tb", "x")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("no [agent] stats listener", p.stderr)
        self.assertTrue(os.path.exists(a.ini))


if __name__ == "__main__":
    unittest.main()
