"""algorithm = concurrency (issue 28): at most `limit` requests in flight per
key. Through SPOP directly, standalone, on one redis-server and on a Redis
Cluster: with limit = 2 two slots are taken, the third request is denied, a
release frees one and the next is admitted; a slot never released frees
itself after max_hold; a blocked request holds no slot; a release of an
unknown or garbled slot is harmless and counted; Redis down with
on_redis_down = open takes the local share and says degraded. Agents must
exit 0 on SIGTERM (checked at cleanup)."""
import os
import subprocess
import time
import unittest

from fleet import redis_ini, unique, wait_redis_up
from harness import Agent, stop_cleanly, wait_for
from test_redis import RedisCase
from test_redis_topologies import TopologyCase

RULES = """
[rule:inflight]
message = check-rate
key = key
match = path ^/slow/
algorithm = concurrency
limit = 2
release = release-slot
max_hold = %(hold)s
on_redis_down = %(down)s

[rule:gate]
message = check-rate
key = key
match = path ^/slow/gated
rate = 1/1m
"""


def rules(hold="60s", down="open"):
    return RULES % {"hold": hold, "down": down}


class ConcMixin:
    def take(self, c, key, path="/slow/x"):
        return c.decide(key=key, path=path)

    def release(self, c, slot):
        got = c.decide(msg="release-slot", slot=slot)
        self.assertEqual(got, {"blocked": False}, got)

    def limit_two(self, agent, c, label):
        """Two slots taken, the third denied, one released, the next admitted."""
        key = unique("c")
        a, b, third = self.take(c, key), self.take(c, key), self.take(c, key)
        self.assertEqual([g["blocked"] for g in (a, b, third)], [False, False, True],
                         "%s: %r" % (label, (a, b, third)))
        self.assertEqual((a["remaining"], b["remaining"], third["remaining"]), (1, 0, 0))
        self.assertEqual((a["limit"], a["rule"]), (2, "inflight"), a)
        self.assertIn("slot", a)
        self.assertIn("slot", b)
        self.assertNotEqual(a["slot"], b["slot"])
        self.assertNotIn("slot", third)
        self.assertGreaterEqual(third["retry_after"], 1, third)
        for g in (a, b, third):
            self.assertNotEqual(g.get("degraded"), True, "%s: %r" % (label, g))
        ok = agent.metric("spoa_ratelimit_slots_released_total", rule="inflight",
                          result="ok") or 0
        self.release(c, a["slot"])
        nxt = self.take(c, key)
        self.assertFalse(nxt["blocked"], "%s: %r" % (label, nxt))
        self.assertTrue(wait_for(lambda: agent.metric(
            "spoa_ratelimit_slots_released_total", rule="inflight", result="ok") == ok + 1, 5))
        # a slot already freed, a garbled one, one of an unknown rule: harmless, counted
        unknown = agent.metric("spoa_ratelimit_slots_released_total", rule="inflight",
                               result="unknown") or 0
        self.release(c, a["slot"])
        self.release(c, "garbage")
        self.release(c, "nosuchrule:r0123456789abcdef:6b")
        self.assertTrue(wait_for(lambda: agent.metric(
            "spoa_ratelimit_slots_released_total", rule="inflight",
            result="unknown") == unknown + 3, 5))
        # still full (b and nxt): the bogus releases freed nothing
        self.assertTrue(self.take(c, key)["blocked"], label)
        # both in one release message, space separated
        self.release(c, b["slot"] + " " + nxt["slot"])
        got = [self.take(c, key) for _ in range(3)]
        self.assertEqual([g["blocked"] for g in got], [False, False, True], got)

    def blocked_holds_none(self, agent, c, label):
        """A request that another rule blocks gives its slot back at once
        (and its ACK carries none)."""
        key = unique("g")
        first = self.take(c, key, path="/slow/gated")  # gate admits one a minute
        self.assertFalse(first["blocked"], first)
        second = self.take(c, key, path="/slow/gated")
        self.assertTrue(second["blocked"], second)
        self.assertEqual(second["rule"], "gate", second)
        self.assertNotIn("slot", second)
        # first holds one slot; second's went back: one more is free
        got = [self.take(c, key) for _ in range(2)]
        self.assertEqual([g["blocked"] for g in got], [False, True], "%s: %r" % (label, got))

    def expiry(self, agent, c, label):
        """A slot never released frees itself after max_hold (2 s)."""
        key = unique("e")
        a, b = self.take(c, key), self.take(c, key)
        self.assertEqual([a["blocked"], b["blocked"]], [False, False], (a, b))
        t0 = time.monotonic()
        self.assertTrue(self.take(c, key)["blocked"])
        expired = agent.metric("spoa_ratelimit_slots_expired_total", rule="inflight") or 0
        self.assertTrue(wait_for(lambda: not self.take(c, key)["blocked"], 10),
                        label + ": never freed")
        self.assertGreaterEqual(time.monotonic() - t0, 1.5, label + ": freed before max_hold")
        self.assertTrue(wait_for(lambda: agent.metric(
            "spoa_ratelimit_slots_expired_total", rule="inflight") >= expired + 2, 5))


class Standalone(ConcMixin, RedisCase):
    def agent(self, ini):
        a = Agent(ini)
        stop_cleanly(self, a)
        return a

    def test_limit_two(self):
        a = self.agent(rules())
        self.limit_two(a, self.seq(a), "standalone")

    def test_blocked_holds_no_slot(self):
        a = self.agent(rules())
        self.blocked_holds_none(a, self.seq(a), "standalone")

    def test_expiry(self):
        a = self.agent(rules(hold="2s"))
        self.expiry(a, self.seq(a), "standalone")

    def test_redis_slot_released_standalone_is_unknown(self):
        a = self.agent(rules())
        c = self.seq(a)
        self.release(c, "inflight:r0123456789abcdef:6b")
        self.assertTrue(wait_for(lambda: a.metric(
            "spoa_ratelimit_slots_released_total", rule="inflight", result="unknown") == 1, 5))


class RedisSingle(ConcMixin, RedisCase):
    def test_limit_two(self):
        r = self.start_redis()
        a = self.start_agent(r, rules())
        self.limit_two(a, self.seq(a), "redis")
        keys = self.keys(r, "rl:cc:inflight:")
        self.assertTrue(keys, "no slot set in Redis")

    def test_blocked_holds_no_slot(self):
        r = self.start_redis()
        a = self.start_agent(r, rules())
        self.blocked_holds_none(a, self.seq(a), "redis")

    def test_expiry(self):
        r = self.start_redis()
        a = self.start_agent(r, rules(hold="2s"))
        self.expiry(a, self.seq(a), "redis")

    def test_two_agents_share_the_limit(self):
        """A slot taken through one agent is released through another."""
        r = self.start_redis()
        a1, a2 = self.start_agent(r, rules()), self.start_agent(r, rules())
        c1, c2 = self.seq(a1), self.seq(a2)
        key = unique("f")
        x, y = self.take(c1, key), self.take(c2, key)
        self.assertEqual([x["blocked"], y["blocked"]], [False, False])
        self.assertTrue(self.take(c1, key)["blocked"])
        self.assertTrue(self.take(c2, key)["blocked"])
        self.release(c2, x["slot"])
        self.assertTrue(wait_for(lambda: a2.metric(
            "spoa_ratelimit_slots_released_total", rule="inflight", result="ok") == 1, 5))
        self.assertFalse(self.take(c1, key)["blocked"])

    def test_redis_down_open_local_share(self):
        """Redis down: on_redis_down = open takes the local share (share 0.05
        of 2: at least 1 slot) and says degraded; closed denies."""
        r = self.start_redis()
        a = self.start_agent(r, rules() + RULES.replace("inflight", "closedrule").replace(
            "^/slow/", "^/closed/").replace("%(hold)s", "60s").replace("%(down)s", "closed")
            .replace("[rule:gate]", "[rule:gate2]"))
        c = self.seq(a)
        r.kill()
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 0, 10))
        key = unique("d")
        got = [self.take(c, key) for _ in range(2)]
        self.assertEqual([g["blocked"] for g in got], [False, True], got)
        self.assertTrue(got[0].get("degraded"), got[0])
        self.assertTrue(got[0]["slot"].startswith("inflight:l"), got[0])
        self.release(c, got[0]["slot"])
        self.assertFalse(self.take(c, key)["blocked"])
        closed = self.take(c, key, path="/closed/x")
        self.assertTrue(closed["blocked"], closed)
        self.assertNotIn("slot", closed)


class Cluster(ConcMixin, TopologyCase):
    def test_limit_two(self):
        self.start_cluster()
        a = Agent("[redis]\ncluster = 127.0.0.1:%d\ntimeout = 1s\n\n" % self.ports[0] + rules())
        stop_cleanly(self, a)
        wait_redis_up(a)
        from fleet import Seq
        c = Seq(a.addr)
        self.addCleanup(c.close)
        self.limit_two(a, c, "cluster")


if __name__ == "__main__":
    unittest.main()
