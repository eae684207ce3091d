"""What an operator needs on day two (issue 13): Redis ACL users, the man
pages, the systemd unit installed under a non-default prefix."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import fleet
from harness import TOP, Agent, Redis

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
        self.assertEqual(self.redis.cli("EXISTS", "rl:tb:r:acl").strip(), "1")
        # the connection is really that user's
        clients = self.redis.cli("CLIENT", "LIST")
        self.assertIn("user=ratelimit", clients)

    def test_wrong_password_is_refused_and_falls_back(self):
        a = self.agent("ratelimit:wrong")
        ok = fleet_wait(lambda: "redis refused setup" in a.output())
        self.assertTrue(ok, a.output())
        self.assertIn("AUTH", a.output())
        c = fleet.Seq(a.addr)
        self.addCleanup(c.close)
        self.assertIs(c.decide(key="acl").get("degraded"), True)


def fleet_wait(pred, timeout=10.0):
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@unittest.skipUnless(shutil.which("man"), "man is not installed")
class ManPages(unittest.TestCase):
    def test_pages_render(self):
        for page, title in (("spoa-ratelimit.8", "SPOA-RATELIMIT"),
                            ("spoa-ratelimit.ini.5", "SPOA-RATELIMIT.INI")):
            p = subprocess.run(["man", "-l", "--warnings", os.path.join(TOP, "doc", page)],
                               capture_output=True, text=True, timeout=30,
                               env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
            self.assertEqual(p.returncode, 0, p.stderr)
            out = re.sub(r".\x08", "", p.stdout)  # no overstrike (bold, underline)
            self.assertEqual(p.stderr.strip(), "", "%s: groff warnings:\n%s" % (page, p.stderr))
            self.assertIn(title, out)
            self.assertIn("SYNOPSIS" if page.endswith("8") else "DESCRIPTION", out)


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
        self.assertIn("ExecStart=%s/bin/spoa-ratelimit -c" % prefix, text)
        self.assertNotIn("@bindir@", text)
        for page in ("man8/spoa-ratelimit.8", "man5/spoa-ratelimit.ini.5"):
            self.assertTrue(os.path.exists(os.path.join(prefix, "share", "man", page)), page)
        self.assertTrue(os.path.exists(os.path.join(prefix, "share", "doc", "spoa-ratelimit",
                                                    "prometheus-alerts.yml")))
        p = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True,
                           timeout=60)
        # the unit's own findings only (the host's other units are not ours)
        own = [ln for ln in (p.stdout + p.stderr).splitlines() if "spoa-ratelimit" in ln]
        self.assertEqual(own, [], p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
