# SPDX-License-Identifier: Apache-2.0
"""What an operator needs on day two (issue 13): Redis ACL users, the man
pages, the systemd unit installed under a non-default prefix, mismatches,
per-client limits from an HAProxy map."""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import fleet
from harness import TOP, Agent, HAProxy, Redis, wait_for

RULE = "[rule:r]\nkey = key\nrate = 10/1m\n"


class AclUser(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.addCleanup(self.redis.kill)
        out = self.redis.cli("ACL", "SETUSER", "ratelimit", "on", ">s3cret", "~rl:*", "+@all")
        self.assertEqual(out.strip(), "OK")

    def agent(self, userinfo):
        a = Agent("[redis]\nurl = redis://%s@127.0.0.1:%d/0\n\n%s"
                  % (userinfo, self.redis.port, RULE))
        self.addCleanup(a.stop)
        return a

    def test_acl_user_authenticates(self):
        a = self.agent("ratelimit:s3cret")
        fleet.wait_redis_up(a)
        c = fleet.Seq(a.addr)
        self.addCleanup(c.close)
        got = c.decide(key="acl")
        self.assertIs(got.get("blocked"), False, got)
        self.assertIsNot(got.get("degraded"), True, got)
        self.assertEqual(self.redis.cli("EXISTS", "rl:t2:r:acl").strip(), "1")
        # the connection is really that user's
        clients = self.redis.cli("CLIENT", "LIST")
        self.assertIn("user=ratelimit", clients)

    def test_wrong_password_is_refused_and_falls_back(self):
        a = self.agent("ratelimit:wrong")
        ok = wait_for(lambda: "redis refused the password (WRONGPASS)" in a.output())
        self.assertTrue(ok, a.output())
        self.assertIn('user=ratelimit command="AUTH"', a.output())
        c = fleet.Seq(a.addr)
        self.addCleanup(c.close)
        self.assertIs(c.decide(key="acl").get("degraded"), True)


@unittest.skipUnless(shutil.which("man"), "man is not installed")
class ManPages(unittest.TestCase):
    def test_pages_render(self):
        for page, title in (("spoa-ratelimit.8", "SPOA-RATELIMIT"),
                            ("spoa-ratelimit.ini.5", "SPOA-RATELIMIT.INI"),
                            ("spoa-bench.1", "SPOA-BENCH"), ("spoa-sim.1", "SPOA-SIM")):
            p = subprocess.run(["man", "-l", "--warnings", os.path.join(TOP, "doc", page)],
                               capture_output=True, text=True, timeout=30,
                               env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
            self.assertEqual(p.returncode, 0, p.stderr)
            out = re.sub(r".\x08", "", p.stdout)  # no overstrike (bold, underline)
            self.assertEqual(p.stderr.strip(), "", "%s: groff warnings:\n%s" % (page, p.stderr))
            self.assertIn(title, out)
            self.assertIn("DESCRIPTION" if page.endswith("5") else "SYNOPSIS", out)


class Mismatch(unittest.TestCase):
    """Silent misconfigurations, through a real HAProxy running the kit: each
    gives a log line and a metric (the report comes within 10 s of traffic,
    and at most once a minute after that)."""

    def start(self, rules):
        self.agent = Agent(rules, extra_agent="log_level = info\n")
        self.addCleanup(self.agent.stop)
        self.haproxy = HAProxy(self.agent.port)
        self.addCleanup(self.haproxy.stop)

    def traffic_until(self, pred, what, headers=None):
        end = time.monotonic() + 30
        while time.monotonic() < end:
            self.haproxy.request("/api/x", headers or {"x-api-key": "tenant-1"})
            if pred():
                return
            time.sleep(0.2)
        self.fail("%s: not seen within 30 s:\n%s" % (what, self.agent.output()[-2000:]))

    def metric(self, name):
        return self.agent.metric(name) or 0

    def test_misspelt_key_arg(self):
        self.start("[rule:api]\nkey = api_key\nrate = 10/1m\n")  # HAProxy sends "key"
        self.traffic_until(lambda: 'rule skipped' in self.agent.output() and
                           self.metric("spoa_ratelimit_missing_args_total") > 0,
                           "missing argument")
        self.assertRegex(self.agent.output(), r'rule=api arg="api_key" count=\d+')

    def test_misspelt_message(self):
        self.start("[rule:api]\nmessage = check_rate\nkey = key\nrate = 10/1m\n")
        self.traffic_until(lambda: 'no rule reads this SPOE message' in self.agent.output() and
                           self.metric("spoa_ratelimit_unknown_messages_total") > 0,
                           "unknown message")
        self.assertIn('message="check-rate"', self.agent.output())
        self.assertGreater(self.metric("spoa_ratelimit_unmatched_requests_total"), 0)

    def test_plan_no_rule_matches(self):
        # plans.map says tenant-paid-1 is "paid": no rule for it
        self.start("[rule:free]\nkey = key\nmatch = plan ^free$\nrate = 10/1m\n")
        self.traffic_until(lambda: 'no rule applied' in self.agent.output() and
                           self.metric("spoa_ratelimit_unmatched_requests_total") > 0,
                           "no rule applied", headers={"x-api-key": "tenant-paid-1"})
        self.assertIn('example="message=check-rate plan=paid"', self.agent.output())
        self.assertEqual(self.metric("spoa_ratelimit_missing_args_total"), 0)

    def test_rule_without_key(self):
        self.start("[rule:all]\nrate = 10/1m\n")
        self.assertEqual(self.metric("spoa_ratelimit_rules_without_key"), 1)
        self.assertIn('"rule without key: one bucket shared by every client', self.agent.output())
        p = subprocess.run([__import__("harness").AGENT, "-c", self.agent.ini, "--check"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"agent\.ini:\d+: warning: rule 'all' has no key")


# The kit's haproxy.cfg sets txn.limit from limits.map (no default) and sends it
# as the "limit" arg: this map replaces the shipped one.
LIMITS_MAP = ("tenant-a 5/1h\n"
              "tenant-b 12/1h\n"
              "tenant-huge 500/1h\n"  # above max_rate: clamped to 20/1h
              "tenant-bad lots\n")    # not a rate: the rule is skipped, and counted
CUSTOM_RULE = ("[rule:custom]\nmessage = check-rate\nkey = key\nrate = arg:limit\n"
               "max_rate = 20/1h\n")


class PerClientLimits:
    """One rule with rate = arg:limit gives each API key the limit the map
    says, through a real HAProxy, in one run (hours, so that no token comes
    back during the test)."""
    redis = False
    rule_extra = ""

    def setUp(self):
        head = ""
        if self.redis:
            self.rd = Redis()
            self.addCleanup(self.rd.kill)
            head = "[redis]\nurl = redis://127.0.0.1:%d/0\n\n" % self.rd.port
        self.agent = Agent(head + CUSTOM_RULE + self.rule_extra,
                           extra_agent="log_level = info\n")
        self.addCleanup(self.agent.stop)
        if self.redis:
            fleet.wait_redis_up(self.agent)
        self.haproxy = HAProxy(self.agent.port, files={"limits.map": LIMITS_MAP})
        self.addCleanup(self.haproxy.stop)
        # the SPOE applet connects lazily: wait until the agent answers (a key
        # not in the map: no rule applies, and no limit arg is sent)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            st, h, _ = self.haproxy.request("/warmup", {"x-api-key": "unlisted"})
            if st == 200 and "ratelimit-status" not in h:
                break
            time.sleep(0.1)
        else:
            self.fail("no answer from the agent through HAProxy")

    def get(self, key):
        return self.haproxy.request("/api/x", {"x-api-key": key})

    def test_each_client_gets_its_own_limit(self):
        want = {"tenant-a": 5, "tenant-b": 12, "tenant-huge": 20}
        got = {k: [] for k in want}
        for _ in range(24):  # interleaved: no client's requests count for another
            for key in want:
                got[key].append(self.get(key))
        for key, n in want.items():
            self.assertEqual([g[0] for g in got[key]], [200] * n + [429] * (24 - n), key)
            for st, h, _ in got[key]:
                self.assertEqual(h.get("ratelimit-policy"), '"custom";q=%d;w=3600' % n, key)
                self.assertEqual(h.get("ratelimit-limit"), str(n), key)
                if st == 429:
                    self.assertGreaterEqual(int(h["retry-after"]), 1)
            self.assertEqual(got[key][n - 1][1].get("ratelimit-remaining"), "0", key)
        # a key the map does not list: the rule does not apply, and that is no mismatch
        st, h, _ = self.get("unlisted")
        self.assertEqual(st, 200)
        self.assertNotIn("ratelimit-policy", h)
        self.assertEqual(self.agent.metric("spoa_ratelimit_missing_args_total") or 0, 0)
        if self.redis:
            keys = self.rd.cli("--scan", "--pattern", "rl:t2:custom:*").splitlines()
            self.assertEqual(len(keys), 3, keys)
            for key, limits in (("tenant-a", "5/3600000ms/5"), ("tenant-b", "12/3600000ms/12"),
                                ("tenant-huge", "20/3600000ms/20")):
                self.assertTrue([k for k in keys if key in k and k.endswith(limits)], keys)

    def test_invalid_limit_skips_the_rule_and_is_counted(self):
        self.assertEqual(self.agent.metric("spoa_ratelimit_missing_args_total") or 0, 0)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            st, h, _ = self.get("tenant-bad")
            self.assertEqual(st, 200)
            self.assertNotIn("ratelimit-policy", h)
            if 'arg="limit=lots"' in self.agent.output():
                break
            time.sleep(0.2)
        self.assertRegex(self.agent.output(), r'rule skipped.* rule=custom arg="limit=lots" '
                                              r'count=\d+')
        self.assertGreater(self.agent.metric("spoa_ratelimit_missing_args_total"), 0)


class PerClientLimitsStandalone(PerClientLimits, unittest.TestCase):
    pass


class PerClientLimitsRedis(PerClientLimits, unittest.TestCase):
    redis = True


class PerClientLimitsRedisExact(PerClientLimits, unittest.TestCase):
    """lease = off: the limits go to Redis with every script call."""
    redis = True
    rule_extra = "lease = off\n"


BUILD = os.path.dirname(os.path.dirname(os.path.abspath(__import__("harness").AGENT)))
UNIT = os.path.join(BUILD, "contrib", "spoa-ratelimit.service")


@unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze is not installed")
class SystemdUnit(unittest.TestCase):
    def test_unit_verifies_under_another_prefix(self):
        """make install with prefix=... writes a unit naming that prefix, and
        systemd-analyze verify accepts it (ExecStart exists there)."""
        prefix = tempfile.mkdtemp(prefix="rl-prefix-")
        self.addCleanup(shutil.rmtree, prefix, True)

        def make(*args):
            p = subprocess.run(["make", "-s", "-C", BUILD] + list(args), capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        os.unlink(UNIT)  # made again with the prefix of this make
        self.addCleanup(make, "contrib/spoa-ratelimit.service")
        self.addCleanup(lambda: os.path.exists(UNIT) and os.unlink(UNIT))
        make("install", "prefix=" + prefix)
        unit = os.path.join(prefix, "lib", "systemd", "system", "spoa-ratelimit.service")
        with open(unit) as f:
            text = f.read()
        self.assertIn("ExecStart=%s/sbin/spoa-ratelimit -c ${CONFIG}" % prefix, text)
        self.assertIn("Environment=CONFIG=%s/etc/spoa-ratelimit/spoa-ratelimit.ini" % prefix, text)
        self.assertNotRegex(text, r"@[a-z_]+@")  # every @dir@ substituted
        # the default configuration, installed where the unit reads it, valid
        conf = os.path.join(prefix, "etc", "spoa-ratelimit", "spoa-ratelimit.ini")
        p = subprocess.run([os.path.join(prefix, "sbin", "spoa-ratelimit"), "-c", conf, "--check"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for page in ("man8/spoa-ratelimit.8", "man5/spoa-ratelimit.ini.5"):
            self.assertTrue(os.path.exists(os.path.join(prefix, "share", "man", page)), page)
        self.assertTrue(os.path.exists(os.path.join(prefix, "share", "doc", "spoa-ratelimit",
                                                    "prometheus-alerts.yml")))
        # --man=no: the unit's Documentation= pages are under this prefix,
        # not on man's path (the package test verifies them installed)
        p = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], capture_output=True,
                           text=True, timeout=60)
        # the unit's own findings only (the host's other units are not ours)
        own = [ln for ln in (p.stdout + p.stderr).splitlines() if "spoa-ratelimit" in ln]
        self.assertEqual(own, [], p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
