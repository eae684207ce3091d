# SPDX-License-Identifier: Apache-2.0
"""The operator's view of regions (issue 46), against real redis-servers: a
global Redis (no delay tap), two regions of two agents each, one
`scope = global` rule (regions.RegionFleet).

- /status.json `global`: configured, up, this agent's role (one claimer per
  region, as the metric says), its region, the regions seen; the claimer's
  counters grow, the other agent's stay 0.
- GET /key of a scope = global rule: `scope: "global"`; on the region's
  claimer a `global` object (what the region holds of the key's global
  bucket), null on the other agent.
- The status page (headless Chromium, --dump-dom): a Regions card saying
  which agent claims for its region, its region and the regions seen;
  hidden without [global].
- An agent without [global]: `global.configured` false, no `scope` in /key.

Every wait is on a condition with a deadline."""
import json
import re
import unittest
import urllib.parse

import browser
import fleet
import regions
from fleet import LoadClient, unique
from harness import Agent, Redis, wait_for

CHROMIUM = browser.find_chromium()


def status(a):
    return json.loads(a.get("/status.json"))


def page_card(br, a, until):
    """The Regions card of a's status page once until(card) holds (each
    try a fresh --dump-dom; the page's timers run in virtual time)."""
    got = [""]

    def ok():
        dom = br.dump_dom("http://127.0.0.1:%d/" % a.stats_port)
        m = re.search(r'<div class="card" id="card-global"[^>]*>.*?</dl></div>', dom, re.S)
        got[0] = m.group(0) if m and "data-ticks" in dom else dom[-3000:]
        return m is not None and "data-ticks" in dom and until(got[0])
    return wait_for(ok, 40, step=0.5), got[0]


def key_state(a, key):
    return json.loads(a.get("/key?rule=api&key=" + urllib.parse.quote(key)))


class RegionsOps(unittest.TestCase):
    def setUp(self):
        self.fl = regions.RegionFleet(delay=0)
        self.addCleanup(self.stop)
        self.fl.start()

    def stop(self):
        rcs = self.fl.stop()
        self.assertEqual([rc for rc in rcs if rc not in (0, None)], [],
                         "agents exited with %r" % rcs)

    def traffic(self, key, seconds=1.0):
        """key paced from every agent (each region's claimer then follows it)."""
        clients = [LoadClient(a.addr, {"key": key, "path": "/api/x"},
                              [(seconds, "paced", 10.0)], name="c%d" % i)
                   for i, a in enumerate(self.fl.agents)]
        return fleet.run_clients(clients, join_timeout=seconds + 60)

    def roles(self, region):
        ag = self.fl.agents_of(region)
        wait_for(lambda: sum(1 for a in ag if status(a)["global"]["claimer"]) == 1, timeout=30)
        c = [a for a in ag if status(a)["global"]["claimer"]][0]
        return c, [a for a in ag if a is not c][0]

    def test_status_json_global(self):
        key = unique("st")
        self.traffic(key)
        for i in range(2):
            c, other = self.roles(i)
            self.assertEqual(c.metric("spoa_ratelimit_global_claimer"), 1)
            wait_for(lambda: status(c)["global"]["claims"] > 0 and
                     status(c)["global"]["regions"] == 2, timeout=30)
            g = status(c)["global"]
            self.assertEqual((g["configured"], g["up"], g["claimer"], g["region"]),
                             (True, True, True, "region-%d" % i), g)
            self.assertEqual(g["regions"], 2, g)
            self.assertGreater(g["calls"], 0, g)
            self.assertGreater(g["granted"], 0, g)
            self.assertGreaterEqual(g["keys"], 1, g)
            self.assertIsNotNone(g["rtt_ms"], g)
            for f in ("failed", "returned", "backstop", "forfeited"):
                self.assertIsInstance(g[f], int, f)
            o = status(other)["global"]
            self.assertEqual((o["configured"], o["up"], o["claimer"], o["region"], o["calls"]),
                             (True, True, False, "region-%d" % i, 0), o)

    def test_key_global_on_the_claimer(self):
        key = unique("k")
        self.traffic(key)
        c, other = self.roles(0)
        # the claimer follows the key from its next round on
        wait_for(lambda: key_state(c, key).get("global") is not None, timeout=30)
        st = key_state(c, key)
        self.assertEqual(st["scope"], "global")
        g = st["global"]
        self.assertEqual(sorted(g), ["backstop", "deadline_ms", "est", "gheld", "pool"], g)
        self.assertIs(g["backstop"], False, g)
        self.assertIsInstance(g["gheld"], int, g)
        self.assertIsInstance(g["deadline_ms"], int, g)
        self.assertIn("redis", st)
        o = key_state(other, key)
        self.assertEqual(o["scope"], "global")
        self.assertIsNone(o["global"], o)
        # a key never seen: the claimer follows nothing for it
        self.assertIsNone(key_state(c, unique("never"))["global"])


    @unittest.skipUnless(CHROMIUM, "chromium not found")
    def test_page_regions_card(self):
        self.traffic(unique("pg"))
        c, other = self.roles(1)
        with browser.Browser() as br:
            ok, card = page_card(br, c, lambda t: "claimer of its region" in t and
                                 "<dt>regions seen</dt><dd>2</dd>" in t)
            self.assertTrue(ok, card)
            self.assertNotIn("hidden", card.split(">", 1)[0])
            self.assertIn("<dt>region</dt><dd>region-1</dd>", card)
            self.assertIn('<dd class="up">up</dd>', card)
            ok, card = page_card(br, other, lambda t: "not the claimer" in t)
            self.assertTrue(ok, card)


class NoGlobal(unittest.TestCase):
    def test_without_global(self):
        r = Redis()
        self.addCleanup(r.kill)
        a = Agent("[redis]\nurl = redis://127.0.0.1:%d/0\n\n"
                  "[rule:api]\nkey = key\nrate = 20/1s\nburst = 10\n\n" % r.port, workers=1)
        self.addCleanup(a.stop)
        fleet.wait_redis_up(a)
        g = status(a)["global"]
        self.assertEqual((g["configured"], g["up"], g["claimer"], g["region"], g["rtt_ms"]),
                         (False, False, False, None, None), g)
        if CHROMIUM:
            with browser.Browser() as br:
                ok, card = page_card(br, a, lambda t: True)
                self.assertTrue(ok, card)
                self.assertIn("hidden", card.split(">", 1)[0])
        st = key_state(a, "x")
        self.assertNotIn("scope", st)
        self.assertNotIn("global", st)


if __name__ == "__main__":
    unittest.main()
