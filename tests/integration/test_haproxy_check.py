# SPDX-License-Identifier: Apache-2.0
"""--check --haproxy, the real binary: the shipped kit passes; the kit with
one mistake each fails (exit 1) naming FILE:LINE; the block doc/packaging.md
tells operators to paste passes, HAProxy accepts it when started in / (as
systemd starts it) and, in front of an agent, answers 429."""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request

from harness import AGENT, TOP, Agent, Proc, free_port, wait_port

KIT = os.path.join(TOP, "haproxy")
DOC = os.path.join(TOP, "doc", "packaging.md")

# Debian's haproxy.cfg above the block, as on a Debian 12 machine; a stand-in
# with the same global/defaults keywords where there is none.
DEBIAN_CFG = "/etc/haproxy/haproxy.cfg"
STAND_IN = """global
    log /dev/log local0
defaults
    log global
    mode http
    option httplog
    timeout connect 5000
    timeout client 50000
    timeout server 50000
"""


def check(ini, cfg, cwd="/", env=None):
    """(exit code, stderr) of AGENT -c ini --check --haproxy cfg."""
    e = dict(os.environ)
    for k in ("RL_HTTP_ADDR", "RL_AGENT_ADDR", "RL_AGENT1_ADDR", "RL_AGENT2_ADDR"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run([AGENT, "-c", ini, "--check", "--haproxy", cfg], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stderr


def line_of(text, needle):
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError("%r not in the text" % needle)


def doc_block():
    """The text between doc/packaging.md's haproxy-block markers, its code
    fences left out: what test-package.sh runs HAProxy with."""
    with open(DOC) as f:
        m = re.search(r"<!-- haproxy-block: begin[^\n]*\n```\n(.*?)```\n<!-- haproxy-block: end",
                      f.read(), re.S)
    assert m, "no haproxy-block markers in doc/packaging.md"
    return m.group(1)


class Kit(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hapcheck-")
        for name in os.listdir(KIT):
            shutil.copy(os.path.join(KIT, name), self.dir)
        with open(os.path.join(KIT, "haproxy.cfg")) as f:
            self.cfg = f.read()
        with open(os.path.join(KIT, "spoe-ratelimit.conf")) as f:
            self.spoe = f.read()
        with open(os.path.join(KIT, "ratelimit.ini")) as f:
            self.ini = f.read()

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_kit(self, cfg=None, spoe=None, ini=None, env=None):
        cfg_path = self.write("haproxy.cfg", cfg if cfg is not None else self.cfg)
        self.write("spoe-ratelimit.conf", spoe if spoe is not None else self.spoe)
        ini_path = self.write("ratelimit.ini", ini if ini is not None else self.ini)
        return check(ini_path, cfg_path, env=env), cfg_path

    def cc_ini(self):
        """The kit's commented-out concurrency rule, enabled."""
        head, tail = self.ini.split(";[rule:reports-in-flight]")
        return head + re.sub(r"(?m)^;", "", "[rule:reports-in-flight]" + tail)

    def without(self, text, needle):
        new = "".join(l for l in text.splitlines(True) if needle not in l)
        self.assertNotEqual(new, text, "the kit has no line with %r: edit this test" % needle)
        return new

    def test_kit_passes(self):
        (rc, err), _ = self.run_kit()
        self.assertEqual((rc, err), (0, ""))
        (rc, err), _ = self.run_kit(ini=self.cc_ini())
        self.assertEqual((rc, err), (0, ""))

    def test_without_set_var(self):
        cfg = self.without(self.cfg, "set-var(txn.rl_agents)")
        (rc, err), path = self.run_kit(cfg)
        self.assertEqual(rc, 1, err)
        n = line_of(cfg, "send-spoe-group ratelimit check")
        self.assertIn("%s:%d: send-spoe-group ratelimit check: its condition reads "
                      "var(txn.rl_agents), which nothing sets" % (path, n), err)

    def test_without_filter(self):
        cfg = self.without(self.cfg, "filter spoe")
        (rc, err), path = self.run_kit(cfg)
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:%d: frontend 'www' has no 'filter spoe' line"
                      % (path, line_of(cfg, "frontend www")), err)

    def test_without_release(self):
        cfg = self.without(self.cfg, "http-response send-spoe-group")
        (rc, err), _ = self.run_kit(cfg, ini=self.cc_ini())
        self.assertEqual(rc, 1, err)
        n = line_of(self.cc_ini(), "[rule:reports-in-flight]")
        self.assertIn("ratelimit.ini:%d: concurrency rule 'reports-in-flight': no "
                      "'http-response send-spoe-group' sends its release message" % n, err)

    def test_wrong_var_prefix(self):
        spoe = self.spoe.replace("option var-prefix rl", "option var-prefix limiter")
        (rc, err), path = self.run_kit(spoe=spoe)
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:%d: no 'http-request deny' reads var(txn.limiter.blocked)"
                      % (path, line_of(self.cfg, "filter spoe")), err)
        self.assertIn("%s:%d: reads var(txn.rl.blocked), but the agent sets txn.limiter.*"
                      % (path, line_of(self.cfg, "RateLimit-Status unavailable")), err)

    def test_arg_not_sent(self):
        spoe = self.spoe.replace(" plan=var(txn.plan)", "")
        self.assertNotEqual(spoe, self.spoe)
        (rc, err), _ = self.run_kit(spoe=spoe)
        self.assertEqual(rc, 1, err)
        self.assertIn("ratelimit.ini:%d: rule 'api-key' reads arg 'plan', which message "
                      "'check-rate' does not send" % line_of(self.ini, "[rule:api-key]"), err)

    def test_address_mismatch(self):
        env = {"RL_AGENT1_ADDR": "127.0.0.1:23999", "RL_AGENT2_ADDR": "10.1.1.1:12345"}
        (rc, err), path = self.run_kit(env=env)
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:%d: no server of backend 'spoe-ratelimit' is at this agent's address"
                      % (path, line_of(self.cfg, "server agent1")), err)
        # the environment may also put one of them at the agent's address
        (rc, err), _ = self.run_kit(env={"RL_AGENT2_ADDR": "127.0.0.1:12345",
                                         "RL_AGENT1_ADDR": "10.1.1.1:1"})
        self.assertEqual((rc, err), (0, ""))

    def test_without_default_path(self):
        """HAProxy started in / (systemd) does not find the SPOE file."""
        cfg = self.without(self.cfg, "default-path config")
        (rc, err), path = self.run_kit(cfg)
        self.assertEqual(rc, 1, err)
        n = line_of(cfg, "filter spoe")
        self.assertIn("%s:%d: warning: 'spoe-ratelimit.conf' is relative to the directory "
                      "HAProxy starts in (/ under systemd)" % (path, n), err)
        self.assertIn("%s:%d: cannot read the SPOE file spoe-ratelimit.conf" % (path, n), err)

    def test_usage(self):
        p = subprocess.run([AGENT, "-c", os.path.join(KIT, "ratelimit.ini"), "--haproxy",
                            os.path.join(KIT, "haproxy.cfg")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, "--haproxy goes with --check")


class PackagingBlock(unittest.TestCase):
    """The block of doc/packaging.md after Debian's haproxy.cfg, the SPOE
    file beside it, the package's default INI: what an operator gets."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hapcheck-block-")
        base = STAND_IN
        if os.path.exists(DEBIAN_CFG):
            with open(DEBIAN_CFG) as f:
                base = f.read()
        self.cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write(base + doc_block())
        shutil.copy(os.path.join(KIT, "spoe-ratelimit.conf"), self.dir)
        self.ini = os.path.join(TOP, "contrib", "spoa-ratelimit.ini")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_block_checks(self):
        rc, err = check(self.ini, self.cfg)
        self.assertEqual((rc, err), (0, ""))
        # and without its set-var line, the mistake issue 41 found
        with open(self.cfg) as f:
            text = f.read()
        text = "".join(l for l in text.splitlines(True) if "set-var(txn.rl_agents)" not in l)
        broken = os.path.join(self.dir, "broken.cfg")
        with open(broken, "w") as f:
            f.write(text)
        rc, err = check(self.ini, broken)
        self.assertEqual(rc, 1, err)
        self.assertIn("broken.cfg:%d: send-spoe-group ratelimit check"
                      % line_of(text, "send-spoe-group ratelimit check"), err)

    @unittest.skipUnless(shutil.which("haproxy"), "haproxy not installed")
    def test_block_denies(self):
        """HAProxy started in /, as systemd does: 429 after the burst."""
        agent = Agent("[rule:per-ip]\nmessage = check-rate\nkey = ip\nrate = 3/1m\n",
                      stats=False)
        self.addCleanup(agent.stop)
        http = free_port()
        # as an unprivileged test: without Debian's chroot, user and stats socket
        with open(self.cfg) as f:
            text = re.sub(r"(?m)^\s*(chroot|user|group|daemon|stats socket)\b.*$", "", f.read())
        with open(self.cfg, "w") as f:
            f.write(text)
        env = dict(os.environ, RL_HTTP_ADDR="127.0.0.1:%d" % http,
                   RL_AGENT_ADDR="127.0.0.1:%d" % agent.port)
        rc, err = check(agent.ini, self.cfg, env={"RL_AGENT_ADDR": env["RL_AGENT_ADDR"]})
        self.assertEqual((rc, err), (0, ""))
        hap = Proc(["haproxy", "-db", "-f", self.cfg], "haproxy-block", cwd="/", env=env)
        self.addCleanup(hap.stop)
        wait_port(http, proc=hap.p)
        codes = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and 429 not in codes:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/" % http, timeout=5) as r:
                    codes.append(r.status if r.headers.get("RateLimit-Policy") else 0)
            except urllib.error.HTTPError as e:
                codes.append(e.code)
            if codes[-1] == 0:
                codes.pop()  # the agent's server not UP yet: an unlimited 200
                time.sleep(0.1)
        self.assertEqual(codes, [200, 200, 200, 429], hap.output()[-2000:])


if __name__ == "__main__":
    unittest.main()
