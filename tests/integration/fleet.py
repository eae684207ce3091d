# SPDX-License-Identifier: Apache-2.0
"""Helpers for the Redis-mode integration tests (test_redis.py): INI sections,
waiting for the agent's Redis link, SPOP load clients that timestamp every
decision, Redis MONITOR command counting, and the checks of the lease bound
("the fleet never admits more than b + r*T in any interval T").

All load clients of one test run as threads of this one Python process, so
their time.monotonic() stamps share one clock (the agents and Redis run on the
same machine, hence on that clock too)."""
import os
import re
import socket
import sys
import threading
import time
import traceback
import uuid

import spop


# ---- configuration ----------------------------------------------------------

def redis_ini(port, prefix="rl:", timeout="1s", interval="100ms", ttl="1s",
              max_fraction="0.1", fallback_mode="open", share="0.05", password=None, db=0,
              rate_leases=None, functions=None):
    """[redis], [lease] and [fallback] sections for an agent on one Redis.
    timeout: 1s by default, not the shipped 100ms: tests that are not about the
    timeout fail on a degraded answer, and on a loaded machine one stall of
    the agent (under ASan) or of redis-server exceeds 100 ms. Tests of the
    timeout itself pass it explicitly."""
    auth = ":%s@" % password if password else ""
    return ("[redis]\nurl = redis://%s127.0.0.1:%d/%d\ntimeout = %s\nprefix = %s\n%s\n"
            "[lease]\ninterval = %s\nttl = %s\nmax_fraction = %s\n%s\n"
            "[fallback]\nmode = %s\nshare = %s\n\n"
            % (auth, port, db, timeout, prefix,
               "functions = %s\n" % functions if functions else "", interval, ttl, max_fraction,
               "rate_leases = %s\n" % rate_leases if rate_leases else "", fallback_mode,
               share))


def unique(word="k"):
    return "%s-%s" % (word, uuid.uuid4().hex[:10])


def wait_redis_up(agent, timeout=10.0):
    """Wait until the agent reports spoa_ratelimit_redis_up 1; raise with the
    agent's log otherwise."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        if agent.p.poll() is not None:
            raise AssertionError("agent exited with %s:\n%s" % (agent.p.returncode,
                                                               agent.output()[-3000:]))
        try:
            last = agent.metric("spoa_ratelimit_redis_up")
        except OSError as e:
            last = repr(e)
        if last == 1:
            return
        time.sleep(0.05)
    raise AssertionError("spoa_ratelimit_redis_up is %r after %.0f s; agent log:\n%s"
                         % (last, timeout, agent.output()[-3000:]))



def slow_round_trips(agents, over="0.1"):
    """Redis round trips (command batches) the agents timed at more than
    `over` seconds so far, a bound of spoa_ratelimit_redis_latency_seconds
    (0.1 is [lease] interval's default): on a loaded machine, the stalls that
    leave leases dry and their requests denied while Redis still had
    tokens."""
    n = 0
    for a in agents:
        n += (a.metric("spoa_ratelimit_redis_latency_seconds_count") or 0) - (
            a.metric("spoa_ratelimit_redis_latency_seconds_bucket", le=over) or 0)
    return int(n)


def exact_admitted_cost(recs, b, r, cost):
    """What one exact bucket (full at the start) admits of these requests'
    costs (cost(x) each), in the order they were sent: their total."""
    tokens, last, total = float(b), None, 0
    for x in sorted(recs, key=lambda x: x.sent):
        if last is not None:
            tokens = min(float(b), tokens + r * (x.sent - last))
        last = x.sent
        c = cost(x)
        if tokens >= c:
            tokens -= c
            total += c
    return total


def redis_counts(agents):
    """(commands, script operations) sent so far by all agents: a batch is one
    command that carries several operations."""
    cmds = ops = 0
    for a in agents:
        c = a.metric("spoa_ratelimit_redis_commands_total") or 0
        b = a.metric("spoa_ratelimit_redis_batches_total") or 0
        bc = a.metric("spoa_ratelimit_redis_batched_calls_total") or 0
        cmds += c
        ops += c - b + bc
    return cmds, ops

def stop_all(procs):
    """Stop every process (agents get SIGTERM); returns {index: rc}."""
    rcs = {}
    for i, p in enumerate(procs):
        try:
            rcs[i] = p.stop()
        except Exception as e:  # keep stopping the others
            rcs[i] = repr(e)
    return rcs


def thread_cpu(pid):
    """{tid: CPU seconds} of every thread of pid, from /proc: the scheduler's
    run time in nanoseconds (schedstat) where the kernel keeps it, else
    user + system time in clock ticks (10 ms: a probe of a few ms may show
    none, so a probe's owner could not be told)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def busy_workers(before, after):
    """CPU seconds spent between two thread_cpu() samples by each thread but
    the main one (tid == pid: the agent's main thread runs Redis and timers;
    the others are its workers), largest first."""
    main = min(after)
    return sorted((round(after[t] - before.get(t, 0.0), 2) for t in after if t != main),
                  reverse=True)


def clients_on_each_worker(addr, pid, workers, per_worker, tries=60):
    """SPOP connections to the agent (pid) at addr, per_worker of them served
    by each of its `workers` worker threads. Which worker accepts a connection
    is up to the kernel, so each new connection is asked 2,000 decisions (on a
    key of its own) and the thread that spent the CPU on them owns it;
    connections are opened until every worker has its share."""
    by = {}
    for _ in range(tries):
        c = spop.Client(addr, timeout=10.0)
        c.handshake()
        probe = unique("probe")
        before = thread_cpu(pid)
        c.send(b"".join(spop.notify(i + 1, 1, [("check-rate", [("key", probe)])])
                        for i in range(2000)))
        for _ in range(2000):
            f = c.recv_frame()
            if f is None or f["type"] != spop.ACK:
                raise AssertionError("probe: expected an ACK, got %r" % (f,))
        after = thread_cpu(pid)
        spent = {t: after[t] - before.get(t, 0.0) for t in after if t != pid}
        owner = max(spent, key=spent.get)
        mine = by.setdefault(owner, [])
        if spent[owner] > 0 and len(mine) < per_worker:
            mine.append(c)
        else:
            c.close()
        if len(by) >= workers and sum(min(len(v), per_worker) for v in by.values()) \
                >= workers * per_worker:
            return [c for v in by.values() for c in v]
    for v in by.values():
        for c in v:
            c.close()
    raise AssertionError("after %d connections, not %d on each of %d workers: %r"
                         % (tries, per_worker, workers, {t: len(v) for t, v in by.items()}))


# ---- sequential helper ------------------------------------------------------

class Seq:
    """One SPOP connection, one decision at a time."""

    def __init__(self, addr):
        self.c = spop.Client(addr)
        self.c.handshake()
        self.sid = 0

    def decide(self, msg="check-rate", **args):
        self.sid += 1
        return self.c.decide(args, stream=self.sid, fid=1, message=msg)

    def close(self):
        self.c.close()


# ---- load clients -----------------------------------------------------------

class Record:
    __slots__ = ("sent", "acked", "vars", "phase", "client")

    def __init__(self, sent, acked, vars_, phase, client):
        self.sent, self.acked, self.vars, self.phase, self.client = sent, acked, vars_, phase, client

    @property
    def allowed(self):
        return self.vars.get("blocked") is False

    def __repr__(self):
        return "Record(sent=%.4f acked=%.4f phase=%s client=%s %r)" % (
            self.sent, self.acked, self.phase, self.client, self.vars)


class LoadClient(threading.Thread):
    """One SPOP connection driven through phases. A phase is
    (duration_s or None, kind, param):
      ("flood", depth): keep `depth` NOTIFYs in flight (pipelined);
      ("paced", per_s): one NOTIFY at a time, started every 1/per_s seconds.
    A phase with duration None lasts until stop() is called. Every ACK is
    recorded with the time just before its NOTIFY was written (`sent`) and the
    time just after the read that completed it (`acked`): the agent decided
    somewhere in [sent, acked]."""

    def __init__(self, addr, args, phases, name=0, message="check-rate", timeout=5.0,
                 client=None, reconnect=False):
        super().__init__(daemon=True)
        # reconnect: an AGENT-DISCONNECT with status 2 (the agent closes its
        # connections after its loop stalled past 0.5 s, as on a machine
        # loaded far beyond its cores) is met as HAProxy meets it: the
        # frames in flight go undecided (not recorded: the agent admitted
        # nothing for them), and a new connection goes on with the phase.
        # Counted in self.disconnects. Off: any frame but an ACK fails.
        self.addr, self.timeout, self.reconnect = addr, timeout, reconnect
        self.disconnects = 0
        self.args = list(args.items())
        self.phases = phases
        self.name_ = name
        self.message = message
        if client is None:  # else: a connection already open, handshake done
            client = spop.Client(addr, timeout=timeout)
            client.handshake()
        self.cl = client
        self.records = []
        self.error = None
        self.t0 = None
        self.go = threading.Event()
        self._halt = threading.Event()
        self.stream = 0
        self.inflight = {}
        self.phase_starts = []

    def start_at(self, t0):
        self.t0 = t0
        self.go.set()

    def stop(self):
        self._halt.set()

    def _send(self, n=1):
        data = b""
        now = time.monotonic()
        for _ in range(n):
            self.stream += 1
            data += spop.notify(self.stream, 1, [(self.message, self.args)])
            self.inflight[self.stream] = now
        self.cl.send(data)

    def _read(self, phase):
        """Block for at least one frame; record every ACK read."""
        while True:
            f, self.cl.buf = spop.decode_frame(self.cl.buf)
            if f is None:
                break
            self._ack(f, self._last_read, phase)
            return 1
        data = self.cl.sock.recv(262144)
        self._last_read = time.monotonic()
        if not data:
            raise ConnectionError("agent closed the SPOP connection")
        self.cl.buf += data
        n = 0
        while True:
            f, self.cl.buf = spop.decode_frame(self.cl.buf)
            if f is None:
                return n
            self._ack(f, self._last_read, phase)
            n += 1

    def _ack(self, f, t, phase):
        if (self.reconnect and f["type"] == spop.AGENT_DISCONNECT
                and spop.decode_kv(f["payload"]).get("status-code") == 2):
            self.disconnects += 1
            self.inflight.clear()
            try:
                self.cl.close()
            except OSError:
                pass
            self.cl = spop.Client(self.addr, timeout=self.timeout)
            self.cl.handshake()
            return
        if f["type"] != spop.ACK:
            raise AssertionError("expected ACK, got frame %r" % (f,))
        s = self.inflight.pop(f["stream"], None)
        if s is None:
            raise AssertionError("ACK for unknown stream %r" % (f,))
        self.records.append(Record(s, t, spop.decode_actions(f["payload"]), phase,
                                   self.name_))

    def run(self):
        self._last_read = 0.0
        try:
            self.go.wait()
            while time.monotonic() < self.t0:
                time.sleep(min(0.005, max(0.0, self.t0 - time.monotonic())))
            start = self.t0
            for idx, (dur, kind, param) in enumerate(self.phases):
                end = None if dur is None else start + dur
                self.phase_starts.append(time.monotonic())

                def going():
                    if self._halt.is_set():
                        return False
                    return end is None or time.monotonic() < end
                if kind == "flood":
                    while going():
                        want = param - len(self.inflight)
                        if want > 0:
                            self._send(want)
                        self._read(idx)
                    while self.inflight:
                        self._read(idx)
                elif kind == "paced":
                    nxt = time.monotonic()
                    while going():
                        now = time.monotonic()
                        if now < nxt:
                            time.sleep(min(nxt - now, 0.01))
                            continue
                        self._send(1)
                        while self.inflight:
                            self._read(idx)
                        nxt += 1.0 / param
                else:
                    raise ValueError(kind)
                if end is not None:
                    start = end
                if self._halt.is_set():
                    break
        except Exception:
            self.error = "client %s: %s" % (self.name_, traceback.format_exc())
        finally:
            try:
                self.cl.close()
            except OSError:
                pass


def run_clients(clients, lead=0.05, join_timeout=60.0):
    """Start every client at one instant; wait for the ones with a bounded
    schedule; returns all records. Raises if a client failed."""
    with_switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # keeps ACK timestamps close to the reads
    try:
        for c in clients:
            c.start()
        t0 = time.monotonic() + lead
        for c in clients:
            c.start_at(t0)
        for c in clients:
            c.join(join_timeout)
    finally:
        sys.setswitchinterval(with_switch)
    return collect(clients)


def collect(clients):
    errors = [c.error for c in clients if c.error]
    alive = [c.name_ for c in clients if c.is_alive()]
    if errors or alive:
        raise AssertionError("load clients failed: %s; still running: %s"
                             % ("\n".join(errors), alive))
    out = []
    for c in clients:
        out.extend(c.records)
    out.sort(key=lambda r: r.acked)
    return out


# ---- the bound --------------------------------------------------------------

def exact_admitted(recs, b, r):
    """What one exact bucket (full at the start) admits of these requests,
    in the order they were sent."""
    return exact_admitted_cost(recs, b, r, lambda x: 1)


def worst_across(records, b, r, t_first, t_last):
    """The worst excess over b + r*T among intervals that begin before t_first
    (an admission ACKed before it) and end after t_last, each admission
    bracketed as worst_window(rigorous=True) does: (excess, count, T)."""
    adm = sorted((x for x in records if x.allowed), key=lambda x: x.acked)
    n = len(adm)
    heads = [i for i in range(n) if adm[i].acked < t_first]
    tails = [j for j in range(n) if adm[j].acked > t_last]
    if not heads or not tails:
        return None
    # start of a window i..j: the earliest send from i on (its decisions' span)
    min_sent = [0.0] * n
    m = float("inf")
    for i in range(n - 1, -1, -1):
        m = min(m, adm[i].sent)
        min_sent[i] = m
    best_j = max(tails, key=lambda j: j - r * adm[j].acked)
    best = None
    for i in heads:
        T = adm[best_j].acked - min_sent[i]
        count = best_j - i + 1
        ex = count - (b + r * T)
        if best is None or ex > best[0]:
            best = (ex, count, T)
    return best


def worst_window(records, b, r, rigorous):
    """The worst interval for the claim "any interval of length T admits at
    most b + r*T", over admitted records sorted by ACK time.

    Windows are runs i..j of admissions in ACK order.
    rigorous=False: T = acked[j] - acked[i] (ACK timestamps only; they lag the
      real decision instants by a variable delay, so the caller adds a slack).
    rigorous=True: the decisions i..j all happened inside
      [min(sent[k] for k >= i), acked[j]] (each decision happened between its
      NOTIFY write and its ACK read), so that length bounds their real span
      from above and no slack is needed.
    Returns (excess, count, T, i, j): excess = count - (b + r*T), maximal over
    all windows (O(n) with suffix maxima of j - r*acked[j])."""
    adm = [x for x in records if x.allowed]
    adm.sort(key=lambda x: x.acked)
    n = len(adm)
    if n == 0:
        return (float("-inf"), 0, 0.0, None, None)
    a = [x.acked for x in adm]
    suf_best = [0] * n  # argmax_{j >= i} (j - r*a[j])
    suf_min_sent = [0.0] * n
    best = n - 1
    msent = adm[n - 1].sent
    for i in range(n - 1, -1, -1):
        if i - r * a[i] > best - r * a[best]:
            best = i
        suf_best[i] = best
        msent = min(msent, adm[i].sent)
        suf_min_sent[i] = msent
    worst = None
    for i in range(n):
        j = suf_best[i]
        start = suf_min_sent[i] if rigorous else a[i]
        T = a[j] - start
        count = j - i + 1
        excess = count - (b + r * T)
        if worst is None or excess > worst[0]:
            worst = (excess, count, T, i, j)
    return worst


def admitted_between(records, t1, t2):
    return sum(1 for x in records if x.allowed and t1 <= x.acked <= t2)


# ---- reported values --------------------------------------------------------

def sanity_problems(records, rules, ttl_s=1.0, allow_degraded=False):
    """Problems with the variables of the answers, as strings (at most 20).
    rules: {name: (N, period_s, burst)}: every answer must come from one of
    them."""
    probs = []

    def bad(msg, rec):
        if len(probs) < 20:
            probs.append("%s: %r" % (msg, rec.vars if hasattr(rec, "vars") else rec))
    for rec in records:
        v = rec.vars if hasattr(rec, "vars") else rec
        if not isinstance(v.get("blocked"), bool):
            bad("blocked missing or not a bool", rec)
            continue
        if v.get("degraded") is True and not allow_degraded:
            bad("degraded while Redis is up", rec)
        name = v.get("rule")
        if name not in rules:
            bad("unexpected rule", rec)
            continue
        n, period, burst = rules[name]
        missing = [k for k in ("limit", "remaining", "reset")
                   if not isinstance(v.get(k), int) or isinstance(v.get(k), bool)]
        if missing:
            bad("%s missing or not an int" % ",".join(missing), rec)
            continue
        if v["limit"] != n:
            bad("limit != %d" % n, rec)
        if v["remaining"] < 0:
            bad("remaining negative", rec)
        if v["remaining"] > max(burst, n):
            bad("remaining above the burst", rec)
        if v["reset"] < 0:
            bad("reset negative", rec)
        # full again within burst/rate (+ a lease ttl and rounding), or two
        # windows for the sliding window
        if v["reset"] > max(burst / (n / period), 2 * period) + ttl_s + 1:
            bad("reset implausibly large", rec)
        if v.get("policy") != '"%s";q=%d;w=%d' % (name, n, period):
            bad("policy", rec)
        if v.get("ratelimit") != '"%s";r=%d;t=%d' % (name, v["remaining"], v["reset"]):
            bad("ratelimit inconsistent with remaining/reset", rec)
        if v["blocked"]:
            ra = v.get("retry_after")
            if not isinstance(ra, int) or ra < 1:
                bad("blocked without retry_after >= 1", rec)
            elif ra > 2 * period + ttl_s + 1:
                bad("retry_after implausibly large", rec)
            if v["remaining"] != 0:
                bad("blocked with remaining != 0", rec)
        else:
            if "retry_after" in v:
                bad("retry_after on an allowed answer", rec)
    return probs


# ---- Redis MONITOR ----------------------------------------------------------

MON_RE = re.compile(r'^\+?(\d+\.\d+) \[(\d+) ([^\]]+)\] "([^"]*)"')


class Monitor:
    """A MONITOR connection read by a thread. mark() sends a unique ECHO from
    another connection and waits until MONITOR has shown it, so the lines
    between two marks are exactly the commands Redis ran in between."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(b"MONITOR\r\n")
        self.lines = []
        self.cond = threading.Condition()
        self.buf = b""
        first = self._line_blocking()
        if first != "+OK":
            raise AssertionError("MONITOR answered %r" % first)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _line_blocking(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("MONITOR connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode(errors="replace")

    def _loop(self):
        self.sock.settimeout(None)
        try:
            while True:
                line = self._line_blocking()
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()
        except OSError:
            pass
        except ConnectionError:
            pass

    def mark(self, timeout=30.0):
        """Index just past the marker line."""
        tag = "spoa-test-mark-" + uuid.uuid4().hex
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(("ECHO %s\r\n" % tag).encode())
            s.recv(1024)
        end = time.monotonic() + timeout
        start = 0
        with self.cond:
            while True:
                for i in range(start, len(self.lines)):
                    if tag in self.lines[i]:
                        return i + 1
                start = len(self.lines)
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("MONITOR never showed the marker")
                self.cond.wait(left)

    def commands(self, i, j):
        """Commands between two marks sent by clients (not by Lua scripts,
        which MONITOR shows as client 'lua'), as (client, COMMAND) pairs;
        the closing marker's ECHO is excluded."""
        with self.cond:
            lines = self.lines[i:j - 1]
        out = []
        for ln in lines:
            m = MON_RE.match(ln)
            if not m:
                continue
            client, cmd = m.group(3), m.group(4).upper()
            if client == "lua":
                continue
            out.append((client, cmd))
        return out

    def script_ops(self, i, j):
        """Script operations between two marks: an EVALSHA (or FCALL) carries
        as many as its numkeys (the batch script runs one per key)."""
        with self.cond:
            lines = self.lines[i:j - 1]
        n = 0
        for ln in lines:
            m = MON_RE.match(ln)
            if not m or m.group(3) == "lua" or m.group(4).upper() not in ("EVALSHA", "FCALL"):
                continue
            args = re.findall(r'"((?:[^"\\]|\\.)*)"', ln)
            n += int(args[2]) if len(args) > 2 and args[2].isdigit() else 1
        return n

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# ---- a minimal RESP client (for calling the Lua scripts directly) -----------

class Resp:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.sock.makefile("rb")

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._reply()

    def _reply(self):
        line = self.f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError("bad RESP line %r" % line)

    def close(self):
        self.f.close()
        self.sock.close()


# ---- replaying a schedule ---------------------------------------------------

class Replayer(threading.Thread):
    """One SPOP connection to one agent: sends each request of its schedule
    at t0 + t (pipelined: never waits for an ACK), a second thread reads the
    ACKs. Records when each request really left and whether it was allowed."""

    def __init__(self, addr, reqs):
        super().__init__(daemon=True)
        self.reqs = reqs
        self.cl = spop.Client(addr, timeout=10)
        self.cl.handshake()
        self.sent = [None] * len(reqs)
        self.acked = [None] * len(reqs)
        self.answers = {}
        self.error = None
        self.t0 = None
        self.reader = threading.Thread(target=self.read, daemon=True)

    def read(self):
        try:
            buf = b""
            while len(self.answers) < len(self.reqs):
                data = self.cl.sock.recv(65536)
                if not data:
                    raise ConnectionError("agent closed the connection")
                buf += data
                while True:
                    f, buf = spop.decode_frame(buf)
                    if f is None:
                        break
                    assert f["type"] == spop.ACK, f
                    self.answers[f["stream"]] = spop.decode_actions(f["payload"])
                    self.acked[f["stream"] - 1] = time.monotonic()
        except Exception as e:  # reported by the test
            self.error = "reader: %r" % e

    def run(self):
        self.reader.start()
        try:
            for i, (t, key, _) in enumerate(self.reqs):
                delay = self.t0 + t - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self.sent[i] = time.monotonic()
                self.cl.send(spop.notify(i + 1, 1, [("check-rate", [("key", "k%d" % key)])]))
        except Exception as e:
            self.error = "sender: %r" % e
        self.reader.join(30)
        self.cl.close()
