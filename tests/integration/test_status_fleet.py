# SPDX-License-Identifier: Apache-2.0
"""The status page says why (issue 45): /status.json's fleet, boxes,
decisions and rejected version, and the page drawn from them in a real
headless Chromium (`--dump-dom`: the DOM is asserted, never pixels), on a
real redis-server:

- three agents on one Redis: each one's /status.json lists the three
  (their pids) with their counters, and the totals are the rows' sums,
  equal to what the agents decided; the page's fleet table has three rows
  and a totals row, each rules version a link to its text;
- calls per decision count decision calls only: an idle agent made Redis
  calls (heartbeat, polls) but no decision call, and shows no ratio;
- standalone: no lease box, no fleet box (flags false, boxes hidden);
- Redis refusing the password: the red banner, saying why (WRONGPASS);
- a rule version that does not compile: a banner naming it, and the Agent
  card's "last reload" says it was rejected;
- concurrency slots taken and never released: held and expired counts, a
  banner, and the blocked client's wait as "when a slot frees", not "now";
- a shadow rule's would-be blocks drawn in their own class, sparklines
  with their scale written in.

With $SPOA_SHOTS set to a directory, each case also saves a screenshot
there (status-*.png) to look at."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import browser
from fleet import Seq, unique, wait_redis_up
from harness import AGENT, Agent, Redis, stop_cleanly, wait_for

RULES = """
[rule:api]
message = check-rate
key = key
rate = 5/1m
burst = 5

[rule:ip-shadow]
message = check-rate
key = key
rate = 2/1m
burst = 2
shadow = yes
"""

CONC = """
[rule:inflight]
message = check-rate
key = key
algorithm = concurrency
limit = 2
release = release-slot
max_hold = 2s
"""


def redis_ini(port, password=None):
    """timeout 1s, not 200ms: no test here is about the timeout, and on a busy
    machine one stall of redis-server past 200 ms made the agent answer from its
    local backstop (degraded), which SlotsStuck read as a slot never taken."""
    return "[redis]\nurl = redis://127.0.0.1:%d\ntimeout = 1s\n%s" % (
        port, "password = %s\n" % password if password else "")


def status(agent):
    return json.loads(agent.get("/status.json"))


def element(dom, tag_id):
    """The opening tag of the element with id tag_id (its attributes)."""
    m = re.search(r'<[a-z]+ [^>]*id="%s"[^>]*>' % re.escape(tag_id), dom)
    assert m, "no #%s in the DOM" % tag_id
    return m.group(0)


def shown(dom, tag_id):
    return " hidden" not in element(dom, tag_id)


def banner_text(dom, tag_id):
    m = re.search(r'id="%s"[^>]*>(.*?)</div>' % re.escape(tag_id), dom, re.S)
    return m.group(1) if m else ""


class PageCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if browser.find_chromium() is None:
            raise unittest.SkipTest("no Chromium")
        cls.browser = browser.Browser()

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()

    def dom(self, agent, until=None, timeout=20):
        """The page's DOM once until(dom) holds (each try: a fresh
        --dump-dom, the page's timers run in virtual time)."""
        got = [""]

        def ok():
            got[0] = self.browser.dump_dom("http://127.0.0.1:%d/" % agent.stats_port)
            return "data-ticks" in got[0] and (until is None or until(got[0]))
        self.assertTrue(wait_for(ok, timeout, step=0.5), got[0][-4000:])
        return got[0]

    def shot(self, agent, name, ready="Number(document.body.dataset.ticks || 0) >= 2"):
        """With $SPOA_SHOTS: the page as a person sees it, for the eye."""
        out = os.environ.get("SPOA_SHOTS")
        if not out:
            return
        os.makedirs(out, exist_ok=True)
        page = self.browser.open("http://127.0.0.1:%d/" % agent.stats_port)
        try:
            page.wait_for(ready, timeout=20)
            page.screenshot(os.path.join(out, "status-%s.png" % name), width=1400, height=900)
        finally:
            page.close()


class Fleet(PageCase):
    def setUp(self):
        self.redis = Redis()
        self.addCleanup(self.redis.stop)
        self.agents = []
        for _ in range(3):
            a = Agent(redis_ini(self.redis.port) + RULES, workers=1)
            stop_cleanly(self, a)
            self.agents.append(a)
        # the ports open before Redis is connected: a decision before then is
        # the backstop's (degraded), and leases nobody holds in Redis
        for a in self.agents:
            wait_redis_up(a)

    def decide(self, agent, n, key):
        s = Seq(agent.addr)
        try:
            for _ in range(n):
                s.decide(key=key)
        finally:
            s.close()

    def own_decisions(self, agent):
        return status(agent)["decisions"]["total"]

    def test_three_agents_each_list_three_with_totals(self):
        # an idle agent: Redis calls (heartbeat, epoch, connection setup), none for decisions
        a0 = self.agents[0]
        self.assertTrue(wait_for(lambda: status(a0)["redis"]["commands"] > 0, 10))
        idle = status(a0)
        self.assertEqual(idle["leases"]["decision_calls"], 0, idle["leases"])
        self.assertIsNone(idle["leases"]["redis_calls_per_decision"], idle["leases"])
        self.assertEqual(idle["boxes"], {"leases": True, "fleet": True})

        for i, a in enumerate(self.agents):
            self.decide(a, 3 + 4 * i, unique("c"))
        self.decide(self.agents[2], 8, "busy")  # over api's 5 and the shadow's 2
        own = [self.own_decisions(a) for a in self.agents]
        pids = sorted(a.p.pid for a in self.agents)

        def complete(a):
            f = status(a)["fleet"]
            rows = {r["pid"]: r["decisions"] for r in f["agents"]}
            return sorted(rows) == pids and [rows[x.p.pid] for x in self.agents] == own
        for a in self.agents:
            self.assertTrue(wait_for(lambda: complete(a), 20), status(a)["fleet"])
            s = status(a)
            f = s["fleet"]
            self.assertEqual(len(f["agents"]), 3, f)
            for k in ("decisions", "blocked", "would_block", "degraded", "notifies",
                      "redis_errors", "slots_held", "slots_expired"):
                self.assertEqual(f["totals"][k], sum(r[k] for r in f["agents"]), (k, f))
            self.assertEqual(f["totals"]["decisions"], sum(own))
            self.assertEqual((f["totals"]["agents"], f["totals"]["redis_up"]), (3, 3))
            self.assertEqual([r["pid"] for r in f["agents"] if r["self"]], [a.p.pid])
            for r in f["agents"]:
                self.assertTrue(r["redis_up"])
                self.assertLess(r["last_seen_s"], 20)
                self.assertEqual(r["listen"],
                                 "127.0.0.1:%d" % next(x for x in self.agents if x.p.pid == r["pid"]).port)
        busy = status(self.agents[2])
        self.assertGreater(busy["fleet"]["totals"]["blocked"], 0)
        self.assertGreater(busy["fleet"]["totals"]["would_block"], 0)
        # decisions made Redis calls now, each counted
        calls = busy["leases"]["decision_calls"]
        self.assertGreater(calls, 0)
        self.assertLess(calls, busy["redis"]["commands"])
        self.assertAlmostEqual(busy["leases"]["redis_calls_per_decision"],
                               calls / busy["decisions"]["total"], places=3)

        dom = self.dom(self.agents[2], lambda d: d.count('<tr><td>') >= 3 and "fleet total" in d)
        self.assertTrue(shown(dom, "fleet-section"))
        self.assertTrue(shown(dom, "card-leases"))
        table = re.search(r'<table id="fleet">.*?</table>', dom, re.S).group(0)
        body = re.search(r"<tbody>(.*?)</tbody>", table, re.S).group(1)
        self.assertEqual(body.count("<tr"), 3, table)
        for a in self.agents:
            self.assertIn('<td class="n">%d</td>' % a.p.pid, body)
        self.assertIn("fleet total, 3 agents", table)
        self.assertIn("(this agent)", body)
        # the shadow rule's would-be blocks: their own class, not the red "blk"
        row = re.search(r'<tr class="shadow" data-rule="ip-shadow">.*?</tr>', dom, re.S).group(0)
        self.assertIn('class="wblk"', row)
        self.assertNotIn('class="blk"', row)
        self.assertNotIn(" hot", row)
        # a sparkline says its scale
        self.assertRegex(dom, r'<text [^>]*class="scale-max"[^>]*>peak [\d,]+/s</text>')
        # a blocked client's retry: a time or that it passed, never "now"
        top = re.search(r'<table id="top">.*?</table>', dom, re.S).group(0)
        self.assertIn("busy", top)
        self.assertNotRegex(top, r'<td class="n">now</td>')
        self.shot(self.agents[2], "fleet",
                  "document.querySelectorAll('#fleet tbody tr').length === 3")


FAKE_ROWS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, tonumber(ARGV[1]) do
  local m = 'host=fake' .. i .. ' pid=' .. i .. ' listen=x'
  redis.call('ZADD', KEYS[1], now, m)
  local row = '{"host":"<b>fake' .. i .. '</b>","pid":' .. i .. ',"decisions":1}'
  if i == 1 then row = string.rep('x', 2000) end
  if i == 2 then row = 'not json' end
  redis.call('HSET', KEYS[2], m, row)
end
return 1
"""


class FleetBounded(PageCase):
    def test_rows_capped_and_checked(self):
        """300 agents more in the set (written by hand): the beat answers
        256 rows, skips a row over 1 KiB and one that is not JSON, and the
        page shows another agent's host as text."""
        redis = Redis()
        self.addCleanup(redis.stop)
        a = Agent(redis_ini(redis.port) + RULES, workers=1)
        stop_cleanly(self, a)
        self.assertTrue(wait_for(lambda: status(a)["fleet"]["age_s"] is not None, 10))
        redis.cli("EVAL", FAKE_ROWS, "2", "rl:agents", "{rl:agents}:stats", "300")
        # the next beat: the agent newest, then the fakes (two of them skipped)
        self.assertTrue(wait_for(lambda: len(status(a)["fleet"]["agents"]) >= 250, 10),
                        status(a)["fleet"]["totals"])
        f = status(a)["fleet"]
        self.assertLessEqual(len(f["agents"]), 256)
        self.assertEqual(f["max_rows"], 256)
        self.assertTrue(f["agents"][0]["self"], f["agents"][0])
        self.assertEqual(f["totals"]["agents"], len(f["agents"]))
        pids = [r["pid"] for r in f["agents"]]
        self.assertNotIn(1, pids)  # its row is over 1 KiB
        self.assertNotIn(2, pids)  # its row is not JSON
        self.assertGreaterEqual(a.metric("spoa_ratelimit_fleet_agents"), 301)
        dom = self.dom(a, lambda d: d.count("fake") > 100)
        self.assertIn("&lt;b&gt;fake", dom)
        self.assertNotIn("<b>fake", dom)


class Standalone(PageCase):
    def test_no_lease_no_fleet(self):
        a = Agent(RULES, workers=1)
        stop_cleanly(self, a)
        s = status(a)
        self.assertEqual(s["boxes"], {"leases": False, "fleet": False})
        self.assertIsNone(s["fleet"])
        dom = self.dom(a)
        self.assertFalse(shown(dom, "card-leases"))
        self.assertFalse(shown(dom, "fleet-section"))
        self.assertTrue(shown(dom, "card-decisions"))
        self.assertIn("standalone (no [redis])", dom)
        self.shot(a, "standalone")


class RedisRefusesPassword(PageCase):
    def test_wrong_password_banner(self):
        r = Redis(args=["--requirepass", "right-one"])
        self.addCleanup(r.stop)
        a = Agent(redis_ini(r.port, password="wrong-one") + RULES, workers=1, wait=True)
        stop_cleanly(self, a)
        self.assertTrue(wait_for(lambda: status(a)["redis"]["up"] is False, 10))
        dom = self.dom(a, lambda d: shown(d, "banner-redis"))
        text = banner_text(dom, "banner-redis")
        self.assertIn("Redis is down", text)
        self.assertRegex(text, "Why: (WRONGPASS|NOAUTH)")
        self.assertTrue(shown(dom, "card-leases"))
        self.shot(a, "wrongpass", "!document.getElementById('banner-redis').hidden")


class RejectedVersion(PageCase):
    def test_rejected_version_banner(self):
        r = Redis()
        self.addCleanup(r.stop)
        d = tempfile.mkdtemp(prefix="rl-page-")
        self.addCleanup(shutil.rmtree, d, True)
        op = os.path.join(d, "op.ini")
        with open(op, "w") as f:
            f.write(redis_ini(r.port))
        good = os.path.join(d, "good.ini")
        with open(good, "w") as f:
            f.write("[rule:api]\nkey = key\nrate = 10/1m\n")
        a = Agent(redis_ini(r.port) + "[rules]\nsource = redis\npoll = 200ms\ncache =\n"
                  "[rule:own]\nkey = key\nrate = 1/1m\n", workers=1)
        stop_cleanly(self, a)
        p = subprocess.run([AGENT, "-c", op, "--push", good], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(wait_for(lambda: status(a)["rule_set"]["version"] == 1, 10))
        dom = self.dom(a, lambda x: "last reload" in x)
        self.assertFalse(shown(dom, "banner-rules"))
        self.assertRegex(dom, r"<dt>last reload</dt><dd[^>]*>ok, ")
        # version 2, written by hand, does not compile
        text = "[rule:api]\nkey = key\nrate = lots\n"
        r.cli("HSET", "rl:{rules}:v:2", "text", text, "sha256",
              hashlib.sha256(text.encode()).hexdigest())
        r.cli("SET", "rl:{rules}:current", "2")
        self.assertTrue(wait_for(lambda: status(a)["rule_set"]["rejected_version"] == 2, 10),
                        status(a)["rule_set"])
        dom = self.dom(a, lambda x: shown(x, "banner-rules"))
        text = banner_text(dom, "banner-rules")
        self.assertIn("version 2 was rejected", text)
        self.assertIn("bad rate", text)
        self.assertIn("Version 1 stays in force", text)
        self.assertRegex(dom, r'<dt>last reload</dt><dd class="hot">version 2 rejected</dd>')
        self.shot(a, "rejected", "!document.getElementById('banner-rules').hidden")


class SlotsStuck(PageCase):
    def test_slots_held_and_expired(self):
        r = Redis()
        self.addCleanup(r.stop)
        a = Agent(redis_ini(r.port) + CONC, workers=1)
        stop_cleanly(self, a)
        # the ports open before Redis is connected: a decision before then is
        # the backstop's (degraded: seen next to CPU hogs), its slots local
        wait_redis_up(a)
        s = Seq(a.addr)
        self.addCleanup(s.close)
        # one taken and released: releases do come (no slots_never_released warning)
        first = s.decide(key="fine")
        self.assertIsNot(first.get("degraded"), True, first)
        self.assertEqual(s.decide(msg="release-slot", slot=first["slot"]), {"blocked": False})
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_slots_released_total",
                                                  rule="inflight", result="ok") == 1, 5))
        got = [s.decide(key="stuck") for _ in range(3)]  # two taken, never released
        self.assertNotIn(True, [g.get("degraded", False) for g in got], got)
        self.assertEqual([g["blocked"] for g in got], [False, False, True], got)
        st = status(a)
        rule = next(x for x in st["rules"] if x["name"] == "inflight")
        self.assertEqual((rule["slots_held"], st["decisions"]["slots_held"]), (2, 2), rule)
        self.assertEqual(rule["max_hold_s"], 2.0)
        # past max_hold the next acquire finds them expired
        self.assertTrue(wait_for(lambda: not s.decide(key="stuck")["blocked"], 10))
        s.decide(key="stuck")
        s.decide(key="stuck")  # full again: blocked
        self.assertTrue(wait_for(lambda: status(a)["decisions"]["slots_expired"] >= 1, 5))
        dom = self.dom(a, lambda x: shown(x, "banner-slots") and "when a slot frees" in x)
        self.assertIn("expired without a release", banner_text(dom, "banner-slots"))
        self.assertNotIn('data-kind="slots_never_released"', dom)
        top = re.search(r'<table id="top">.*?</table>', dom, re.S).group(0)
        self.assertIn("when a slot frees (at most 2 s)", top)
        self.assertNotRegex(top, r'<td class="n">now</td>')
        row = re.search(r'<tr data-rule="inflight">.*?</tr>', dom, re.S).group(0)
        self.assertRegex(row, r'<td class="n slots warn">\d+ / [1-9]\d*</td>')
        self.shot(a, "slots", "!document.getElementById('banner-slots').hidden")


if __name__ == "__main__":
    unittest.main()
