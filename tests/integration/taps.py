# SPDX-License-Identifier: Apache-2.0
"""Loopback TCP relays for the HAProxy tests, put between two real processes.

SpopTap sits between HAProxy and the agent and records every SPOP frame of
every connection in order, so a test can count connections and HELLOs, read a
health check byte for byte, and see in which order ACKs came back. It forwards
whole frames, each in one send, as HAProxy and the agent write them.

DelayTap sits between the agent and Redis and holds Redis's replies back for a
fixed time (a delay line, not a queue: replies that arrive together leave
together), so that decisions which need Redis are reliably slower than those
that do not; set_delay() changes that time mid-run.

CutTap sits between the agent and Redis and, once armed, loses one
connection the worst way: it forwards the first command a predicate picks,
lets Redis run it, drops the reply and closes the connection, so that the
agent cannot know whether it ran. Later connections go through."""
import queue
import socket
import threading
import time

import spop
from harness import free_port


def _listener():
    port = free_port()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(256)
    ls.settimeout(0.2)
    return ls, port


class _Relay:
    """Accepts on a free loopback port and connects each client to upstream."""

    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.ls, self.port = _listener()
        self.stopping = False
        self.socks = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    def _accept_loop(self):
        while not self.stopping:
            try:
                down, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                down.close()
                continue
            for sk in (down, up):
                sk.settimeout(None)
                sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.socks += [down, up]
            self.connected(down, up)

    def connected(self, down, up):
        raise NotImplementedError

    @staticmethod
    def _half_close(sk):
        try:
            sk.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def stop(self):
        self.stopping = True
        self.ls.close()
        with self.lock:
            for sk in self.socks:
                try:
                    sk.close()
                except OSError:
                    pass
        self.thread.join(5)


class SpopConn:
    """One SPOP connection seen by the tap: frames in the order they passed,
    each as (sequence number, direction "h2a" or "a2h", frame dict, raw bytes)."""

    def __init__(self, n):
        self.n = n
        self.frames = []
        self.opened = time.monotonic()
        self.eof = {}  # direction -> monotonic time its sender closed

    def of(self, direction, ftype=None):
        return [f for _, d, f, _ in self.frames
                if d == direction and (ftype is None or f["type"] == ftype)]

    def hello(self):
        """The HAPROXY-HELLO's kv-list, or None."""
        h = self.of("h2a", spop.HAPROXY_HELLO)
        return spop.decode_kv(h[0]["payload"]) if h else None

    def is_healthcheck(self):
        h = self.hello()
        return bool(h and h.get("healthcheck"))

    def ack_order(self):
        """(NOTIFYs sent, ACKs answered after a later NOTIFY's ACK): a frame is
        named by (stream-id, frame-id)."""
        sent = {}
        for _, d, f, _ in self.frames:
            if d == "h2a" and f["type"] == spop.NOTIFY:
                sent.setdefault((f["stream"], f["fid"]), len(sent))
        late, highest = 0, -1
        for _, d, f, _ in self.frames:
            if d == "a2h" and f["type"] == spop.ACK:
                i = sent.get((f["stream"], f["fid"]))
                if i is None:
                    continue
                if i < highest:
                    late += 1
                highest = max(highest, i)
        return len(sent), late


class SpopTap(_Relay):
    """HAProxy -> tap -> agent, recording frames."""

    def __init__(self, agent_port):
        self.conns = []
        self.seq = 0
        super().__init__(agent_port)

    def connected(self, down, up):
        with self.lock:
            c = SpopConn(len(self.conns))
            self.conns.append(c)
        left = [2]
        for src, dst, d in ((down, up, "h2a"), (up, down, "a2h")):
            threading.Thread(target=self._pump, args=(c, src, dst, d, left), daemon=True).start()

    def _pump(self, c, src, dst, direction, left):
        buf = b""
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            while True:
                f, rest = spop.decode_frame(buf)
                if f is None:
                    break
                raw = buf[:len(buf) - len(rest)]
                buf = rest
                with self.lock:
                    self.seq += 1
                    c.frames.append((self.seq, direction, f, raw))
                try:
                    dst.sendall(raw)  # one frame, one send
                except OSError:
                    break
        self._half_close(dst)
        with self.lock:
            c.eof[direction] = time.monotonic()
            left[0] -= 1
            done = left[0] == 0
        if done:
            for sk in (src, dst):
                try:
                    sk.close()
                except OSError:
                    pass

    def snapshot(self):
        with self.lock:
            return list(self.conns)

    def requests(self):
        """Connections that carried a HELLO other than a health check."""
        return [c for c in self.snapshot() if c.hello() is not None and not c.is_healthcheck()]

    def healthchecks(self):
        return [c for c in self.snapshot() if c.is_healthcheck()]


class DelayTap(_Relay):
    """agent -> tap -> Redis; Redis's replies reach the agent `delay` s late."""

    def __init__(self, redis_port, delay):
        self.delay = delay
        super().__init__(redis_port)

    def set_delay(self, delay):
        """Replies read from now on wait `delay` s (a slower or faster
        Redis mid-run); those already held leave when they were due, and
        none overtakes another (one queue per connection)."""
        self.delay = delay

    def connected(self, down, up):
        threading.Thread(target=self._forward, args=(down, up), daemon=True).start()
        q = queue.Queue()
        threading.Thread(target=self._read_late, args=(up, q), daemon=True).start()
        threading.Thread(target=self._write_late, args=(q, down), daemon=True).start()

    def _forward(self, src, dst):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        self._half_close(dst)

    def _read_late(self, src, q):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            q.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _write_late(self, q, dst):
        while True:
            due, data = q.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                self._half_close(dst)
                return
            try:
                dst.sendall(data)
            except OSError:
                return


def resp_commands(buf):
    """The whole RESP commands (arrays of bulk strings, as hiredis writes
    them) at the start of buf: (list of [args as bytes], bytes used)."""
    cmds, i = [], 0
    while True:
        j = buf.find(b"\r\n", i)
        if j < 0 or buf[i:i + 1] != b"*":
            return cmds, i
        n, k, args = int(buf[i + 1:j]), j + 2, []
        for _ in range(n):
            e = buf.find(b"\r\n", k)
            if e < 0:
                return cmds, i
            ln = int(buf[k + 1:e])
            if len(buf) < e + 2 + ln + 2:
                return cmds, i
            args.append(buf[e + 2:e + 2 + ln])
            k = e + 2 + ln + 2
        cmds.append(args)
        i = k


class CutTap(_Relay):
    """agent -> tap -> Redis, transparent until arm(pick): then the first
    command for which pick(args) is true goes to Redis with what came in the
    same read, every reply from then on is dropped, and after `hold` s (Redis
    has run it) the connection is closed both ways. One cut; `cut` is set
    then and `picked` holds the command's args."""

    def __init__(self, redis_port, hold=0.3):
        self.hold, self.pick, self.picked = hold, None, None
        self.cut = threading.Event()
        super().__init__(redis_port)

    def arm(self, pick):
        self.pick = pick

    def connected(self, down, up):
        state = {"dropping": False}
        threading.Thread(target=self._requests, args=(down, up, state), daemon=True).start()
        threading.Thread(target=self._replies, args=(up, down, state), daemon=True).start()

    def _requests(self, src, dst, state):
        buf = b""
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            fire = False
            if self.pick and not self.cut.is_set():
                buf += data
                cmds, used = resp_commands(buf)
                buf = buf[used:]
                for c in cmds:
                    if self.pick(c):
                        self.picked, fire = c, True
                        break
            if fire:
                state["dropping"] = True  # before Redis can answer it
                self.pick = None
            try:
                dst.sendall(data)
            except OSError:
                break
            if fire:
                time.sleep(self.hold)
                for sk in (src, dst):
                    try:
                        sk.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                self.cut.set()
                return
        self._half_close(dst)

    def _replies(self, src, dst, state):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if state["dropping"]:
                continue
            try:
                dst.sendall(data)
            except OSError:
                break
        self._half_close(dst)
