# SPDX-License-Identifier: Apache-2.0
"""The stats listener against DNS rebinding and its smaller holes (issue 43),
on the real agent, loopback only:

- Host: the listener's own address, localhost and the names of [agent]
  stats_hosts get their answer (/status.json with its reset token); a
  rebinding page's name (evil.example:PORT), a listed name with the wrong
  port and an HTTP/1.1 request without Host get 421 and no token; an
  HTTP/1.0 request without Host (scripts, old health checks) still works;
  stats_hosts follows a SIGHUP;
- a request holding a NUL byte gets 400 at once (not the 5 s timeout);
- the Basic scheme is matched case-insensitively ("basic" works);
- /top, /key, /metrics and /status.json carry X-Content-Type-Options:
  nosniff and Cross-Origin-Resource-Policy: same-origin;
- secret_readable for a 0644 INI holding stats_auth, none for 0600.

Every wait has a deadline; nothing asserts how long something took but the
NUL answer, which must come well before the listener's 5 s timeout."""
import base64
import json
import os
import signal
import socket
import time
import unittest

from harness import Agent, stop_cleanly, wait_for

RULE = "\n[rule:api]\nmessage = check-rate\nkey = key\nrate = 100/1m\n"
AUTH = "stats_auth = admin:s3cret\n"


def raw(port, request, timeout=10):
    """(status line, headers dict lower-cased, body) of one raw request
    (bytes) to 127.0.0.1:port; the whole answer, read until close."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, body


def get(port, path, host, auth=("admin", "s3cret"), scheme="Basic", version="HTTP/1.1"):
    req = "GET %s %s\r\n" % (path, version)
    if host is not None:
        req += "Host: %s\r\n" % host
    if auth:
        req += "Authorization: %s %s\r\n" % (
            scheme, base64.b64encode(("%s:%s" % auth).encode()).decode())
    return raw(port, (req + "Connection: close\r\n\r\n").encode())


def code(status_line):
    return int(status_line.split()[1])


class StatsHost(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent(RULE, workers=1,
                          extra_agent=AUTH + "stats_hosts = stats.example.com, "
                                            "mon.example.com:8443\n")
        os.chmod(cls.agent.ini, 0o600)

    @classmethod
    def tearDownClass(cls):
        rc = cls.agent.stop()
        if rc != 0:
            raise AssertionError("agent exit %s" % rc)

    def status(self, host, **kw):
        line, headers, body = get(self.agent.stats_port, "/status.json", host, **kw)
        return code(line), headers, body

    def test_rebinding_name_refused(self):
        p = self.agent.stats_port
        for host in ("evil.example:%d" % p, "evil.example", "127.0.0.1.evil.example:%d" % p,
                     "127.0.0.1:%d" % (p + 1 if p < 65535 else p - 1),
                     "stats.example.com:%d" % (p + 1 if p < 65535 else p - 1),
                     "mon.example.com", "localhost:%d@evil" % p):
            c, h, body = self.status(host)
            self.assertEqual(c, 421, host)
            self.assertNotIn(b"token", body, host)
            self.assertEqual(h.get("x-content-type-options"), "nosniff")
        # HTTP/1.1 requires Host: without one, 421 too
        c, _, body = self.status(None)
        self.assertEqual(c, 421)
        self.assertNotIn(b"token", body)

    def test_allowed_hosts_get_the_token(self):
        p = self.agent.stats_port
        for host in ("127.0.0.1:%d" % p, "localhost:%d" % p, "LocalHost", "[::1]:%d" % p,
                     "stats.example.com", "stats.example.com:%d" % p, "mon.example.com:8443"):
            c, h, body = self.status(host)
            self.assertEqual(c, 200, host)
            doc = json.loads(body)
            self.assertTrue(doc["reset"]["allowed"])
            self.assertEqual(len(doc["reset"]["token"]), len(doc["reset"]["token"].strip()))
            self.assertGreaterEqual(len(doc["reset"]["token"]), 16, host)
            self.assertEqual(h["x-content-type-options"], "nosniff")
            self.assertEqual(h["cross-origin-resource-policy"], "same-origin")
        # an HTTP/1.0 request may come without Host, as scripts send it
        line, _, _ = get(p, "/health", None, auth=None, version="HTTP/1.0")
        self.assertEqual(code(line), 200)

    def test_basic_scheme_case_insensitive(self):
        p = self.agent.stats_port
        host = "127.0.0.1:%d" % p
        for scheme in ("Basic", "basic", "BASIC"):
            self.assertEqual(self.status(host, scheme=scheme)[0], 200, scheme)
        self.assertEqual(self.status(host, scheme="Bearer")[0], 401)
        self.assertEqual(self.status(host, auth=("admin", "wrong"), scheme="basic")[0], 401)
        self.assertEqual(self.status(host, auth=None)[0], 401)

    def test_nul_byte_gets_400_at_once(self):
        p = self.agent.stats_port
        s = socket.create_connection(("127.0.0.1", p), timeout=10)
        self.addCleanup(s.close)
        # no end of headers: only the NUL can make the listener answer
        s.sendall(b"GET /status.json HTTP/1.1\r\nHost: 127.0.0.1\x00:%d\r\n" % p)
        t0 = time.monotonic()
        data = s.recv(4096)
        waited = time.monotonic() - t0
        self.assertTrue(data.startswith(b"HTTP/1.1 400 "), data[:80])
        # the listener's timeout is 5 s: an answer well before it is the NUL's
        self.assertLess(waited, 4.0)

    def test_headers_on_every_endpoint(self):
        p = self.agent.stats_port
        host = "127.0.0.1:%d" % p
        for path in ("/top", "/key?rule=api&key=x", "/metrics", "/status.json", "/config",
                     "/nope"):
            line, h, _ = get(p, path, host)
            self.assertIn(code(line), (200, 404), path)
            self.assertEqual(h.get("x-content-type-options"), "nosniff", path)
            self.assertEqual(h.get("cross-origin-resource-policy"), "same-origin", path)
            self.assertEqual(list(h).count("x-content-type-options"), 1, path)
        # the status page keeps its own policy, nosniff once
        line, h, _ = get(p, "/", host)
        self.assertEqual(code(line), 200)
        self.assertIn("content-security-policy", h)
        self.assertEqual(h.get("x-content-type-options"), "nosniff")


class StatsHostsReload(unittest.TestCase):
    def test_sighup_changes_stats_hosts(self):
        a = Agent(RULE, workers=1, extra_agent="stats_hosts = one.example\n")
        stop_cleanly(self, a)
        p = a.stats_port

        def status_of(host):
            return code(get(p, "/status.json", host, auth=None)[0])

        self.assertEqual(status_of("one.example:%d" % p), 200)
        self.assertEqual(status_of("two.example:%d" % p), 421)
        n = a.output().count('"configuration reloaded"')
        a.rewrite(RULE, extra_agent="stats_hosts = two.example\n")
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: a.output().count('"configuration reloaded"') > n))
        self.assertEqual(status_of("two.example:%d" % p), 200)
        self.assertEqual(status_of("one.example:%d" % p), 421)

    def test_bad_item_refused(self):
        a = Agent(RULE, workers=1, extra_agent="stats_hosts = ok.example\n")
        stop_cleanly(self, a)
        n = a.output().count("reload failed")
        a.rewrite(RULE, extra_agent="stats_hosts = http://x.example/\n")
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: a.output().count("reload failed") > n))
        self.assertIn("bad host 'http://x.example/' in 'stats_hosts'", a.output())


class SecretInIni(unittest.TestCase):
    """secret_readable names the INI holding stats_auth while every user may
    read it: none at start for a 0600 file, raised by the reload that finds
    it 0644 (on /status.json and the gauge), cleared by the one after
    chmod 600."""
    KIND = "secret_readable"

    def kinds(self, a):
        _, _, body = get(a.stats_port, "/status.json", "127.0.0.1:%d" % a.stats_port)
        return {w["kind"]: w for w in json.loads(body)["warnings"]}

    def gauge(self, a):
        _, _, body = get(a.stats_port, "/metrics", "127.0.0.1:%d" % a.stats_port)
        want = 'spoa_ratelimit_warning{kind="%s"} ' % self.KIND
        for line in body.decode().splitlines():
            if line.startswith(want):
                return float(line.split()[-1])
        return None

    def reload(self, a):
        n = a.output().count('"configuration reloaded"')
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: a.output().count('"configuration reloaded"') > n))

    def test_readable_ini_with_stats_auth(self):
        old = os.umask(0o077)  # the INI written 0600
        try:
            a = Agent(RULE, workers=1, extra_agent=AUTH)
        finally:
            os.umask(old)
        stop_cleanly(self, a)
        self.assertEqual(os.stat(a.ini).st_mode & 0o777, 0o600)
        self.assertNotIn(self.KIND, self.kinds(a))
        self.assertEqual(self.gauge(a), 0)

        os.chmod(a.ini, 0o644)
        self.reload(a)
        self.assertTrue(wait_for(lambda: self.gauge(a) == 1, timeout=10))
        msg = self.kinds(a)[self.KIND]["message"]
        self.assertIn(a.ini, msg)
        self.assertIn("0644", msg)
        self.assertIn("chmod 640", msg)
        self.assertIn("stats_auth", msg)

        os.chmod(a.ini, 0o600)
        self.reload(a)
        self.assertTrue(wait_for(lambda: self.gauge(a) == 0, timeout=10))
        self.assertNotIn(self.KIND, self.kinds(a))


if __name__ == "__main__":
    unittest.main()
