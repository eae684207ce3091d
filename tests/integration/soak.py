# SPDX-License-Identifier: Apache-2.0
"""`make soak`: a real HAProxy running the shipped kit, three agents and one
Redis, under steady traffic, for SOAK_S seconds (600 by default), while Redis
is killed and restarted, stalled (SIGSTOP/SIGCONT), HAProxy reloaded (SIGUSR2
to its master), the agents' SPOP ports flooded with connections that never
finish their HELLO, and every agent sent SIGHUP every 10 s.

  python3 soak.py [AGENT [SECONDS]]      (AGENT also from $AGENT)

Traffic: wrk with soak_traffic.lua (hot, warm and cold API keys and client
IPs, SOAK_RPS requests/s in all) and, beside it, this program's own client on
a few bound-check keys, which records every response's status and times.
Checks, each printed as it is decided, then one summary line; exit 1 if any
fails:
  - no agent exits during the run, and each exits 0 on SIGTERM at the end;
  - each agent's RSS at the end is less than 10% above its RSS at the end of
    the warm-up (the first 20% of the run, at most 60 s, ended at the first
    calm moment after that and after one of each event: the events come round
    from the first second, so the memory a first outage, reload or flood takes
    is in the warm-up);
  - each agent's fd count returns to what it was before HAProxy started, once
    traffic, flood and HAProxy are gone (waited for, with a deadline);
  - the bound b + r*T, for every bound-check key and window away from the
    Redis outages (soak_check.up_bound, which says why it needs no slack);
  - during each Redis outage, admissions within what the leases held and the
    agents' backstop buckets allow (soak_check.down_bound);
  - no 5xx and no connection error, at wrk and at the client, and fewer than
    1% of the answers without an agent's decision (HAProxy failing open);
  - every SIGHUP gave a reload, and none failed.

Settings (environment; a run shorter than 300 s, as run-tests' minute, has
the second figure): SOAK_S, SOAK_RPS (400), SOAK_FLOOD (connections of the
flood over the three agents: 2000), SOAK_FLOOD_S (15; 3), SOAK_FLOOD_RATE
(new flood connections a second, 1000), SOAK_SHARE ([fallback] share, 0.1),
SOAK_REDIS_TIMEOUT (100ms), SOAK_DOWN_S and SOAK_STALL_S (3; 1.5), SOAK_GAP_S
(calm between two events: 4; 1.5), SOAK_EVENTS (which events come round:
flood,kill,stall,reload), SOAK_HAPROXY (the binary; default the newest HAProxy
that haproxies.py finds), SOAK_AGENT_EXTRA (more [agent] lines, e.g.
'max_connections = 512').

The flood is 2,000 connections over the three agents (renewed as the agents
close them): connections in handshake are capped ([agent] max_handshakes, 128
by default, the oldest closed to admit a new one) and one that has not
finished its HELLO holds a 1 KB read buffer, not a whole frame's 16 KB (with
16 KB each, glibc's per-thread arenas kept the pages a flood touched and RSS
crept up for minutes after each flood).

RSS: an agent is a 5 MB process, and a minute's run ends before its arenas
settle; growth fails the run when it is both over 10 % and over 1 MB
(RSS_GROWTH_FLOOR_KB): a leak of even 40 bytes a request (27,000 requests a
minute) or of a buffer per flood connection crosses both. Each agent's end is
held against the largest RSS any agent had after the warm-up: the three do
the same work, and one that HAProxy 2.6 fed little at first catches up with
the others later."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fleet  # noqa: E402
import haproxies  # noqa: E402
import harness  # noqa: E402
from soak_check import Rec, backstop_burst, down_bound, up_bound  # noqa: E402

AGENTS = 3
SIGHUP_EVERY_S = 10.0
RSS_GROWTH_MAX = 0.10
RSS_GROWTH_FLOOR_KB = 1024  # growth below this never fails (see the top)
# HAProxy lets a request pass when no agent answers within `timeout processing`
# (150 ms in the kit): a few may on a loaded machine; more means the agents
# were not deciding, and the bound checks would see nothing.
UNAVAILABLE_MAX = 0.01
TTL_S = 1.0  # [lease] ttl of the soak's agents (fleet.redis_ini's default)
# The bound-check keys: the kit's per-customer rule (plan "custom", the rate
# from limits.map), each sent by CLIENT_THREADS threads at `rps` in all, over
# its limit so that the bound is what decides.
BOUND_KEYS = [  # key, limits.map value, N, period s, burst, rps
    ("soak-bound-1", "20/1s", 20, 1.0, 20, 60.0),
    ("soak-bound-2", "100/10s", 100, 10.0, 100, 30.0),
]
CLIENT_THREADS = 3
BOUND_RULE = "api-key-custom"


def env_f(name, default):
    return float(os.environ.get(name, default))


def now():
    return time.monotonic()


def wait_for(pred, timeout, step=0.1):
    end = now() + timeout
    while True:
        v = pred()
        if v or now() >= end:
            return v
        time.sleep(step)


def say(t0, msg):
    print("soak: %6.1f s  %s" % (now() - t0, msg), flush=True)


# ---- set-up ---------------------------------------------------------------------

def agent_ini(redis_port, share, timeout):
    """The kit's ratelimit.ini rules with the soak's [redis], [lease] and
    [fallback] (share set explicitly: its default may change)."""
    with open(os.path.join(harness.TOP, "haproxy", "ratelimit.ini")) as f:
        lines = f.read().splitlines()
    keep, section = [], None
    for ln in lines:
        m = re.match(r"\s*\[([^\]]+)\]\s*$", ln)
        if m:
            section = m.group(1)
        if section not in ("agent", "lease", "fallback"):
            keep.append(ln)
    return fleet.redis_ini(redis_port, timeout=timeout, share=str(share)) + "\n".join(keep) + "\n"


def kit_edits(agents):
    """The kit's haproxy.cfg for the soak: the three agents in its backend,
    the client IP taken from X-Forwarded-For (so that wrk can vary it), the
    per-request log lines off (notice: warnings such as a server going down
    stay), and idle keep-alive connections kept through a reload (below)."""
    def servers(cfg):
        # agent1 and agent2 are the kit's own lines (KitHAProxy's agent ports);
        # the others get a line of their own, with the kit's default-server
        line = '    server agent2 "${RL_AGENT2_ADDR}"\n'
        assert line in cfg
        more = "".join("    server agent%d 127.0.0.1:%d\n" % (i + 3, a.port)
                       for i, a in enumerate(agents[2:]))
        return cfg.replace(line, line + more)

    def set_src(cfg):
        anchor = "    http-request set-var(txn.plan)"
        assert anchor in cfg
        return cfg.replace(anchor, "    http-request set-src hdr(x-forwarded-for) if "
                           "{ req.hdr(x-forwarded-for) -m found }\n" + anchor, 1)

    def quiet(cfg):
        old = "log stderr format short local0 info"
        assert old in cfg
        return cfg.replace(old, "log stderr format short local0 notice")

    def idle_close(cfg):
        # At a reload the old worker closes its idle keep-alive connections, and
        # a request sent on one as it closes gets no answer (wrk: a read error).
        # With this option it answers the next request on each, with
        # "Connection: close", instead: what an operator reloading under load
        # sets, so that the soak counts what the SPOE path loses, not that race.
        anchor = "defaults\n    mode http\n"
        assert anchor in cfg
        return cfg.replace(anchor, anchor + "    option idle-close-on-response\n", 1)
    return [servers, set_src, quiet, idle_close]


def kit_maps():
    out = {}
    for name, extra in (("plans.map", "".join("%s custom\n" % k[0] for k in BOUND_KEYS)),
                        ("limits.map", "".join("%s %s\n" % (k[0], k[1]) for k in BOUND_KEYS))):
        with open(os.path.join(harness.TOP, "haproxy", name)) as f:
            out[name] = f.read().rstrip("\n") + "\n" + extra
    return out


def pick_haproxy():
    path = os.environ.get("SOAK_HAPROXY")
    if path:
        return haproxies.Build(path, haproxies.version_of(path))
    builds = haproxies.survey()[0]
    if not builds:
        raise RuntimeError("no HAProxy found: " + haproxies.describe())
    return max(builds, key=lambda b: b.version)


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


# ---- the bound-check client -------------------------------------------------------

class BoundClient(threading.Thread):
    """Requests for one key at `rps`, one at a time on a keep-alive
    connection, each recorded as a soak_check.Rec; a connection error is
    recorded with its time and the connection made again."""

    def __init__(self, port, key, rps, stop):
        super().__init__(daemon=True)
        self.port, self.key, self.rps, self.halt = port, key, rps, stop
        self.records, self.errors, self.fatal = [], [], None

    def run(self):
        conn, nxt = None, now()
        try:
            while not self.halt.is_set():
                t = now()
                if t < nxt:
                    time.sleep(min(nxt - t, 0.05))
                    continue
                nxt = max(nxt + 1.0 / self.rps, t)
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                sent = now()
                try:
                    conn.request("GET", "/api/items", headers={"X-Api-Key": self.key,
                                                               "X-Forwarded-For": "10.9.9.9"})
                    resp = conn.getresponse()
                    resp.read()
                    acked = now()
                except (OSError, http.client.HTTPException) as e:
                    self.errors.append((sent, now(), repr(e)))
                    conn.close()
                    conn = None
                    continue
                self.records.append(Rec(sent, acked, resp.status,
                                        (resp.getheader("RateLimit-Status") or "").strip()))
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
        except Exception as e:  # reported as a failure
            self.fatal = repr(e)
        finally:
            if conn is not None:
                conn.close()


# ---- watching the agents ---------------------------------------------------------

class Watch(threading.Thread):
    """Every second: each agent alive?, its RSS and fd count; every 10 s a
    SIGHUP to every agent."""

    def __init__(self, agents, t0, stop):
        super().__init__(daemon=True)
        self.agents, self.t0, self.halt = agents, t0, stop
        self.samples = []  # (t, [rss kB], [fds])
        self.exits = {}    # agent index -> (t, returncode)
        self.sighups = 0

    def sample(self):
        rss, fds = [], []
        for i, a in enumerate(self.agents):
            if a.p.poll() is not None:
                self.exits.setdefault(i, (now() - self.t0, a.p.returncode))
                rss.append(None)
                fds.append(None)
                continue
            try:
                rss.append(harness.rss_kb(a.p.pid))
                fds.append(fd_count(a.p.pid))
            except OSError:
                rss.append(None)
                fds.append(None)
        self.samples.append((now(), rss, fds))

    def run(self):
        next_hup = self.t0 + SIGHUP_EVERY_S
        while not self.halt.wait(1.0):
            self.sample()
            if now() >= next_hup:
                next_hup += SIGHUP_EVERY_S
                for a in self.agents:
                    a.kill_sig(signal.SIGHUP)
                self.sighups += 1


# ---- the soak ---------------------------------------------------------------------

class Soak:
    def __init__(self, seconds):
        self.seconds = seconds
        self.rps = env_f("SOAK_RPS", 400)
        # a short run (run-tests' minute) has shorter events, so that one of
        # each fits in its warm-up
        short = seconds < 300
        self.flood_n = int(env_f("SOAK_FLOOD", 2000))
        self.flood_s = env_f("SOAK_FLOOD_S", 3 if short else 15)
        self.flood_rate = env_f("SOAK_FLOOD_RATE", 1000)
        self.share = env_f("SOAK_SHARE", 0.1)
        self.redis_timeout = os.environ.get("SOAK_REDIS_TIMEOUT", "100ms")
        self.down_s = env_f("SOAK_DOWN_S", 1.5 if short else 3)
        self.stall_s = env_f("SOAK_STALL_S", 1.5 if short else 3)
        self.gap_s = env_f("SOAK_GAP_S", 1.5 if short else 4)
        self.warmup = min(0.2 * seconds, 60.0)
        self.rss_warm = None
        self.procs = []        # everything to stop at the end
        self.down = []         # (what, t0, t1): no token from Redis in [t0, t1]
        self.excluded = []     # (t_from, t_to): windows overlapping these are not checked
        self.floods = []       # flood.py's results
        self.reloads = []      # seconds each HAProxy reload took
        self.failures = []
        self.notes = []

    # -- events (run one after the other by run()) --

    def wait_agents_up(self, timeout=30.0):
        def up():
            for a in self.agents:
                if a.p.poll() is not None:
                    return True  # reported by the watch
                try:
                    if a.metric("spoa_ratelimit_redis_up") != 1:
                        return False
                except OSError:
                    return False
            return True
        if not wait_for(up, timeout, 0.05):
            self.failures.append("agents not back on Redis %.0f s after it came back" % timeout)

    def ev_redis_kill(self):
        t_a = now()
        self.redis.p.kill()
        self.redis.p.wait()
        t0 = now()
        time.sleep(self.down_s)  # the outage itself: a schedule, not a wait for a condition
        t1 = now()
        self.redis = harness.Redis(port=self.redis.port)
        self.procs.append(self.redis)
        self.wait_agents_up()
        t_up = now()
        self.down.append(("redis killed", t0, t1))
        # after a restart, leases claimed from the old Redis may still be spent
        # for a ttl beside a new, full bucket: those windows are not Redis' bound
        self.excluded.append((t_a, t_up + TTL_S + 0.5))
        return "redis killed, restarted after %.1f s, agents back after %.1f s" % (
            t1 - t0, t_up - t1)

    def ev_redis_stall(self):
        pid = self.redis.p.pid
        t_a = now()
        os.kill(pid, signal.SIGSTOP)

        def stopped():
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        if not wait_for(stopped, 10, 0.01):
            self.failures.append("redis-server did not stop on SIGSTOP")
        t0 = now()
        time.sleep(self.stall_s)  # the stall itself
        t1 = now()
        os.kill(pid, signal.SIGCONT)
        self.wait_agents_up()
        t_up = now()
        self.down.append(("redis stalled", t0, t1))
        self.excluded.append((t_a, t_up + TTL_S + 0.5))
        return "redis stalled (SIGSTOP) for %.1f s, agents on it %.1f s after SIGCONT" % (
            t1 - t0, t_up - t1)

    def ev_haproxy_reload(self):
        t_a = now()
        old, new = self.haproxy.reload()
        self.reloads.append(now() - t_a)
        return "haproxy reloaded (SIGUSR2): workers %s -> %s in %.2f s" % (old, new, now() - t_a)

    def ev_flood(self):
        seconds = self.flood_s
        refused0 = [self.refused(a) for a in self.agents]
        ports = ",".join(str(a.port) for a in self.agents)
        p = subprocess.run([sys.executable, os.path.join(HERE, "flood.py"), ports,
                            str(self.flood_n), str(seconds), str(self.flood_rate)],
                           capture_output=True, text=True, timeout=seconds + 60)
        try:
            st = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.failures.append("flood.py failed: %s" % (p.stdout + p.stderr)[-2000:])
            return "flood failed"
        st["refused"] = sum(self.refused(a) for a in self.agents) - sum(refused0)
        self.floods.append(st)
        return ("flood: %d connections for %.0f s: %d opened, %d closed by the agents "
                "(%d with an AGENT-DISCONNECT), %d refused at accept, max %d open"
                % (self.flood_n, seconds, st["opened"], st["closed_by_peer"],
                   st["disconnects"], st["refused"], st["max_open"]))

    def refused(self, a):
        total = 0.0
        try:
            for ln in a.metrics().splitlines():
                if ln.startswith("spoa_ratelimit_connections_refused_total{"):
                    total += float(ln.split()[-1])
        except OSError:
            pass
        return total

    def schedule(self):
        """The events, in the order they come round: each is followed by gap_s
        of calm, and they keep coming round from the first second while they
        fit before the last 10% of the run (at least 5 s), which stays calm."""
        cycle = [("flood", self.ev_flood, self.flood_s + 1),
                 ("kill", self.ev_redis_kill, self.down_s + 1),
                 ("stall", self.ev_redis_stall, self.stall_s + 1),
                 ("reload", self.ev_haproxy_reload, 1)]
        want = os.environ.get("SOAK_EVENTS", "kill,stall,reload,flood").split(",")
        return [(fn, est) for name, fn, est in cycle if name in want]

    # -- the run --

    def run(self):
        t_setup = now()
        self.redis = harness.Redis()
        self.procs.append(self.redis)
        ini = agent_ini(self.redis.port, self.share, self.redis_timeout)
        extra = "allow = 127.0.0.0/8, ::1/128\n" + os.environ.get("SOAK_AGENT_EXTRA", "")
        if extra and not extra.endswith("\n"):
            extra += "\n"
        self.agents = []
        for _ in range(AGENTS):
            a = harness.Agent(ini, workers=2, extra_agent=extra)
            self.agents.append(a)
            self.procs.append(a)
        for a in self.agents:
            fleet.wait_redis_up(a)
        build = pick_haproxy()
        # fds before HAProxy: listeners, Redis links, the loop's own
        self.fd_base = [fd_count(a.p.pid) for a in self.agents]
        self.haproxy = haproxies.KitHAProxy(build, (self.agents[0].port, self.agents[1].port),
                                            cfg_edits=kit_edits(self.agents), files=kit_maps(),
                                            master_worker=True)
        self.procs.append(self.haproxy)

        def answered():  # an answer decided by an agent, not HAProxy failing open
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.haproxy.http_port, timeout=5)
                c.request("GET", "/", headers={"X-Api-Key": "soak-probe"})
                r = c.getresponse()
                r.read()
                c.close()
                return r.getheader("RateLimit-Policy") is not None
            except (OSError, http.client.HTTPException):
                return False
        if not wait_for(answered, 30):
            raise RuntimeError("HAProxy never got an answer from the agents")
        print("soak: %d s, %d agents (%s), HAProxy %s -W, redis-server; set-up took %.1f s; "
              "warm-up %.0f s; fd baseline %s" % (self.seconds, AGENTS, harness.AGENT, build.text,
                                                  now() - t_setup, self.warmup, self.fd_base),
              flush=True)

        stop = threading.Event()
        t0 = self.t0 = now()
        conns = max(4, int(self.rps / 50))  # each waits delay ms between requests
        delay_ms = max(1, int(1000.0 * conns / self.rps))
        wrk = subprocess.Popen(["wrk", "-t", "1", "-c", str(conns), "-d", "%ds" % self.seconds,
                                "--timeout", "5s", "-s", os.path.join(HERE, "soak_traffic.lua"),
                                "http://127.0.0.1:%d/" % self.haproxy.http_port, "--",
                                str(delay_ms)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
        clients = {}
        for key, _, _, _, _, rps in BOUND_KEYS:
            clients[key] = [BoundClient(self.haproxy.http_port, key, rps / CLIENT_THREADS, stop)
                            for _ in range(CLIENT_THREADS)]
        for cs in clients.values():
            for c in cs:
                c.start()
        watch = Watch(self.agents, t0, stop)
        watch.start()
        self.watch = watch
        end = t0 + self.seconds
        tail = max(5.0, 0.1 * self.seconds)

        def warm_up_over():
            # the warm-up ends at the first calm moment after its time and after
            # one of each event, so that the memory a first outage, reload (the
            # new worker's SPOP connections beside the old one's) or flood
            # takes is in it: on a loaded machine the first round can take
            # longer than 20% of a short run
            watch.sample()
            self.rss_warm = watch.samples[-1][1]
            say(t0, "warm-up over: RSS %s kB, fds %s" % (self.rss_warm, watch.samples[-1][2]))
        time.sleep(1.0)
        cycle, k = self.schedule(), 0
        while cycle:
            fn, est = cycle[k % len(cycle)]
            if self.rss_warm is None and now() >= t0 + self.warmup and k >= len(cycle):
                warm_up_over()
            if now() + est > end - tail:
                break
            say(t0, fn())
            k += 1
            time.sleep(max(0.0, min(self.gap_s, end - tail - now())))
        if self.rss_warm is None:
            time.sleep(max(0.0, t0 + self.warmup - now()))
            warm_up_over()
        time.sleep(max(0.0, end - now()))
        stop.set()
        for cs in clients.values():
            for c in cs:
                c.join(30)
        try:
            out, _ = wrk.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(wrk.pid, signal.SIGKILL)
            out, _ = wrk.communicate()
            self.failures.append("wrk did not finish within 60 s of its end")
        watch.sample()
        self.rss_end = watch.samples[-1][1]
        watch.join(5)
        self.t_end = now()
        say(t0, "traffic over: RSS %s kB, fds %s" % (self.rss_end, watch.samples[-1][2]))
        self.finish(out, clients, wrk.returncode)

    def stop_haproxy(self):
        """SIGTERM to the master (it stops its workers); whatever is left of
        its process group after that is killed."""
        self.haproxy.stop()
        try:
            os.killpg(self.haproxy.p.pid, signal.SIGKILL)
        except OSError:
            pass

    def cleanup(self):
        for p in reversed(self.procs):
            try:
                if p is getattr(self, "haproxy", None):
                    self.stop_haproxy()
                elif isinstance(p, harness.Agent):
                    p.stop(check=False)
                else:
                    p.stop()
            except Exception:  # stop the others anyway
                pass

    # -- the checks --

    def finish(self, wrk_out, clients, wrk_rc):
        fail = self.failures
        # 1. requests answered: no 5xx, no connection error
        m = re.search(r"soak-wrk: (.*)", wrk_out or "")
        if not m:
            fail.append("wrk printed no soak-wrk line (exit %s):\n%s" % (wrk_rc, wrk_out[-2000:]))
            w = {}
        else:
            w = {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
        recs = {k: [r for c in cs for r in c.records] for k, cs in clients.items()}
        errs = [e for cs in clients.values() for c in cs for e in c.errors]
        fatal = [c.fatal for cs in clients.values() for c in cs if c.fatal]
        if fatal:
            fail.append("bound-check client failed: %s" % fatal[:3])
        c5 = sum(1 for rs in recs.values() for r in rs if r.status >= 500)
        c_other = sum(1 for rs in recs.values() for r in rs if r.status not in (200, 429)
                      and r.status < 500)
        n_client = sum(len(rs) for rs in recs.values())
        unavailable = w.get("unavailable", 0) + sum(1 for rs in recs.values() for r in rs
                                                    if r.rl == "unavailable")
        wrk_errs = sum(w.get(k, 0) for k in ("connect", "read", "write", "timeout"))
        n5xx = w.get("s5xx", 0) + c5
        requests = w.get("requests", 0) + n_client
        print("soak: requests: wrk %d (%d 2xx, %d 429, %d 5xx, %d other; socket errors: connect "
              "%d, read %d, write %d, timeout %d), bound-check client %d (%d 5xx, %d other, %d "
              "connection errors); %d degraded, %d unavailable (HAProxy failing open)"
              % (w.get("requests", 0), w.get("s2xx", 0), w.get("s429", 0), w.get("s5xx", 0),
                 w.get("other", 0), w.get("connect", 0), w.get("read", 0), w.get("write", 0),
                 w.get("timeout", 0), n_client, c5, c_other, len(errs),
                 w.get("degraded", 0) + sum(1 for rs in recs.values() for r in rs
                                            if r.rl == "degraded"), unavailable))
        for e in errs[:5]:
            print("soak:   client error at %.1f s: %s" % (e[0] - self.t0, e[2]))
        if n5xx:
            fail.append("%d 5xx responses" % n5xx)
        if unavailable > UNAVAILABLE_MAX * max(1, requests):
            fail.append("%d answers without an agent's decision (HAProxy failing open), more "
                        "than %.0f%% of the requests" % (unavailable, 100 * UNAVAILABLE_MAX))
        if wrk_errs or errs or w.get("other", 0) or c_other:
            fail.append("%d unanswered requests (wrk socket errors %d, client connection errors "
                        "%d), %d unexpected statuses" % (wrk_errs + len(errs), wrk_errs,
                                                         len(errs), w.get("other", 0) + c_other))

        # 2. the bound while Redis is up, 3. outages held to the backstop
        worst = None
        down_worst = None
        for key, _, n, period, burst, _ in BOUND_KEYS:
            r = n / period
            ex, count, T, nseg, covered = up_bound(recs[key], burst, r, self.excluded,
                                                   self.t0, self.t_end)
            print("soak: bound %s (b=%d, r=%g/s): worst window %d admitted in %.3f s (bound "
                  "%.1f, excess %.2f), over %d stretches away from outages (%.0f s of %.0f)"
                  % (key, burst, r, count, T, burst + r * T, ex, nseg, covered,
                     self.t_end - self.t0))
            if ex > 1e-9:
                fail.append("%s: %d admitted in %.3f s, above b + r*T = %.1f"
                            % (key, count, T, burst + r * T))
            if worst is None or ex > worst:
                worst = ex
            bb = backstop_burst(burst, self.share)
            for what, t0, t1 in self.down:
                adm, bound, reqs, deg = down_bound(recs[key], t0, t1, burst, r, bb, self.share,
                                                   AGENTS)
                print("soak:   %s at %.1f s for %.1f s: %s admitted %d of %d (%d by the "
                      "backstop), at most %.1f (b + %d agents x (%d + %g x %g/s x %.1f s))"
                      % (what, t0 - self.t0, t1 - t0, key, adm, reqs, deg, bound, AGENTS, bb,
                         self.share, r, t1 - t0))
                if adm > bound:
                    fail.append("%s: %d admitted while %s (%.1f s), above %.1f"
                                % (key, adm, what, t1 - t0, bound))
                if down_worst is None or adm - bound > down_worst[0] - down_worst[1]:
                    down_worst = (adm, bound)

        in_outage = [(a, z) for a, z in self.excluded]
        deg_up = sum(1 for rs in recs.values() for x in rs if x.rl == "degraded"
                     and not any(a <= x.acked and x.sent <= z for a, z in in_outage))
        print("soak: answers of the fallback while Redis was up (a Redis call past its "
              "timeout; their brackets left out of the bound check): %d" % deg_up)

        # 4. agents alive, RSS
        w_ = self.watch
        marks, line = [0.1 * k * self.seconds for k in range(1, 11)], []
        for t, rss, _ in w_.samples:
            if marks and t - self.t0 >= marks[0]:
                marks.pop(0)
                line.append("%.0fs %s" % (t - self.t0, "/".join(str(x) for x in rss)))
        print("soak: RSS kB over time: " + ", ".join(line))
        exits = dict(w_.exits)
        if exits:
            fail.append("agents exited during the run: %s" % {
                i: "at %.1f s, code %s" % v for i, v in exits.items()})
        # Each agent against the largest RSS any of the three had after the
        # warm-up (the fleet's steady state, at least its own): they do the
        # same work, and HAProxy 2.6 gives one of them little traffic at
        # first (one applet per thread), so its RSS catches up with the
        # others' later, which is not growth
        growth, grown_kb = [], []
        fleet_warm = max([a for a in self.rss_warm if a] or [0])
        for i in range(AGENTS):
            a, z = self.rss_warm[i], self.rss_end[i]
            if a and z:
                a = max(a, fleet_warm)
                growth.append((z - a) / a)
                grown_kb.append(z - a)
        peak = [max((s[1][i] or 0) for s in w_.samples) for i in range(AGENTS)]
        print("soak: RSS kB after warm-up %s, at the end %s (growth %s), peak %s"
              % (self.rss_warm, self.rss_end, ", ".join("%.1f%%" % (100 * g) for g in growth),
                 peak))
        if len(growth) < AGENTS or any(g >= RSS_GROWTH_MAX and kb > RSS_GROWTH_FLOOR_KB
                                       for g, kb in zip(growth, grown_kb)):
            fail.append("RSS growth after warm-up %s (%s kB), limit %.0f%% and %d kB"
                        % (["%.1f%%" % (100 * g) for g in growth], grown_kb,
                           100 * RSS_GROWTH_MAX, RSS_GROWTH_FLOOR_KB))

        # 5. fds: HAProxy gone, each agent back to its count from before it
        self.stop_haproxy()

        def fds_now():
            out = []
            for a in self.agents:
                try:
                    out.append(fd_count(a.p.pid))
                except OSError:
                    out.append(None)
            return out
        t = now()
        back = wait_for(lambda: fds_now() == self.fd_base, 60, 0.2)
        fds_end = fds_now()
        print("soak: fds: baseline %s, after HAProxy stopped %s%s"
              % (self.fd_base, fds_end, " (after %.1f s)" % (now() - t) if back else ""))
        if not back:
            fail.append("fds not back to baseline within 60 s: %s, baseline %s"
                        % (fds_end, self.fd_base))

        # 6. every SIGHUP reloaded the configuration
        def reloads():
            return [self.agents[i].metric("spoa_ratelimit_reloads_total") or 0
                    for i in range(AGENTS)]
        ok = wait_for(lambda: min(reloads()) >= w_.sighups, 10, 0.2)
        failed = [a.metric("spoa_ratelimit_reload_failures_total") or 0 for a in self.agents]
        print("soak: %d SIGHUPs, reloads %s, reload failures %s; %d HAProxy reloads; floods: %s"
              % (w_.sighups, reloads(), failed, len(self.reloads),
                 ", ".join("%d refused/%d closed" % (f["refused"], f["closed_by_peer"])
                           for f in self.floods)))
        if not ok or any(failed):
            fail.append("SIGHUP reloads %s for %d SIGHUPs, failures %s"
                        % (reloads(), w_.sighups, failed))

        # 7. the agents exit 0 on SIGTERM
        for i, a in enumerate(self.agents):
            rc = a.stop(check=False)
            if rc != 0 and i not in exits:
                fail.append("agent %d exited %s on SIGTERM:\n%s" % (i, rc, a.output()[-2000:]))
        for f in fail:
            print("soak: FAILED: %s" % f)
        down_txt = ("outages within the backstop (worst %d of %.1f)" % down_worst
                    if down_worst else "no outage")
        print("soak: %d s, %d agents, %d requests, %d 5xx, %d unanswered, %d unavailable, max "
              "excess %.2f tokens, %s, RSS growth %s, %s, %d agent exits: %s"
              % (self.seconds, AGENTS, requests, n5xx, wrk_errs + len(errs), unavailable,
                 worst if worst is not None else float("nan"), down_txt,
                 "%.1f%%" % (100 * max(growth)) if growth else "?",
                 "fds back to baseline" if back else "fds NOT back to baseline", len(exits),
                 "FAILED" if fail else "PASS"), flush=True)
        return not fail


def main():
    if len(sys.argv) > 1:
        harness.AGENT = os.path.abspath(sys.argv[1])
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else int(env_f("SOAK_S", 600))
    s = Soak(seconds)
    ok = False
    try:
        s.run()
        ok = not s.failures
    except Exception:
        import traceback
        traceback.print_exc()
        print("soak: %d s: FAILED (the soak itself broke, above)" % seconds, flush=True)
    finally:
        s.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
