# SPDX-License-Identifier: Apache-2.0
"""[fallback] share = auto that cannot collapse (issue 42, deliverable 4):
three agents on one Redis see N = 3; the heartbeat set is emptied under them
(FLUSHALL, then Redis restarted empty and crashing again a second later). An
agent that read the emptied set (spoa_ratelimit_fleet_agents 1) keeps N = 3
(spoa_ratelimit_fleet_agents_max), and in the outage that follows each
agent's backstop admits within the stated bound share * (b + r*D) with share
1/3 (+1 token), D the time its fresh key was driven in the outage as this
test measured it: not the whole limit, which would admit three times that.

Starts its own redis-server and agents on free loopback ports; agents must
exit 0 on SIGTERM."""
import math
import time
import unittest

import fleet
from harness import Agent, Redis, wait_for

RULE = "[rule:api]\nkey = key\nrate = 30/1s\nburst = 30\n"
B, R = 30, 30.0
N = 3
OUTAGE = 2.5  # seconds of decisions per agent while Redis is down


def gauges(agents):
    return ([a.metric("spoa_ratelimit_fleet_agents") for a in agents],
            [a.metric("spoa_ratelimit_fleet_agents_max") for a in agents])


class ShareAutoKept(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.addCleanup(lambda: self.redis.kill())
        ini = fleet.redis_ini(self.redis.port, share="auto") + RULE
        self.agents = [Agent(ini, workers=1) for _ in range(N)]
        self.addCleanup(fleet.stop_all, self.agents)
        for a in self.agents:
            fleet.wait_redis_up(a)

    def wait_gauge(self, name, want, timeout=25.0):
        for a in self.agents:
            self.assertTrue(wait_for(lambda: a.metric(name) == want, timeout=timeout),
                            "%s %r, not %d\n%s" % (name, a.metric(name), want,
                                                    a.output()[-2000:]))

    def test_emptied_heartbeats_keep_n_through_a_crash_loop(self):
        # the whole fleet seen (each agent beats at connect, then every 5 s)
        self.wait_gauge("spoa_ratelimit_fleet_agents", N)
        self.wait_gauge("spoa_ratelimit_fleet_agents_max", N)

        # FLUSHALL: the next agent to beat reads a set of one
        self.assertEqual(self.redis.cli("FLUSHALL"), "OK")
        self.assertTrue(wait_for(lambda: 1 in gauges(self.agents)[0], timeout=12),
                        "no agent read the emptied set: %r" % (gauges(self.agents),))
        raw, mx = gauges(self.agents)
        print("\n  after FLUSHALL: fleet_agents %r, fleet_agents_max %r" % (raw, mx))
        self.assertEqual(mx, [N] * N)

        # Redis restarted empty, crashing again a second later
        port = self.redis.port
        self.redis.kill()
        self.redis = Redis(port)
        for a in self.agents:
            fleet.wait_redis_up(a)
        time.sleep(1.0)
        self.redis.kill()
        t_down = time.monotonic()
        for a in self.agents:
            self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 0))
        raw, mx = gauges(self.agents)
        print("  Redis restarted empty, down again: fleet_agents %r, fleet_agents_max %r"
              % (raw, mx))
        self.assertEqual(mx, [N] * N, "N shrank")

        # each agent's backstop: 1/3 of the rule, not the whole of it
        share = 1.0 / N
        problems = []
        for i, a in enumerate(self.agents):
            key = fleet.unique("outage")
            c = fleet.Seq(a.addr)
            try:
                t0 = time.monotonic()
                got = []
                while time.monotonic() - t0 < OUTAGE:
                    got.append(c.decide(key=key))
                t_last = time.monotonic()
            finally:
                c.close()
            allowed = sum(1 for g in got if g["blocked"] is False)
            not_degraded = [g for g in got if g.get("degraded") is not True]
            # a fresh key: its backstop bucket was made at its first
            # decision, after t0, so D is this agent's measured t0..t_last
            d = t_last - t0
            bound = math.floor(share * B) + share * R * d + 1  # +1: a token's rounding
            print("  agent%d: %d decisions in %.2f s, %d admitted; bound share*(b + r*D) = "
                  "%.1f (share 1 would allow %.0f)"
                  % (i + 1, len(got), d, allowed, bound, B + R * d))
            if not_degraded:
                problems.append("agent%d: %d answers not degraded, e.g. %r"
                                % (i + 1, len(not_degraded), not_degraded[0]))
            if len(got) < 2 * B:
                problems.append("agent%d: only %d decisions in %.1f s: too few to tell"
                                % (i + 1, len(got), OUTAGE))
            if allowed > bound:
                problems.append("agent%d admitted %d in an outage of %.2f s: over share * "
                                "(b + r*D) = %.1f with share 1/%d"
                                % (i + 1, allowed, d, bound, N))
        self.assertEqual(problems, [])
        # still 3 after the outage's decisions
        self.assertEqual(gauges(self.agents)[1], [N] * N)

    def test_clean_stop_leaves_the_fleet_at_once(self):
        """SIGTERM to one of three agents: its heartbeat goes with it, and
        the others read 2 agents (fleet_agents) and N = 2 (the max that
        share = auto uses) within 7 s: a beat, not the 60 s window a lost
        agent takes. A kill -9 leaves no such word: N stays 2 then."""
        self.wait_gauge("spoa_ratelimit_fleet_agents", N)
        self.wait_gauge("spoa_ratelimit_fleet_agents_max", N)
        gone = self.agents.pop()
        t = time.monotonic()
        self.assertEqual(gone.stop(), 0)
        self.assertEqual(self.redis.cli("ZCARD", "rl:agents"), "2")
        for a in self.agents:
            self.assertTrue(wait_for(lambda: gauges([a]) == ([N - 1], [N - 1]), timeout=7.0),
                            "after a clean stop: fleet_agents, max %r\n%s"
                            % (gauges([a]), a.output()[-1500:]))
        print("\n  one of %d stopped: the others read %r within %.1f s"
              % (N, gauges(self.agents), time.monotonic() - t))
        self.assertIn("left=1", "".join(a.output() for a in self.agents))
        # a crash says nothing: the dead agent's member stays until its
        # liveness passes, and N keeps it for the window
        dead = self.agents.pop()
        dead.kill()
        dead.stop(check=False)  # its files
        self.assertEqual(self.redis.cli("ZCARD", "rl:agents"), "2")
        time.sleep(6.0)  # a beat of the survivor's
        self.assertEqual(gauges(self.agents)[1], [N - 1])


if __name__ == "__main__":
    unittest.main()
