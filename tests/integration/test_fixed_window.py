# SPDX-License-Identifier: Apache-2.0
"""algorithm = fixed-window and window_offset (issue 28): N per window,
windows aligned to the Unix epoch in UTC. 5/1d: 5 allowed, then denied with
retry_after and reset = the seconds to 00:00 UTC (computed here from the
clock, with a second or two of tolerance), standalone and on Redis (single
and Cluster), leased and exact; a short window denies until its boundary and
then admits; window_offset shifts the boundary; three agents with leases
never admit more than N in one window; the fail-open backstop allows share x
N per window while Redis is down; GET /key shows the window and POST /reset
empties it; through HAProxy (the kit) a quota's 429 carries Retry-After.
Agents must exit 0 on SIGTERM (checked at cleanup)."""
import json
import math
import subprocess
import time
import unittest
import urllib.request

import fleet
from fleet import LoadClient, run_clients, unique
from harness import AGENT, Agent, HAProxy, stop_cleanly, wait_for
from test_cost import CostCase
from test_redis_topologies import TopologyCase

DAY = 86400

RULES = """
[rule:quota]
key = key
match = path ^/q/
rate = 5/1d
algorithm = fixed-window
lease = %(lease)s

[rule:short]
key = key
match = path ^/s/
rate = 3/2s
algorithm = fixed-window
lease = %(lease)s

[rule:shifted]
key = key
match = path ^/o/
rate = 3/4s
algorithm = fixed-window
window_offset = 1s
lease = %(lease)s
"""


def to_next(period, offset=0, now=None):
    """Seconds from now to the next window start of period shifted by offset."""
    now = time.time() if now is None else now
    return period - (now - offset) % period


class FixedCase(CostCase):
    """Agents standalone or on Redis as test_cost starts them."""

    def stats(self, agent, method, path):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (agent.stats_port, path),
                                     method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read().decode())

    def day_quota(self, agent, label):
        """The issue's case: 5 pass, the 6th is denied until 00:00 UTC."""
        c = self.seq(agent)
        key = unique("q")
        got = [c.decide(key=key, path="/q/x") for _ in range(6)]
        self.assertEqual([(g["blocked"], g["remaining"]) for g in got],
                         [(False, 4), (False, 3), (False, 2), (False, 1), (False, 0), (True, 0)],
                         "%s: %r" % (label, got))
        for g in got:
            self.assertNotEqual(g.get("degraded"), True, g)
        want = to_next(DAY)
        if want < 5:  # midnight passed during the test: nothing to compare
            return key
        self.assertLessEqual(abs(got[5]["retry_after"] - want), 2, "%s: %r, want %.1f"
                             % (label, got[5], want))
        self.assertLessEqual(abs(got[5]["reset"] - want), 2, got[5])
        self.assertLessEqual(abs(got[4]["reset"] - want), 2, got[4])
        self.assertEqual(got[0]["policy"], '"quota";q=5;w=86400', got[0])
        return key

    def key_and_reset(self, agent, key, label):
        st = self.stats(agent, "GET", "/key?rule=quota&key=" + key)
        self.assertEqual(st["algorithm"], "fixed-window", st)
        w = st.get("bucket") or st.get("redis")
        self.assertIsNotNone(w, st)
        start = (time.time() // DAY) * DAY * 1000
        self.assertEqual((w["window_start_ms"], w["window_end_ms"]),
                         (start, start + DAY * 1000), "%s: %r" % (label, st))
        self.assertEqual((w["count"], w["remaining"], w["blocked"]), (5, 0, True), st)
        self.stats(agent, "POST", "/reset?rule=quota&key=" + key)
        got = self.seq(agent).decide(key=key, path="/q/x")
        self.assertEqual((got["blocked"], got["remaining"]), (False, 4), "%s: %r" % (label, got))

    def boundary(self, agent, label):
        """3/2s: denied until the boundary, then allowed; window_offset 1s of
        3/4s moves the boundary to 1 s past a multiple of 4 s."""
        c = self.seq(agent)
        for path, period, offset in (("/s/x", 2, 0), ("/o/x", 4, 1)):
            for _ in range(5):  # the 4 decisions in one window (a busy machine may straddle)
                # start early in a window, so the 4 land in the same one
                wait_for(lambda: to_next(period, offset) > period - 0.5, period + 1, 0.01)
                key = unique("b")
                t0 = time.time()
                got = [c.decide(key=key, path=path) for _ in range(4)]
                left = to_next(period, offset)
                if to_next(period, offset, t0) > left:
                    break
            end = time.time() + left
            self.assertEqual([g["blocked"] for g in got], [False, False, False, True],
                             "%s %s: %r" % (label, path, got))
            # seconds to the boundary rounded up, as seen a moment after the decision
            self.assertIn(got[3]["retry_after"], (math.ceil(left), math.ceil(left) + 1), got[3])
            while True:
                g = c.decide(key=key, path=path)
                t = time.time()
                if not g["blocked"]:
                    break
                self.assertLess(t, end + 2, "%s %s: still denied past the boundary" % (label, path))
                time.sleep(0.05)
            # admitted only once the window ended (the agent's or Redis' clock
            # is this machine's: a few ms of slack for the call)
            self.assertGreaterEqual(t, end - 0.05, "%s %s: admitted early" % (label, path))
            self.assertEqual(g["remaining"], 2, g)


class Standalone(FixedCase):
    def test_day_quota_boundary_key_reset(self):
        for lease in ("on", "off"):
            a = self.agent(RULES % {"lease": lease})
            key = self.day_quota(a, "standalone")
            self.key_and_reset(a, key, "standalone")
        self.boundary(a, "standalone")

    def test_check_print(self):
        a = self.agent(RULES % {"lease": "on"})
        p = subprocess.run([AGENT, "-c", a.ini, "--check", "--print"], capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("\nalgorithm = fixed-window\nwindow_offset = 0\n", p.stdout)
        self.assertIn("\nalgorithm = fixed-window\nwindow_offset = 1s\n", p.stdout)


class OnRedis(FixedCase):
    def test_day_quota_leased_and_exact(self):
        r = self.start_redis()
        for lease in ("on", "off"):
            a = self.agent(RULES % {"lease": lease}, redis=r, prefix="f%s:" % lease)
            key = self.day_quota(a, "lease = " + lease)
            self.key_and_reset(a, key, "lease = " + lease)
            self.assertTrue(any(k.startswith("f%s:fw:quota:" % lease)
                                for k in self.keys(r, "f%s:" % lease)), self.keys(r, ""))
            self.boundary(a, "lease = " + lease)

    def test_fleet_never_over_n_per_window(self):
        """3 agents with leases, 6 pipelining clients flooding one key of
        20/2s for 5 s: no window admits more than 20. A decision happened
        between its NOTIFY's write and its ACK's read: one counted in a
        window is one whose both instants fall in it."""
        N, P = 20, 2.0
        r = self.start_redis()
        rule = "[rule:fleet]\nkey = key\nrate = 20/2s\nalgorithm = fixed-window\n"
        agents = [self.agent(rule, redis=r, workers=1, interval="100ms", ttl="1s",
                             max_fraction="0.2") for _ in range(3)]
        key = unique("fleet")
        clients = [LoadClient(agents[i // 2].addr, {"key": key}, [(5.0, "flood", 4)], name=i)
                   for i in range(6)]
        recs = run_clients(clients)
        adm = [x for x in recs if x.allowed]
        wall0 = time.time() - time.monotonic()  # the records' clock is monotonic
        per = {}
        for x in adm:
            ws, wa = (wall0 + x.sent) // P, (wall0 + x.acked) // P
            if ws == wa:
                per[ws] = per.get(ws, 0) + 1
        print("\n  fixed window fleet: %d decisions, %d admitted, per window %r"
              % (len(recs), len(adm), sorted(per.values())))
        self.assertGreater(len(adm), 0)
        self.assertLessEqual(max(per.values()), N, per)
        self.assertGreaterEqual(len(adm), N, "nothing like a window's worth admitted")
        self.assertLessEqual(len(adm), N * (5.0 / P + 2), "more than N per window overall")
        for a in agents:
            self.assertGreater(a.metric("spoa_ratelimit_lease_claims_total") or 0, 0)

    def test_fail_open_backstop(self):
        """Redis stopped: the backstop allows share x N per window, counted
        to the same boundary."""
        r = self.start_redis()
        a = self.agent(RULES % {"lease": "on"}, redis=r, share="0.4")
        r.kill()
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 0, 10))
        c = self.seq(a)
        key = unique("down")
        got = [c.decide(key=key, path="/q/x") for _ in range(3)]
        self.assertEqual([(g["blocked"], g.get("degraded")) for g in got],
                         [(False, True), (False, True), (True, True)], got)
        want = to_next(DAY)
        if want > 5:
            self.assertLessEqual(abs(got[2]["retry_after"] - want), 2, (got[2], want))


class Cluster(TopologyCase):
    def test_day_quota_on_a_cluster(self):
        self.start_cluster()
        for lease in ("on", "off"):
            a = Agent("[redis]\ncluster = 127.0.0.1:%d\ntimeout = 1s\n\n" % self.ports[0]
                      + RULES % {"lease": lease})
            stop_cleanly(self, a)
            fleet.wait_redis_up(a)
            FixedCase.day_quota(self, a, "cluster, lease = " + lease)

    def seq(self, agent):
        s = fleet.Seq(agent.addr)
        self.addCleanup(s.close)
        return s


class ThroughHAProxy(FixedCase):
    def test_quota_429_retry_after(self):
        a = self.agent("[rule:daily]\nkey = key\nrate = 2/1d\nalgorithm = fixed-window\n")
        h = HAProxy(a.port)
        self.addCleanup(h.stop)
        self.assertTrue(wait_for(lambda: "ratelimit-policy" in h.request(
            "/warmup", {"x-api-key": "warmup"})[1], 10, 0.1), "no decision through HAProxy")
        key = unique("hap")
        got = [h.request("/", {"x-api-key": key}) for _ in range(3)]
        self.assertEqual([g[0] for g in got], [200, 200, 429], got)
        self.assertEqual(got[0][1].get("ratelimit-policy"), '"daily";q=2;w=86400', got[0][1])
        want = to_next(DAY)
        if want > 5:
            self.assertLessEqual(abs(int(got[2][1]["retry-after"]) - want), 2, (got[2], want))
            r = got[1][1].get("ratelimit")
            self.assertTrue(r.startswith('"daily";r=0;t='), r)
            self.assertLessEqual(abs(int(r.rsplit("=", 1)[1]) - want), 2, r)


if __name__ == "__main__":
    unittest.main()
