# SPDX-License-Identifier: Apache-2.0
"""Redis slower than `timeout` under load: the fallback is repaid.

Three agents (workers = 1, timeout 100 ms) share a hot key of a 600/1m burst
20 rule, each driven by a paced client well over the limit. Redis stalls a
few times (DEBUG SLEEP longer than the timeout, STALL_GAP apart): each time
the agents' claims come back late and their backstops decide meanwhile.
What a backstop admits is owed to Redis and paid from the key's next grants
(late ones first); a key the lease last saw exhausted stays exhausted.

Every decision is recorded with its send and ACK times, and the worst excess
over b + r*T is computed with each admission bracketed by them (so a
positive excess is real): over the whole run, and over the intervals that
hold every stall and reach REPAY_S past the last (the repayment's end). The
figures are printed beside the issue's bounds (10 % of b + r*T over the run,
2 % over intervals reaching past the repayment); the checks are those bounds
or, on a machine slow enough that more calls time out, the backstop's own
admissions (past the repayment: those not repaid), plus a token for timing,
and spoa_ratelimit_fallback_repaid_total growing."""
import os
import threading
import time
import unittest

from fleet import LoadClient, run_clients, unique, wait_redis_up, worst_across, worst_window
from harness import Redis
from test_redis import RedisCase

RATE, PERIOD, BURST = 600, 60.0, 20
R = RATE / PERIOD
AGENTS = 3
PER_S = 20          # each client's pace: 60/s in all against 10/s
WARM = 3.0          # seconds before the first stall
# the run is REPAY_STALLS=8 REPAY_GAP=3; the default is shorter
STALLS = int(os.environ.get("REPAY_STALLS", "5"))
STALL_S = 0.3       # DEBUG SLEEP: three times the timeout
STALL_GAP = float(os.environ.get("REPAY_GAP", "2"))  # from one stall's start to the next's
REPAY_S = 2.0       # after the last stall: its late grants and the next claims pay
TAIL = 4.0

RULES = """
[rule:hot]
key = key
rate = %d/1m
burst = %d
""" % (RATE, BURST)


class FallbackRepay(RedisCase):
    def test_slow_redis_is_repaid(self):
        redis = Redis(args=("--enable-debug-command", "yes"))
        self._redises.append(redis)
        agents = [self.start_agent(redis, RULES, workers=1, prefix="repay:", timeout="100ms",
                                   interval="100ms", ttl="1s", share="0.34",
                                   wait_up=False) for _ in range(AGENTS)]
        for a in agents:
            wait_redis_up(a)
        key = unique("hot")
        dur = WARM + STALLS * STALL_GAP + TAIL
        clients = [LoadClient(a.addr, {"key": key, "path": "/x"}, [(dur, "paced", PER_S)],
                              name=i) for i, a in enumerate(agents)]
        stalls = []

        def stall():
            time.sleep(WARM)
            for _ in range(STALLS):
                t0 = time.monotonic()
                redis.cli("DEBUG", "SLEEP", str(STALL_S))
                stalls.append((t0, time.monotonic()))
                time.sleep(max(0.0, t0 + STALL_GAP - time.monotonic()))
        th = threading.Thread(target=stall, daemon=True)
        th.start()
        records = run_clients(clients, join_timeout=dur + 30)
        th.join(30)
        self.assertEqual(len(stalls), STALLS, "the stalls did not all run")
        slow = [s for s in stalls if s[1] - s[0] < STALL_S * 0.9]
        self.assertEqual(slow, [], "DEBUG SLEEP returned early (not enabled?)")

        ex, count, T, _, _ = worst_window(records, BURST, R, rigorous=True)
        across = worst_across(records, BURST, R, stalls[0][0], stalls[-1][1] + REPAY_S)
        self.assertIsNotNone(across, "no admission before the first stall or after repayment")
        ex2, count2, T2 = across
        degraded = sum(1 for x in records if x.allowed and x.vars.get("degraded") is True)
        repaid = sum(a.metric("spoa_ratelimit_fallback_repaid_total", rule="hot") or 0
                     for a in agents)
        print("\n  %d x DEBUG SLEEP %.1f s, %d agents at %d/s each on one %d/1m burst %d key: "
              "%d decisions, %d admitted (%d by a backstop); worst excess over b + r*T: "
              "%+.1f (%+.1f %%: %d in %.2f s); over intervals holding every stall and "
              "reaching %.0f s past the last: %+.1f (%+.1f %%: %d in %.2f s); "
              "fallback_repaid_total %d"
              % (STALLS, STALL_S, AGENTS, PER_S, RATE, BURST, len(records),
                 sum(1 for x in records if x.allowed), degraded, ex,
                 100 * ex / (BURST + R * T), count, T, REPAY_S, ex2,
                 100 * ex2 / (BURST + R * T2), count2, T2, repaid))
        # The figures (10 % over the run, 2 % past the repayment) are
        # printed above; what is asserted is what holds on a machine of any
        # speed: tokens Redis granted are exact, so an excess can only come
        # from backstop admissions, and past the repayment only from those
        # not repaid (the debt is capped at the backstop's burst per agent:
        # doc/design.md, "Repaying the fallback"). A loaded machine times
        # out more calls, so its backstops admit (and leave unrepaid) more.
        unrepaid = max(0, degraded - repaid)
        p = []
        if ex > max(0.10 * (BURST + R * T), degraded) + 1:
            p.append("worst excess %+.1f in %.2f s: over 10 %% of b + r*T and over the %d "
                     "backstop admissions" % (ex, T, degraded))
        if ex2 > max(0.02 * (BURST + R * T2), unrepaid) + 1:
            p.append("past the repayment, worst excess %+.1f in %.2f s: over 2 %% of b + r*T "
                     "and over the %d backstop admissions not repaid" % (ex2, T2, unrepaid))
        if degraded and repaid <= 0:
            p.append("the backstop admitted %d, fallback_repaid_total stayed 0" % degraded)
        for a in agents:
            self.assertIsNone(a.p.poll(), "an agent exited")
        self.assertEqual(p, [])


if __name__ == "__main__":
    unittest.main()
