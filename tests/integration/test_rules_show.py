# SPDX-License-Identifier: Apache-2.0
"""Versions you can read (issue 45, item 4): --rules-show N prints version
N's text byte for byte as --push stored it (who, when and why on stderr),
--rules-diff A B a unified diff that `patch` (or, without it, this file's
own applier) turns A's text into B's with, nothing for a version and
itself; an unknown version, and a version over the 1 MiB cap written by
hand, exit 1 saying so, as the agents' own capped read
(lua/rules_fetch.lua) refuses it. An agent's GET /rules/N (where the status
page's fleet table links each version) serves the same text, 404 for a
version not kept. On a real redis-server."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request

from fleet import redis_ini, wait_redis_up
from harness import AGENT, Agent, stop_cleanly
from test_redis import RedisCase

V1 = ("; the API's limits\n"
      "[rule:api]\nkey = key\nrate = 10/1m\n\n"
      "[rule:login]\nkey = key\nrate = 5/1m\t; per client, caf\u00e9\n")
# one rule changed, one added, and no newline at the end
V2 = ("; the API's limits\n"
      "[rule:api]\nkey = key\nrate = 20/1m\n\n"
      "[rule:login]\nkey = key\nrate = 5/1m\t; per client, caf\u00e9\n\n"
      "[rule:search]\nkey = key\nrate = 100/1m")


def apply_unified(a, diff):
    """a (bytes) patched by the unified diff (bytes), each hunk's context
    and deletions checked against a; None when it does not apply."""
    lines = a.splitlines(keepends=True)
    out, at = [], 0
    d = diff.splitlines(keepends=True)
    i = 2  # past --- and +++
    while i < len(d):
        m = re.match(rb"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@\n", d[i])
        if not m:
            return None
        start = int(m.group(1)) - (1 if m.group(2) == b"0" else 0)
        out += lines[at:start - 1] if start > 0 else []
        at = max(start - 1, at) if start > 0 else 0
        i += 1
        while i < len(d) and not d[i].startswith(b"@@"):
            body = d[i][1:]
            if i + 1 < len(d) and d[i + 1].startswith(b"\\ No newline"):
                body = body[:-1]
                skip = 2
            else:
                skip = 1
            if d[i][:1] in (b" ", b"-"):
                if at >= len(lines) or lines[at] != body:
                    return None
                at += 1
            if d[i][:1] in (b" ", b"+"):
                out.append(body)
            i += skip
    return b"".join(out + lines[at:])


class RulesShow(RedisCase):
    def setUp(self):
        super().setUp()
        self.r = self.start_redis()
        self.dir = tempfile.mkdtemp(prefix="rl-show-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.op = self.path("op.ini", "[redis]\nurl = redis://127.0.0.1:%d\n" % self.r.port)

    def path(self, name, data):
        p = os.path.join(self.dir, name)
        with open(p, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        return p

    def cli(self, *args):
        return subprocess.run([AGENT, "-c", self.op] + list(args), capture_output=True,
                              timeout=30)

    def push(self, text, *args):
        p = self.cli("--push", self.path("rules.ini", text), *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        return int(p.stdout.strip())

    def test_show_and_diff(self):
        v1 = self.push(V1, "--message", "first limits")
        v2 = self.push(V2)
        self.assertEqual((v1, v2), (1, 2))
        for v, text in ((v1, V1), (v2, V2)):
            p = self.cli("--rules-show", str(v))
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout, text.encode())  # byte for byte
        p = self.cli("--rules-show", "1")
        self.assertRegex(p.stderr.decode(), r"^; redis:v1 \d{4}-\d\d-\d\dT\S+Z host \S+ "
                                            r"sha256 [0-9a-f]{12}: first limits\n$")

        p = self.cli("--rules-diff", "1", "2")
        self.assertEqual((p.returncode, p.stderr), (0, b""))
        d = p.stdout
        print("\n  --rules-diff 1 2:\n    " + d.decode().replace("\n", "\n    "))
        self.assertTrue(d.startswith(b"--- redis:v1\n+++ redis:v2\n@@ -"), d)
        self.assertIn(b"-rate = 10/1m\n+rate = 20/1m\n", d)
        self.assertIn(b"+rate = 100/1m\n\\ No newline at end of file\n", d)
        self.assertEqual(apply_unified(V1.encode(), d), V2.encode())
        # and backwards
        back = self.cli("--rules-diff", "2", "1").stdout
        self.assertTrue(back.startswith(b"--- redis:v2\n+++ redis:v1\n"), back)
        self.assertEqual(apply_unified(V2.encode(), back), V1.encode())
        if shutil.which("patch"):
            target = self.path("target.ini", V1)
            pp = subprocess.run(["patch", "-s", target], input=d, capture_output=True,
                                timeout=30)
            self.assertEqual(pp.returncode, 0, pp.stdout + pp.stderr)
            with open(target, "rb") as f:
                self.assertEqual(f.read(), V2.encode())
        else:
            print("  (no patch(1): the diff is checked by this test's applier only)")

        # a version against itself: no diff; the operand forms getopt allows
        p = self.cli("--rules-diff", "2", "2")
        self.assertEqual((p.returncode, p.stdout), (0, b""), p.stderr)
        p = subprocess.run([AGENT, "--rules-diff", "1", "-c", self.op, "2"],
                           capture_output=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout), (0, d), p.stderr)

    def test_unknown_and_refused_versions(self):
        self.push(V1)
        for args in (("--rules-show", "7"), ("--rules-diff", "1", "7"),
                     ("--rules-diff", "7", "1")):
            p = self.cli(*args)
            self.assertEqual((p.returncode, p.stdout), (1, b""), args)
            self.assertIn(b"version 7 is not kept in Redis", p.stderr)
        # usage errors: no B, a version that is not a number
        for args in (("--rules-diff", "1"), ("--rules-show", "x"), ("--rules-show", "0"),
                     ("--rules-diff", "1", "2", "3"), ("--rules-show", "1", "--push", "f")):
            p = self.cli(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(b"usage:", p.stderr)
        # over the cap, written by hand: not read, as the agents do not
        big = b"; " + b"x" * (1024 * 1024) + b"\n"
        subprocess.run(["redis-cli", "-p", str(self.r.port), "-x", "HSET", "rl:{rules}:v:5",
                        "text"], input=big, capture_output=True, timeout=30, check=True)
        self.r.cli("HSET", "rl:{rules}:v:5", "sha256", "0" * 64)
        p = self.cli("--rules-show", "5")
        self.assertEqual((p.returncode, p.stdout), (1, b""))
        self.assertIn(b"version 5 is larger than 1 MiB (%d bytes)" % len(big), p.stderr)
        # a text that does not match its sha256: shown, with a warning
        self.r.cli("HSET", "rl:{rules}:v:6", "text", "[rule:x]\n", "sha256", "0" * 64)
        p = self.cli("--rules-show", "6")
        self.assertEqual((p.returncode, p.stdout), (0, b"[rule:x]\n"), p.stderr)
        self.assertIn(b"does not match its sha256", p.stderr)

    def test_read_only_users_can_read(self):
        """doc/operations.md's ACL users: the operators' rules-admin, and the
        agents' user too (read-only on the versions), show and diff."""
        self.push(V1)
        self.push(V2)
        for user in (["agent", "on", ">agent-secret", "resetkeys", "~rl:[^{]*", "~{rl:agents}:*",
                      "%R~rl:{rules}:*", "~rl:{rules}:agents", "~rl:{rules}:seen",
                      "resetchannels", "-@all", "+@read", "+@write", "+@scripting",
                      "+@connection", "-@dangerous", "+info", "+role", "+time"],
                     ["rules-admin", "on", ">admin-secret", "resetkeys", "~rl:{rules}:*",
                      "resetchannels", "-@all", "+@read", "+@write", "+@scripting",
                      "+@connection", "-@dangerous", "+info", "+time"]):
            self.assertEqual(self.r.cli("ACL", "SETUSER", *user), "OK")
        for name, secret in (("rules-admin", "admin-secret"), ("agent", "agent-secret")):
            self.op = self.path("%s.ini" % name, "[redis]\nurl = redis://127.0.0.1:%d\n"
                                "username = %s\npassword = %s\n" % (self.r.port, name, secret))
            p = self.cli("--rules-show", "2")
            self.assertEqual((p.returncode, p.stdout), (0, V2.encode()), p.stderr)
            p = self.cli("--rules-diff", "1", "2")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(apply_unified(V1.encode(), p.stdout), V2.encode())

    def test_agent_serves_a_version(self):
        """GET /rules/N on an agent with source = redis: the text byte for
        byte, 404 for a version not kept or not a number, 502 over 1 MiB."""
        self.push(V1)
        self.push(V2)
        a = Agent(redis_ini(self.r.port) + "[rules]\nsource = redis\npoll = 200ms\ncache =\n"
                  "[rule:own]\nkey = key\nrate = 1/1m\n", workers=1)
        stop_cleanly(self, a)
        wait_redis_up(a)

        def get(path):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d%s" % (a.stats_port, path),
                                            timeout=5) as r:
                    return r.status, r.headers.get("Content-Type"), r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.headers.get("Content-Type"), e.read()

        self.assertEqual(get("/rules/1"), (200, "text/plain; charset=utf-8", V1.encode()))
        self.assertEqual(get("/rules/2")[2], V2.encode())
        for bad in ("/rules/7", "/rules/0", "/rules/x", "/rules/", "/rules/1x"):
            self.assertEqual(get(bad)[0], 404, bad)
        big = b"; " + b"x" * (1024 * 1024) + b"\n"
        subprocess.run(["redis-cli", "-p", str(self.r.port), "-x", "HSET", "rl:{rules}:v:5",
                        "text"], input=big, capture_output=True, timeout=30, check=True)
        status, _, body = get("/rules/5")
        self.assertEqual(status, 502)
        self.assertIn(b"larger than 1 MiB", body)

    def test_refused_at_once(self):
        """Issue 45, item 9: a refused connection or password is said by
        name (the command no longer waits out its 5 s and says only that
        Redis was not reached)."""
        from harness import free_port
        self.op = self.path("closed.ini", "[redis]\nurl = redis://127.0.0.1:%d\n" % free_port())
        rules = self.path("r.ini", V1)
        for args in (("--rules-show", "1"), ("--rules-history",), ("--push", rules)):
            p = self.cli(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn(b"Connection refused", p.stderr, args)
        self.assertEqual(self.r.cli("CONFIG", "SET", "requirepass", "right"), "OK")
        for pw, want in (("wrong", b"WRONGPASS"), (None, b"unauthenticated")):
            self.op = self.path("pw.ini", "[redis]\nurl = redis://127.0.0.1:%d\n%s" % (
                self.r.port, "password = %s\n" % pw if pw else ""))
            p = self.cli("--rules-history")
            self.assertEqual(p.returncode, 1)
            self.assertIn(want, p.stderr)
        subprocess.run(["redis-cli", "-p", str(self.r.port), "-a", "right", "CONFIG", "SET",
                        "requirepass", ""], capture_output=True, timeout=10)


if __name__ == "__main__":
    unittest.main()
