# SPDX-License-Identifier: Apache-2.0
"""The fault matrix (issue 42): three agents (workers = 1) on one Redis, the
rules `10/1s burst 5`, `600/1m burst 20` and `60/1m burst 30`, each with a
hot key (paced well over its limit), a near-limit key (paced at the limit)
and an under-limit key (paced at half of it), every request from a client on
each of the three agents. A fault is injected while the clients run; every
decision is recorded bracketed by its NOTIFY's send and its ACK's read, so
the worst excess over b + r*T (fleet.worst_window, rigorous) is real.

test_faults.py asserts on what each fault's run() measured and prints the
table (`make faults`: row() per fault): fault, allowance, measured worst
excess, utilisation, degraded decisions and the warnings the agents raised.
The Sentinel split brain, with its own fleet of sentinels and a replica, is
in faults_sentinel.py (run(make=...), Proxy(rewrite=...))."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import fleet
from fleet import LoadClient, exact_admitted, redis_ini, unique, worst_across, worst_window
from harness import Agent, Redis, wait_for

# (name, path, rate per s, period label, burst)
RULES = (("fast", 10.0, "10/1s", 5), ("minute", 10.0, "600/1m", 20),
         ("slow", 1.0, "60/1m", 30))
RULES_INI = "".join("[rule:%s]\nkey = key\nmatch = path ^/%s/\nrate = %s\nburst = %d\n\n"
                    % (n, n, rate, b) for n, _, rate, b in RULES)
AGENTS = 3
# how hard each kind of key is driven, as a multiple of its rule's rate (over
# the fleet: each of the three agents sends a third)
LOADS = (("hot", 4.0), ("near", 1.0), ("under", 0.5))
WARN_RE = re.compile(r"msg=warning kind=(\w+)")


class Proxy(threading.Thread):
    """A TCP proxy on loopback in front of Redis, for one agent: cut() closes
    its connections and refuses new ones (accepted, then closed) until heal().
    Each connection is two pump threads; all stop with stop(). rewrite:
    (old, new) bytes replaced in what the upstream sends (a sentinel's
    answers naming another address to this client only)."""

    def __init__(self, upstream_port, rewrite=None):
        super().__init__(daemon=True)
        self.up = upstream_port
        self.rewrite = rewrite
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.cut_ = threading.Event()
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.socks = []
        self.start()

    def run(self):
        while not self.halt.is_set():
            try:
                c, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.cut_.is_set():
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.up), timeout=2)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.socks += [c, u]
            for a, b, fix in ((c, u, None), (u, c, self.rewrite)):
                threading.Thread(target=self.pump, args=(a, b, fix), daemon=True).start()

    def pump(self, a, b, fix=None):
        try:
            a.settimeout(None)
            while True:
                data = a.recv(65536)
                if not data or self.cut_.is_set():
                    break
                b.sendall(data.replace(*fix) if fix else data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.cut_.set()
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def heal(self):
        self.cut_.clear()

    def stop(self):
        self.halt.set()
        self.cut()
        self.lsock.close()


class Fleet:
    """Redis and three agents; stop() ends them all. proxied: the first
    agent reaches Redis through a Proxy (self.proxy). agent_env: each
    agent's environment (None: this process's)."""

    def __init__(self, timeout="1s", share="auto", redis_env=None, proxied=False,
                 cluster=False, agent_env=None):
        self.timeout, self.share = timeout, share
        self.agents, self.nodes, self.proxy = [], [], None
        if cluster:
            self.start_cluster()
            self.redis = self.nodes[0]
        else:
            self.redis = self.start_redis(env=redis_env)
        self.proxy = Proxy(self.redis.port) if proxied else None
        try:
            for i in range(AGENTS):
                port = self.proxy.port if self.proxy and i == 0 else self.redis.port
                if cluster:
                    ini = ("[redis]\ncluster = %s\nprefix = {rl}:\ntimeout = %s\n\n"
                           "[fallback]\nshare = %s\n\n%s"
                           % (",".join("127.0.0.1:%d" % n.port for n in self.nodes), timeout,
                              share, RULES_INI))
                else:
                    ini = redis_ini(port, timeout=timeout, share=share) + RULES_INI
                self.agents.append(Agent(ini, workers=1,
                                         env=agent_env[i] if agent_env else None))
            for a in self.agents:
                fleet.wait_redis_up(a)
            # share = auto is 1/N of the fleet each agent has seen: a fleet
            # that has run, every agent's heartbeat read back (every 5 s)
            for a in self.agents:
                if not wait_for(lambda: a.metric("spoa_ratelimit_fleet_agents") == AGENTS, 15):
                    raise AssertionError("an agent does not see the fleet of %d:\n%s"
                                         % (AGENTS, a.output()[-2000:]))
        except BaseException:
            self.stop()
            raise

    def start_cluster(self):
        """Three masters, no replicas (self.nodes), cluster_state:ok."""
        import test_redis_topologies as topo
        self.dir = tempfile.mkdtemp(prefix="faults-cluster-")
        for _ in range(3):
            p = topo.cluster_port()
            self.nodes.append(Redis(p, args=(
                "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                "--cluster-config-file", os.path.join(self.dir, "nodes-%d.conf" % p))))
        out = subprocess.run(["redis-cli", "--cluster", "create"]
                             + ["127.0.0.1:%d" % n.port for n in self.nodes]
                             + ["--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stdout + out.stderr
        assert wait_for(lambda: all("cluster_state:ok" in n.cli("CLUSTER", "INFO")
                                    for n in self.nodes), 15), "cluster never ok"

    def start_redis(self, port=None, env=None):
        saved = {}
        for k, v in (env or {}).items():  # only redis-server inherits these
            saved[k] = os.environ.get(k)
            os.environ[k] = v
        try:
            # DEBUG SLEEP for the slow Redis (Redis 7 refuses DEBUG otherwise)
            return Redis(port, args=("--enable-debug-command", "local"))
        finally:
            for k, v in saved.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v

    def warnings(self):
        """{kind: agents that raised it}."""
        out = {}
        for a in self.agents:
            for k in set(WARN_RE.findall(a.output())):
                out[k] = out.get(k, 0) + 1
        return out

    def stop(self):
        for a in self.agents:
            try:
                a.stop(check=False)
            except Exception:
                pass
        if self.proxy:
            self.proxy.stop()
        self.redis.kill()
        for n in self.nodes:
            n.kill()
        if self.nodes:
            shutil.rmtree(self.dir, ignore_errors=True)


def clients(fl, seconds):
    """The paced clients: one per agent, rule and kind of key."""
    out, keys = [], {}
    for name, r, _, b in RULES:
        for kind, load in LOADS:
            key = unique("%s-%s" % (name, kind))
            keys[key] = (name, kind, b, r)
            for i, a in enumerate(fl.agents):
                out.append(LoadClient(a.addr, {"key": key, "path": "/%s/x" % name},
                                      [(seconds, "paced", load * r / AGENTS)],
                                      name="%s/%d" % (key, i), reconnect=True))
    return out, keys


class Result:
    """What one fault's run measured. per_key: {key: (rule, kind, excess,
    relative excess, admitted, requests)}; excess over b + r*T (plus the
    extra `slack_b` bursts the caller asks for), relative to b + r*T of that
    window."""

    def __init__(self, fault, recs, keys, warnings, extra):
        self.fault, self.recs, self.keys, self.warnings = fault, recs, keys, warnings
        self.extra = extra  # what the fault itself measured (times, counts)
        self.degraded = sum(1 for x in recs if x.vars.get("degraded") is True)
        self.decisions = len(recs)
        adm = exact = 0
        self.per_key = {}
        for key, (name, kind, b, r) in keys.items():
            mine = [x for x in recs if x.client.startswith(key + "/")]
            ex, count, T, _, _ = worst_window(mine, b, r, True)
            self.per_key[key] = (name, kind, ex, ex / (b + r * T) if count else 0.0,
                                 sum(1 for x in mine if x.allowed), len(mine))
            adm += sum(1 for x in mine if x.allowed)
            exact += exact_admitted(mine, b, r)
        self.utilisation = adm / exact if exact else 0.0

    def worst(self, slack_b=0.0, kinds=None):
        """(excess over b + r*T + slack_b * b, excess over b + r*T, relative,
        key) of the worst key by the first."""
        best = None
        for key, (name, kind, ex, rel, _, _) in self.per_key.items():
            if kinds and kind not in kinds:
                continue
            b = self.keys[key][2]
            e = ex - slack_b * b
            if best is None or e > best[0]:
                best = (e, ex, rel, key)
        return best

    def explain(self, key, since=None):
        """The worst window of key in words, for a failure's message: its
        length and count against b + r*T, where it lies (s after `since`,
        default the clients' start), and per agent what it admitted there,
        degraded or not, with the rule's backstop admissions and repaid."""
        name, kind, b, r = self.keys[key]
        mine = [x for x in self.recs if x.client.startswith(key + "/")]
        ex, count, T, i, j = worst_window(mine, b, r, True)
        if i is None:
            return "%s %s: nothing admitted" % (name, kind)
        adm = sorted((x for x in mine if x.allowed), key=lambda x: x.acked)
        win = adm[i:j + 1]
        t0 = self.extra.get("t0", 0.0) if since is None else since
        start = min(x.sent for x in adm[i:])
        per = {}
        for x in win:
            a = x.client.rsplit("/", 1)[1]
            n, d = per.get(a, (0, 0))
            per[a] = (n + 1, d + (x.vars.get("degraded") is True))
        deg = sum(1 for x in self.recs if x.allowed and x.vars.get("degraded") is True
                  and self.keys[x.client.rsplit("/", 1)[0]][0] == name)
        return ("%s %s: %d admitted in %.3f s (b + r*T = %.1f) from %+.3f s to %+.3f s; per "
                "agent (admitted, degraded): %s; rule %s: backstops admitted %d, repaid %d"
                % (name, kind, count, T, b + r * T, start - t0, win[-1].acked - t0,
                   ", ".join("%s %s" % (a, per[a]) for a in sorted(per)), name, deg,
                   self.extra.get("repaid", {}).get(name, 0)))

    def past(self, t_first, t_last):
        """{key: (excess, relative)}: each key's worst excess over b + r*T
        among the intervals that begin before t_first and end after t_last
        (fleet.worst_across: those reaching past a fault's repayment)."""
        out = {}
        for key, (name, kind, b, r) in self.keys.items():
            mine = [x for x in self.recs if x.client.startswith(key + "/")]
            w = worst_across(mine, b, r, t_first, t_last)
            if w:
                out[key] = (w[0], w[0] / (b + r * w[2]))
        return out

    def unrepaid(self, rule):
        """What the backstops admitted on rule's keys (degraded decisions
        allowed) less what Redis was charged for it (fallback_repaid_total)."""
        deg = sum(1 for x in self.recs if x.allowed and x.vars.get("degraded") is True
                  and self.keys[x.client.rsplit("/", 1)[0]][0] == rule)
        return max(0, deg - self.extra.get("repaid", {}).get(rule, 0))

    def degraded_admitted(self, key):
        return sum(1 for x in self.recs if x.allowed and x.vars.get("degraded") is True
                   and x.client.startswith(key + "/"))

    def admitted_share(self, kind, t1, t2, decided_by_redis=False):
        """Of the requests of `kind` keys sent in [t1, t2], the share admitted;
        decided_by_redis: of those Redis decided (not degraded: a backstop's
        answer, given when Redis was later than the timeout)."""
        mine = [x for x in self.recs if t1 <= x.sent <= t2
                and self.keys[x.client.rsplit("/", 1)[0]][1] == kind
                and not (decided_by_redis and x.vars.get("degraded") is True)]
        return sum(1 for x in mine if x.allowed) / len(mine) if mine else 0.0


def run(fault, seconds, inject, at=3.0, timeout="1s", share="auto", redis_env=None,
        proxied=False, cluster=False, agent_env=None, make=None):
    """Start the fleet (make(): another kind of it, with Fleet's agents,
    warnings() and stop()), run the clients for `seconds`, call
    inject(fleet, extra) `at` seconds in (in this thread: the clients run in
    theirs); inject records what it measured in the dict extra. Returns a
    Result."""
    fl = make() if make else Fleet(timeout=timeout, share=share, redis_env=redis_env,
                                   proxied=proxied, cluster=cluster, agent_env=agent_env)
    extra = {}
    try:
        cl, keys = clients(fl, seconds)
        with_switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        try:
            for c in cl:
                c.start()
            t0 = time.monotonic() + 0.1
            for c in cl:
                c.start_at(t0)
            extra["t0"], extra["clients"] = t0, cl
            if inject:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                inject(fl, extra)
            for c in cl:
                c.join(seconds + 60)
        finally:
            sys.setswitchinterval(with_switch)
        recs = fleet.collect(cl)
        extra.pop("clients")
        live = [a for a in fl.agents if a.p.poll() is None]
        # what each rule's backstops admitted and Redis was charged since
        extra["repaid"] = {n: sum(a.metric("spoa_ratelimit_fallback_repaid_total", rule=n) or 0
                                  for a in live) for n, _, _, _ in RULES}
        return Result(fault, recs, keys, fl.warnings(), extra)
    finally:
        fl.stop()


# ---- the faults -------------------------------------------------------------

def state_lost_times(fl, since, deadline=10.0):
    """Seconds after `since` at which each agent counted a loss of state."""
    took = []
    for a in fl.agents:
        wait_for(lambda: (a.metric("spoa_ratelimit_redis_state_lost_total") or 0) >= 1,
                 deadline, step=0.02)
        took.append(time.monotonic() - since)
    return took


def healthy(seconds=8.0):
    return run("healthy", seconds, None)


def flushdb(seconds=8.0):
    def inject(fl, extra):
        assert fl.redis.cli("FLUSHDB") == "OK"
        extra["named_s"] = max(state_lost_times(fl, time.monotonic()))
    return run("FLUSHDB under load", seconds, inject)


def slow_redis(seconds=30.0, stalls=8, gap=3.0, stall_s=0.3):
    """8 x DEBUG SLEEP 0.3, 3 s apart, agents' timeout 100 ms."""
    def inject(fl, extra):
        extra["stalls"] = []
        for i in range(stalls):
            t = time.monotonic()
            got = fl.redis.cli("DEBUG", "SLEEP", str(stall_s))
            assert got == "OK", "DEBUG SLEEP answered %r" % got
            extra["stalls"].append((t, time.monotonic()))
            time.sleep(max(0.0, t + gap - time.monotonic()))
    return run("Redis slower than timeout", seconds, inject, at=2.0, timeout="100ms")


def kill_restart(seconds=10.0):
    """Redis killed (-9) and restarted empty on its port."""
    def inject(fl, extra):
        port = fl.redis.port
        t = time.monotonic()
        fl.redis.kill()
        fl.redis = fl.start_redis(port)
        for a in fl.agents:
            fleet.wait_redis_up(a)
        extra["down_s"] = time.monotonic() - t  # until every agent is back
        extra["named_s"] = max(state_lost_times(fl, t))
    return run("Redis kill -9, restarted empty", seconds, inject)


def crash_loop(seconds=14.0, down=6.0):
    """Redis killed, restarted empty, killed again 1 s later and kept down
    `down` seconds (share = auto: the agents' backstop share is 1/N, N the
    fleet they saw). extra["outage"]: (killed, restarted) of the long outage."""
    def inject(fl, extra):
        port = fl.redis.port
        fl.redis.kill()
        fl.redis = fl.start_redis(port)
        time.sleep(1.0)
        fl.redis.kill()
        t = time.monotonic()
        time.sleep(down)
        fl.redis = fl.start_redis(port)
        extra["outage"] = (t, time.monotonic())
    return run("crash loop, share = auto", seconds, inject)


def outage_admitted(res, key):
    """Admissions of key decided surely inside the outage: sent after the
    kill, acknowledged before the restart."""
    t1, t2 = res.extra["outage"]
    return sum(1 for x in res.recs if x.allowed and x.client.startswith(key + "/")
               and x.sent >= t1 and x.acked <= t2)


def partition(seconds=22.0, cut_s=15.0):
    """The first agent cut from Redis (its proxy) for cut_s seconds; the
    others keep it. extra["cut"]: (cut, the agent connected again)."""
    def inject(fl, extra):
        t = time.monotonic()
        fl.proxy.cut()
        time.sleep(cut_s)
        fl.proxy.heal()
        fleet.wait_redis_up(fl.agents[0])  # (its reconnection backs off)
        extra["cut"] = (t, time.monotonic())
    return run("one agent partitioned %.0f s" % cut_s, seconds, inject, proxied=True)


def tryagain(seconds=12.0):
    """Redis Cluster, prefix {rl}: (one slot): half of the slot's keys
    migrated under load, so batches holding keys of both halves meet
    TRYAGAIN, then the rest, then the slot given to its new owner.
    extra["tryagain"]: the TRYAGAIN replies the agents counted; extra["window"]:
    (first half moved, slot given to the new owner)."""
    def cli(node, *args):
        return node.cli(*(str(a) for a in args))

    def inject(fl, extra):
        ids = {n.port: cli(n, "CLUSTER", "MYID") for n in fl.nodes}
        slot = int(cli(fl.nodes[0], "CLUSTER", "KEYSLOT", "{rl}"))
        src = [n for n in fl.nodes if cli(n, "CLUSTER", "COUNTKEYSINSLOT", slot) != "0"][0]
        dst = [n for n in fl.nodes if n is not src][0]
        keys = cli(src, "CLUSTER", "GETKEYSINSLOT", slot, 1000).split()
        assert cli(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src.port]) == "OK"
        assert cli(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst.port]) == "OK"
        half = keys[:len(keys) // 2]
        cli(src, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *half)
        t = time.monotonic()
        # batches of both halves meet TRYAGAIN until the rest moves
        wait_for(lambda: any(a.metric("spoa_ratelimit_redis_error_replies_total",
                                      kind="TRYAGAIN") for a in fl.agents), 5, step=0.02)

        def moved():
            rest = cli(src, "CLUSTER", "GETKEYSINSLOT", slot, 1000).split()
            if rest:
                cli(src, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *rest)
            return cli(src, "CLUSTER", "COUNTKEYSINSLOT", slot) == "0"
        assert wait_for(moved, 20), "keys left on the source"
        for n in fl.nodes:
            assert cli(n, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst.port]) == "OK"
        extra["window"] = (t, time.monotonic())  # while the slot was half moved
        extra["tryagain"] = sum(
            a.metric("spoa_ratelimit_redis_error_replies_total", kind="TRYAGAIN") or 0
            for a in fl.agents)
    return run("TRYAGAIN, one-slot migration", seconds, inject, cluster=True)


def build_shim():
    """(LD_PRELOAD env, offset file, dir) for clock_shim.c, or None without cc."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if not cc:
        return None
    d = tempfile.mkdtemp(prefix="clock-shim-")
    so, offset = os.path.join(d, "shim.so"), os.path.join(d, "offset")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clock_shim.c")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"], check=True)
    step_clock(offset, 0)
    return {"LD_PRELOAD": so, "CLOCK_SHIM_FILE": offset}, offset, d


def step_clock(offset, seconds):
    with open(offset + ".tmp", "w") as f:
        f.write("%d\n" % (seconds * 1000000))
    os.replace(offset + ".tmp", offset)


def clock_back(seconds=10.0, step=20):
    """Redis' clock steps back 20 s (clock_shim.c)."""
    shim = build_shim()
    if shim is None:
        return None
    env, offset, d = shim

    def inject(fl, extra):
        step_clock(offset, -step)
        extra["stepped"] = time.monotonic()
    try:
        return run("Redis clock back %d s" % step, seconds, inject, redis_env=env)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def agent_kill(seconds=10.0, victim=2):
    """An agent killed (SIGKILL) holding leases: its clients stop first (as
    HAProxy's requests go to the other agents), then the agent dies with
    the tokens Redis granted it; Redis drops them after the lease's ttl."""
    def inject(fl, extra):
        a = fl.agents[victim]
        mine = [c for c in extra["clients"] if c.name_.endswith("/%d" % victim)]
        extra["held_keys"] = a.metric("spoa_ratelimit_lease_active_keys") or 0
        for c in mine:
            c.stop()
        for c in mine:
            c.join(10)
        a.kill_sig(signal.SIGKILL)
        a.p.wait(10)
        extra["killed"] = time.monotonic()
    return run("agent kill -9 holding leases", seconds, inject)


def agents_skewed(seconds=8.0, skew=300):
    """Two of the three agents' wall clocks off by +skew and -skew seconds
    (clock_shim.c in the agents); Redis' clock and the third agent's right."""
    shim = build_shim()
    if shim is None:
        return None
    env, offset, d = shim
    envs = [None]
    for i, sk in enumerate((skew, -skew)):
        f = "%s-%d" % (offset, i)
        step_clock(f, sk)
        e = dict(os.environ)
        e.update(env)
        e["CLOCK_SHIM_FILE"] = f
        envs.append(e)
    try:
        return run("agents' clocks +/-%d s" % skew, seconds, None, agent_env=envs)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- the table --------------------------------------------------------------

HEADER = ("| fault | allowance over b + r*T | worst excess (relative, key) | utilisation "
          "| degraded | warnings (agents) | also measured |\n|---|---|---|---|---|---|---|")


def row(res, allowance, slack_b=0.0, note=""):
    """One line of the table; the worst key is chosen by its excess over
    b + r*T + slack_b * b, shown over b + r*T."""
    _, ex, rel, key = res.worst(slack_b)
    w = ",".join("%s(%d)" % kv for kv in sorted(res.warnings.items())) or "none"
    return ("| %s | %s | %+.1f (%+.1f %%, %s %s) | %.3f | %d of %d | %s | %s |"
            % (res.fault, allowance, ex, 100 * rel, res.per_key[key][0], res.per_key[key][1],
               res.utilisation, res.degraded, res.decisions, w, note))
