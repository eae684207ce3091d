# SPDX-License-Identifier: Apache-2.0
"""The budget of a whole rule set (issue 43, item 4; doc/configuration.md,
"The budget of a rule set"), on a real redis-server. 1,024 rules x 16
regexes, each within the per-regex bounds, used to be accepted by --push
and compiled by every agent on its main loop at the same poll: a stall of
seconds for every NOTIFY. Now --push refuses such sets, saying which budget
and the figures (no FILE:LINE: the whole set is over); an agent handed one
straight through Redis (bypassing --push) loads it off its loop, refuses it
(logged once, counted, its error on the status page) and keeps deciding
with the rules in force, a paced stream of NOTIFYs answered meanwhile
without a stall; stopped during such a load it still exits cleanly. Measured (printed): how long --push took to refuse, and
the slowest NOTIFY answer while the agent loaded and refused the set."""
import hashlib
import json
import signal
import subprocess
import threading
import time

from fleet import Seq, redis_ini, unique, wait_redis_up
from harness import Agent, stop_cleanly, wait_for
from test_rules_redis import StoreCase, rules

BUDGET_DOC = '(doc/configuration.md, "The budget of a rule set")'


def huge_set(pattern):
    """1,024 rules of 16 match lines; pattern % (i, j) the j-th regex of rule i."""
    out = []
    for i in range(1024):
        out.append("[rule:r%d]\nkey = key\nrate = 100/1m\n" % i)
        for j in range(16):
            out.append("match = a%d %s\n" % (j, pattern % (i, j)))
    return "".join(out)


# The finding's shape: ~40-byte regexes, 0.9 MB in all (under the 1 MiB a
# version may hold): over the text budget, nothing compiled.
FINDING = "^/p%d/(alpha|beta|gamma)[0-9]+/x%d[a-z]*$"
# Short regexes with tens of KB of JIT code each: within the text budget,
# the costliest to refuse (compiled until the code or CPU budget goes over).
COSTLY = "(?:ab?){0,600}z%.0s%.0s"


class Budget(StoreCase):
    def setUp(self):
        super().setUp()
        self.r = self.start_redis()
        self.section = redis_ini(self.r.port)
        self.op = self.operator("[redis]\nurl = redis://127.0.0.1:%d\n" % self.r.port)

    def current(self):
        return self.r.cli("GET", "rl:{rules}:current").split(" ")[0]

    def test_push_refuses_huge_sets(self):
        """Both shapes: exit 1, the budget named with its figures and no
        line, nothing written; a large realistic set goes through."""
        self.assertEqual(self.push(self.op, rules(10)), 1)
        for pattern, want in ((FINDING, r"its 16384 regexes hold \d+ bytes of text, more than "
                                        r"the 262144 bytes a whole rule set may hold"),
                              (COSTLY, r"its regexes compile to more than 6291456 bytes with "
                                       r"their JIT code \(\d+ by regex \d+ of 16384\)|compiling "
                                       r"its regexes took more than 2000 ms of CPU")):
            text = huge_set(pattern)
            self.assertLess(len(text), 1 << 20)
            t0 = time.monotonic()
            p = self.push(self.op, text, ok=False)
            took = time.monotonic() - t0
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertEqual(p.stdout, "")
            self.assertRegex(p.stderr, r"^\S*/rules-\d+\.ini: rule set over its budget: (%s)" % want)
            self.assertIn(BUDGET_DOC, p.stderr)
            self.assertNotRegex(p.stderr, r"\.ini:\d+:")  # about the whole set: no line
            print("\n  --push of 1,024 x 16 %r regexes refused in %.2f s: %s"
                  % (pattern % (0, 0), took, p.stderr.strip()[:160]))
        self.assertEqual(self.current(), "1")
        self.assertEqual(self.r.cli("ZCARD", "rl:{rules}:versions"), "1")
        # 200 rules of 3 realistic regexes: well within the budget
        real = "".join("[rule:svc%d]\nkey = key\nrate = 100/1m\n"
                       "match = path ^/api/v[0-9]+/(users|orders|items)/[0-9]+(/[a-z_]+)?%d$\n"
                       "match = ua (?i)(curl|wget|python-requests|go-http-client|okhttp)/\n"
                       "match = method ^(GET|HEAD|POST)$\n" % (i, i) for i in range(200))
        self.assertEqual(self.push(self.op, real), 2)

    def hset_text(self, key, text):
        """HSET key text TEXT, the text through redis-cli's stdin (-x): it
        is larger than one command-line argument may be."""
        p = subprocess.run(["redis-cli", "-p", str(self.r.port), "-x", "HSET", key, "text"],
                           input=text, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_agent_keeps_serving_through_a_huge_version(self):
        """A huge version written by hand, its sha256 right: the agent (one
        worker: its SPOP connections share the main loop with Redis and the
        rule store) loads it off that loop and refuses it, once; a NOTIFY
        every 20 ms on fresh keys (each a Redis call) is answered
        throughout, none slower than 1 s (the set took seconds on the loop
        before); the old rules still decide; /status.json says why."""
        agent = self.store_agent(self.section, poll="100ms")
        wait_redis_up(agent)
        self.push(self.op, rules(10))
        self.wait_limit([agent], 10)
        text = huge_set(COSTLY)
        sha = hashlib.sha256(text.encode()).hexdigest()
        self.hset_text("rl:{rules}:v:2", text)
        self.r.cli("HSET", "rl:{rules}:v:2", "sha256", sha)

        lat, errors, stop = [], [], threading.Event()
        seen_compiling = []

        def paced():
            s = Seq(agent.addr)
            try:
                while not stop.is_set():
                    t0 = time.monotonic()
                    v = s.decide(key=unique("k"))
                    lat.append(time.monotonic() - t0)
                    if v.get("limit") != 10:
                        errors.append(v)
                    time.sleep(max(0.0, 0.02 - (time.monotonic() - t0)))
            except Exception as e:  # noqa: BLE001 - reported by the test
                errors.append(repr(e))
            finally:
                s.close()

        th = threading.Thread(target=paced, daemon=True)
        th.start()
        try:
            time.sleep(0.3)  # the stream is going before the version appears
            t0 = time.monotonic()
            self.r.cli("SET", "rl:{rules}:current", "2 " + sha)

            def refused():
                rs = json.loads(agent.get("/status.json"))["rule_set"]
                if rs["compiling"]:
                    seen_compiling.append(True)
                return agent.metric("spoa_ratelimit_rules_applied_total", result="rejected") == 1
            self.assertTrue(wait_for(refused, 30, step=0.02), agent.output()[-3000:])
            took = time.monotonic() - t0
            time.sleep(0.5)  # and after it
        finally:
            stop.set()
            th.join(10)
        self.assertEqual(errors, [])
        self.assertGreater(len(lat), 10)
        print("\n  huge version (1,024 x 16 costly regexes) refused %.2f s after it became "
              "current; %d NOTIFYs meanwhile, slowest %.0f ms%s"
              % (took, len(lat), max(lat) * 1000,
                 "; rule_set.compiling seen true" if seen_compiling else ""))
        self.assertLess(max(lat), 1.0)
        lines = [ln for ln in agent.output().splitlines() if "rules version rejected" in ln]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("version=2 in_force=1", lines[0])
        self.assertRegex(lines[0], r'error="redis:v2: rule set over its budget: ')
        self.assertEqual(agent.metric("spoa_ratelimit_rules_version"), 1)
        self.assertEqual(self.limit(agent), 10)
        rs = json.loads(agent.get("/status.json"))["rule_set"]
        self.assertEqual((rs["version"], rs["current"], rs["compiling"]), (1, 2, False), rs)
        self.assertTrue(rs["error"].startswith("version 2: redis:v2: rule set over its budget"),
                        rs)
        self.assertEqual(rs["regexes"]["count"], 0)  # rules(10) has no match line
        # the next good push is applied as ever
        self.assertEqual(self.push(self.op, rules(20)), 3)
        self.wait_limit([agent], 20)

    def test_stop_during_a_load(self):
        """SIGTERM while a version loads on its thread: the agent waits for
        it (bounded by the budget), drops it and exits 0 (under ASan: no
        leak) within its stop deadline."""
        agent = self.store_agent(self.section, poll="100ms")
        wait_redis_up(agent)
        self.push(self.op, rules(10))
        self.wait_limit([agent], 10)
        text = huge_set(COSTLY)
        sha = hashlib.sha256(text.encode()).hexdigest()
        self.hset_text("rl:{rules}:v:2", text)
        self.r.cli("HSET", "rl:{rules}:v:2", "sha256", sha)
        self.r.cli("SET", "rl:{rules}:current", "2 " + sha)
        seen = wait_for(lambda: json.loads(agent.get("/status.json"))["rule_set"]["compiling"],
                        10, step=0.01)
        t0 = time.monotonic()
        agent.stop()  # raises unless it exits 0
        print("\n  stopped %.2f s after SIGTERM%s" % (
            time.monotonic() - t0, " during a load" if seen else " (the load had ended)"))

    def test_sighup_loads_off_the_loop(self):
        """SIGHUP with source = file: the file is loaded on a thread and put
        in force; a file over the budget is refused and the rules stay."""
        a = Agent(rules(5), workers=1)
        stop_cleanly(self, a)
        self.assertEqual(self.limit(a), 5)
        a.rewrite(rules(7))
        a.p.send_signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: self.limit(a) == 7, 10), a.output()[-2000:])
        a.rewrite(huge_set(FINDING))
        a.p.send_signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_reload_failures_total") == 1,
                                 10), a.output()[-2000:])
        self.assertEqual(self.limit(a), 7)
        st = json.loads(a.get("/status.json"))
        self.assertFalse(st["reload"]["ok"])
        self.assertIn("rule set over its budget", st["reload"]["error"])
        self.assertFalse(st["rule_set"]["compiling"])


if __name__ == "__main__":
    import unittest
    unittest.main()
