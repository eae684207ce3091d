# SPDX-License-Identifier: Apache-2.0
"""A fake Redis for tests of a Redis that breaks the protocol: a RESP server
on a random loopback port, run in a thread of the test, that answers what the
agent sends around its script calls well enough for it to connect (PING,
AUTH, SELECT, CLIENT, INFO, ROLE, SCRIPT LOAD, FUNCTION LOAD, the epoch and
heartbeat EVALs, the first decision's SET NX), and answers the script calls
(EVALSHA, FCALL) as the test chooses (attribute `mode`, changed at any time):

  "good"       well-formed replies (every decision allowed; a batch too)
  "malformed"  replies no script gives, in turn: nil, an integer, too few
               values, a nil element, "nan", a negative count, more granted
               than asked (a claim) or allowed = 7 (an exact call)
  "noscript"   NOSCRIPT (FCALL: "ERR Function not found") always, even right
               after SCRIPT LOAD
  "garbage"    bytes that are no RESP

What the server saw is counted (under `lock`): `connections` accepted,
`script_calls`, `script_loads` (SCRIPT LOAD and FUNCTION LOAD) and `reloads`
(those sent on a connection after a script call on it: a reload after
NOSCRIPT, not the loads every connection starts with)."""
import hashlib
import os
import re
import socket
import threading
import time

# the registry's scripts (lua/scripts.am), in its order, then the batch script
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lua",
                       "scripts.am")) as _f:
    SCRIPTS = re.findall(r"(?m)^\s+lua/(\w+)", _f.read()) + ["batch"]
MALFORMED = ["nil", "integer", "short", "nil_element", "nan", "negative", "granted"]
INFO = ("# Server\r\nredis_version:7.2.0\r\n# Memory\r\nmaxmemory:0\r\n"
        "maxmemory_policy:noeviction\r\n# Stats\r\nevicted_keys:0\r\n")


def bulk(s):
    if s is None:
        return b"$-1\r\n"
    if isinstance(s, str):
        s = s.encode()
    return b"$%d\r\n%s\r\n" % (len(s), s)


def array(items):
    out = b"*%d\r\n" % len(items)
    for v in items:
        if v is None:
            out += b"$-1\r\n"
        elif isinstance(v, int):
            out += b":%d\r\n" % v
        else:
            out += bulk(v)
    return out


def script_of(src):
    """The script a source is (its header comment names it), or None."""
    for name in SCRIPTS:  # "--[[ tb_exact.lua - ..." or "-- batch.lua: generated ..."
        if ("--[[ %s.lua " % name) in src[:200] or ("-- %s.lua:" % name) in src[:200]:
            return name
    return None


def good_values(name, args):
    """A reply the script could give to ARGV args."""
    now = int(time.time() * 1000)
    if name.endswith("_claim"):
        want = int(args[4]) if len(args) > 4 and args[4] else 0
        g = min(want, 5)
        return [g, 10, g, 1, 0, 100, 1000 if g else 0, g, 0, 0]
    if name.endswith("_return"):
        return [0, 10, 0, 0, 0, 0, 0, 0, 0, 0]
    if name.endswith("_exact") or name == "cc_acquire":
        v = [1, 9, 0, 100, now]
        return v + [0] if name == "cc_acquire" else v
    if name.endswith("_reset") and name != "cc_reset":
        return [10, 0, 0, 10]
    if name.endswith("_refund"):
        return [0, 10]
    if name == "cc_release":
        return [1, 0]
    return [0, 0, 0]


class FakeRedis:
    def __init__(self, mode="good"):
        self.mode = mode
        self.lock = threading.Lock()
        self.connections = self.script_calls = self.script_loads = self.reloads = 0
        self.shas = {}      # sha1 -> script name
        self.kv = {}        # the epoch keys
        self.library = None
        self.accepted = []  # time.monotonic() of each connection
        self._turn = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.closed = True
        self.sock.close()
        for c in list(self.conns):
            try:
                c.close()
            except OSError:
                pass

    def counts(self):
        with self.lock:
            return {"connections": self.connections, "script_calls": self.script_calls,
                    "script_loads": self.script_loads, "reloads": self.reloads}

    # ---- connections ---------------------------------------------------------

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.accepted.append(time.monotonic())
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        state = {"called": False}
        try:
            while not self.closed:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
                while True:
                    cmd, buf = self._parse(buf)
                    if cmd is None:
                        break
                    out = self._answer(cmd, state)
                    if out:
                        c.sendall(out)
        except OSError:
            return
        finally:
            try:
                c.close()
            except OSError:
                pass
            if c in self.conns:
                self.conns.remove(c)

    @staticmethod
    def _parse(buf):
        """One command (a list of bytes) off buf, or None when incomplete."""
        if not buf:
            return None, buf
        if buf[:1] != b"*":  # inline
            end = buf.find(b"\r\n")
            if end < 0:
                return None, buf
            return buf[:end].split(), buf[end + 2:]
        end = buf.find(b"\r\n")
        if end < 0:
            return None, buf
        n, at, out = int(buf[1:end]), end + 2, []
        for _ in range(n):
            end = buf.find(b"\r\n", at)
            if end < 0:
                return None, buf
            ln = int(buf[at + 1:end])
            if len(buf) < end + 2 + ln + 2:
                return None, buf
            out.append(buf[end + 2:end + 2 + ln])
            at = end + 2 + ln + 2
        return out, buf[at:]

    # ---- answers ------------------------------------------------------------------

    def _answer(self, cmd, state):
        verb = cmd[0].upper().decode(errors="replace") if cmd else ""
        args = [a.decode(errors="replace") for a in cmd[1:]]
        if verb == "PING":
            return b"+PONG\r\n"
        if verb in ("AUTH", "SELECT", "CLIENT", "ASKING"):
            return b"+OK\r\n"
        if verb == "INFO":
            return bulk(INFO)
        if verb == "ROLE":
            return b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
        if verb == "SCRIPT" and args and args[0].upper() == "LOAD":
            sha = hashlib.sha1(cmd[2]).hexdigest()
            with self.lock:
                self.shas[sha] = script_of(args[1])
                self.script_loads += 1
                self.reloads += state["called"]
            return bulk(sha)
        if verb == "FUNCTION" and args and args[0].upper() == "LOAD":
            first = args[-1].split("\n", 1)[0]
            with self.lock:
                self.library = first.split("name=", 1)[1].strip() if "name=" in first else "lib"
                self.script_loads += 1
                self.reloads += state["called"]
            return bulk(self.library)
        if verb in ("EVALSHA", "FCALL"):
            state["called"] = True
            return self._script_call(verb, args)
        if verb == "EVAL":
            return self._eval(args)
        if verb == "SET":
            return bulk(None)  # there already: NX wrote nothing (nil), the script decides
        if verb == "GET":
            return bulk(self.kv.get(args[0]))
        return b"+OK\r\n"

    def _eval(self, args):
        if "redis.call('GET', KEYS[1])" in args[0]:  # store_epoch.c's
            key, new = args[2], args[3]
            with self.lock:
                cur = self.kv.get(key)
                if cur is not None:
                    return array([0, cur])
                self.kv[key] = new
            return array([1, new])
        return array([1])  # the heartbeat: one agent

    def _script_call(self, verb, args):
        with self.lock:
            self.script_calls += 1
            mode = self.mode
            self._turn += 1
            turn = self._turn
        if verb == "FCALL":
            name = next((s for s in SCRIPTS if args[0].endswith("_" + s)), None)
            if mode == "noscript" or name is None:
                return b"-ERR Function not found\r\n"
        else:
            name = self.shas.get(args[0])
            if mode == "noscript" or args[0] not in self.shas:
                return b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
        if mode == "garbage":
            return b"@@ this is no RESP @@\r\n"
        nkeys = int(args[1])
        keys, argv = args[2:2 + nkeys], args[2 + nkeys:]
        if name == "batch":
            return self._batch(keys, argv, mode, turn)
        v = good_values(name, argv)
        if mode == "malformed":
            return self._malformed(name, v, turn)
        return array(v)

    def _batch(self, keys, argv, mode, turn):
        out, at, prev = [], 0, []
        for _ in keys:
            script, argc = SCRIPTS[int(argv[at])], argv[at + 1]
            at += 2
            if argc == "=":
                a = prev
            else:
                a = argv[at:at + int(argc)]
                at += int(argc)
            prev = a
            v = good_values(script, a)
            out += [len(v)] + v
        if mode == "malformed":
            return self._malformed("batch", out, turn)
        return array(out)

    @staticmethod
    def _malformed(name, v, turn):
        kind = MALFORMED[turn % len(MALFORMED)]
        if kind == "nil":
            return b"$-1\r\n"
        if kind == "integer":
            return b":1\r\n"
        if kind == "short":
            return array(v[:-1] if name != "batch" else v[:1])
        if kind == "nil_element":
            return array([None] + v[1:])
        if kind == "nan":
            return array(["nan"] + v[1:])
        if kind == "negative":
            return array(v[:1] + [-5] + v[2:])
        # "granted": more granted than asked (a claim), allowed > 1 (exact)
        big = 10 ** 9
        return array([big] + v[1:] if name != "batch" else v[:1] + [big] + v[2:])
