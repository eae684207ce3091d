# SPDX-License-Identifier: Apache-2.0
"""Redis' clock stepping (issue 42, "Clock steps").

ClockStepBack plants what a step back of 20 s leaves: a live agent's keys
with their stored times 20 s ahead of Redis' clock (all the scripts see of a
step). A client under its limit must be admitted at the bucket's rate again,
not denied for 20 s, through the agent's exact decisions and its leases; a
sliding window must admit again once its window ends.

ClockShim steps Redis' real clock: redis-server runs under clock_shim.c
(LD_PRELOAD, built here with cc), whose wall clock moves by what the test
writes in a file. The agent must name each step (log `redis clock jump` with
its size and sign, spoa_ratelimit_redis_clock_jumps_total), and a client
paced under its limit must keep being admitted through a step back of 20 s.
The detector itself is tested alone in tests/unit/store/test_clock_jump.c.

Agents must exit 0 on SIGTERM (checked at cleanup)."""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import wait_for

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


class ClockCase(RedisCase):
    """Helpers: Redis' time, a client's key, paced decisions."""

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


class ClockStepBack(ClockCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.agent = self.start_agent(self.redis, RULES)
        self.c = self.seq(self.agent)

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


class ClockShim(ClockCase):
    """redis-server with a wall clock the test steps."""

    def setUp(self):
        super().setUp()
        cc = shutil.which(os.environ.get("CC", "cc"))
        if not cc:
            self.skipTest("no C compiler for the clock shim")
        d = tempfile.mkdtemp(prefix="clock-shim-")
        self.addCleanup(shutil.rmtree, d, True)
        so, self.offset = os.path.join(d, "shim.so"), os.path.join(d, "offset")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clock_shim.c")
        subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"], check=True)
        self.step(0)
        # only redis-server inherits the shim (set while it starts)
        os.environ["LD_PRELOAD"], os.environ["CLOCK_SHIM_FILE"] = so, self.offset
        try:
            self.redis = self.start_redis()
        finally:
            del os.environ["LD_PRELOAD"], os.environ["CLOCK_SHIM_FILE"]
        self.agent = self.start_agent(self.redis, RULES)
        self.c = self.seq(self.agent)

    def step(self, offset_s):
        """Redis' clock from now on: the real one plus offset_s."""
        with open(self.offset + ".tmp", "w") as f:
            f.write("%d\n" % (offset_s * 1000000))
        os.replace(self.offset + ".tmp", self.offset)

    def jumps(self):
        return [int(m) for m in re.findall(r"redis clock jump.*?step_ms=(-?\d+)",
                                           self.agent.output())]

    def test_steps_are_named_and_back_admits(self):
        client, path = unique("shim"), "/exact/x"
        got, _ = self.paced(path, client, 1.0)  # the baseline
        self.assertEqual(self.jumps(), [])
        before = self.redis_us()
        self.step(-20)
        wait_for(lambda: self.redis_us() < before, timeout=5)
        got, first = self.paced(path, client, 2.5)
        # admitted through the step, at the rate (before: 0 for 20 s)
        self.assertIsNotNone(first, got)
        self.assertGreaterEqual(got.count(False) / len(got), 0.75, got)
        self.assertTrue(wait_for(lambda: self.jumps(), timeout=5), self.agent.output()[-2000:])
        back = self.jumps()[0]
        self.assertTrue(-21000 < back < -19000, self.jumps())
        self.assertGreaterEqual(self.metric(self.agent, "spoa_ratelimit_redis_clock_jumps_total"), 1)
        # forward an hour (from 20 s behind): named too
        self.step(3600)
        end = time.monotonic() + 5
        while len(self.jumps()) < 2 and time.monotonic() < end:
            self.c.decide(key=client, path=path)  # (an exact decision carries the time)
            time.sleep(0.05)
        self.assertGreaterEqual(len(self.jumps()), 2, self.agent.output()[-2000:])
        fwd = self.jumps()[1]
        self.assertTrue(3619000 < fwd < 3622000, self.jumps())
        self.assertGreaterEqual(self.metric(self.agent, "spoa_ratelimit_redis_clock_jumps_total"), 2)

if __name__ == "__main__":
    unittest.main()
