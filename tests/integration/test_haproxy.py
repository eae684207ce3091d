# SPDX-License-Identifier: Apache-2.0
"""The shipped haproxy/ kit, started as it is (ports aside), in front of the
agent running the shipped sample rules: 200s with RateLimit headers, then 429
with Retry-After; and still 200 with the agent stopped. Once per HAProxy found
(Debian's 2.6, and a 3.1+ build where one is found): see haproxies.py."""
import os
import re
import time
import unittest

from harness import AGENT, TOP, Proc, free_port, wait_port
from haproxies import KitHAProxy, backend_first, check_config, per_haproxy


def shipped_agent(port, stats_port):
    with open(os.path.join(TOP, "haproxy", "ratelimit.ini")) as f:
        text = f.read()
    text = text.replace("127.0.0.1:12345", "127.0.0.1:%d" % port)
    text = text.replace("127.0.0.1:9145", "127.0.0.1:%d" % stats_port)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ratelimit-%d.ini" % port)
    with open(path, "w") as f:
        f.write(text)
    p = Proc([AGENT, "-c", path], "agent-shipped")
    wait_port(port, proc=p.p)
    return p


class KitParses:
    """The one kit parses with warnings as errors, backend declared last (as
    shipped) or first: `mode spop` on 3.1+, `mode tcp` and timeout hello/idle
    before (2.6 rejects `mode spop`)."""

    def test_parses_with_warnings_as_errors(self):
        for name, edits in (("backend last", ()), ("backend first", (backend_first,))):
            rc, out = check_config(self.build, cfg_edits=edits)
            self.assertEqual(rc, 0, "%s, %s: haproxy -c -dW:\n%s" % (self.build, name, out))
            self.assertNotIn("WARNING", out.upper(), out)


class ShippedKit:
    def setUp(self):
        self.port, self.stats = free_port(), free_port()
        self.agent = shipped_agent(self.port, self.stats)
        self.haproxy = KitHAProxy(self.build, self.port)
        # the SPOE applet connects lazily: wait until a decision comes back
        end = time.time() + 10
        while time.time() < end:
            st, h, _ = self.haproxy.request("/warmup", {"x-api-key": "warmup"})
            if "ratelimit-policy" in h:
                break
            time.sleep(0.1)

    def tearDown(self):
        self.haproxy.stop()
        self.stop_agent()

    def stop_agent(self):
        """SIGTERM; the agent must exit 0 (under ASan, exit 23 is a report)."""
        rc = self.agent.stop()
        self.assertEqual(rc, 0, "agent exit code %s:\n%s" % (rc, self.agent.output()[-3000:]))

    def test_200_then_429_with_headers(self):
        statuses = []
        for i in range(25):
            st, h, body = self.haproxy.request("/api/v1/items", {"x-api-key": "tenant-1"})
            statuses.append(st)
            self.assertEqual(h.get("ratelimit-policy"), '"api-key";q=100;w=60', h)
            self.assertRegex(h.get("ratelimit", ""), r'^"api-key";r=\d+;t=\d+$')
            self.assertEqual(h.get("ratelimit-limit"), "100")
            self.assertIn("ratelimit-remaining", h)
            self.assertIn("ratelimit-reset", h)
            if st == 429:
                self.assertGreaterEqual(int(h["retry-after"]), 1)
                self.assertEqual(h["ratelimit-remaining"], "0")
                self.assertIn("Too Many Requests", body)
            else:
                self.assertNotIn("retry-after", h)
        self.assertEqual(statuses, [200] * 20 + [429] * 5)

    def test_plans_are_tiered(self):
        st, h, _ = self.haproxy.request("/api/x", {"x-api-key": "tenant-paid-1"})
        self.assertEqual(st, 200)
        self.assertEqual(h.get("ratelimit-policy"), '"api-key-paid";q=1000;w=60')

    def test_per_client_limit_from_the_map(self):
        """limits.map gives tenant-big-1 (plan "custom") its own 5000/1m."""
        st, h, _ = self.haproxy.request("/api/x", {"x-api-key": "tenant-big-1"})
        self.assertEqual(st, 200)
        self.assertEqual(h.get("ratelimit-policy"), '"api-key-custom";q=5000;w=60')
        self.assertEqual(h.get("ratelimit-limit"), "5000")

    def test_login_per_ip(self):
        got = [self.haproxy.request("/login", {}) for _ in range(12)]
        self.assertEqual([g[0] for g in got], [200] * 10 + [429] * 2)
        self.assertEqual(got[0][1]["ratelimit-policy"], '"login";q=10;w=3600')
        self.assertTrue(360 - 1 <= int(got[11][1]["retry-after"]) <= 360)

    def dropped_logs(self):
        return int(self.haproxy.show_info()["DroppedLogs"])

    def log_lines(self, path, n, dropped0=0):
        """HAProxy's HTTP log lines for path, once n of them are there or
        HAProxy counts the missing ones as dropped (below)."""
        end = time.time() + 10
        while True:
            lines = [ln for ln in self.haproxy.output().splitlines() if '"GET %s' % path in ln]
            if len(lines) >= n or time.time() > end:
                return lines
            if len(lines) + self.dropped_logs() - dropped0 >= n:
                return lines
            time.sleep(0.05)

    def test_log_line_carries_the_verdict(self):
        """The kit's log-format: every request's line says which rule decided,
        blocked or not, the SPOE error and processing time; the SPOE filter's
        own lines (dontlog-normal) only appear for errors.

        HAProxy drops a line rather than wait when two of its threads write
        to the log's fd at once (fd_write_frag_line gives up after 200 tries;
        seen next to CPU hogs) and counts it in `show info` DroppedLogs: each
        request is numbered, and each one either has its line with its own
        verdict or is counted there."""
        dropped0 = self.dropped_logs()
        sent = 0
        for sent in range(1, 23):
            self.haproxy.request("/api/log?n=%d" % (sent - 1), {"x-api-key": "tenant-log"})
        lines = self.log_lines("/api/log?n=", sent, dropped0)
        # a denial's line must be seen: one more denied request while both
        # were dropped (bounded)
        while not any(" 429 " in ln for ln in lines) and sent < 32:
            sent += 1
            self.haproxy.request("/api/log?n=%d" % (sent - 1), {"x-api-key": "tenant-log"})
            lines = self.log_lines("/api/log?n=", sent, dropped0)
        dropped = self.dropped_logs() - dropped0
        # (>=: a line of HAProxy's own, such as a server's state, may be the
        # one dropped)
        self.assertGreaterEqual(len(lines) + dropped, sent, "%d dropped:\n%s"
                                % (dropped, self.haproxy.output()[-2000:]))
        for status in (" 200 ", " 429 "):
            self.assertTrue(any(status in ln for ln in lines), (status, dropped, lines))
        seen = set()
        for ln in lines:
            i = int(re.search(r'"GET /api/log\?n=(\d+) ', ln).group(1))
            self.assertNotIn(i, seen, ln)
            seen.add(i)
            if i < 20:
                self.assertRegex(ln, r' 200 .*rl_rule="api-key" rl_blocked=0 rl_would_block=- '
                                     r'rl_error=- rl_ptime=\d+$')
            else:
                self.assertRegex(ln, r' 429 .*rl_rule="api-key" rl_blocked=1 .* rl_error=- '
                                     r'rl_ptime=\d+$')
        self.assertNotIn("SPOE: [ratelimit-agent]", self.haproxy.output(),
                         "dontlog-normal: no SPOE line for a normal decision")
        # the agent down: the request passes, and its line says why (the SPOE
        # error code, or no-agent once HAProxy has marked the agent DOWN and
        # the kit no longer asks)
        self.agent.stop()
        for n in range(1, 6):  # a dropped line (above): ask again, bounded
            dropped0 = self.dropped_logs()
            self.haproxy.request("/api/down?n=%d" % n, {"x-api-key": "tenant-log"})
            lines = self.log_lines("/api/down?n=", 1, dropped0)
            if lines:
                break
        self.assertEqual(len(lines), 1, "%d dropped:\n%s" % (
            self.dropped_logs(), self.haproxy.output()[-2000:]))
        self.assertRegex(lines[0], r' 200 .*rl_rule="" rl_blocked=- rl_would_block=- '
                                   r'rl_error=(no-agent|[1-9]\d*) ')

    def test_agent_down_fails_open(self):
        self.stop_agent()
        for _ in range(3):
            st, h, body = self.haproxy.request("/api/v1/items", {"x-api-key": "tenant-1"})
            self.assertEqual(st, 200)
            self.assertEqual(h.get("ratelimit-status"), "unavailable")
            self.assertNotIn("ratelimit-policy", h)


per_haproxy(KitParses, globals())
per_haproxy(ShippedKit, globals())

if __name__ == "__main__":
    unittest.main()
