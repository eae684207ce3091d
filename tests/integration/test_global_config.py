# SPDX-License-Identifier: Apache-2.0
"""The configuration of regions (issue 46, v1.2) in a running agent, against
real redis-servers: [global] and a rule's scope shown by GET /config as
--check --print prints them (passwords masked, the region in force); a
SIGHUP that changes [global]'s topology or region keeps what is in force
and says so (the log and GET /config), as for [redis]; a new password is
not a pending change; a reload with scope = global on a rule that is not a
token bucket is refused and the rules in force kept. Every agent must exit
0 on SIGTERM (checked at cleanup)."""
import signal
import unittest

from fleet import redis_ini
import harness
from harness import Agent, Redis
from test_keyapi import call, check_print, header_and_body, reloaded

RULES = """
[rule:api]
message = m-api
key = key
rate = 20/1s
burst = 10
scope = global

[rule:local]
message = m-local
key = key
rate = 5/1m
"""


def global_ini(port, password="gsecret", region="eu"):
    return ("[global]\nurl = redis://:%s@127.0.0.1:%d/0\ninterval = 500ms\nregion = %s\n\n"
            % (password, port, region))


class GlobalConfig(unittest.TestCase):
    def setUp(self):
        self.regional = Redis()
        self.addCleanup(self.regional.stop)
        self.glob = Redis()
        self.addCleanup(self.glob.stop)

    def agent(self, ini):
        a = Agent(ini)
        self.addCleanup(a.stop)
        return a

    def reload(self, a, ini):
        before = a.metric("spoa_ratelimit_reloads_total")
        a.rewrite(ini)
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(reloaded(a, before), a.output()[-2000:])
        return header_and_body(call(a, "GET", "/config")[2])

    def test_shown_and_restart_only(self):
        base = redis_ini(self.regional.port)
        a = self.agent(base + global_ini(self.glob.port) + RULES)
        status, _, page = call(a, "GET", "/config")
        self.assertEqual(status, 200)
        head, body = header_and_body(page)
        self.assertEqual(page[len(head) + 2:], check_print(a.ini))
        self.assertIn("\n[global]\nurl = redis://:***@127.0.0.1:%d/0\n" % self.glob.port, body)
        self.assertIn("\ninterval = 500ms\nmax_fraction = 0.25\nreserve = 0.2\nregion = eu\n", body)
        self.assertNotIn("gsecret", page)
        self.assertIn("\nscope = global\n", body)
        self.assertIn("\nscope = region\n", body)
        self.assertIn("; restart pending: none", head)

        # a new password (and interval back to its default: restart only)
        head, body = self.reload(a, base + global_ini(self.glob.port, password="other")
                                 .replace("interval = 500ms\n", "") + RULES)
        self.assertNotIn("[global] url", head)
        self.assertIn(";   [global] interval = 500ms in force; the file says 1000ms", head)
        self.assertNotIn("other", body)

        # a new topology and region: kept, and said in the log and on /config
        head, body = self.reload(a, base + "[global]\ncluster = 127.0.0.1:%d\nregion = us\n\n"
                                 % self.glob.port + RULES)
        self.assertIn(";   [global] url = redis://:***@127.0.0.1:%d/0 in force; the file says \n"
                      % self.glob.port, head + "\n")
        self.assertIn(";   [global] cluster =  in force; the file says 127.0.0.1:%d"
                      % self.glob.port, head)
        self.assertIn(";   [global] region = eu in force; the file says us", head)
        out = a.output()
        for name in ("[global] url", "[global] cluster", "[global] region",
                     "[global] interval"):
            self.assertIn('"%s changed; takes effect at restart"' % name, out)
        self.assertNotIn("gsecret", out)
        self.assertNotIn("other", out)

        # back to what is in force: nothing pending
        head, _ = self.reload(a, base + global_ini(self.glob.port) + RULES)
        self.assertIn("; restart pending: none", head)

        # the reserve applies at a reload (the rules' calls and the claimer)
        head, body = self.reload(a, base + global_ini(self.glob.port)
                                 .replace("region = eu\n", "reserve = 0\nregion = eu\n") + RULES)
        self.assertIn("; restart pending: none", head)
        self.assertIn("\nreserve = 0\n", body)

    def test_reload_refused(self):
        base = redis_ini(self.regional.port)
        a = self.agent(base + global_ini(self.glob.port) + RULES)
        before = a.metric("spoa_ratelimit_reload_failures_total") or 0
        a.rewrite(base + global_ini(self.glob.port)
                  + RULES.replace("scope = global\n", "scope = global\nalgorithm = fixed-window\n"))
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(harness.wait_for(
            lambda: (a.metric("spoa_ratelimit_reload_failures_total") or 0) > before, 10.0),
            a.output()[-2000:])
        self.assertIn("scope = global supports token buckets only (rule 'api' is algorithm = "
                      "fixed-window)", a.output())
        # without [global] at all: refused too
        a.rewrite(base + RULES)
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(harness.wait_for(
            lambda: (a.metric("spoa_ratelimit_reload_failures_total") or 0) > before + 1, 10.0),
            a.output()[-2000:])
        self.assertIn("rule 'api' has scope = global but there is no [global] section",
                      a.output())
        # the rules in force are kept
        _, body = header_and_body(call(a, "GET", "/config")[2])
        self.assertIn("\nscope = global\n", body)


if __name__ == "__main__":
    unittest.main()
