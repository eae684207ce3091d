# SPDX-License-Identifier: Apache-2.0
"""spoa-bench -r (paced load) against a standalone agent: a paced run makes
its rate at any number of connections and pipeline depth. Before, a paced
run whose pipelines filled up spun without reading the ACKs that would have
emptied them: -c 1 -p 1 -d 2 -r 1000 made 1 decision in 2 s.

The bounds hold on a loaded two-core machine: a paced run never sends ahead
of its schedule (at most r x d + one decision), and catches up after a stall
of the machine as soon as the pipelines have room."""
import re
import subprocess
import unittest

import harness

RULES = """
[rule:bench]
key = key
rate = 10/1s
burst = 50
"""


def bench(agent, *args, timeout=60):
    """Run spoa-bench against agent: (returncode, output, {decisions, secs,
    allowed, blocked, errors})."""
    p = subprocess.run([harness.BENCH, "-a", "127.0.0.1:%d" % agent.port, "-k", "100"]
                       + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    res = {}
    m = re.search(r"decisions (\d+) in ([\d.]+) s", p.stdout)
    if m:
        res["decisions"], res["secs"] = int(m.group(1)), float(m.group(2))
    m = re.search(r"allowed (\d+) blocked (\d+) errors (\d+)", p.stdout)
    if m:
        res["allowed"], res["blocked"], res["errors"] = map(int, m.groups())
    return p.returncode, out, res


class Paced(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # one worker: the bench and the agent share two cores with other runs
        cls.agent = harness.Agent(RULES, workers=1, stats=False)

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def check_run(self, rc, out, res, want):
        self.assertEqual(rc, 0, out)
        self.assertEqual(res.get("errors"), 0, out)
        self.assertEqual(res["allowed"] + res["blocked"], res["decisions"], out)
        # never ahead of schedule; behind by at most a fifth on a loaded machine
        self.assertLessEqual(res["decisions"], want * 1.05 + 1, out)
        self.assertGreaterEqual(res["decisions"], want * 0.80, out)

    def test_duration_any_depth(self):
        """-d SECONDS -r RATE: decisions = RATE x SECONDS, from one connection
        with one NOTIFY in flight (an ACK must come back before each next
        decision) to several deep pipelines at a high rate."""
        for conns, pipeline, rate, secs in ((1, 1, 1000, 2), (4, 20, 20000, 2),
                                            (8, 1, 4000, 2), (2, 5, 3000, 2)):
            with self.subTest(c=conns, p=pipeline, r=rate, d=secs):
                rc, out, res = bench(self.agent, "-c", conns, "-p", pipeline, "-r", rate,
                                     "-d", secs)
                print("  -c %d -p %d -r %d -d %d: %s decisions" % (conns, pipeline, rate, secs,
                                                                    res.get("decisions")))
                self.check_run(rc, out, res, rate * secs)

    def test_total_takes_its_time(self):
        """-n TOTAL -r RATE: every decision is made, and it takes TOTAL / RATE
        seconds: no faster (paced), not much slower."""
        rc, out, res = bench(self.agent, "-c", 2, "-p", 2, "-r", 2000, "-n", 3000)
        self.assertEqual(rc, 0, out)
        self.assertEqual(res["decisions"], 3000, out)
        self.assertGreaterEqual(res["secs"], 1.49, out)
        self.assertLessEqual(res["secs"], 1.5 / 0.80, out)

    def test_help_tells_pacing(self):
        p = subprocess.run([harness.BENCH, "--help"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0)
        self.assertIn("-r RATE", p.stdout)
        self.assertIn("PIPELINE in flight", p.stdout)


if __name__ == "__main__":
    unittest.main()
