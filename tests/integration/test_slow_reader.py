# SPDX-License-Identifier: Apache-2.0
"""SPOP peers that never read the answers they are owed: one that then
half-closes (SHUT_WR) and one that does not. Each sends many NOTIFYs from a
socket with a small receive buffer, enough that its ACKs fill that buffer,
the agent's send buffer and the agent's own output up to OUT_HIGH_WATER
(src/server/server_conn.c), where the agent stops reading it. Checked: the agent's
memory stays bounded (VmRSS), the connection's fd is closed within
DRAIN_TIMEOUT_S (5 s) of the last answer taken plus slack, counted in
spoa_ratelimit_connection_timeouts_total{phase="drain"}, and a normal peer on
the same worker is answered promptly throughout. A third peer also has
NOTIFYs waiting for a stopped Redis when it is closed: their answers come
after the connection is gone (the agent must neither crash nor leak: ASan).

Every wait is a poll with a deadline."""
import os
import socket
import time
import unittest

import signal

import spop
from harness import Agent, Redis

RULES = """
[rule:r]
key = key
rate = 1000000/1s
burst = 1000000
"""
DRAIN_TIMEOUT_S = 5.0
SLACK = 3.0           # a loaded 2-core machine
NOTIFIES = 200000     # ~7 MB of NOTIFYs, ~22 MB of ACKs if they were all read
RSS_GROWTH_MB = 12    # bounded: OUT_HIGH_WATER (1 MB) and one input buffer, not the ACKs
PROMPT_S = 1.0        # the normal peer's answers


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def flood(n, message="check-rate"):
    """n NOTIFYs, each for one of 1,000 keys."""
    return b"".join(spop.notify(i, 1, [(message, [("key", "k%d" % (i % 1000))])])
                    for i in range(1, n + 1))


class SlowReader(unittest.TestCase):
    ini = RULES
    normal_message = "check-rate"

    def setUp(self):
        # one worker: the slow peer and the normal one share its loop
        self.agent = Agent(self.ini, workers=1)
        self.addCleanup(self.agent.stop)
        self.normal = spop.Client(self.agent.addr, timeout=5)
        self.addCleanup(self.normal.close)
        self.normal.handshake()
        self.sid = 0
        self.lat = []

    def serve_normal(self):
        """One decision on the normal peer, timed."""
        self.sid += 1
        t = time.monotonic()
        g = self.normal.decide({"key": "normal"}, stream=self.sid, fid=1,
                               message=self.normal_message)
        self.lat.append(time.monotonic() - t)
        self.assertIs(g.get("blocked"), False, g)

    def poll(self, cond, timeout, what):
        """Serve the normal peer and sample the agent's memory until cond()
        holds; returns the time it took. Fails after timeout seconds."""
        t0 = time.monotonic()
        while True:
            self.serve_normal()
            self.peak = max(self.peak, rss_kb(self.agent.p.pid))
            if cond():
                return time.monotonic() - t0
            self.assertIsNone(self.agent.p.poll(), "the agent exited")
            if time.monotonic() - t0 > timeout:
                self.fail("%s: not within %.1f s" % (what, timeout))
            time.sleep(0.1)

    def stuff(self, blob):
        """A peer with a 4 KB receive buffer: HELLO, then blob until the
        agent takes no more for a second. Returns the socket."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(s.close)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
        s.settimeout(5)
        s.connect(self.agent.addr)
        s.sendall(spop.hello())
        buf = b""
        while True:
            f, buf = spop.decode_frame(buf)
            if f:
                self.assertEqual(f["type"], spop.AGENT_HELLO)
                break
            data = s.recv(4096)
            self.assertTrue(data, "closed before AGENT-HELLO")
            buf += data
        s.setblocking(False)
        sent, last = 0, time.monotonic()
        while sent < len(blob) and time.monotonic() - last < 1.0:
            try:
                sent += s.send(blob[sent:sent + 65536])
                last = time.monotonic()
            except BlockingIOError:
                self.serve_normal()
                time.sleep(0.01)
        self.sent = sent
        self.last_taken = last  # the agent took nothing after this
        return s

    def run_peer(self, half_close, blob=None):
        pid = self.agent.p.pid
        self.serve_normal()
        base_rss, base_fds = rss_kb(pid), nfds(pid)
        self.peak = base_rss
        drain0 = self.agent.metric("spoa_ratelimit_connection_timeouts_total", listener="spop",
                                   phase="drain")
        s = self.stuff(blob or flood(NOTIFIES))
        # open still, unless a slow spell of the machine made stuff() outlast
        # the write deadline (the agent took nothing since last_taken)
        # (counted as SPOP connections, not fds: the agent's Redis side may
        # open a socket meanwhile, e.g. a reconnect to a stopped Redis)
        spop_conns = lambda: self.agent.metric("spoa_ratelimit_connections")
        self.assertIn(spop_conns(), (1, 2))
        if half_close:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # already closed by the agent
        t_stop = self.last_taken  # it took nothing more from here (and never read)
        left = DRAIN_TIMEOUT_S + SLACK - (time.monotonic() - t_stop)
        self.poll(lambda: spop_conns() == 1 and nfds(pid) <= base_fds + 1, max(left, 0.5),
                  "the slow peer's connection closed")
        took = time.monotonic() - t_stop
        drain = self.agent.metric("spoa_ratelimit_connection_timeouts_total", listener="spop",
                                  phase="drain")
        conns = self.agent.metric("spoa_ratelimit_connections")
        for _ in range(5):  # and the normal peer still is
            self.serve_normal()
        grow = (self.peak - base_rss) / 1024.0
        lat = sorted(self.lat)
        print("\n  %s: sent %.1f MB of NOTIFYs, closed %.2f s after it stopped; agent RSS "
              "%.1f MB -> peak %.1f MB (+%.1f); normal peer %d decisions, p50 %.1f ms max "
              "%.1f ms" % ("half-closed" if half_close else "open", self.sent / 1e6, took,
                           base_rss / 1024.0, self.peak / 1024.0, grow, len(lat),
                           1000 * lat[len(lat) // 2], 1000 * lat[-1]))
        p = []
        if grow > RSS_GROWTH_MB:
            p.append("agent RSS grew %.1f MB (bound %d)" % (grow, RSS_GROWTH_MB))
        if drain != drain0 + 1:
            p.append("timeouts_total{phase=drain} %s -> %s, want +1" % (drain0, drain))
        if conns != 1:
            p.append("spoa_ratelimit_connections %s once closed, want 1 (the normal peer)"
                     % conns)
        if lat[-1] > PROMPT_S:
            p.append("the normal peer waited %.2f s for an answer" % lat[-1])
        if self.sent < 2e6:
            p.append("only %d bytes sent: the agent's buffers were not filled" % self.sent)
        self.assertEqual(p, [])

    def test_half_closed_never_reads(self):
        """SHUT_WR after the NOTIFYs: the EOF sits behind frames the agent
        no longer reads, so the write deadline (not the drain one) ends it."""
        self.run_peer(half_close=True)

    def test_never_reads(self):
        """No half-close: the agent stops reading it at OUT_HIGH_WATER, keeps
        serving others, and closes it once it took nothing for 5 s."""
        self.run_peer(half_close=False)


# Redis mode: the slow peer's first NOTIFYs wait for a stopped Redis (timeout
# 20 s, lease off); what fills its buffers are NOTIFYs of a message no rule
# reads (answered at once, an ACK without actions: small, so more of them).
WAITING_RULES = """
[rule:exact]
message = check-rate
key = key
rate = 100/1s
lease = off
"""


class SlowReaderWaiting(SlowReader):
    normal_message = "other"  # Redis is stopped: the normal peer asks no rule

    def setUp(self):
        self.redis = Redis()
        self.addCleanup(self.redis.kill)
        self.ini = ("[redis]\nurl = redis://127.0.0.1:%d/0\ntimeout = 20s\n\n"
                    % self.redis.port + WAITING_RULES)
        super().setUp()
        end = time.monotonic() + 10
        while self.agent.metric("spoa_ratelimit_redis_up") != 1:
            self.assertLess(time.monotonic(), end, "redis_up not 1")
            time.sleep(0.05)

    def stuff(self, blob):
        s = super().stuff(blob)
        # closed below with these still waiting
        self.assertEqual(self.agent.metric("spoa_ratelimit_notifies_waiting"), 5)
        return s

    def test_closed_with_answers_waiting_for_redis(self):
        pid = self.redis.p.pid
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(lambda: self.redis.p.poll() is None and os.kill(pid, signal.SIGCONT))
        blob = flood(5) + flood(600000, message="other")
        self.run_peer(half_close=True, blob=blob)
        os.kill(pid, signal.SIGCONT)
        # the five answers come back to a connection that is gone
        end = time.monotonic() + 10
        while self.agent.metric("spoa_ratelimit_notifies_waiting") != 0:
            self.assertLess(time.monotonic(), end, "requests still waiting after SIGCONT")
            time.sleep(0.05)
        self.assertIsNone(self.agent.p.poll(), "the agent exited")

    # the SlowReader tests are not run again here
    test_half_closed_never_reads = None
    test_never_reads = None


if __name__ == "__main__":
    unittest.main()
