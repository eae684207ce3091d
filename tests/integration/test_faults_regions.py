# SPDX-License-Identifier: Apache-2.0
"""The fault matrix's region rows (issue 46, item 3; faults_regions.py runs
each fault and measures it): two regions of two agents, each region on its
own Redis, a global Redis 80 ms away, two `scope = global` rules.

Smoke (./run-tests' fault step, with test_faults.Smoke; about 40 s): the
global Redis restarted empty, region 0 cut from it 3 s, region 0's Redis
stopped 3 s. Matrix (`make faults`): a healthy run, the global Redis
stopped 5 s, 400 ms late for 6 s, restarted empty, region 0 cut 5 s,
region 0's Redis stopped 5 s, region 0's claimer killed. Each test asserts
the allowance doc/design.md ("Regions") states for its fault, on every
key, each decision bracketed (the worst excess over b + r*T is real);
what the fallback decided (degraded answers: a regional call that timed
out on a loaded machine) is allowed on top, a token each, as in
test_faults. Nothing asserted depends on the machine's speed: counts of
admissions are checked against bounds, never against expected figures.
At the end the table of every row run is printed (faults.row()).

run.py runs this module only when named (run-tests' fault step, make
faults): Smoke and Matrix take about two and a half minutes."""
import unittest

import faults_regions as fr
from faults import HEADER, row

ROWS = []
EPS = 1e-9  # the excess is a float: b + r*T with T measured
WARN = "global_unreachable"


def tearDownModule():
    if ROWS:
        print("\n" + HEADER)
        for r in ROWS:
            print(r)


class RegionFaultCase(unittest.TestCase):
    def record(self, res, allowance, slack_b=0.0, note=""):
        p99 = "decisions' p99 %.1f ms" % fr.p99_ms(res)
        r = row(res, allowance, slack_b, "%s; %s" % (note, p99) if note else p99)
        print("\n" + r, flush=True)
        ROWS.append(r)

    def worst_hot(self, fn):
        """(value, rule) of the hot key for which fn(key) is largest."""
        return max((fn(k), k) for k in fr.hot_keys(self.res))

    def assert_bound(self, res, allow, what):
        """Every key's worst excess over b + r*T <= allow(key) + what the
        fallback admitted of it."""
        for key, (name, kind, ex, rel, adm, n) in sorted(res.per_key.items()):
            a = allow(key) + res.degraded_admitted(key)
            self.assertLessEqual(ex, a + EPS, "%s: %s %s key admitted %+.2f over b + r*T, "
                                 "allowed %.2f (%d of %d admitted)"
                                 % (what, name, kind, ex, a, adm, n))

    def assert_outage(self, res, t1, t2, settle_end, allow_in, what):
        """In [t1, t2] each key admits at most allow_in(key) (+ degraded);
        outside [t1, settle_end] the bound is exact (+ degraded); every
        region kept deciding in it."""
        for key, (name, kind, b, r) in sorted(res.keys.items()):
            adm = fr.admitted_in(res, key, t1, t2)
            a = allow_in(key) + res.degraded_admitted(key)
            self.assertLessEqual(adm, a + EPS, "%s: %s %s admitted %d in %.1f s, allowed %.1f"
                                 % (what, name, kind, adm, t2 - t1, a))
            out = fr.excess_outside(res, key, t1, settle_end)
            self.assertLessEqual(out, res.degraded_admitted(key) + EPS,
                                 "%s: %s %s %+.2f over b + r*T outside it and its settling"
                                 % (what, name, kind, out))
        for region in range(fr.REGIONS):
            self.assertGreater(fr.decided_in(res, t1, t2, region), 0,
                               "%s: region %d decided nothing in it" % (what, region))

    def assert_warned_and_cleared(self, res, agents):
        self.assertGreaterEqual(res.warnings.get(WARN, 0), agents, res.warnings)
        self.assertGreaterEqual(res.extra["cleared"].get(WARN, 0), agents, res.extra["cleared"])

    # ---- the rows, shared by Smoke and Matrix ------------------------------

    def restart(self, **kw):
        """Stated (doc/design.md): the new bucket is full while the regions
        hold tokens of the old one: at most one extra b per key over
        b + r*T. The kill is an outage too, however short: a region that
        held nothing of a key (a hot key spends what it gets) deposits its
        backstop share until the new Redis answers, the regions' shares
        b + r*D together over the gap D (kill to both regions counted by
        the new Redis), allowed when the backstops tripped; a token for
        timing."""
        self.res = res = fr.global_restart(**kw)
        t1, t2 = res.extra["gap"]
        d = t2 - t1
        bs = res.extra["backstop"]

        def allow(key):
            b, r = res.keys[key][2:]
            return b + ((b + r * d) if bs else 0.0) + 1.0
        ex, key = self.worst_hot(lambda k: res.per_key[k][2] - res.keys[k][2])
        self.record(res, "b per key (+ b + r*D of backstops over the gap D)", 1.0,
                    "gap %.2f s; named on every agent in %.2f s; backstop tokens %d; %s hot "
                    "%+.1f over b + r*T (b = %d)"
                    % (d, res.extra["named_s"], bs, res.keys[key][0], res.per_key[key][2],
                       res.keys[key][2]))
        self.assert_bound(res, allow, "global restarted empty")
        self.assertIn(WARN, res.warnings)
        # the lost state named on every agent (the global epoch key), once
        self.assertEqual(res.warnings.get("global_state_lost", 0), fr.AGENTS,
                         res.warnings)
        self.assertNotIn("redis_state_lost", res.warnings)

    def cut(self, **kw):
        """Region 0 cut from the global Redis for D, from the cut until its
        agents are connected again (the heal and their reconnection's
        backoff). Region 0 spends what it held (counted by the global
        bucket), then its backstop share (b + r*D)/regions; region 1 claims
        on, the global bucket granting at most b + r*D less what region 0
        held. So over b + r*T the allowance is region 0's backstop,
        (b + r*D)/regions, and in the cut at most b + r*D + (b + r*D)/regions
        are admitted (more than the whole outage's 2b + r*D when r*D > b:
        measured, doc/design.md). Outside the cut and its settling: exact.
        Region 1 alone is exact throughout."""
        self.res = res = fr.region_cut(**kw)
        t1, t2 = res.extra["cut"]
        back = res.extra["back"]
        d = back - t1
        share = 1.0 / fr.REGIONS

        def allow(key):
            b, r = res.keys[key][2:]
            return share * (b + r * d) + 1.0
        adm, key = self.worst_hot(lambda k: fr.admitted_in(res, k, t1, t2))
        b, r = res.keys[key][2:]
        dc = t2 - t1
        self.record(res, "(b + r*D)/regions; in the cut b + r*D + (b + r*D)/regions", 0.0,
                    "cut %.1f s, back %.1f s later; %s hot admitted %d in the cut "
                    "(2b + r*D = %.0f, b + r*D + (b + r*D)/2 = %.0f); region 1 alone %+.1f"
                    % (dc, back - t2, res.keys[key][0], adm, 2 * b + r * dc,
                       (1 + share) * (b + r * dc),
                       max(fr.excess_of(res, k, 1) for k in res.keys)))
        self.assert_bound(res, allow, "region 0 cut")
        for k, (name, kind, b, r) in res.keys.items():
            self.assertLessEqual(fr.excess_of(res, k, 1), res.degraded_admitted(k) + EPS,
                                 "region 1 alone over b + r*T on %s %s" % (name, kind))
        self.assert_outage(res, t1, t2, back + fr.SETTLE,
                           lambda k: (1 + share) * (res.keys[k][2] + res.keys[k][3] * d) + 1.0,
                           "region 0 cut")
        self.assert_warned_and_cleared(res, fr.PER_REGION)

    def regional_down(self, **kw):
        """Region 0's Redis stopped: its agents answer from their fallback
        once their calls time out, as for one region: each agent's backstop
        share * (b + r*D) over b + r*T ([fallback] share = 0.05, two
        agents), a token each for timing, D from the stop to the last
        degraded answer. Region 1 alone is exact, answers nothing degraded
        and keeps deciding."""
        self.res = res = fr.regional_down(**kw)
        t1, t2 = res.extra["outage"]
        deg = [x for x in res.recs if x.vars.get("degraded") is True]
        d = max([x.acked for x in deg] + [t2]) - t1
        span = ("degraded answers from +%.1f s to +%.1f s" % (
            min(x.sent for x in deg) - t1, max(x.acked for x in deg) - t1)) if deg else "none"

        def allow(key):
            b, r = res.keys[key][2:]
            return fr.PER_REGION * (fr.SHARE * (b + r * d) + 1.0)
        r1 = max(fr.excess_of(res, k, 1) for k in res.keys)
        # (region 1 decides by its own Redis; a machine loaded past its
        # timeout may still have it answer degraded now and then: allowed)
        r1_deg = [x for x in deg if fr.region_of_rec(x) == 1]
        self.record(res, "region 0's agents' share*(b + r*D); region 1 exact", 0.0,
                    "stopped %.1f s, %s; region 1 alone %+.1f, its decisions in the "
                    "outage %d (%d degraded)" % (t2 - t1, span, r1, fr.decided_in(res, t1, t2, 1),
                                                 len(r1_deg)))
        self.assertGreater(len(deg) - len(r1_deg), 0, "region 0's agents never fell back")
        self.assert_bound(res, allow, "region 0's Redis stopped")
        self.assertLessEqual(r1, sum(1 for x in r1_deg if x.allowed) + EPS,
                             "region 1 alone over b + r*T")
        self.assertGreater(fr.decided_in(res, t1, t2, 1), 0, "region 1 stopped deciding")


class Smoke(RegionFaultCase):
    def test_global_restarted_empty(self):
        self.restart(seconds=8.0, at=3.0)

    def test_region_cut(self):
        self.cut(seconds=9.0, cut_s=3.0, at=2.0)

    def test_regional_redis_stopped(self):
        self.regional_down(seconds=9.0, down=3.0, at=2.0)


class Matrix(RegionFaultCase):
    def test_healthy_is_exact(self):
        self.res = res = fr.healthy()
        self.record(res, "0 (exact)")
        self.assertEqual(res.degraded, 0)
        self.assert_bound(res, lambda k: 0.0, "healthy")

    def test_global_stopped(self):
        """Stated (doc/design.md): the regions spend what they held (the
        global bucket counts it: at most b), then their backstop shares,
        b + r*D together: at most 2b + r*D admitted in the outage D, a
        token for timing; outside it and its settling exact. Decisions
        keep coming in both regions; the claimers warn and clear."""
        self.res = res = fr.global_down()
        t1, t2 = res.extra["outage"]
        d = t2 - t1
        hot = "; ".join("%s hot admitted %d in it (2b + r*D = %.0f, r*D %.0f)" % (
            res.keys[k][0], fr.admitted_in(res, k, t1, t2), 2 * res.keys[k][2]
            + res.keys[k][3] * d, res.keys[k][3] * d) for k in fr.hot_keys(res))
        self.record(res, "in the outage 2b + r*D admitted; outside it and its settling 0", 0.0,
                    "stopped %.1f s; %s; outside %+.1f; backstop tokens %d"
                    % (d, hot,
                       max(fr.excess_outside(res, k, t1, t2 + fr.SETTLE) for k in res.keys),
                       res.extra["backstop"]))
        self.assert_outage(res, t1, t2, t2 + fr.SETTLE,
                           lambda k: 2 * res.keys[k][2] + res.keys[k][3] * d + 1.0,
                           "global Redis stopped")
        self.assertGreater(res.extra["backstop"], 0, "no backstop deposited")
        self.assert_warned_and_cleared(res, fr.REGIONS)

    def test_global_slow(self):
        """The global Redis' replies 400 ms late (5 times the usual round
        trip, under [global] timeout = 1 s): claims land later, no decision
        waits for them: exact, utilisation lower (reported). A machine
        loaded past the timeout gives rounds up: then the backstops' b + r*D
        over the slow span is allowed, as for an outage."""
        self.res = res = fr.global_slow()
        t1, t2 = res.extra["slow"]
        bs = res.extra["backstop"]

        def allow(key):
            b, r = res.keys[key][2:]
            return (b + r * (t2 - t1) + 1.0) if bs else 0.0
        self.record(res, "0 (exact)", 0.0, "slow %.1f s; backstop tokens %d; p99 in it %.1f ms"
                    % (t2 - t1, bs, fr.p99_ms(res, t1, t2)))
        self.assert_bound(res, allow, "global Redis slow")
        for region in range(fr.REGIONS):
            self.assertGreater(fr.decided_in(res, t1, t2, region), 0)

    def test_global_restarted_empty(self):
        self.restart()

    def test_region_cut(self):
        self.cut()

    def test_regional_redis_stopped(self):
        self.regional_down()

    def test_claimer_killed(self):
        """Region 0's claimer killed (SIGKILL): the other agent of the
        region takes the lease lock once its ttl (3 intervals, 3 s) runs out and
        feeds the region on; the regional bucket's deadline keeps what the
        dead claimer was granted from being spent past its global lease:
        exact."""
        self.res = res = fr.claimer_killed()
        e = res.extra
        self.assertIsNotNone(e["takeover"], "no successor took region 0's lock")
        self.record(res, "0 (exact)", 0.0, "successor in %.2f s (lock ttl %g s)"
                    % (e["takeover"] - e["killed"], 3 * fr.INTERVAL))
        self.assert_bound(res, lambda k: 0.0, "claimer killed")
        survivor = [i for i in range(fr.PER_REGION) if i != e["victim"]][0]
        after = [x for x in res.recs if x.allowed and x.sent > e["takeover"] + 1.0
                 and x.client.endswith("/%d" % survivor)]
        self.assertGreater(len(after), 0, "region 0 admitted nothing after the takeover")


if __name__ == "__main__":
    unittest.main()
