# SPDX-License-Identifier: Apache-2.0
"""Rule semantics through the SPOP wire, standalone mode (no Redis)."""
import os
import subprocess
import tempfile
import unittest

import spop
from harness import Agent, AGENT

RULES = """
[rule:ten]
message = check-rate
key = key
match = path ^/api/
rate = 10/1m
burst = 10

[rule:login]
message = check-rate
key = ip
match = path ^/login
match = method ^POST$
rate = 3/1h

[rule:shadow-ip]
message = check-rate
key = ip
rate = 2/1m
shadow = yes

[rule:backtrack]
message = bt
key = key
match = path ^(a|aa)+$
rate = 1/1m

[rule:pair]
message = other
key = key, ip
rate = 5/1s
burst = 2
"""


class Rules(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent(RULES)

    @classmethod
    def tearDownClass(cls):
        rc = cls.agent.stop()
        assert rc == 0, "agent exit %s\n%s" % (rc, cls.agent.output())

    def setUp(self):
        self.c = spop.Client(self.agent.addr)
        self.c.handshake()
        self.sid = 0

    def tearDown(self):
        self.c.close()

    def decide(self, msg="check-rate", **args):
        self.sid += 1
        return self.c.decide(args, stream=self.sid, fid=1, message=msg)

    def test_ten_per_minute(self):
        got = [self.decide(key="tenant-1", path="/api/v1/items", ip=("ipv4", "10.1.1.1"))
               for _ in range(14)]
        allowed = [g for g in got if not g["blocked"]]
        self.assertEqual(len(allowed), 10)
        self.assertEqual([g["remaining"] for g in got[:10]], list(range(9, -1, -1)))
        for g in got[:10]:
            self.assertEqual(g["rule"], "ten")
            self.assertEqual(g["limit"], 10)
            self.assertEqual(g["policy"], '"ten";q=10;w=60')
            self.assertEqual(g["ratelimit"], '"ten";r=%d;t=%d' % (g["remaining"], g["reset"]))
            self.assertNotIn("retry_after", g)
        self.assertEqual(got[0]["reset"], 6)
        for g in got[10:]:
            self.assertIs(g["blocked"], True)
            self.assertEqual(g["remaining"], 0)
            self.assertGreaterEqual(g["retry_after"], 1)
            self.assertLessEqual(g["retry_after"], 6)
            self.assertTrue(58 <= g["reset"] <= 60, g)
            self.assertEqual(g["rule"], "ten")
        # another key is independent
        self.assertEqual(self.decide(key="tenant-2", path="/api/x", ip=("ipv4", "10.1.1.2"))
                         ["remaining"], 9)

    def test_no_match_sets_only_blocked(self):
        # /static matches no rule but the shadow one (every message, key ip);
        # without ip the shadow rule is skipped too.
        self.assertEqual(self.decide(key="k", path="/static/a.css"), {"blocked": False})

    def test_missing_or_empty_arg_skips_rule(self):
        self.assertEqual(self.decide(key="", path="/api/a"), {"blocked": False})
        self.assertEqual(self.decide(key=None, path="/api/a"), {"blocked": False})
        self.assertEqual(self.decide(path="/api/a"), {"blocked": False})

    def test_match_all_must_hold(self):
        ip = ("ipv4", "192.0.2.7")
        r = self.decide(path="/login", method="GET", ip=ip)
        self.assertNotEqual(r.get("rule"), "login")
        got = [self.decide(path="/login", method="POST", ip=ip) for _ in range(4)]
        self.assertEqual([g["blocked"] for g in got], [False, False, False, True])
        self.assertEqual(got[0]["rule"], "login")
        self.assertEqual(got[0]["policy"], '"login";q=3;w=3600')

    def test_backtracking_regex_is_bounded(self):
        """A text that makes ^(a|aa)+$ backtrack exponentially (PCRE2 stops at
        its match limit): answered at once, the rule does not apply, counted;
        a short text still matches."""
        before = self.agent.metric("spoa_ratelimit_match_limited_total")
        got = self.decide(msg="bt", key="k1", path="a" * 4000 + "c")
        self.assertEqual(got, {"blocked": False})
        self.assertEqual(self.agent.metric("spoa_ratelimit_match_limited_total"), before + 1)
        got = [self.decide(msg="bt", key="k2", path="aaaa") for _ in range(2)]
        self.assertEqual([(g["blocked"], g.get("rule")) for g in got],
                         [(False, "backtrack"), (True, "backtrack")], got)
        self.assertEqual(self.agent.metric("spoa_ratelimit_match_limited_total"), before + 1)

    def test_shadow_never_blocks(self):
        ip = ("ipv6", "2001:db8::77")
        got = [self.decide(path="/x", ip=ip) for _ in range(4)]
        self.assertTrue(all(g["blocked"] is False for g in got))
        self.assertNotIn("would_block", got[0])
        self.assertIs(got[2]["would_block"], True)
        self.assertIs(got[3]["would_block"], True)
        # shadow rules never choose the rule or the headers
        self.assertNotIn("rule", got[3])
        self.assertNotIn("policy", got[3])

    def test_v4_mapped_is_v4(self):
        a = self.decide(path="/y", ip=("ipv4", "198.51.100.9"))
        b = self.decide(path="/y", ip=("ipv6", "::ffff:198.51.100.9"))
        self.assertNotIn("would_block", a)
        self.assertNotIn("would_block", b)
        c = self.decide(path="/y", ip=("ipv4", "198.51.100.9"))
        self.assertIs(c["would_block"], True)  # the third for one client

    def test_message_binding_and_composite_key(self):
        ip = ("ipv4", "203.0.113.5")
        got = [self.decide(msg="other", key="k1", ip=ip) for _ in range(3)]
        self.assertEqual([g["blocked"] for g in got], [False, False, True])
        self.assertEqual(got[0]["rule"], "pair")
        # a different ip is a different key
        self.assertIs(self.decide(msg="other", key="k1", ip=("ipv4", "203.0.113.6"))["blocked"],
                      False)
        # "ten" only reads check-rate
        self.assertNotEqual(self.decide(msg="other", key="k9", path="/api/",
                                        ip=("ipv4", "203.0.113.7")).get("rule"), "ten")

    def test_several_messages_deciding_rule(self):
        # one NOTIFY, two messages: "ten" (check-rate) and "pair" (other);
        # the deciding rule is the one with fewest remaining (pair: burst 2).
        ip = ("ipv4", "203.0.113.99")
        self.sid += 1
        self.c.send(spop.notify(self.sid, 1, [
            ("check-rate", [("key", "multi"), ("path", "/api/m"), ("ip", ip)]),
            ("other", [("key", "multi"), ("ip", ip)])]))
        f = self.c.recv_frame()
        r = spop.decode_actions(f["payload"])
        self.assertEqual(r["rule"], "pair")
        self.assertEqual(r["remaining"], 1)


def write(text):
    fd, path = tempfile.mkstemp(suffix=".ini")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


class Check(unittest.TestCase):
    def check(self, text):
        path = write(text)
        try:
            p = subprocess.run([AGENT, "-c", path, "--check"], capture_output=True, text=True,
                               timeout=10)
        finally:
            os.unlink(path)
        return p.returncode, p.stderr.replace(path, "FILE")

    def test_valid(self):
        rc, err = self.check("[agent]\nlisten = 127.0.0.1:1\n" + RULES)
        self.assertEqual(rc, 0, err)

    def test_shipped_sample_is_valid(self):
        here = os.path.dirname(os.path.abspath(__file__))
        p = subprocess.run([AGENT, "-c", os.path.join(here, "..", "..", "haproxy",
                                                      "ratelimit.ini"), "--check"],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_mistakes_each_reported_with_line(self):
        # each message names what is wrong and quotes the offending value
        cases = [
            ("[agent]\nbogus = 1\n", 2, ("unknown key", "bogus")),
            ("[agent]\nworkers = many\n", 2, ("number", "'many'", "workers")),
            ("[lease]\ninterval = 10 parsecs\n", 2, ("duration", "'10 parsecs'", "interval")),
            ("[rule:a]\nkey = k\n", 1, ("rate",)),
            ("[nosuch]\n", 1, ("section", "nosuch")),
            ("[rule:a]\nrate = 1/1s\n[rule:a]\nrate = 2/1s\n", 3, ("duplicate",)),
            ("[rule:a]\nrate = 1/1s\nmatch = path ([a-\n", 3, ("regex",)),
            ("[rule:a]\nrate = ten/1m\n", 2, ("rate", "'ten/1m'")),
            ("[rule:a]\nrate = 1/1s\nshadow = perhaps\n", 3, ("boolean", "'perhaps'", "shadow")),
            ("[agent]\nallow = 10.0.0.0/33\n", 2, ("CIDR", "10.0.0.0/33", "allow")),
        ]
        for text, line, words in cases:
            rc, err = self.check(text)
            self.assertEqual(rc, 1, text)
            self.assertRegex(err, r"^FILE:%d: " % line, text)
            for word in words:
                self.assertIn(word, err, text)

    def test_unreadable(self):
        p = subprocess.run([AGENT, "-c", "/nonexistent/x.ini", "--check"], capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(p.returncode, 1)
        self.assertIn("/nonexistent/x.ini", p.stderr)


if __name__ == "__main__":
    unittest.main()
