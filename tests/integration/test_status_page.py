# SPDX-License-Identifier: Apache-2.0
"""The status page (GET /) and GET /status.json on the stats listener, in a
real headless Chromium (browser.py, the DevTools protocol), with real
traffic through the shipped kit on every HAProxy found (haproxies.py) and a
real redis-server:

- the numbers the page shows are those /metrics reports, within a tick
  (read /metrics, wait for the page's next refresh, read /metrics again: the
  page's value lies between);
- a client key such as <img src=x onerror=alert(1)> is text: no element
  from it, no dialog, no script run;
- Redis stopped: a red banner within seconds, with each rule's fail mode;
  Redis back: the banner goes;
- no request leaves for another origin;
- the reset button (with its confirmation) clears a blocked client.

And without a browser: the page's headers (a strict Content-Security-Policy,
no caching, nosniff), /status.json's documented fields, HTTP Basic auth on
every stats endpoint with stats_auth, and POST /reset refused (403) when it
comes cross-site or from a browser without the page's token, the client
staying blocked."""
import base64
import http.client
import json
import os
import re
import signal
import threading
import time
import unittest
import urllib.parse

import browser
import spop
from fleet import wait_redis_up
from harness import Agent, Redis, wait_for
from haproxies import KitHAProxy, per_haproxy

HOSTILE = "<img src=x onerror=alert(1)>"

RULES = """
[rule:api-key]
message = check-rate
key = key
rate = 100/1m
burst = 20

[rule:ip-shadow]
message = check-rate
key = ip
rate = 300/1m
shadow = yes

; never blocks: its token is given back when api-key blocks (charge)
[rule:ip-all]
message = check-rate
key = ip
rate = 100000/1s
"""


def redis_ini(redis):
    """timeout 1s (no test here is about it): with 100 ms, one stall of a busy
    machine answers from the backstop, and a drained key is not drained."""
    return "[redis]\nurl = redis://127.0.0.1:%d\ntimeout = 1s\n" % redis.port


def call(agent, method, path, headers=None, body=None):
    """(status, headers lower-cased, body text) of one stats request."""
    c = http.client.HTTPConnection("127.0.0.1", agent.stats_port, timeout=5)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def status_json(agent, headers=None):
    status, _, body = call(agent, "GET", "/status.json", headers)
    assert status == 200, (status, body)
    return json.loads(body)


def decisions(agent, rule, result):
    v = agent.metric("spoa_ratelimit_decisions_total", rule=rule, result=result)
    return int(v or 0)


def refunds(agent, rule):
    return int(agent.metric("spoa_ratelimit_refunds_total", rule=rule) or 0)


def key_query(rule, key):
    return urllib.parse.urlencode({"rule": rule, "key": key})


def blocked_now(agent, rule, key, headers=None):
    status, _, body = call(agent, "GET", "/key?" + key_query(rule, key), headers)
    assert status == 200, (status, body)
    st = json.loads(body)
    return st


class Traffic(threading.Thread):
    """Requests through HAProxy until stopped: one API key within its limit
    (allowed), one far over it (blocked), and the hostile key (blocked)."""

    def __init__(self, haproxy):
        super().__init__(daemon=True)
        self.haproxy = haproxy
        self.halt = threading.Event()
        self.sent = 0

    def run(self):
        n = 0
        while not self.halt.is_set():
            key = ("calm-key" if n % 10 == 0 else "busy-key") if n % 3 else HOSTILE
            self.haproxy.request("/", headers={"X-API-Key": key})
            self.sent += 1
            n += 1
            time.sleep(0.002)

    def stop(self):
        self.halt.set()
        self.join(10)


class PageUnderTraffic:
    """The kit on self.build, one agent with Redis, the page in Chromium."""

    @classmethod
    def setUpClass(cls):
        if cls.build is None:
            return
        # class cleanups, not tearDownClass: they also run when a start below
        # fails, so nothing started is left running
        cls.redis = Redis()
        # the one running at the end: test_redis_down_banner starts another
        cls.addClassCleanup(lambda: cls.redis.stop())
        cls.agent = Agent(redis_ini(cls.redis) + RULES, workers=2)
        cls.addClassCleanup(cls.agent.stop)
        wait_redis_up(cls.agent)  # the ports open before Redis is connected
        cls.haproxy = KitHAProxy(cls.build, cls.agent.port)
        cls.addClassCleanup(cls.haproxy.stop)
        cls.browser = browser.Browser()
        cls.addClassCleanup(cls.browser.close)
        cls.origin = "http://127.0.0.1:%d" % cls.agent.stats_port
        cls.traffic = Traffic(cls.haproxy)
        cls.traffic.start()
        # the thread running at the end: a test restarts it under a new name
        cls.addClassCleanup(lambda: cls.traffic.stop())
        wait_for(lambda: decisions(cls.agent, "api-key", "blocked") > 0, timeout=20)
        cls.page = cls.browser.open(cls.origin + "/")

    def ticks(self):
        return int(self.page.eval("Number(document.body.dataset.ticks || 0)"))

    def next_tick(self):
        t = self.ticks()
        self.page.wait_for("Number(document.body.dataset.ticks || 0) >= %d" % (t + 2), timeout=10)

    def cell(self, rule, cls):
        v = self.page.eval("(() => { const r = document.querySelector('#rules tr[data-rule=\"%s\"]'); "
                           "return r ? r.querySelector('td.%s').textContent : null; })()" % (rule, cls))
        return int(v.replace(",", "")) if v is not None else None

    def test_numbers_match_metrics_within_a_tick(self):
        self.page.wait_for("document.querySelector('#rules tr[data-rule=\"api-key\"]') !== null")
        for _ in range(3):
            before = {r: decisions(self.agent, "api-key", r) for r in ("allowed", "blocked")}
            self.next_tick()
            shown = {"allowed": self.cell("api-key", "allowed"),
                     "blocked": self.cell("api-key", "blocked")}
            after = {r: decisions(self.agent, "api-key", r) for r in ("allowed", "blocked")}
            for r in ("allowed", "blocked"):
                self.assertLessEqual(before[r], shown[r], "%s: page behind /metrics" % r)
                self.assertLessEqual(shown[r], after[r], "%s: page ahead of /metrics" % r)
        self.assertGreater(shown["blocked"], 0)
        # refunds: ip-all's tokens given back when api-key blocked
        before = refunds(self.agent, "ip-all")
        self.next_tick()
        shown = self.cell("ip-all", "refunded")
        after = refunds(self.agent, "ip-all")
        self.assertTrue(0 < before <= shown <= after, (before, shown, after))
        # the shadow rule's would-be blocks, and the sparkline has points
        wb = self.cell("ip-shadow", "would-block")
        self.assertIsNotNone(wb)
        pts = self.page.eval("document.querySelector('#rules tr[data-rule=\"api-key\"] "
                             "polyline.dec').getAttribute('points').split(' ').length")
        self.assertGreaterEqual(pts, 2)

    def test_dump_dom_shows_rules_and_clients(self):
        """`chromium --headless --dump-dom` (the page's timers run in virtual
        time): the rules and the blocked clients, with /metrics' numbers."""
        before = decisions(self.agent, "api-key", "blocked")
        dom = self.browser.dump_dom(self.origin + "/")
        after = decisions(self.agent, "api-key", "blocked")
        m = re.search(r'<tr data-rule="api-key">.*?<td class="n blocked">([\d,]+)</td>', dom)
        self.assertIsNotNone(m, dom[-3000:])
        shown = int(m.group(1).replace(",", ""))
        self.assertTrue(before <= shown <= after, (before, shown, after))
        self.assertIn('<td class="key"><a href="key?rule=api-key&amp;key=busy-key">busy-key</a>',
                      dom)
        self.assertNotIn("<img", dom)

    def test_hostile_key_is_text(self):
        self.page.wait_for("[...document.querySelectorAll('#top td.key')].some("
                           "td => td.textContent === %s)" % json.dumps(HOSTILE), timeout=20)
        self.assertEqual(self.page.eval("document.querySelectorAll('img').length"), 0)
        self.assertEqual(self.page.eval("document.querySelectorAll('[onerror]').length"), 0)
        self.page.pump(1.5)
        self.assertEqual(self.page.dialogs, [], "the key's markup ran a script")
        href = self.page.eval("[...document.querySelectorAll('#top td.key a')].find("
                              "a => a.textContent === %s).getAttribute('href')" % json.dumps(HOSTILE))
        status, _, body = call(self.agent, "GET", "/" + href)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["key"], HOSTILE)

    def test_no_request_to_another_origin(self):
        self.page.pump(2.5)
        self.assertTrue(self.page.requests)
        foreign = [u for u in self.page.requests if not u.startswith(self.origin + "/")]
        self.assertEqual(foreign, [])

    def test_redis_down_banner(self):
        self.page.wait_for("document.getElementById('banner-redis').hidden === true")
        port = self.redis.port
        self.redis.stop()
        try:
            text = self.page.wait_for("!document.getElementById('banner-redis').hidden && "
                                      "document.getElementById('banner-redis').textContent",
                                      timeout=15)
            self.assertIn("Redis is down since", text)
            self.assertIn("api-key: fail open", text)
            # and why, by name (status.json's redis.last_error)
            self.page.wait_for("document.getElementById('banner-redis').textContent"
                               ".includes('Why: connection_refused (Connection refused, ')",
                               timeout=15)
        finally:
            type(self).redis = Redis(port=port)
        self.page.wait_for("document.getElementById('banner-redis').hidden === true", timeout=20)

    def test_failed_reload_banner(self):
        good = redis_ini(self.redis) + RULES
        self.agent.rewrite(good + "\n[rule:broken]\nmessage = check-rate\nrate = lots\n")
        self.agent.kill_sig(signal.SIGHUP)
        try:
            text = self.page.wait_for("!document.getElementById('banner-reload').hidden && "
                                      "document.getElementById('banner-reload').textContent",
                                      timeout=15)
            self.assertIn("The last reload failed", text)
            self.assertRegex(text, r"agent\.ini:\d+: ")  # FILE:LINE: the first error
            self.assertFalse(status_json(self.agent)["reload"]["ok"])
        finally:
            self.agent.rewrite(good)
            self.agent.kill_sig(signal.SIGHUP)
        self.page.wait_for("document.getElementById('banner-reload').hidden === true", timeout=15)
        self.assertTrue(status_json(self.agent)["reload"]["ok"])

    def test_reset_button_clears_a_blocked_client(self):
        self.page.wait_for("[...document.querySelectorAll('#top td.key')].some("
                           "td => td.textContent === 'busy-key')", timeout=20)
        self.traffic.stop()
        try:
            self.page.accept_dialogs = True
            self.page.eval("[...document.querySelectorAll('#top tr')].find(tr => "
                           "tr.querySelector('td.key') && tr.querySelector('td.key').textContent "
                           "=== 'busy-key').querySelector('button').click()")
            self.page.wait_for("document.getElementById('reset-result').textContent"
                               ".startsWith('Reset: ')", timeout=10)
            self.assertTrue(any(d.startswith("Reset client") for d in self.page.dialogs))
            # the page says what happened: the fleet's confirmations (this one agent)
            self.assertIn("confirmed by 1 of 1 agent",
                          self.page.eval("document.getElementById('reset-result').textContent"))
            st = blocked_now(self.agent, "api-key", "busy-key")
            # full again: what Redis has and what leases hold (a lease may
            # have claimed a batch since), and not blocked
            self.assertGreaterEqual(st["redis"]["tokens_now"] + st["redis"]["held"], 19, st)
            self.assertFalse(st["redis"]["blocked"], st)
        finally:
            self.page.accept_dialogs = False
            type(self).traffic = Traffic(self.haproxy)
            self.traffic.start()


per_haproxy(PageUnderTraffic, globals())


# A slow refill: a drained client stays blocked for the length of a test.
GUARD_RULES = """
[rule:api-key]
message = check-rate
key = key
rate = 20/1h
burst = 20
"""


class Guards(unittest.TestCase):
    """No HAProxy: requests sent by hand."""

    @classmethod
    def setUpClass(cls):
        cls.redis = Redis()
        cls.agent = Agent(redis_ini(cls.redis) + GUARD_RULES, workers=1,
                          extra_agent="stats_auth = ops:s3cret pass\n")
        cls.auth = {"Authorization": "Basic " + base64.b64encode(b"ops:s3cret pass").decode()}
        # the tests read Redis' state: connected first (the ports open sooner)
        wait_for(lambda: status_json(cls.agent, cls.auth)["redis"]["up"], timeout=15)

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()
        cls.redis.stop()

    def block(self, key):
        """Drain key's bucket through the agent's own SPOP port."""
        c = spop.Client(self.agent.addr)
        try:
            c.handshake()
            for i in range(25):
                c.decide({"key": key, "ip": "10.0.0.1"}, stream=1, fid=i + 1)
        finally:
            c.close()

    def test_page_headers(self):
        status, h, body = call(self.agent, "GET", "/", self.auth)
        self.assertEqual(status, 200)
        self.assertEqual(h["content-type"], "text/html; charset=utf-8")
        csp = h["content-security-policy"]
        self.assertIn("default-src 'none'", csp)
        self.assertRegex(csp, r"script-src 'sha256-[A-Za-z0-9+/]{43}='")
        self.assertIn("connect-src 'self'", csp)
        self.assertIn("frame-ancestors 'none'", csp)
        self.assertEqual(h["x-content-type-options"], "nosniff")
        self.assertIn("no-cache", h["cache-control"])
        # self-contained: no URL to anywhere else
        self.assertIsNone(re.search(r"(src|href)=\"(https?:)?//", body))
        self.assertEqual(len(re.findall(r"<script>", body)), 1)

    def test_status_json_fields(self):
        s = status_json(self.agent, self.auth)
        for section, fields in {
            "agent": ("version", "pid", "uptime_s", "workers", "config_file", "fds", "fd_limit",
                      "rss_bytes", "now_unix"),
            "reload": ("ok", "last_unix", "reloads", "failures", "error"),
            "redis": ("configured", "mode", "up", "down_since_unix", "latency_p50_ms",
                      "latency_p99_ms", "failovers", "reconnects", "fleet_agents",
                      "fleet_agents_max"),
            "leases": ("redis_calls_per_decision", "tokens_claimed", "tokens_returned", "keys",
                       "calls_saved"),
            "peers": ("connections", "in_flight", "hello", "disconnect", "last_disconnect"),
            "reset": ("allowed", "token"),
        }.items():
            for f in fields:
                self.assertIn(f, s[section], "%s.%s" % (section, f))
        self.assertIsInstance(s["warnings"], list)
        for w in s["warnings"]:
            self.assertEqual(sorted(w), ["kind", "message", "since"])
        # stats_auth written in an INI every user may read (the umask's
        # doing): the agent says so (doc/operations.md, "Warnings")
        kinds = {w["kind"]: w for w in s["warnings"]}
        if os.stat(self.agent.ini).st_mode & 0o004:
            self.assertIn(self.agent.ini, kinds["secret_readable"]["message"])
        else:
            self.assertNotIn("secret_readable", kinds)
        self.assertEqual(s["redis"]["mode"], "url")
        self.assertTrue(s["redis"]["up"])
        names = [r["name"] for r in s["rules"]]
        self.assertEqual(names, ["api-key"])
        r = s["rules"][names.index("api-key")]
        self.assertEqual(r["fail"], "open")
        self.assertEqual(len(r["history"]["decisions"]), len(r["history"]["blocks"]))
        status, h, _ = call(self.agent, "GET", "/status.json", self.auth)
        self.assertEqual(h["content-type"], "application/json")
        self.assertNotIn("access-control-allow-origin", h)
        self.assertEqual(h.get("cross-origin-resource-policy"), "same-origin")

    def test_basic_auth_on_every_endpoint(self):
        for path in ("/", "/status.json", "/metrics", "/top", "/config",
                     "/key?" + key_query("api-key", "k")):
            status, h, _ = call(self.agent, "GET", path)
            self.assertEqual(status, 401, path)
            self.assertIn('Basic realm="spoa-ratelimit"', h.get("www-authenticate", ""))
            wrong = {"Authorization": "Basic " + base64.b64encode(b"ops:nope").decode()}
            self.assertEqual(call(self.agent, "GET", path, wrong)[0], 401, path)
            self.assertEqual(call(self.agent, "GET", path, self.auth)[0], 200, path)
        status, _, _ = call(self.agent, "POST", "/reset?" + key_query("api-key", "k"))
        self.assertEqual(status, 401)

    def test_cross_site_reset_refused(self):
        key = "victim-%d" % os.getpid()
        self.block(key)
        q = "/reset?" + key_query("api-key", key)
        token = status_json(self.agent, self.auth)["reset"]["token"]
        for headers in ({"Origin": "http://evil.example"},
                        {"Origin": "http://evil.example", "X-Spoa-Token": token},
                        {"Sec-Fetch-Site": "cross-site"},
                        {"Sec-Fetch-Site": "same-site", "X-Spoa-Token": token},
                        {"Origin": "http://127.0.0.1:%d" % self.agent.stats_port},  # no token
                        {"Sec-Fetch-Site": "same-origin", "X-Spoa-Token": "forged"}):
            status, _, body = call(self.agent, "POST", q, dict(self.auth, **headers))
            self.assertEqual(status, 403, (headers, body))
        st = blocked_now(self.agent, "api-key", key, self.auth)
        self.assertLess(st["redis"]["tokens_now"], 1, "a refused reset cleared the client")
        # the page's own request: same origin, its token
        status, _, body = call(self.agent, "POST", q, dict(self.auth, **{
            "Origin": "http://127.0.0.1:%d" % self.agent.stats_port,
            "Sec-Fetch-Site": "same-origin", "X-Spoa-Token": token}))
        self.assertEqual(status, 200, body)
        # a script (curl: no Origin, no Sec-Fetch-*) keeps working as before
        self.block(key)
        self.assertEqual(call(self.agent, "POST", q, self.auth)[0], 200)


class ResetOff(unittest.TestCase):
    def test_stats_reset_off(self):
        agent = Agent(RULES, workers=1, extra_agent="stats_reset = no\n")
        try:
            self.assertFalse(status_json(agent)["reset"]["allowed"])
            status, _, body = call(agent, "POST", "/reset?" + key_query("api-key", "k"))
            self.assertEqual(status, 403, body)
            self.assertIn("stats_reset", body)
        finally:
            agent.stop()


if __name__ == "__main__":
    unittest.main()
