# SPDX-License-Identifier: Apache-2.0
"""Rate leases on a real redis-server and real agents (the script logic is in
tests/unit/lua/test_scripts_rate.c, the policy in tests/unit/lease/test_lease_rate.c): a warm key
gets a share of the rate and a slice of the burst, is decided locally from
then on, shows in /key and /metrics, and gives everything back at SIGTERM.
The warm-key fleet scenario is measured by `make warm-fleet`."""
import json
import time
import unittest

from harness import wait_for
from test_redis import RedisCase

# 30/1m (0.5 tokens/s) burst 20; a request every 200 ms is warm (5/s: under
# one per 100 ms interval, and far more than 4 per 30 s rate_ttl)
WARM = "\n[rule:warm]\nkey = key\nrate = 30/1m\nburst = 20\n"


class RateLeases(RedisCase):
    def warm_key(self, redis, agent, key, n=3):
        c = self.seq(agent)
        got = []
        for _ in range(n):
            got.append(c.decide(key=key))
            time.sleep(0.2)  # the traffic's shape: ~5 requests/s
        self.assertEqual([g.get("blocked") for g in got], [False] * n, got)
        rkey = "rl:t2:warm:" + key
        fields = wait_for(lambda: (lambda h: h if any(k.startswith("q:") for k in h) else None)(
            self.hgetall(redis, rkey)), timeout=5)
        self.assertTrue(fields, "no rate lease in Redis: %r" % self.hgetall(redis, rkey))
        return c, rkey, fields

    def test_warm_key_decided_locally_and_given_back_at_sigterm(self):
        redis = self.start_redis()
        a = self.start_agent(redis, WARM, workers=1, rate_leases="on")
        c, rkey, h = self.warm_key(redis, a, "w1")
        agent_id = [k[2:] for k in h if k.startswith("q:")][0]
        share = float(h["q:" + agent_id]) * 1e6  # tokens per second
        slice_ = int(float(h["hn:" + agent_id]))
        self.assertGreater(share, 0)
        self.assertLessEqual(share, 0.7 * 0.5 + 1e-9)  # RATE_POOL of the rate
        self.assertGreaterEqual(slice_, 2)
        self.assertEqual(a.metric("spoa_ratelimit_lease_rate_keys"), 1)
        # decided here now: more requests, no more script calls (the slice holds them)
        # (script calls, not redis_commands_total: the fleet heartbeat and the
        # INFO poll send commands of their own now and then)
        def calls_now():
            return (a.metric("spoa_ratelimit_lease_claims_total")
                    + a.metric("spoa_ratelimit_lease_exact_calls_total"))
        calls = calls_now()
        local = a.metric("spoa_ratelimit_lease_local_decisions_total")
        got = [c.decide(key="w1") for _ in range(slice_ - 1)]
        self.assertEqual([g.get("blocked") for g in got], [False] * len(got), got)
        self.assertEqual(calls_now(), calls)
        self.assertEqual(a.metric("spoa_ratelimit_lease_local_decisions_total"),
                         local + len(got))
        k = json.loads(a.get("/key?rule=warm&key=w1"))
        self.assertGreater(k["lease"]["rate_share_per_s"], 0, k)
        self.assertEqual(k["lease"]["slice"], slice_, k)
        spent = 3 + len(got)
        # SIGTERM: the lease goes back, the share and slice leave Redis
        t0 = time.monotonic()
        self.assertEqual(a.stop(timeout=8), 0, a.output()[-2000:])
        took = time.monotonic() - t0
        h1 = self.hgetall(redis, rkey)
        self.assertEqual([f for f in h1 if f.split(":")[0] in ("h", "e", "q", "qn", "hn")], [],
                         "a lease left in Redis after SIGTERM: %r" % h1)
        # everything not spent is back: 20 - spent, plus at most the refill
        # of the test's few seconds (0.5/s)
        t = float(h1["t"])
        self.assertGreaterEqual(t, 20 - spent - 1e-6, h1)
        self.assertLessEqual(t, 20, h1)
        self.assertLess(took, 5.0)

    def test_off_keeps_token_leases(self):
        """rate_leases = off (the default, and said explicitly): the same warm
        traffic leaves no share in Redis."""
        for setting in (None, "off"):
            with self.subTest(rate_leases=setting):
                self.off_keeps_token_leases(setting, "w2" + (setting or ""))

    def off_keeps_token_leases(self, setting, key):
        redis = self.start_redis()
        a = self.start_agent(redis, WARM, workers=1, rate_leases=setting)
        s = self.seq(a)
        for _ in range(5):
            self.assertIs(s.decide(key=key).get("blocked"), False)
            time.sleep(0.2)
        h = self.hgetall(redis, "rl:t2:warm:" + key)
        self.assertTrue(h, "no bucket in Redis")
        self.assertEqual([f for f in h if f.startswith(("q:", "hn:", "d:"))], [], h)
        self.assertEqual(a.metric("spoa_ratelimit_lease_rate_keys"), 0)
        self.assertEqual(a.metric("spoa_ratelimit_lease_rate_claims_total"), 0)


if __name__ == "__main__":
    unittest.main()
