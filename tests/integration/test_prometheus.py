# SPDX-License-Identifier: Apache-2.0
"""Prometheus, with Prometheus's own tool (promtool, Debian package
`prometheus`): the agent's /metrics passes `promtool check metrics` (standalone
and in Redis mode, after traffic that fills every labelled series), the alert
rules in contrib/ pass `promtool check rules` and their unit tests
(contrib/prometheus-alerts.test.yml), and every metric the rules use is one the
agent exports. Skipped, saying so, where promtool is not installed;
./run-tests installs it."""
import os
import re
import shutil
import subprocess
import unittest

import fleet
import spop
from fleet import wait_redis_up
from harness import TOP, Agent, Redis

PROMTOOL = shutil.which("promtool")
CONTRIB = os.path.join(TOP, "contrib")

RULES = """
[rule:api]
message = check-rate
key = key
rate = 5/1m

[rule:ip-shadow]
message = check-rate
key = ip
rate = 2/1m
shadow = yes
"""


def promtool(*args, stdin=None, cwd=None):
    p = subprocess.run([PROMTOOL] + list(args), input=stdin, capture_output=True, text=True,
                       cwd=cwd, timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()


def traffic(agent):
    """Allowed, blocked and would_block decisions, and one protocol error."""
    c = spop.Client(agent.addr)
    c.handshake()
    for i in range(10):
        c.decide({"key": "k1", "ip": ("ipv4", "192.0.2.1")}, stream=i + 1, fid=1)
    c.close()
    c = spop.Client(agent.addr)
    c.send(spop.frame(spop.NOTIFY, b"", 1, 1))  # NOTIFY before HELLO: status 4 (invalid)
    c.recv_frame()
    c.close()


@unittest.skipUnless(PROMTOOL, "promtool not found: apt-get install prometheus (run-tests does)")
class Prometheus(unittest.TestCase):
    def check_metrics(self, agent):
        traffic(agent)
        text = agent.metrics()
        self.assertIn('result="would_block"', text)
        rc, out = promtool("check", "metrics", stdin=text)
        self.assertEqual((rc, out), (0, ""), "promtool check metrics:\n" + out)
        return text

    def test_metrics_standalone(self):
        agent = Agent(RULES)
        try:
            self.check_metrics(agent)
        finally:
            agent.stop()

    def test_metrics_redis(self):
        redis = Redis()
        # timeout 1s and wait for the link: decisions must go through Redis
        # (a loaded machine must not turn them into fallback ones)
        agent = Agent("[redis]\nurl = redis://127.0.0.1:%d/0\ntimeout = 1s\n" % redis.port
                      + RULES)
        try:
            # the Redis series need answers from Redis: traffic once it is up
            # (the scripts load in a few ms, after the listeners opened)
            fleet.wait_redis_up(agent)
            text = self.check_metrics(agent)
            self.assertNotRegex(text,
                                r'(?m)^spoa_ratelimit_degraded_decisions_total\{[^}]*\} [1-9]')
            self.assertRegex(text, r"(?m)^spoa_ratelimit_redis_latency_seconds_count [1-9]")
        finally:
            redis.stop()
            agent.stop()  # last: it raises unless the agent exits 0

    def test_alert_rules_check(self):
        rc, out = promtool("check", "rules", "prometheus-alerts.yml", cwd=CONTRIB)
        self.assertEqual(rc, 0, out)
        self.assertIn("SUCCESS", out)

    def test_alert_rules_unit_tests(self):
        rc, out = promtool("test", "rules", "prometheus-alerts.test.yml", cwd=CONTRIB)
        self.assertEqual(rc, 0, out)
        self.assertIn("SUCCESS", out)

    def test_alerts_use_metrics_the_agent_exports(self):
        with open(os.path.join(CONTRIB, "prometheus-alerts.yml")) as f:
            used = set(re.findall(r"\b(spoa_ratelimit_[a-z_]+)", f.read()))
        agent = Agent(RULES)
        try:
            exported = set(re.findall(r"(?m)^(spoa_ratelimit_[a-z_]+)", agent.metrics()))
        finally:
            agent.stop()
        self.assertTrue(used)
        self.assertEqual(used - exported, set())


if __name__ == "__main__":
    unittest.main()
