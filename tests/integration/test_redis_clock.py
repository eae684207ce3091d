# SPDX-License-Identifier: Apache-2.0
"""Redis' clock stepping back (issue 42, "Clock steps"): a live agent's keys
are left with their stored times 20 s ahead of Redis' clock, as a step back
of 20 s leaves them (Redis has no command to set its clock, and no clock shim
is installed: the state is planted instead, which is all the scripts see of a
step). A client under its limit must be admitted at the bucket's rate again,
not denied for 20 s, through the agent's exact decisions and its leases; a
sliding window must admit again once its window ends. The agent's side, the
redis_clock_jump detector, is a pure module tested in
tests/unit/test_clock_jump.c. Agents must exit 0 on SIGTERM (checked at
cleanup)."""
import time
import unittest

from fleet import unique
from test_redis import RedisCase

RULES = """
[rule:exact]
key = key
match = path ^/exact/
rate = 10/1s
burst = 5
lease = off

[rule:leased]
key = key
match = path ^/leased/
rate = 10/1s
burst = 5

[rule:window]
key = key
match = path ^/window/
rate = 5/1s
algorithm = sliding-window
lease = off
"""

STEP_US = 20 * 1000000


class ClockStepBack(RedisCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.agent = self.start_agent(self.redis, RULES)
        self.c = self.seq(self.agent)

    def redis_us(self):
        s, us = self.redis.cli("TIME").split()
        return int(s) * 1000000 + int(us)

    def key_of(self, client):
        """The Redis key of client's bucket (the first decision made it)."""
        keys = [k for k in self.keys(self.redis, "rl:") if k.endswith(":" + client)]
        self.assertEqual(len(keys), 1, keys)
        return keys[0]

    def paced(self, path, key, seconds, gap=0.125):
        """Decisions of key, one every gap after the previous answer (at most
        8/s: under a limit of 10/s whatever the machine's speed), for seconds;
        returns the blocked flags and the time of the first admission."""
        got, first, end = [], None, time.monotonic() + seconds
        t0 = time.monotonic()
        while time.monotonic() < end:
            d = self.c.decide(key=key, path=path)
            self.assertNotEqual(d.get("degraded"), True, d)
            got.append(d["blocked"])
            if not d["blocked"] and first is None:
                first = time.monotonic() - t0
            time.sleep(gap)
        return got, first

    def test_token_bucket_admits_at_rate_after_step_back(self):
        for rule in ("exact", "leased"):
            client = unique(rule)
            path = "/%s/x" % rule
            self.c.decide(key=client, path=path)
            key = self.key_of(client)
            # the key as a step back of 20 s leaves it: empty, its last call
            # (ts) 20 s ahead of Redis' clock
            self.redis.cli("DEL", key)
            self.redis.cli("HSET", key, "t", "0", "ts", str(self.redis_us() + STEP_US))
            self.redis.cli("PEXPIRE", key, "60000")
            got, first = self.paced(path, client, 2.5)
            self.assertIsNotNone(first, "%s: nothing admitted in 2.5 s: %r" % (rule, got))
            self.assertLess(first, 1.5, "%s: first admission after %.2f s" % (rule, first))
            admitted = got.count(False) / len(got)
            # before the rebase: 0 for 20 s. Now only the first (the bucket was
            # empty) may wait for a token at 10/s
            self.assertGreaterEqual(admitted, 0.75, "%s: %r" % (rule, got))
            ts = int(self.hgetall(self.redis, key)["ts"])
            self.assertLessEqual(ts, self.redis_us(), "%s: ts not rebased" % rule)

    def test_sliding_window_admits_after_its_window(self):
        client = unique("window")
        path = "/window/x"
        self.c.decide(key=client, path=path)
        key = self.key_of(client)
        w = self.redis_us() // 1000000 + 20  # 20 windows of 1 s ahead: full
        self.redis.cli("HSET", key, "w", str(w), "c", "5", "p", "0")
        self.redis.cli("PEXPIRE", key, "60000")
        got, first = self.paced(path, client, 4.0)
        # the full count moved to now's window: denied until the estimate
        # falls (at most the window and the next), not for 20 s
        self.assertIsNotNone(first, "nothing admitted in 4 s: %r" % got)
        self.assertLess(first, 3.0, "first admission after %.2f s" % first)
        self.assertLess(int(self.redis.cli("HGET", key, "w")), w)


if __name__ == "__main__":
    unittest.main()
