# SPDX-License-Identifier: Apache-2.0
"""The scripts as a Redis function library ([redis] functions, issue 30):
against real redis-server processes on loopback.

- By default the agent loads its library at connect (FUNCTION LOAD) and calls
  the scripts with FCALL, never EVALSHA; a second agent of the same build
  finds the library there and calls the same functions.
- functions = off: EVALSHA only, no library.
- FUNCTION FLUSH under a running agent: the next call reloads the library and
  goes again; no decision is lost or degraded, the limit still holds.
- An ACL that refuses FCALL, or FUNCTION LOAD: the same scripts with EVALSHA,
  said once; decisions exact.

Every wait polls a condition with a deadline."""
import re
import unittest

from harness import wait_for
from test_redis_auth import AuthCase, cli, info


FN_CONNS = "spoa_ratelimit_redis_function_connections"


def calls(port, command, **auth):
    m = re.search(r"calls=(\d+)", info(port, "commandstats", **auth).get("cmdstat_" + command, ""))
    return int(m.group(1)) if m else 0


def libraries(port, **auth):
    out = cli(port, "FUNCTION", "LIST", "LIBRARYNAME", "spoa_ratelimit_*", **auth)
    return sorted(set(re.findall(r"^(spoa_ratelimit_[0-9a-f]{16})$", out, re.M)))


class Functions(AuthCase):
    def url(self, r):
        return "[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port

    def test_calls_go_as_fcall(self):
        r = self.redis()
        a = self.agent(self.url(r))
        self.wait_up(a)
        self.assertEqual(len(libraries(r.port)), 1, cli(r.port, "FUNCTION", "LIST"))
        # its connection calls functions (one per agent: the workers share it)
        self.assertTrue(wait_for(lambda: a.metric(FN_CONNS) == 1, timeout=10),
                        "%s: %r" % (FN_CONNS, a.metric(FN_CONNS)))
        self.assert_ten_of(self.seq(a), "fcall")
        self.assertGreater(calls(r.port, "fcall"), 0)
        self.assertEqual(calls(r.port, "evalsha"), 0)
        # a second agent of this build: the library is there ("already
        # exists"), and it calls the same functions
        b = self.agent(self.url(r))
        self.wait_up(b)
        before = calls(r.port, "fcall")
        c = self.seq(b)
        got = [c.decide(key="fcall") for _ in range(2)]
        self.assertEqual([g.get("blocked") for g in got], [True, True], got)
        self.assertGreater(calls(r.port, "fcall"), before)
        self.assertEqual(calls(r.port, "evalsha"), 0)
        self.assertEqual(len(libraries(r.port)), 1)
        self.assertNotIn("functions unavailable", a.output() + b.output())

    def test_functions_off(self):
        r = self.redis()
        a = self.agent(self.url(r) + "functions = off\n")
        self.wait_up(a)
        self.assert_ten_of(self.seq(a), "off")
        self.assertGreater(calls(r.port, "evalsha"), 0)
        self.assertEqual(calls(r.port, "fcall"), 0)
        self.assertEqual(calls(r.port, "function|load"), 0)
        self.assertEqual(libraries(r.port), [])
        self.assertEqual(a.metric(FN_CONNS), 0)

    def test_function_flush_reloads(self):
        r = self.redis()
        a = self.agent(self.url(r))
        self.wait_up(a)
        c = self.seq(a)
        first = [c.decide(key="flush") for _ in range(4)]
        self.assertEqual(cli(r.port, "FUNCTION", "FLUSH"), "OK")
        # (a lease top-up may find it gone, and load it again, before the next request)
        rest = [c.decide(key="flush") for _ in range(8)]
        got = first + rest
        self.assertEqual([g.get("blocked") for g in got], [False] * 10 + [True] * 2, got)
        self.assertEqual([g for g in got if g.get("degraded")], [], got)
        self.wait_log(a, '"redis lost its functions; reloading"')
        self.assertTrue(wait_for(lambda: len(libraries(r.port)) == 1, timeout=10),
                        "library not loaded again")
        self.assertEqual(calls(r.port, "evalsha"), 0)

    def test_acl_without_fcall(self):
        r, a = self.acl_agent("~rl:*", "+@all", "-fcall")
        self.assert_ten_of(self.seq(a), "nofcall")
        self.wait_log(a, '"redis ACL refused FCALL: calling the scripts with EVALSHA"')
        self.assertGreater(calls(r.port, "evalsha"), 0)
        self.assertEqual(a.metric("spoa_ratelimit_redis_up"), 1)
        self.assertEqual(a.metric(FN_CONNS), 0)
        # the connection stays on EVALSHA: no FCALL after the first refusal
        before = calls(r.port, "fcall")
        self.assert_ten_of(self.seq(a), "nofcall2")
        self.assertEqual(calls(r.port, "fcall"), before)
        self.assertEqual(a.output().count("ACL refused FCALL"), 1)

    def test_acl_without_function_load(self):
        r, a = self.acl_agent("~rl:*", "+@all", "-function")
        self.wait_log(a, '"redis functions unavailable: calling the scripts with EVALSHA"')
        self.assert_ten_of(self.seq(a), "noload")
        self.assertGreater(calls(r.port, "evalsha"), 0)
        self.assertEqual(calls(r.port, "fcall"), 0)
        self.assertEqual(libraries(r.port), [])
        self.assertEqual(a.metric(FN_CONNS), 0)
        # said once, not per reconnect
        reconnects = a.metric("spoa_ratelimit_redis_reconnects_total") or 0
        self.assertGreaterEqual(int(cli(r.port, "CLIENT", "KILL", "USER", "lim")), 1)
        self.assertTrue(wait_for(lambda: (a.metric("spoa_ratelimit_redis_reconnects_total") or 0)
                                 > reconnects and a.metric("spoa_ratelimit_redis_up") == 1,
                                 timeout=10), "no reconnect")
        self.assertEqual(calls(r.port, "function|load"), 0)
        self.assertEqual(a.output().count("functions unavailable"), 1)


if __name__ == "__main__":
    unittest.main()
