# SPDX-License-Identifier: Apache-2.0
"""Bounded replies (issue 43): a reply from Redis past what the agent's
commands can get (src/store/store_reply_cap.h) closes that connection and no
more. A relay in front of a real redis-server forwards everything, then, once
armed, answers one script call (EVALSHA or FCALL) with a hostile reply: an
array header of 100 million elements followed by elements, a bulk string
header of 512 MB followed by its bytes as fast as the agent reads them, or
arrays nested six deep. Each time the agent's resident set stays under
256 MB (hiredis alone: about 12 bytes of memory per byte of the array, the
whole 512 MB buffered), it keeps answering every NOTIFY (falling back
meanwhile), counts spoa_ratelimit_redis_error_replies_total{kind=
"reply_too_large"}, raises redis_errors, logs why, and reconnects with its
backoff to decide on Redis again. And a rule text made larger than 1 MiB in
Redis is refused in one read: one EVAL_RO (lua/rules_fetch.lua), never an
HSTRLEN then an HMGET that a swap between the two would defeat. A reply
that no command waited for (hiredis 0.14 aborts on one) is refused as a
bad_reply and the connection made again."""
import re
import socket
import threading
import time
import unittest

from fleet import Seq, redis_ini, unique, wait_redis_up
from harness import Agent, free_port, rss_kb, stop_cleanly, wait_for
from test_redis import RedisCase
from test_rules_redis import StoreCase, rules

RULE = "[rule:r]\nkey = key\nrate = 100000/1m\nburst = 100000\nlease = off\n"
RSS_MAX_KB = 256 * 1024
CHUNK = 64 * 1024


def resp_end(buf, i=0):
    """The offset past the RESP2 reply starting at buf[i], or None while it
    is incomplete."""
    j = buf.find(b"\r\n", i)
    if j < 0:
        return None
    t = buf[i:i + 1]
    if t in (b"+", b"-", b":"):
        return j + 2
    n = int(buf[i + 1:j])
    if t == b"$":
        end = j + 2 + (n + 2 if n >= 0 else 0)
        return end if end <= len(buf) else None
    k = j + 2
    for _ in range(max(n, 0)):
        k = resp_end(buf, k)
        if k is None:
            return None
    return k


class HostileRelay(threading.Thread):
    """Loopback relay to a Redis. armed(mode): the next script call seen
    from the agent is answered, in place of the next whole reply from Redis,
    by the hostile reply of mode; that connection then carries nothing else
    from Redis. One hostile reply per arming."""

    def __init__(self, upstream_port):
        super().__init__(daemon=True)
        self.upstream = upstream_port
        self.port = free_port()
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", self.port))
        self.ls.listen(64)
        self.ls.settimeout(0.2)
        self.lock = threading.Lock()
        self.mode = None     # armed with this mode
        self.pending = None  # a script call was seen: (mode) to send at the next boundary
        self.sent = 0        # bytes of hostile replies sent
        self.fired = 0       # hostile replies begun
        self.running = True
        self.socks = []

    def arm(self, mode):
        with self.lock:
            self.mode = mode

    def run(self):
        while self.running:
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            self.socks += [c, u]
            state = {"hostile": None}
            threading.Thread(target=self.client_to_redis, args=(c, u, state),
                             daemon=True).start()
            threading.Thread(target=self.redis_to_client, args=(u, c, state),
                             daemon=True).start()

    def client_to_redis(self, c, u, state):
        try:
            while True:
                data = c.recv(CHUNK)
                if not data:
                    break
                with self.lock:
                    if self.mode and (b"EVALSHA" in data or b"FCALL" in data):
                        state["hostile"], self.mode = self.mode, None
                u.sendall(data)
        except OSError:
            pass
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def redis_to_client(self, u, c, state):
        buf = b""
        try:
            while True:
                data = u.recv(CHUNK)
                if not data:
                    break
                buf += data
                while True:
                    if state["hostile"] == "unasked":
                        end = resp_end(buf)
                        if end is None:
                            break
                        # the reply, then one no command asked for
                        self.fired += 1
                        c.sendall(buf[:end] + b"+OK\r\n")
                        buf = buf[end:]
                        state["hostile"] = None
                        continue
                    if state["hostile"]:
                        self.fired += 1
                        self.hostile(c, state["hostile"])
                        return
                    end = resp_end(buf)
                    if end is None:
                        break
                    c.sendall(buf[:end])
                    buf = buf[end:]
        except OSError:
            pass
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def hostile(self, c, mode):
        """Send until the agent closes (or a bound past anything it may hold)."""
        if mode == "array":
            head, body, total = b"*100000000\r\n", b":1\r\n" * (CHUNK // 4), 400 << 20
        elif mode == "bulk":
            head, body, total = b"$536870912\r\n", b"x" * CHUNK, 536870912
        else:
            head, body, total = b"*1\r\n" * 6 + b":1\r\n", b"", 0
        try:
            c.sendall(head)
            self.sent += len(head)
            while self.sent < total:
                c.sendall(body)
                self.sent += len(body)
            if not body:
                c.recv(1)  # wait for the agent to close
        except OSError:
            pass
        try:
            c.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def stop(self):
        self.running = False
        self.ls.close()
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


class RssWatch(threading.Thread):
    """The largest VmRSS of pid seen, sampled every 5 ms until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.max_kb, self.running = pid, 0, True

    def run(self):
        while self.running:
            try:
                self.max_kb = max(self.max_kb, rss_kb(self.pid))
            except OSError:
                return
            time.sleep(0.005)


class ReplyCap(RedisCase):
    def setUp(self):
        super().setUp()
        self.r = self.start_redis()
        self.relay = HostileRelay(self.r.port)
        self.relay.start()
        self.addCleanup(self.relay.stop)
        self.a = Agent(redis_ini(self.relay.port) + RULE, workers=1)
        stop_cleanly(self, self.a)
        wait_redis_up(self.a)

    def too_large(self):
        return self.a.metric("spoa_ratelimit_redis_error_replies_total",
                             kind="reply_too_large") or 0

    def hostile(self, mode, why):
        s = Seq(self.a.addr)
        self.addCleanup(s.close)
        self.assertNotEqual(s.decide(key=unique()).get("degraded"), True)
        self.assertEqual(self.too_large(), 0)
        watch = RssWatch(self.a.p.pid)
        watch.start()
        self.relay.arm(mode)
        # every NOTIFY is answered (on Redis, or falling back) while the
        # hostile reply comes and the connection is made again
        ok = wait_for(lambda: (s.decide(key=unique()) is not None and
                               self.too_large() >= 1), 30, step=0.01)
        self.assertTrue(ok, "no reply_too_large counted (relay fired %d, sent %d bytes):\n%s"
                        % (self.relay.fired, self.relay.sent, self.a.output()[-3000:]))
        # back on Redis: the connection made again through the relay
        wait_redis_up(self.a, timeout=20)
        self.assertTrue(wait_for(lambda: s.decide(key=unique()).get("degraded") is not True,
                                 10))
        watch.running = False
        watch.join()
        self.assertEqual(self.relay.fired, 1)
        self.assertLess(watch.max_kb, RSS_MAX_KB,
                        "agent RSS reached %d kB (%d bytes sent)" % (watch.max_kb,
                                                                      self.relay.sent))
        self.assertEqual(self.too_large(), 1)
        out = self.a.output()
        self.assertRegex(out, r'err="reply too large: [^"]*' + re.escape(why))
        self.assertIn("reply_too_large", out)
        self.assertIn("msg=warning kind=redis_errors", out)
        print("\n  %s: agent RSS at most %d kB, %d hostile bytes sent"
              % (mode, watch.max_kb, self.relay.sent))

    def test_huge_array_header(self):
        """*100000000 then elements: refused at the header."""
        self.hostile("array", "array of 100000000 elements (cap 65536)")

    def test_huge_bulk_string(self):
        """$536870912 then its bytes: refused once the unparsed bytes pass
        one string's cap, long before the body is in."""
        self.hostile("bulk", "bytes of one reply unparsed (cap 1114112)")

    def test_deep_nesting(self):
        """Arrays six deep (hiredis alone takes up to seven)."""
        self.hostile("nested", "arrays nested 5 deep (cap 4)")

    def test_reply_no_command_waited_for(self):
        """A reply after the script's own, which no command waited for:
        hiredis 0.14 asserts on it (the agent aborted). Refused at its
        first byte as a bad_reply, the connection made again."""
        s = Seq(self.a.addr)
        self.addCleanup(s.close)
        self.assertNotEqual(s.decide(key=unique()).get("degraded"), True)

        def bad():
            return self.a.metric("spoa_ratelimit_redis_error_replies_total",
                                 kind="bad_reply") or 0
        self.relay.arm("unasked")
        ok = wait_for(lambda: s.decide(key=unique()) is not None and bad() >= 1, 30, step=0.01)
        self.assertTrue(ok, "no bad_reply counted (relay fired %d):\n%s"
                        % (self.relay.fired, self.a.output()[-3000:]))
        self.assertIsNone(self.a.p.poll(), "the agent exited:\n" + self.a.output()[-3000:])
        wait_redis_up(self.a, timeout=20)
        self.assertTrue(wait_for(lambda: s.decide(key=unique()).get("degraded") is not True,
                                 10))
        self.assertEqual(self.relay.fired, 1)
        self.assertIn("a reply no command waited for", self.a.output())


class RulesText(StoreCase):
    def test_over_cap_in_one_read(self):
        """A version's text swapped for one over 1 MiB in Redis: the agent
        asks for it once, with one EVAL_RO that answers its size alone; no
        HSTRLEN, no HMGET; refused as larger than 1 MiB, the rules in force
        kept, nothing too large ever read."""
        r = self.start_redis()
        op = self.operator("[redis]\nurl = redis://127.0.0.1:%d\n" % r.port)
        a = self.store_agent(redis_ini(r.port))
        wait_redis_up(a)
        self.assertEqual(self.push(op, rules(10)), 1)
        self.wait_limit([a], 10)
        r.cli("CONFIG", "RESETSTAT")
        # version 2 in Redis with a text of 2 MiB (written as a swap would
        # leave it: the text, then current naming the version)
        r.cli("EVAL", "redis.call('HSET', KEYS[1], 'text', string.rep(';', 2097152), "
              "'sha256', string.rep('0', 64))", "1", "rl:{rules}:v:2")
        r.cli("SET", "rl:{rules}:current", "2 " + "0" * 64)
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_rules_applied_total",
                                                  result="rejected") == 1, 10),
                        a.output()[-2000:])
        self.assertIn('version=2 in_force=1 error="larger than 1 MiB: not read"', a.output())
        self.assertEqual(self.limit(a), 10)
        stats = r.cli("INFO", "commandstats")
        # the script's own HSTRLEN is the only one (Redis counts a script's
        # commands too), and no HMGET: the text was never sent
        self.assertIn("cmdstat_eval_ro:calls=1,", stats)
        self.assertIn("cmdstat_hstrlen:calls=1,", stats)
        self.assertNotIn("cmdstat_hmget:", stats)
        self.assertEqual(a.metric("spoa_ratelimit_redis_error_replies_total",
                                  kind="reply_too_large"), 0)


if __name__ == "__main__":
    unittest.main()
