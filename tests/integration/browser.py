# SPDX-License-Identifier: Apache-2.0
"""Headless Chromium driven over the DevTools protocol, with the standard
library only: a WebSocket client small enough to read (RFC 6455: the
handshake, masked text frames out, text/continuation/ping/close frames in)
and the few protocol calls the status-page tests need.

    with Browser() as b:
        page = b.open("http://127.0.0.1:PORT/")
        page.wait_for("document.querySelector('#rules tr') !== null")
        rows = page.eval("[...document.querySelectorAll('#rules tr')].length")
        page.requests  # every URL the page asked for (Network domain)
        page.dialogs   # every alert/confirm/prompt the page opened

Chromium is the Debian package `chromium` (/usr/bin/chromium); $CHROMIUM
names another. It runs with a fresh profile in a temporary directory and is
killed at the end whatever happens."""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request


def find_chromium():
    for c in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
              shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if c and os.path.exists(c):
            return c
    return None


# ---- WebSocket (RFC 6455), client side ------------------------------------------


class WebSocket:
    def __init__(self, url, timeout=10.0):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        if not m:
            raise ValueError("not a ws:// url: %r" % url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n" % (path, host, port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("WebSocket handshake: connection closed")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError("WebSocket handshake refused: %r" % head[:200])

    def send(self, text):
        data = text.encode()
        n = len(data)
        if n < 126:
            hdr = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(hdr + mask + body)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("WebSocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, timeout):
        """The next whole text message, or None when timeout passes first."""
        self.sock.settimeout(timeout)
        msg = b""
        try:
            while True:
                b0, b1 = self._read(2)
                op, n = b0 & 0x0F, b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", self._read(8))[0]
                payload = self._read(n)  # a server never masks
                if op == 0x8:
                    raise ConnectionError("WebSocket closed by the browser")
                if op == 0x9:  # ping: answer pong (masked, as a client must)
                    mask = os.urandom(4)
                    self.sock.sendall(struct.pack("!BB", 0x8A, 0x80 | len(payload)) + mask +
                                      bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
                    continue
                if op in (0x1, 0x0):
                    msg += payload
                    if b0 & 0x80:
                        return msg.decode()
        except socket.timeout:
            return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---- the DevTools protocol ------------------------------------------------------------


class Page:
    """One tab. Events are collected as they arrive: requests (every URL
    asked for), dialogs (alert/confirm/prompt messages: each is dismissed,
    or accepted while accept_dialogs is set),
    console (console messages and uncaught exceptions)."""

    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0
        self.requests = []
        self.dialogs = []
        self.console = []
        self.accept_dialogs = False
        self.call("Network.enable")
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _event(self, m):
        method, p = m.get("method"), m.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(p.get("message", ""))
            self.send("Page.handleJavaScriptDialog", accept=self.accept_dialogs)
        elif method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", a.get("description", "")))
                                         for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.console.append("exception: %s" % p["exceptionDetails"].get("text"))

    def send(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        return self.next_id

    def call(self, method, timeout=15.0, **params):
        mid = self.send(method, **params)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("DevTools: no answer to %s" % method)
            raw = self.ws.recv(left)
            if raw is None:
                continue
            m = json.loads(raw)
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError("DevTools %s: %s" % (method, m["error"]))
                return m.get("result", {})
            self._event(m)

    def pump(self, seconds):
        """Collect events for a while (requests made by the page's timers)."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            raw = self.ws.recv(left)
            if raw is not None:
                self._event(json.loads(raw))

    def navigate(self, url):
        self.call("Page.navigate", url=url)

    def eval(self, expr):
        """The value of a JavaScript expression (JSON-able), awaited if a promise."""
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page: %s: %s" % (expr, r["exceptionDetails"].get("text")))
        return r["result"].get("value")

    def wait_for(self, expr, timeout=10.0, step=0.1):
        """Waits until expr is truthy in the page; returns its value."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.eval(expr)
                if last:
                    return last
            except RuntimeError as e:
                last = e
            self.pump(step)
        raise AssertionError("page: %s still %r after %.0f s" % (expr, last, timeout))

    def screenshot(self, path, width=1280, height=900):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def close(self):
        self.ws.close()


class Browser:
    def __init__(self, chromium=None, timeout=30.0):
        self.bin = chromium or find_chromium()
        if not self.bin:
            raise RuntimeError("no Chromium: apt-get install chromium (or set $CHROMIUM)")
        self.dir = tempfile.mkdtemp(prefix="spoa-chromium-")
        self.log = open(os.path.join(self.dir, "stderr"), "w+")
        self.proc = subprocess.Popen(
            [self.bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--metrics-recording-only",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             "--user-data-dir=" + os.path.join(self.dir, "profile"), "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.port is None:
            if self.proc.poll() is not None:
                break
            self.log.seek(0)
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", self.log.read())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.05)
        if self.port is None:
            self.log.seek(0)
            err = self.log.read()[-2000:]
            self.close()
            raise RuntimeError("Chromium did not start: %s" % err)
        self.pages = []

    def _json(self, path, method="GET"):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def open(self, url):
        """A new tab on url; returns its Page once the document has loaded."""
        t = self._json("/json/new?about:blank", method="PUT")
        page = Page(t["webSocketDebuggerUrl"])
        self.pages.append(page)
        page.navigate(url)
        page.wait_for("document.readyState === 'complete'")
        return page

    def dump_dom(self, url, budget_ms=3000):
        """What `chromium --headless --dump-dom` prints for url after budget_ms
        of virtual time (the page's timers run)."""
        out = subprocess.run([self.bin, "--headless=new", "--no-sandbox", "--disable-gpu",
                              "--user-data-dir=" + os.path.join(self.dir, "dump"),
                              "--virtual-time-budget=%d" % budget_ms, "--dump-dom", url],
                             capture_output=True, timeout=60)
        return out.stdout.decode(errors="replace")

    def close(self):
        for p in getattr(self, "pages", []):
            p.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
