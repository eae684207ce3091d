# SPDX-License-Identifier: Apache-2.0
"""The Sentinel split brain of the fault matrix (issue 42; faults.py has the
rest): a master M1 with one replica R, three sentinels (quorum 2,
down-after-milliseconds 1000) and the three agents in Sentinel mode. For
20 s {M1, agent 0} are cut from {sentinels, R, agents 1 and 2}: the
sentinels promote R and agents 1 and 2 follow, while agent 0 keeps M1 until
its [redis] sentinel_window passes and it falls back (redis_unconfirmed).
Then the partition heals and the sentinels make M1 a replica of R.

The cut is made of faults.Proxy on loopback: everything that reaches M1
from the majority side (the sentinels' monitoring, R's replication, the
agents' connections to the address the sentinels name) goes through one
proxy, the sentinels monitoring its address; agent 0 reaches each sentinel
through a proxy of its own, which also rewrites the master's address in the
sentinels' answers to a second proxy in front of M1 that is never cut."""
import os
import shutil
import subprocess
import tempfile
import time

import faults
import fleet
from faults import AGENTS, RULES_INI, Fleet, Proxy
from harness import Agent, Proc, Redis, free_port, wait_for, wait_port

DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=10).stdout.strip()


def info(port, section):
    return dict(line.split(":", 1) for line in cli(port, "INFO", section).splitlines()
                if ":" in line)


def sentinel_master(port):
    out = cli(port, "SENTINEL", "MASTER", "mymaster").split("\n")
    return dict(zip(out[0::2], out[1::2]))


class SentinelFleet(Fleet):
    """M1 (self.redis), its replica R (self.replica), three sentinels and
    the three agents; self.side: the proxy everything of the majority side
    reaches M1 through, self.own: agent 0's proxies (to M1, never cut, and
    to each sentinel). master_args: M1's redis-server options (e.g.
    min-replicas-to-write)."""

    def __init__(self, timeout="1s", share="auto", window=None, master_args=()):
        self.timeout, self.share = timeout, share
        self.agents, self.nodes, self.proxy = [], [], None
        self.sentinels, self.own = [], []
        self.dir = tempfile.mkdtemp(prefix="faults-sentinel-")
        self.redis = self.replica = self.side = None
        try:
            self.start(window, master_args)
        except BaseException:
            self.stop()
            raise

    def server(self, *args):
        return Redis(args=("--dir", self.dir) + args)

    def start(self, window, master_args):
        self.redis = self.server(*master_args)
        self.side = Proxy(self.redis.port)
        self.replica = self.server("--replicaof", "127.0.0.1", str(self.side.port))
        assert wait_for(lambda: info(self.replica.port, "replication").get(
            "master_link_status") == "up", 15), "the replica never synced"
        for _ in range(3):
            port = free_port()
            conf = os.path.join(self.dir, "sentinel-%d.conf" % port)
            with open(conf, "w") as f:
                f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
                        "sentinel monitor mymaster 127.0.0.1 %d 2\n"
                        "sentinel down-after-milliseconds mymaster %d\n"
                        "sentinel failover-timeout mymaster %d\n"
                        % (port, self.dir, self.side.port, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS))
            s = Proc(["redis-server", conf, "--sentinel"], "sentinel", cwd=self.dir)
            self.sentinels.append((port, s))
            wait_port(port, proc=s.p)
        # each sentinel knows the two others (hello messages, every 2 s)
        # and the replica before the fault can be a failover
        assert wait_for(lambda: all(
            sentinel_master(p).get("num-other-sentinels") == "2"
            and sentinel_master(p).get("num-slaves") == "1" for p, _ in self.sentinels),
            30, step=0.2), "the sentinels never saw each other and the replica"
        # agent 0: its own way to M1 (the sentinels' answers rewritten to
        # name it; ports of 5 digits both, so lengths match) and to each
        # sentinel
        m1 = Proxy(self.redis.port)
        old, new = (b"\r\n%d\r\n" % p for p in (self.side.port, m1.port))
        assert len(old) == len(new)
        self.own = [m1] + [Proxy(p, rewrite=(old, new)) for p, _ in self.sentinels]
        for i in range(AGENTS):
            ports = ([p.port for p in self.own[1:]] if i == 0 else
                     [p for p, _ in self.sentinels])
            ini = fleet.redis_ini(0, timeout=self.timeout, share=self.share)
            url = "url = redis://127.0.0.1:0/0\n"
            assert url in ini
            ini = ini.replace(url, "sentinel = %s\nmaster = mymaster\n%s" % (
                ",".join("127.0.0.1:%d" % p for p in ports),
                "sentinel_window = %s\n" % window if window else ""))
            self.agents.append(Agent(ini + RULES_INI, workers=1))
        for a in self.agents:
            fleet.wait_redis_up(a)
        for a in self.agents:
            if not wait_for(lambda: a.metric("spoa_ratelimit_fleet_agents") == AGENTS, 15):
                raise AssertionError("an agent does not see the fleet of %d:\n%s"
                                     % (AGENTS, a.output()[-2000:]))
        assert "addr=127.0.0.1:%d" % m1.port in self.agents[0].output(), \
            "agent 0 does not reach M1 through its own proxy"

    def cut(self):
        for p in [self.side] + self.own[1:]:
            p.cut()

    def heal(self):
        for p in [self.side] + self.own[1:]:
            p.heal()

    def stop(self):
        for a in self.agents:
            try:
                a.stop(check=False)
            except Exception:
                pass
        for _, s in self.sentinels:
            s.kill()
        for p in [self.side] + self.own:
            if p:
                p.stop()
        for r in (self.redis, self.replica):
            if r:
                r.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def bucket(port, key):
    """The slow rule's bucket of key on the Redis at port: its fields (a
    hash once leased), its value (a string), or None."""
    k = "rl:t2:slow:" + key
    kind = cli(port, "TYPE", k)
    if kind == "string":
        return cli(port, "GET", k)
    out = cli(port, "HGETALL", k).split("\n")
    return dict(zip(out[0::2], out[1::2])) if kind == "hash" else None


def split_brain(seconds=35.0, cut_s=20.0, window=None, master_args=(), label=""):
    """{M1, agent 0} cut from {sentinels, R, agents 1, 2} for cut_s seconds.
    extra: "cut" (cut, healed), "promoted" (when a sentinel first named R),
    "unconfirmed" (when agent 0 raised redis_unconfirmed), "demoted" (when M1
    became R's replica), "slow_hot" (the slow hot key's bucket on R at the
    cut and after the promotion, on M1 just before the heal), "logs" (each
    agent's log file)."""
    def inject(fl, extra):
        hot = [k for k in fl_keys(extra) if k.startswith("slow-hot")][0]
        a0 = fl.agents[0]
        t = time.monotonic()
        fl.cut()
        extra["slow_hot"] = {"R at cut": bucket(fl.replica.port, hot)}
        sport = fl.sentinels[0][0]
        rname = ["127.0.0.1", str(fl.replica.port)]
        promoted = unconfirmed = None
        while time.monotonic() < t + cut_s:
            now = time.monotonic()
            if promoted is None and cli(sport, "SENTINEL", "get-master-addr-by-name",
                                        "mymaster").split() == rname:
                promoted = now
                extra["slow_hot"]["R promoted"] = bucket(fl.replica.port, hot)
            if unconfirmed is None and "kind=redis_unconfirmed" in a0.output():
                unconfirmed = now
            time.sleep(0.05)
        extra["slow_hot"]["M1 before heal"] = bucket(fl.redis.port, hot)
        extra["slow_hot"]["R before heal"] = bucket(fl.replica.port, hot)
        fl.heal()
        healed = time.monotonic()
        for a in fl.agents:
            fleet.wait_redis_up(a, 15)
        # the sentinels find M1 a master again at their next INFO to it (every
        # 10 s) and make it R's replica: waited for while the clients run
        demoted = wait_for(lambda: info(fl.redis.port, "replication").get("role") == "slave",
                           max(1.0, extra["t0"] + seconds - time.monotonic()), step=0.1)
        extra["demoted"] = time.monotonic() - t if demoted else None
        extra["cut"] = (t, healed)
        extra["promoted"] = promoted - t if promoted else None
        extra["unconfirmed"] = unconfirmed - t if unconfirmed else None
        extra["logs"] = [a.log.name for a in fl.agents]
        extra["state_lost"] = [a.metric("spoa_ratelimit_redis_state_lost_total") or 0
                               for a in fl.agents]
        extra["repaid_by_agent"] = [
            {n: a.metric("spoa_ratelimit_fallback_repaid_total", rule=n) or 0
             for n, _, _, _ in faults.RULES} for a in fl.agents]
    return faults.run("Sentinel split brain %.0f s%s" % (cut_s, label), seconds, inject,
                      make=lambda: SentinelFleet(window=window, master_args=master_args))


def fl_keys(extra):
    """The clients' keys (their names are key/agent)."""
    return sorted({c.name_.rsplit("/", 1)[0] for c in extra["clients"]})


def by_agent(res, t1, t2, kinds=("hot",)):
    """What each agent admitted on keys of `kinds` among the requests sent
    in [t1, t2): {rule: {agent: [by Redis, degraded]}}."""
    out = {}
    for x in res.recs:
        if not (t1 <= x.sent < t2) or not x.allowed:
            continue
        key, agent = x.client.rsplit("/", 1)
        rule, kind = res.keys[key][:2]
        if kind not in kinds:
            continue
        d = out.setdefault(rule, {}).setdefault(int(agent), [0, 0])
        d[1 if x.vars.get("degraded") is True else 0] += 1
    return out


def degraded_spans(res, t1, t2):
    """Each agent's span (s) of its degraded decisions sent in [t1, t2]:
    from the first one's send to the last one's ACK (0 without one)."""
    out = []
    for i in range(AGENTS):
        mine = [x for x in res.recs if x.vars.get("degraded") is True and t1 <= x.sent <= t2
                and x.client.endswith("/%d" % i)]
        out.append(max(x.acked for x in mine) - min(x.sent for x in mine) if mine else 0.0)
    return out


def degraded_admitted_by(res, agent, t1, t2):
    return sum(1 for x in res.recs if x.allowed and x.vars.get("degraded") is True
               and t1 <= x.sent <= t2 and x.client.endswith("/%d" % agent))


def worst_of(res, key, agents):
    """key's worst excess over b + r*T among the decisions of `agents` alone."""
    name, kind, b, r = res.keys[key]
    mine = [x for x in res.recs if x.client.startswith(key + "/")
            and int(x.client.rsplit("/", 1)[1]) in agents]
    return fleet.worst_window(mine, b, r, True)[0]


def admitted_by_redis(res, key, agent, t1, t2):
    """key's requests from agent sent in [t1, t2] that Redis admitted (not
    degraded)."""
    return sum(1 for x in res.recs if x.allowed and x.vars.get("degraded") is not True
               and t1 <= x.sent <= t2 and x.client == "%s/%d" % (key, agent))
