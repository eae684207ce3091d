# SPDX-License-Identifier: Apache-2.0
"""spoa-sim against reality.

Fidelity: one small scenario (4 agents, 50 Zipf keys, ~400 requests/s for 10 s,
once with a token bucket rule and once with a sliding window) is replayed through real agents (spoa-ratelimit processes, one SPOP connection
each, every request sent at its scheduled instant) and a real redis-server; the
instants the requests were really sent become a trace that spoa-sim replays
through its simulated fleet. Admitted counts and Redis calls per decision must
agree within the tolerances below. A disagreement is a bug in the simulator or
in the agent: find which.

Scenarios: the simulator reproduces what the fleet tests of test_redis.py
measure on real agents (the 3-agent 400/1s overload, hot keys' Redis calls),
and keeps the bound (worst_window_excess <= 0) in every run."""
import bisect
import itertools
import json
import os
import random
import subprocess
import tempfile
import threading
import time
import unittest

import fleet
import spop
from harness import AGENT, Agent, Redis

SIM = os.environ.get("SIM", os.path.join(os.path.dirname(AGENT), "spoa-sim"))

# What "agree" means. Admissions are set by the rate limits and depend little
# on timing; Redis calls depend on when ticks and replies fall, which differ
# between a loaded machine and virtual time.
ADMITTED_TOL = 0.10
CALLS_TOL = 0.25

AGENTS, KEYS, RPS, SECONDS, ZIPF, SEED = 4, 50, 400.0, 10.0, 1.1, 7
RATE, BURST = "10/1s", 10
RULE = "\n[rule:sim]\nkey = key\nrate = %s\nburst = %d\nalgorithm = %%s\n" % (RATE, BURST)
LEASE = dict(interval="100ms", ttl="1s", max_fraction="0.1")


def sim(*args):
    """Run spoa-sim --json; its JSON objects."""
    p = subprocess.run([SIM, "--json"] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise AssertionError("spoa-sim %s: exit %d\n%s%s" % (" ".join(map(str, args)),
                                                            p.returncode, p.stdout, p.stderr))
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def schedule(seed=SEED):
    """Poisson arrivals at RPS, Zipf keys, agents uniformly: [(t, key, agent)]."""
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1.0 / (k + 1) ** ZIPF for k in range(KEYS)))
    t, out = 0.0, []
    while True:
        t += rng.expovariate(RPS)
        if t >= SECONDS:
            return out
        out.append((t, bisect.bisect_right(cum, rng.random() * cum[-1]), rng.randrange(AGENTS)))


class Fidelity(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.addCleanup(self.redis.kill)

    def start_agents(self, algorithm):
        agents = []
        for _ in range(AGENTS):
            a = Agent(fleet.redis_ini(self.redis.port, **LEASE) + RULE % algorithm, workers=1)
            self.addCleanup(a.stop)
            agents.append(a)
        for a in agents:
            fleet.wait_redis_up(a)
        return agents

    def test_token_bucket(self):
        self.agree("token-bucket")

    def test_sliding_window(self):
        self.agree("sliding-window")

    def agree(self, algorithm):
        reqs = schedule()
        agents = self.start_agents(algorithm)
        c0, o0 = fleet.redis_counts(agents)
        players = [fleet.Replayer(agents[i].addr, [r for r in reqs if r[2] == i])
                   for i in range(AGENTS)]
        t0 = time.monotonic() + 0.2
        for p in players:
            p.t0 = t0
            p.start()
        for p in players:
            p.join(SECONDS + 60)
        errors = [p.error for p in players if p.error or p.is_alive()]
        self.assertEqual(errors, [], "replay failed")
        time.sleep(0.3)  # the last give-backs
        c1, o1 = fleet.redis_counts(agents)
        decisions = sum(len(p.reqs) for p in players)
        answers = [a for p in players for a in p.answers.values()]
        self.assertEqual(len(answers), decisions, "not every request was answered")
        self.assertEqual([a for a in answers if a.get("degraded") is True], [],
                         "degraded answers: Redis was up")
        real_admitted = sum(1 for a in answers if a.get("blocked") is False)
        lateness = sorted(p.sent[i] - (t0 + r[0]) for p in players for i, r in enumerate(p.reqs))

        # The simulator replays what was really sent, when it was sent.
        with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as f:
            for p in players:
                for i, (_, key, agent) in enumerate(p.reqs):
                    f.write("%.6f k%d a%d\n" % (p.sent[i] - t0 + 0.2, key, agent))
            path = f.name
        self.addCleanup(os.unlink, path)
        res = sim("--trace", path, "--agents", AGENTS, "--rate", RATE, "--burst", BURST,
                  "--algorithm", algorithm,
                  "--interval", LEASE["interval"], "--ttl", LEASE["ttl"],
                  "--max-fraction", LEASE["max_fraction"], "--rtt", "0.3ms")[0]

        real_cpd, real_opd = (c1 - c0) / decisions, (o1 - o0) / decisions
        print("\n  fidelity, %s: %d requests (send lateness p50 %.1f ms, p99 %.1f ms)\n"
              "    admitted:           real %d, simulated %d (exact reference %d)\n"
              "    calls per decision: real %.4f, simulated %.4f\n"
              "    ops per decision:   real %.4f, simulated %.4f\n"
              "    simulated: worst window excess %.3f, utilisation %.3f, wait p99 %.3f ms"
              % (algorithm, decisions, 1000 * lateness[len(lateness) // 2],
                 1000 * lateness[int(len(lateness) * 0.99)], real_admitted, res["admitted"],
                 res["reference_admitted"], real_cpd, res["calls_per_decision"], real_opd,
                 res["ops_per_decision"], res["worst_window_excess"], res["utilisation"],
                 res["wait_p99_ms"]))
        self.assertEqual(res["decisions"], decisions)
        self.assertEqual(res["redis_errors"], 0)
        self.assertEqual(res["fallbacks"], 0)
        if algorithm == "token-bucket":
            self.assertLessEqual(res["worst_window_excess"], 0)
        self.assertLessEqual(abs(res["admitted"] - real_admitted), ADMITTED_TOL * real_admitted,
                             "admitted: simulated %d, real %d" % (res["admitted"], real_admitted))
        self.assertLessEqual(abs(res["calls_per_decision"] - real_cpd), CALLS_TOL * real_cpd,
                             "calls per decision: simulated %.4f, real %.4f"
                             % (res["calls_per_decision"], real_cpd))
        self.assertLessEqual(abs(res["ops_per_decision"] - real_opd), CALLS_TOL * real_opd,
                             "script operations per decision: simulated %.4f, real %.4f"
                             % (res["ops_per_decision"], real_opd))


class Scenarios(unittest.TestCase):
    """What test_redis.py measures on real agents, simulated."""

    def test_svg_path_relative_to_cwd(self):
        """--svg FILE is relative to the current directory: doc/sizing.md's
        --svg doc/NAME.svg run outside the source tree is refused at once,
        naming the directory, before the sweep; a path that exists works."""
        with tempfile.TemporaryDirectory() as d:
            args = [SIM, "--sweep", "agents=2,3", "--keys", "10", "--rps", "200", "--seconds",
                    "1", "--rate", "100/1m", "--svg"]
            p = subprocess.run(args + ["doc/sim.svg"], cwd=d, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--svg doc/sim.svg: no directory doc in %s" % os.path.realpath(d),
                          p.stderr)
            self.assertEqual(p.stdout, "")  # refused before the first run
            os.mkdir(os.path.join(d, "doc"))
            p = subprocess.run(args + ["doc/sim.svg"], cwd=d, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(d, "doc", "sim.svg")) as f:
                self.assertIn("<svg ", f.read())

    def test_fleet_overload(self):
        """test_redis.Fleet: 3 agents, one key at 400/1s burst 40, overloaded
        (real: utilisation ~99 % of b + r*T)."""
        r = sim("--agents", 3, "--keys", 1, "--rps", 3000, "--seconds", 4, "--rate", "400/1s",
                "--burst", 40)[0]
        bound = 40 + 400 * 4
        print("\n  fleet overload: admitted %d of b + r*T = %d (%.1f %%), worst window excess %.3f"
              % (r["admitted"], bound, 100.0 * r["admitted"] / bound, r["worst_window_excess"]))
        self.assertLessEqual(r["worst_window_excess"], 0)
        self.assertGreaterEqual(r["admitted"], 0.95 * bound)
        self.assertGreaterEqual(r["utilisation"], 0.95)

    def test_fixed_window(self):
        """A fixed window, 3 agents overloading one key of 400/1s for 4 s
        (windows aligned with the run's start): N per window, so the bound
        the simulator asserts is 2N + r*T (N on each side of a boundary),
        and about N per window is admitted."""
        r = sim("--agents", 3, "--keys", 1, "--rps", 3000, "--seconds", 4, "--rate", "400/1s",
                "--algorithm", "fixed-window")[0]
        print("\n  fixed window: admitted %d of 4 windows x 400, worst window excess %.3f"
              % (r["admitted"], r["worst_window_excess"]))
        self.assertEqual(r["algorithm"], "fixed-window")
        self.assertLessEqual(r["worst_window_excess"], 0)
        self.assertLessEqual(r["admitted"], 4 * 400)
        self.assertGreaterEqual(r["admitted"], 0.95 * 4 * 400)
        self.assertEqual(r["redis_errors"], 0)

    def test_hot_keys(self):
        """test_redis.Efficiency's shape: one agent, 20 hot keys never
        exhausted, 20,000 decisions at ~128k/s, then 0.35 s idle (leases
        given back). Real agents: ~0.009 script operations per decision
        (144 to 180 calls for 20,000 decisions); within CALLS_TOL of it."""
        r = sim("--agents", 1, "--keys", 20, "--uniform", "--rps", 128000, "--seconds", 0.156,
                "--tail", "350ms", "--rate", "100000/1s", "--burst", 100000)[0]
        print("\n  hot keys: %.4f calls, %.4f script operations per decision (%d claims, "
              "%d returns)" % (r["calls_per_decision"], r["ops_per_decision"], r["claims"],
                               r["returns"]))
        self.assertEqual(r["admitted"], r["decisions"])
        self.assertLessEqual(r["calls_per_decision"], 0.02)
        self.assertLessEqual(abs(r["ops_per_decision"] - 0.009), CALLS_TOL * 0.009)

    def test_bound_under_bursts_and_skew(self):
        """Many agents, spikes, one agent taking half of each key's traffic,
        sliding window too: the bound holds (token bucket), no call fails."""
        for extra in ([], ["--algorithm", "sliding-window"]):
            r = sim("--agents", 50, "--keys", 2000, "--rps", 10000, "--seconds", 3, "--skew", 0.5,
                    "--spike", "5,1s,2s", "--rate", "50/1s", "--burst", 20, *extra)[0]
            if not extra:
                self.assertLessEqual(r["worst_window_excess"], 0)
            self.assertEqual(r["redis_errors"], 0)
            self.assertEqual(r["fallbacks"], 0)
            self.assertGreater(r["utilisation"], 0.5)

    def test_rate_leases(self):
        """The agent's rate leases (the real lease code and scripts): warm keys
        on 4 agents (~1.5 req/s per key per agent, far below one per interval)
        cost token leases ~1 call per decision; rate leases a fraction of it,
        with under 1 % of the requests denied that an exact limiter admits.
        Overload, bursts and skew never break the bound."""
        warm = ["--agents", 4, "--keys", 50, "--uniform", "--rps", 300, "--seconds", 120,
                "--rate", "100/10s", "--burst", 20]
        tok = sim(*warm)[0]  # token leases only: the default
        rate = sim("--rate-leases", "on", *warm)[0]
        print("\n  warm keys: token leases %.3f, rate leases %.3f calls per decision (false "
              "denials %d of %d, utilisation %.2f %%)"
              % (tok["calls_per_decision"], rate["calls_per_decision"], rate["false_denials"],
                 rate["decisions"], 100 * rate["utilisation"]))
        self.assertGreater(tok["calls_per_decision"], 0.9)
        self.assertLess(rate["calls_per_decision"], 0.25)
        self.assertLess(rate["false_denials"], 0.01 * rate["decisions"])
        self.assertGreater(rate["utilisation"], 0.98)
        self.assertLessEqual(rate["worst_window_excess"], 0)
        for extra in (["--skew", 0.8], ["--rps", 1500], ["--spike", "5,2s,10s"]):
            r = sim("--rate-leases", "on", *(warm[:-4] + ["--seconds", 40] + extra))[0]
            self.assertLessEqual(r["worst_window_excess"], 0, extra)
        r = sim("--rate-leases", "on", "--agents", 20, "--keys", 200, "--rps", 5000,
                "--seconds", 20, "--skew", 0.5, "--spike", "5,1s,4s", "--rate", "50/1s",
                "--burst", 20)[0]
        self.assertLessEqual(r["worst_window_excess"], 0)
        self.assertGreater(r["utilisation"], 0.5)

    def test_rate_lease_model(self):
        """--policy rate (the simulator's own model of rate leases, written
        before the agent had them): it keeps the bound too."""
        r = sim("--policy", "rate", "--ttl", "5s", "--agents", 20, "--keys", 200, "--rps", 5000,
                "--seconds", 20, "--skew", 0.5, "--spike", "5,1s,4s", "--rate", "50/1s",
                "--burst", 20)[0]
        self.assertEqual(r["policy"], "rate")
        self.assertLessEqual(r["worst_window_excess"], 0)
        self.assertGreater(r["utilisation"], 0.5)


if __name__ == "__main__":
    unittest.main()
