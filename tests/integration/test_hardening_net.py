# SPDX-License-Identifier: Apache-2.0
"""What a hostile peer, a full fd table or a slow DNS can do to the agent's
listeners and its Redis link (issue 11, network part), each against the real
agent on loopback sockets, with a real Redis where one is involved:

- out of file descriptors (the agent under `prlimit --nofile`), neither the
  SPOP nor the stats listener spins: CPU stays low, one log line, and once
  connections close a new HELLO is answered;
- the stats listener: `stats_allow` (reloadable), a connection cap that keeps
  fds for SPOP, an idle timeout;
- SPOP: `max_connections`, the HELLO timeout, the cap on NOTIFYs waiting for
  Redis per connection (backpressure, every frame still answered);
- a peer that half-closes still gets the answers it is owed, within a bound;
- Redis host names are looked up off the main loop: with a DNS that takes
  seconds (an LD_PRELOAD shim), /metrics and SPOP answers stay prompt.

Every agent must exit 0 on SIGTERM (checked at cleanup)."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import spop
from harness import (AGENT, Agent, Proc, Redis, free_port, raw_http, stop_cleanly, wait_for,
                     wait_port)

RULES = """
[rule:api]
key = key
rate = 1000000/1s
"""

# Every decision is one script call: NOTIFYs wait for Redis while it is stopped.
REDIS_RULES = """
[rule:exact]
key = key
rate = 1000000/1s
lease = off
"""

HELLO_TIMEOUT_S = 5.0  # server_conn.c
DRAIN_TIMEOUT_S = 5.0  # server_conn.c
STATS_TIMEOUT_S = 5.0  # httpd.c
WAITING_CAP = 256      # server_conn.c MAX_WAITING_PER_CONN


def cpu_seconds(pid):
    """utime + stime of the process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peer_closed(sock, timeout):
    """True when the peer closes (EOF or reset) within timeout, after any
    data it sends first; False when it is still open at the deadline."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        if not data:
            return True


def connect(port, n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def close_all(socks):
    for s in socks:
        s.close()


def http_get(port, path="/metrics", timeout=5.0):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return r.read().decode()


def sample(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


class AgentUnder(Agent):
    """The harness's agent, started through a command prefix (prlimit) and
    with extra environment (LD_PRELOAD)."""

    def __init__(self, ini, prefix=(), env=None, workers=2, extra_agent="", wait=True):
        self.port = free_port()
        self.stats_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="spoa-test-")
        self.ini = os.path.join(self.dir, "agent.ini")
        self.extra_agent = extra_agent
        self.workers = workers  # the harness's rewrite() keeps them at a reload
        with open(self.ini, "w") as f:
            f.write(self.head(workers) + extra_agent + ini)
        full_env = dict(os.environ)
        full_env.update(env or {})
        Proc.__init__(self, list(prefix) + [AGENT, "-c", self.ini], "agent", env=full_env)
        if wait:
            wait_port(self.port, proc=self.p)
            wait_port(self.stats_port, proc=self.p)

    def head(self, workers=2):
        return ("[agent]\nlisten = 127.0.0.1:%d\nworkers = %d\nstats = 127.0.0.1:%d\n"
                % (self.port, workers, self.stats_port))

    def reload(self, ini, extra_agent):
        """SIGHUP with a new file; True once the agent says it reloaded (the
        workers take the new config on their next wake-up)."""
        before = self.output().count('"configuration reloaded"')
        self.rewrite(ini, extra_agent)
        self.p.send_signal(signal.SIGHUP)
        ok = wait_for(lambda: self.output().count('"configuration reloaded"') > before)
        time.sleep(0.05)
        return ok

    def metric_or_none(self, name, **labels):
        try:
            return self.metric(name, **labels)
        except OSError:
            return None


class Case(unittest.TestCase):
    def start(self, ini=RULES, **kw):
        a = AgentUnder(ini, **kw)
        stop_cleanly(self, a)
        return a

    def start_redis(self):
        r = Redis()
        self.addCleanup(r.kill)
        return r

    def handshake_ok(self, agent, timeout=10.0):
        """A new connection gets its AGENT-HELLO (retried until timeout)."""
        def once():
            try:
                c = spop.Client(agent.addr, timeout=2)
                try:
                    return c.handshake()["version"] == "2.0"
                finally:
                    c.close()
            except (OSError, AssertionError):
                return False
        return wait_for(once, timeout=timeout, step=0.1)


# ---- 1. out of file descriptors ------------------------------------------------


class OutOfFds(Case):
    def test_spop_and_stats_listeners_do_not_spin(self):
        """nofile=40 and 80 connections: the SPOP listener runs out of fds.
        Then connections to the stats listener meet the same EMFILE. Over 2 s
        the agent uses little CPU and logs the pause once; when the
        connections close, HELLOs are answered and /metrics counts pauses."""
        a = self.start(prefix=["prlimit", "--nofile=40:40"])
        spop_socks = connect(a.port, 80)
        self.addCleanup(close_all, spop_socks)
        # the agent has taken what it can: accept paused
        self.assertTrue(wait_for(lambda: '"cannot accept connections' in a.output(), 10),
                        a.output()[-2000:])
        stats_socks = connect(a.stats_port, 20)
        self.addCleanup(close_all, stats_socks)
        time.sleep(0.2)  # let every worker meet the full table
        c0 = cpu_seconds(a.p.pid)
        t0 = time.monotonic()
        time.sleep(2.0)
        used = cpu_seconds(a.p.pid) - c0
        took = time.monotonic() - t0
        # before the fix: ~2 s of CPU in 2 s, ~400,000 log lines
        self.assertLess(used, 0.3 * took, "agent spins: %.2f s CPU in %.2f s" % (used, took))
        lines = [ln for ln in a.output().splitlines() if "accept" in ln]
        self.assertLessEqual(len(lines), 3, "\n".join(lines[:10]))
        self.assertIn("Too many open files", lines[0])

        close_all(spop_socks)
        close_all(stats_socks)
        self.assertTrue(self.handshake_ok(a), "no AGENT-HELLO after the connections closed:\n"
                        + a.output()[-2000:])
        c = spop.Client(a.addr)
        self.addCleanup(c.close)
        c.handshake()
        self.assertIs(c.decide({"key": "k"})["blocked"], False)
        self.assertTrue(wait_for(lambda: a.metric_or_none("spoa_ratelimit_connections")
                                 is not None, 10), "/metrics never answered")
        m = a.metrics()
        self.assertGreaterEqual(sample(m, 'spoa_ratelimit_accept_pauses_total{listener="spop"}'),
                                1)
        self.assertGreaterEqual(sample(m, 'spoa_ratelimit_accept_pauses_total{listener="stats"}'),
                                1)


# ---- 2. the stats listener -----------------------------------------------------------


class StatsListener(Case):
    def test_stats_allow_refuses_and_reloads(self):
        """A peer outside stats_allow is closed at accept, before any byte of
        /metrics or /top; a reload that lets it in applies to the next
        connection."""
        a = self.start(extra_agent="stats_allow = 10.0.0.0/8, ::1/128\n", wait=False)
        # not wait_port on the stats port: that connection would be refused too
        self.assertTrue(wait_for(lambda: '"started"' in a.output() or a.p.poll() is not None),
                        a.output())
        for path in ("/metrics", "/top"):
            data = raw_http(a.stats_port, "GET", path)
            self.assertEqual(data, b"", "%s answered a refused peer: %r" % (path, data[:200]))
        self.assertIn('"stats peer refused by stats_allow" peer=127.0.0.1', a.output())
        # SPOP is not concerned
        self.assertTrue(self.handshake_ok(a, timeout=5))

        self.assertTrue(a.reload(RULES, "stats_allow = 127.0.0.1/32\n"), a.output()[-2000:])
        m = a.metrics()
        self.assertEqual(
            sample(m, 'spoa_ratelimit_connections_refused_total{listener="stats",reason="allow"}'),
            2)
        self.assertIn('"rules"', a.get("/top"))

    def test_idle_connections_cannot_starve_spop(self):
        """nofile=64 and 100 idle connections to the stats port: the stats
        listener keeps at most 64/8 = 8 of them (each new one closes the
        oldest that has sent no request), so HAProxy's next HELLO is
        answered; the last 8 are closed by the idle timeout, after which
        /metrics answers again."""
        a = self.start(prefix=["prlimit", "--nofile=64:64"])
        socks = connect(a.stats_port, 100)
        self.addCleanup(close_all, socks)
        t0 = time.monotonic()
        # before the fix the stats connections held every fd until their timeout
        self.assertTrue(self.handshake_ok(a, timeout=2), a.output()[-2000:])

        # the agent closes the ones it refused at once, and the 8 it kept when
        # they have been idle for the timeout
        closed = [peer_closed(s, HELLO_TIMEOUT_S + 10) for s in socks]
        took = time.monotonic() - t0
        self.assertEqual(closed.count(False), 0, "idle stats connections left open")
        self.assertGreaterEqual(took, STATS_TIMEOUT_S - 0.5, "kept ones closed too early")
        self.assertTrue(wait_for(lambda: a.metric_or_none("spoa_ratelimit_connections")
                                 is not None, 5), "/metrics does not answer after the timeout")
        m = a.metrics()
        refused = sample(m, 'spoa_ratelimit_connections_refused_total{listener="stats",'
                            'reason="max_connections"}')
        evicted = sample(m, 'spoa_ratelimit_connections_refused_total{listener="stats",'
                            'reason="handshake_evicted"}')
        timeouts = sample(m, 'spoa_ratelimit_connection_timeouts_total{listener="stats",'
                             'phase="request"}')
        # each connection past the 8th closed the oldest idle one (none had
        # sent a request): nothing was refused outright (92, and one more
        # when a scrape got in while the last 8 were held)
        self.assertIn(evicted, (92, 93), m)
        self.assertEqual(refused, 0, m)
        self.assertEqual(timeouts, 8, m)
        self.assertIn('"stats connections closed before a whole request to admit new ones" '
                      'max=8 peer=127.0.0.1', a.output())


# ---- 3. SPOP limits ------------------------------------------------------------------


class SpopLimits(Case):
    def test_max_connections(self):
        """Past max_connections a new connection is closed at accept and
        counted; one closing makes room; a reload raises the cap."""
        a = self.start(extra_agent="max_connections = 3\n")
        # the harness's own probe connection must be gone before counting
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_connections") == 0))
        clients = []
        for _ in range(3):
            c = spop.Client(a.addr)
            c.handshake()
            clients.append(c)
        self.addCleanup(lambda: [c.close() for c in clients])
        extra = socket.create_connection(a.addr, timeout=5)
        self.assertTrue(peer_closed(extra, 5), "4th connection not closed")
        extra.close()
        for c in clients:  # the others are untouched
            self.assertIs(c.decide({"key": "x"})["blocked"], False)
        self.assertEqual(a.metric("spoa_ratelimit_connections_refused_total",
                                  listener="spop", reason="max_connections"), 1)
        self.assertIn('"connection refused: max_connections reached" max_connections=3',
                      a.output())

        clients.pop().close()
        self.assertTrue(self.handshake_ok(a, timeout=5), "no room after a close")
        self.assertTrue(a.reload(RULES, "max_connections = 5\n"))
        more = [spop.Client(a.addr) for _ in range(2)]
        clients.extend(more)
        for c in more:
            c.handshake()

    def test_hello_timeout(self):
        """No HAPROXY-HELLO within 5 s (nothing, or half a frame): an
        AGENT-DISCONNECT with status 2 (timeout), then close. A connection past
        its HELLO is not concerned, however long it stays idle."""
        a = self.start()
        ready = spop.Client(a.addr)
        self.addCleanup(ready.close)
        ready.handshake()
        silent = spop.Client(a.addr)
        partial = spop.Client(a.addr)
        self.addCleanup(silent.close)
        self.addCleanup(partial.close)
        partial.send(spop.hello()[:10])
        t0 = time.monotonic()
        for c in (silent, partial):
            c.sock.settimeout(HELLO_TIMEOUT_S + 10)
            f = c.recv_frame()
            self.assertIsNotNone(f, "closed without AGENT-DISCONNECT")
            self.assertEqual(f["type"], spop.AGENT_DISCONNECT)
            self.assertEqual(spop.decode_kv(f["payload"])["status-code"], 2)
            self.assertTrue(peer_closed(c.sock, 5))
        self.assertGreaterEqual(time.monotonic() - t0, HELLO_TIMEOUT_S - 0.5)
        self.assertIs(ready.decide({"key": "k"})["blocked"], False)
        self.assertEqual(a.metric("spoa_ratelimit_connection_timeouts_total",
                                  listener="spop", phase="hello"), 2)

    def test_waiting_notify_cap(self):
        """Redis stopped, 300 pipelined NOTIFYs on one connection: 256 wait
        for Redis, the rest stay unread (no DISCONNECT); once Redis runs
        again every one of the 300 is answered, from Redis."""
        r = self.start_redis()
        a = self.start("[redis]\nurl = redis://127.0.0.1:%d/0\ntimeout = 20s\n" % r.port
                       + REDIS_RULES)
        self.assertTrue(wait_for(lambda: a.metric_or_none("spoa_ratelimit_redis_up") == 1, 10))
        c = spop.Client(a.addr, timeout=30)
        self.addCleanup(c.close)
        c.handshake()
        self.assertIs(c.decide({"key": "warm"}, stream=1, fid=1).get("degraded"), None)

        os.kill(r.p.pid, signal.SIGSTOP)
        try:
            n = 300
            c.send(b"".join(spop.notify(100 + i, 1, [("check-rate", [("key", "k%d" % i)])])
                            for i in range(n)))
            self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_notify_read_pauses_total")
                                     >= 1, 10), "never paused at the cap")
            self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_notifies_waiting")
                                     == WAITING_CAP, 10))
            time.sleep(0.3)  # nothing more is read while paused
            self.assertEqual(a.metric("spoa_ratelimit_notifies_waiting"), WAITING_CAP)
        finally:
            os.kill(r.p.pid, signal.SIGCONT)
        seen = set()
        for _ in range(n):
            f = c.recv_frame()
            self.assertIsNotNone(f, "closed after %d answers" % len(seen))
            self.assertEqual(f["type"], spop.ACK, f)
            acts = spop.decode_actions(f["payload"])
            self.assertIs(acts["blocked"], False)
            self.assertNotIn("degraded", acts)
            seen.add(f["stream"])
        self.assertEqual(seen, set(range(100, 100 + n)))
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_notifies_waiting") == 0, 5))
        self.assertEqual(a.metric("spoa_ratelimit_protocol_errors_total", status="13"), 0)


# ---- 13. half-closed peers -----------------------------------------------------------


class HalfClose(Case):
    def setUp(self):
        self.redis = self.start_redis()

    def agent(self, timeout):
        a = self.start("[redis]\nurl = redis://127.0.0.1:%d/0\ntimeout = %s\n"
                       % (self.redis.port, timeout) + REDIS_RULES)
        self.assertTrue(wait_for(lambda: a.metric_or_none("spoa_ratelimit_redis_up") == 1, 10))
        return a

    def test_answers_after_half_close(self):
        """NOTIFYs waiting for Redis when HAProxy shuts down its sending side
        are still answered; then the agent closes."""
        a = self.agent("20s")
        c = spop.Client(a.addr, timeout=20)
        self.addCleanup(c.close)
        c.handshake()
        os.kill(self.redis.p.pid, signal.SIGSTOP)
        try:
            c.send(b"".join(spop.notify(i, 1, [("check-rate", [("key", "h%d" % i)])])
                            for i in range(1, 4)))
            self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_notifies_waiting") == 3))
            c.sock.shutdown(socket.SHUT_WR)
            time.sleep(0.5)  # the agent reads the EOF while the answers still wait
        finally:
            os.kill(self.redis.p.pid, signal.SIGCONT)
        got = set()
        for _ in range(3):
            f = c.recv_frame()
            self.assertIsNotNone(f, "closed with answers owed (got %r)" % got)
            self.assertEqual(f["type"], spop.ACK)
            self.assertNotIn("degraded", spop.decode_actions(f["payload"]))
            got.add(f["stream"])
        self.assertEqual(got, {1, 2, 3})
        self.assertTrue(peer_closed(c.sock, 5), "not closed once drained")

    def test_drain_is_bounded(self):
        """Answers that do not come within 5 s of the EOF are given up: the
        connection closes anyway, counted."""
        a = self.agent("30s")
        c = spop.Client(a.addr, timeout=20)
        self.addCleanup(c.close)
        c.handshake()
        os.kill(self.redis.p.pid, signal.SIGSTOP)
        try:
            c.send(spop.notify(1, 1, [("check-rate", [("key", "d1")])]))
            self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_notifies_waiting") == 1))
            t0 = time.monotonic()
            c.sock.shutdown(socket.SHUT_WR)
            self.assertTrue(peer_closed(c.sock, DRAIN_TIMEOUT_S + 10), "never closed")
            self.assertGreaterEqual(time.monotonic() - t0, DRAIN_TIMEOUT_S - 0.5)
            self.assertEqual(a.metric("spoa_ratelimit_connection_timeouts_total",
                                      listener="spop", phase="drain"), 1)
        finally:
            os.kill(self.redis.p.pid, signal.SIGCONT)


# ---- 4. slow DNS -----------------------------------------------------------------------

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* getaddrinfo for a name ending in .slow.test: wait SLOW_DNS_MS, log the
 * name to SLOW_DNS_LOG, then answer for 127.0.0.1. Any other name: libc. */
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **) =
        (int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **))
            dlsym(RTLD_NEXT, "getaddrinfo");
    size_t n = node ? strlen(node) : 0;

    if (n > 10 && strcmp(node + n - 10, ".slow.test") == 0) {
        const char *ms = getenv("SLOW_DNS_MS"), *log = getenv("SLOW_DNS_LOG");
        long v = ms ? atol(ms) : 2000;
        struct timespec ts = {v / 1000, (v % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (log) {
            int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
            char line[300];
            int len = snprintf(line, sizeof(line), "%s\n", node);
            if (fd >= 0) {
                if (write(fd, line, (size_t)len) < 0) {
                }
                close(fd);
            }
        }
        node = "127.0.0.1";
    }
    return real(node, service, hints, res);
}
"""


class SlowDns(Case):
    DELAY_MS = 2000
    # A loop that waited for a lookup would stall for most of DELAY_MS; a
    # loaded machine (ASan, CPU hogs) can take a few hundred ms to answer
    # anything. Half the delay tells the two apart on any machine.
    STALL_S = DELAY_MS / 2000.0

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="slowdns-")
        src = os.path.join(cls.dir, "slowdns.c")
        with open(src, "w") as f:
            f.write(SHIM)
        cls.lib = os.path.join(cls.dir, "slowdns.so")
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", cls.lib, src, "-ldl"],
                       check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def env(self):
        self.log = os.path.join(self.dir, "lookups-%d.log" % free_port())
        asan = os.environ.get("ASAN_OPTIONS", "")
        return {"LD_PRELOAD": self.lib, "SLOW_DNS_MS": str(self.DELAY_MS),
                "SLOW_DNS_LOG": self.log,
                # a sanitizer build wants its runtime first; the shim is harmless
                "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}

    def lookups(self):
        try:
            with open(self.log) as f:
                return f.read().split()
        except FileNotFoundError:
            return []

    def slowest_scrape(self, agent, seconds):
        """The longest /metrics round trip over a period, polling."""
        worst = 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.monotonic()
            http_get(agent.stats_port, timeout=10)
            worst = max(worst, time.monotonic() - t)
            time.sleep(0.05)
        return worst

    def decide_fast(self, agent):
        c = spop.Client(agent.addr)
        try:
            c.handshake()
            t = time.monotonic()
            acts = c.decide({"key": "dns"})
            return time.monotonic() - t, acts
        finally:
            c.close()

    def test_url_name_looked_up_off_the_loop(self):
        """[redis] url with a name the DNS takes 2 s to answer: at start and
        at every reconnect the main loop keeps serving (/metrics, fallback
        answers); the agent connects once the answer is in."""
        r = self.start_redis()
        a = self.start("[redis]\nurl = redis://redis.slow.test:%d/0\ntimeout = 100ms\n"
                       % r.port + REDIS_RULES, env=self.env())
        # the lookup is under way: the loop answers, SPOP gets fallback answers
        t = time.monotonic()
        m = http_get(a.stats_port)
        self.assertLess(time.monotonic() - t, self.STALL_S)
        self.assertEqual(sample(m, "spoa_ratelimit_redis_up"), 0, "lookup not under way")
        took, acts = self.decide_fast(a)
        self.assertLess(took, self.STALL_S)
        self.assertIs(acts["blocked"], False)
        self.assertIs(acts.get("degraded"), True)
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 1, 15),
                        a.output()[-2000:])
        self.assertEqual(self.lookups(), ["redis.slow.test"])
        self.assertNotIn("degraded", self.decide_fast(a)[1])

        # Redis restarts: every reconnect looks the name up again (a moved
        # record is followed), none of them stalls the loop
        port = r.port
        r.kill()
        worst = self.slowest_scrape(a, 3.0)
        self.assertLess(worst, self.STALL_S, "main loop stalled %.2f s during reconnects" % worst)
        self.assertGreaterEqual(len(self.lookups()), 2)
        r2 = Redis(port)
        self.addCleanup(r2.kill)
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 1, 15),
                        a.output()[-2000:])
        self.assertNotIn("degraded", self.decide_fast(a)[1])

    def test_sentinel_name_looked_up_off_the_loop(self):
        """[redis] sentinel with a slow name: the agent re-asks the Sentinel
        every second, each time through a 2 s lookup, and the main loop never
        waits for one."""
        d = tempfile.mkdtemp(prefix="slowdns-sentinel-")
        self.addCleanup(shutil.rmtree, d, True)
        r = self.start_redis()
        sport = free_port()
        conf = os.path.join(d, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n" % (sport, d, r.port))
        sentinel = Proc(["redis-server", conf, "--sentinel"], "sentinel", cwd=d)
        self.addCleanup(sentinel.kill)
        wait_port(sport, proc=sentinel.p)
        a = self.start("[redis]\nsentinel = sentinel.slow.test:%d\nmaster = mymaster\n"
                       "timeout = 100ms\n" % sport + REDIS_RULES, env=self.env())
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 1, 15),
                        a.output()[-2000:])
        worst = self.slowest_scrape(a, 3.0)
        self.assertLess(worst, self.STALL_S, "main loop stalled %.2f s" % worst)
        self.assertTrue(wait_for(lambda: len(self.lookups()) >= 2, 10), self.lookups())
        self.assertTrue(all(n == "sentinel.slow.test" for n in self.lookups()))
        self.assertNotIn("degraded", self.decide_fast(a)[1])


if __name__ == "__main__":
    unittest.main()
