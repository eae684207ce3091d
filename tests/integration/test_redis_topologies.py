# SPDX-License-Identifier: Apache-2.0
"""Redis topologies other than one url: a master found through Sentinel (and
followed through a failover), and a Redis Cluster of three masters (keys
routed by slot and spread over the nodes, a slot migrated under a running
agent: -ASK, then -MOVED; a master down: only its keys fall back).

Every test starts its own redis-server processes on free loopback ports, in a
temporary directory, and stops them at the end (agents first, so they can
give their leases back; agents must exit 0 on SIGTERM)."""
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.parse

import spop
import test_redis_keepalive
from harness import Agent, Proc, free_port, stop_cleanly, wait_for, wait_port

RULES = """
[rule:t]
key = key
rate = 10/1m
burst = 10

[rule:x]
key = xkey
rate = 10/1m
burst = 10
lease = off
"""


def cli(port, *args, timeout=10):
    return subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout).stdout.strip()


def cluster_port():
    """A free port whose cluster bus port (+10000) is free and valid too."""
    return free_port(plus=(10000,))


def stats_call(agent, method, path):
    c = http.client.HTTPConnection("127.0.0.1", agent.stats_port, timeout=10)
    try:
        c.request(method, path)
        r = c.getresponse()
        body = r.read().decode()
        if r.status != 200:
            raise AssertionError("%s %s: %d %s" % (method, path, r.status, body))
        return json.loads(body)
    finally:
        c.close()


def key_state(agent, rule, key):
    return stats_call(agent, "GET", "/key?" + urllib.parse.urlencode(dict(rule=rule, key=key)))


def post_reset(agent, rule, key):
    return stats_call(agent, "POST", "/reset?" + urllib.parse.urlencode(dict(rule=rule, key=key)))


def info(port, section):
    out = {}
    for line in cli(port, "INFO", section).splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


class TopologyCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rl-topo-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.servers = []
        # registered before any agent's: runs after the agents have stopped
        self.addCleanup(lambda: [s.kill() for s in self.servers])
        self.sid = 0

    def server_argv(self, port):
        return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--protected-mode", "no", "--dir", self.dir]

    def server(self, port, *extra, name="redis"):
        p = Proc(self.server_argv(port) + [str(a) for a in extra], name, cwd=self.dir)
        self.servers.append(p)
        wait_port(port, proc=p.p)
        return p

    def start_cluster(self, *extra):
        """Three masters, no replicas, on ports of their own (self.ports), each
        started with the server options extra; waits for cluster_state:ok."""
        self.ports = [cluster_port() for _ in range(3)]
        for p in self.ports:
            self.server(p, "--cluster-enabled", "yes",
                        "--cluster-config-file", os.path.join(self.dir, "nodes-%d.conf" % p),
                        "--cluster-node-timeout", "2000", *extra)
        out = subprocess.run(["redis-cli", "--cluster", "create"] +
                             ["127.0.0.1:%d" % p for p in self.ports] +
                             ["--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertTrue(wait_for(lambda: all("cluster_state:ok" in cli(p, "CLUSTER", "INFO")
                                             for p in self.ports), timeout=15),
                        "cluster never ok")

    def agent(self, redis_section, log_level="info"):
        # timeout 1s: these tests are about routing and failover, and fail on
        # a degraded answer; a shorter timeout turns one stall of a loaded
        # machine (an ASan agent, a descheduled Redis) into one
        a = Agent(redis_section + "timeout = 1s\n\n" + RULES,
                  extra_agent="log_level = %s\n" % log_level)

        stop_cleanly(self, a)
        ok = wait_for(lambda: a.p.poll() is None and a.metric("spoa_ratelimit_redis_up") == 1,
                      timeout=10)
        self.assertTrue(ok, "redis never up:\n" + a.output()[-3000:])
        c = spop.Client(a.addr)
        c.handshake()
        self.addCleanup(c.close)
        return a, c

    def decide(self, c, **args):
        self.sid += 1
        return c.decide(args, stream=self.sid, fid=1)

    def assert_ten_of(self, got, n, what):
        blocked = [g.get("blocked") for g in got]
        self.assertEqual(blocked, [False] * 10 + [True] * (n - 10), "%s: %r" % (what, got))
        self.assertEqual([g.get("remaining") for g in got[:10]], list(range(9, -1, -1)),
                         "%s: %r" % (what, got))
        self.assertEqual([g for g in got if g.get("degraded")], [], what)


# ---- Sentinel ----------------------------------------------------------------


class Sentinel(TopologyCase):
    def start_sentinel(self, master_port):
        port = free_port()
        conf = os.path.join(self.dir, "sentinel-%d.conf" % port)
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds mymaster 1000\n"
                    "sentinel failover-timeout mymaster 5000\n"
                    % (port, self.dir, master_port))
        p = Proc(["redis-server", conf, "--sentinel"], "sentinel", cwd=self.dir)
        self.servers.append(p)
        wait_port(port, proc=p.p)
        return port

    def test_master_through_sentinel_and_failover(self):
        mport, rport = free_port(), free_port()
        self.server(mport)
        self.server(rport, "--replicaof", "127.0.0.1", mport)
        self.assertTrue(wait_for(lambda: info(rport, "replication").get("master_link_status")
                                 == "up"), "replica never synced")
        sport = self.start_sentinel(mport)
        agent, c = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n" % sport)

        got = [self.decide(c, key="s1") for _ in range(14)]
        self.assert_ten_of(got, 14, "through sentinel")
        self.assertEqual(agent.metric("spoa_ratelimit_redis_up"), 1)
        self.assertEqual(cli(mport, "EXISTS", "rl:t2:t:s1"), "1")
        self.assertIn('"redis master" master=mymaster addr=127.0.0.1:%d' % mport, agent.output())
        # GET /key reads the bucket on the master the sentinels name, POST
        # /reset clears it there (what leases hold stays counted)
        st = key_state(agent, "t", "s1")
        self.assertEqual(st["redis_key"], "rl:t2:t:s1")
        self.assertNotIn("error", st["redis"])
        self.assertIs(st["redis"]["exists"], True, st)
        self.assertLess(st["redis"]["tokens_now"], 1, st)
        r = post_reset(agent, "t", "s1")
        self.assertIs(r["redis"]["reset"], True, r)
        self.assertEqual(r["redis"]["remaining"] + r["redis"]["held"], 10, r)
        self.assertIs(self.decide(c, key="s1")["blocked"], False)

        # Failover: the replica becomes the master; the agent follows.
        def failover():
            return cli(sport, "SENTINEL", "FAILOVER", "mymaster") == "OK"
        self.assertTrue(wait_for(failover, timeout=15, step=0.5), "sentinel refused FAILOVER")
        self.assertTrue(wait_for(lambda: cli(sport, "SENTINEL", "get-master-addr-by-name",
                                             "mymaster").split() == ["127.0.0.1", str(rport)],
                                 timeout=15), "failover did not complete")
        t0 = time.monotonic()
        n = [0]

        def on_new_master():
            n[0] += 1
            key = "fo-%d" % n[0]
            r = self.decide(c, key=key)
            return (r.get("degraded") is not True and r["blocked"] is False
                    and cli(rport, "EXISTS", "rl:t2:t:" + key) == "1")
        self.assertTrue(wait_for(on_new_master, timeout=10, step=0.1),
                        "decisions did not move to the new master:\n" + agent.output()[-3000:])
        self.assertLess(time.monotonic() - t0, 10)
        self.assertIn('"redis master" master=mymaster addr=127.0.0.1:%d' % rport, agent.output())
        got = [self.decide(c, xkey="after-failover") for _ in range(12)]
        self.assert_ten_of(got, 12, "exact rule on the new master")
        self.assertEqual(agent.metric("spoa_ratelimit_redis_up"), 1)


# ---- Cluster -------------------------------------------------------------------


class Cluster(TopologyCase):
    def setUp(self):
        super().setUp()
        # survivors keep serving their slots while a master is down
        self.start_cluster("--cluster-require-full-coverage", "no")
        self.ids = {p: cli(p, "CLUSTER", "MYID") for p in self.ports}

    def owner(self, slot):
        for entry in self.slots():
            if entry[0] <= slot <= entry[1]:
                return entry[2]
        return None

    def slots(self):
        """[(start, end, port)] of the masters, from CLUSTER NODES."""
        out = []
        for line in cli(self.ports[0], "CLUSTER", "NODES").splitlines():
            f = line.split()
            if len(f) < 8 or "master" not in f[2].split(","):
                continue
            port = int(f[1].split("@")[0].rsplit(":", 1)[1])
            for r in f[8:]:
                if r.startswith("["):  # importing/migrating marks
                    continue
                lo, _, hi = r.partition("-")
                out.append((int(lo), int(hi or lo), port))
        return out

    def test_keys_routed_by_slot(self):
        agent, c = self.agent("[redis]\ncluster = 127.0.0.1:%d\n" % self.ports[0],
                              log_level="debug")
        for i in range(30):
            got = [self.decide(c, key="user%d" % i) for _ in range(12)]
            self.assert_ten_of(got, 12, "key user%d" % i)
        per_node = {p: [k for k in cli(p, "--scan", "--pattern", "rl:t2:*").splitlines() if k]
                    for p in self.ports}
        self.assertEqual(sum(len(v) for v in per_node.values()), 30, per_node)
        self.assertGreaterEqual(len([p for p in self.ports if per_node[p]]), 2, per_node)
        for p, keys in per_node.items():
            for k in keys:  # each key sits on the master of its slot
                self.assertEqual(self.owner(int(cli(p, "CLUSTER", "KEYSLOT", k))), p, k)
        # our CRC16 agreed with Redis: not a single redirect was needed
        self.assertNotIn('"redis redirect"', agent.output())
        self.assertEqual(agent.metric("spoa_ratelimit_redis_up"), 1)
        # TCP keepalive on the connection to every node (test_redis_keepalive)
        for p in self.ports:
            clients = test_redis_keepalive.agent_clients(p)
            self.assertEqual(len(clients), 1, "agent connections to %d: %r" % (p, clients))
            test_redis_keepalive.assert_keepalive_sockets(self, p, clients)

    def test_slot_migrated_under_the_agent(self):
        agent, c = self.agent("[redis]\ncluster = 127.0.0.1:%d\n" % self.ports[0],
                              log_level="debug")
        key = "rl:t2:x:mover"
        slot = int(cli(self.ports[0], "CLUSTER", "KEYSLOT", key))
        src = self.owner(slot)
        dst = [p for p in self.ports if p != src][0]
        got = [self.decide(c, xkey="mover") for _ in range(3)]
        self.assertEqual(cli(src, "EXISTS", key), "1")

        # Migration under way, key moved: the source answers -ASK.
        self.assertEqual(cli(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.ids[src]), "OK")
        self.assertEqual(cli(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.ids[dst]), "OK")
        got.append(self.decide(c, xkey="mover"))  # still on the source
        self.assertEqual(cli(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", key), "OK")
        got += [self.decide(c, xkey="mover") for _ in range(3)]
        self.assertIn("ASK %d" % slot, agent.output())

        # Migration done: the source answers -MOVED, the agent follows.
        for p in self.ports:
            self.assertEqual(cli(p, "CLUSTER", "SETSLOT", slot, "NODE", self.ids[dst]), "OK")
        self.assertTrue(wait_for(lambda: self.owner(slot) == dst), "slot not moved")
        got += [self.decide(c, xkey="mover") for _ in range(5)]
        self.assertIn("MOVED %d" % slot, agent.output())
        self.assert_ten_of(got, 12, "migrated key")
        self.assertEqual(cli(dst, "EXISTS", key), "1")
        # the map was refreshed: the next calls go straight to the new master
        moves = agent.output().count("MOVED %d" % slot)
        more = [self.decide(c, xkey="mover") for _ in range(3)]
        self.assertEqual([g.get("blocked") for g in more], [True] * 3, more)
        self.assertEqual([g for g in more if g.get("degraded")], [])
        self.assertEqual(agent.output().count("MOVED %d" % slot), moves,
                         "still redirected after the map refresh")

    def test_rate_lease_on_its_slot(self):
        """A warm key's rate lease (tb_claim with a share, also inside a
        batch) lives on the master of the key's slot, and goes back at SIGTERM."""
        agent, c = self.agent("[lease]\nrate_leases = on\n\n[redis]\ncluster = 127.0.0.1:%d\n"
                              % self.ports[0])
        key = "rl:t2:t:warm"
        owner = self.owner(int(cli(self.ports[0], "CLUSTER", "KEYSLOT", key)))
        got = []
        for _ in range(4):
            got.append(self.decide(c, key="warm"))
            time.sleep(0.2)  # the traffic's shape: ~5 requests/s, warm
        self.assertEqual([g.get("blocked") for g in got], [False] * 4, got)
        fields = lambda: cli(owner, "HKEYS", key).split()
        self.assertTrue(wait_for(lambda: any(f.startswith("q:") for f in fields()), timeout=5),
                        "no rate lease on the slot's master: %r" % fields())
        self.assertEqual(agent.metric("spoa_ratelimit_lease_rate_keys"), 1)
        self.assertEqual(agent.stop(timeout=8), 0, agent.output()[-2000:])
        self.assertEqual([f for f in fields() if f.split(":")[0] in ("h", "q", "hn", "qn")], [],
                         "a lease left after SIGTERM: %r" % fields())

    def test_key_page_and_reset_on_each_master(self):
        """GET /key reads a client's Redis bucket from the master of its slot,
        and POST /reset clears it there: one key on each master."""
        agent, c = self.agent("[redis]\ncluster = 127.0.0.1:%d\n" % self.ports[0])
        where = {}
        for i in range(200):
            k = "page%d" % i
            where.setdefault(self.owner(int(cli(self.ports[0], "CLUSTER", "KEYSLOT",
                                                "rl:t2:x:" + k))), k)
            if len(where) == 3:
                break
        self.assertEqual(set(where), set(self.ports), where)
        for port, k in sorted(where.items()):
            got = [self.decide(c, xkey=k) for _ in range(11)]
            self.assert_ten_of(got, 11, "key %s" % k)
            st = key_state(agent, "x", k)
            self.assertEqual(st["redis_key"], "rl:t2:x:" + k)
            rb = st["redis"]
            self.assertNotIn("error", rb)
            self.assertIs(rb["exists"], True, rb)
            self.assertLess(rb["t"], 1, rb)  # ten spent of ten, refill 1 per 6 s
            self.assertEqual(cli(port, "EXISTS", "rl:t2:x:" + k), "1")
            r = post_reset(agent, "x", k)
            self.assertIs(r["redis"]["reset"], True, r)
            self.assertEqual(r["redis"]["remaining"], 10, r)
            self.assertEqual(key_state(agent, "x", k)["redis"]["tokens_now"], 10)
            self.assertIs(self.decide(c, xkey=k).get("blocked"), False)
        # a key no master holds: a full bucket, read from its master all the same
        st = key_state(agent, "x", "never-seen")
        self.assertEqual((st["redis"]["exists"], st["redis"]["tokens_now"]), (False, 10), st)

    def test_node_down_falls_back_for_its_keys_only(self):
        agent, c = self.agent("[redis]\ncluster = %s\n"
                              % ",".join("127.0.0.1:%d" % p for p in self.ports))
        # one client key per master (its bucket lives there)
        where = {}
        for i in range(200):
            k = "n%d" % i
            where.setdefault(self.owner(int(cli(self.ports[0], "CLUSTER", "KEYSLOT",
                                                "rl:t2:t:" + k))), k)
            if len(where) == 3:
                break
        victim = self.ports[1]
        down_key, up_key = where[victim], where[self.ports[0]]
        for k in (down_key, up_key):
            self.assertIsNot(self.decide(c, key=k).get("degraded"), True)
        node = self.servers[1]
        node.kill()
        time.sleep(0.3)
        self.assertTrue(wait_for(lambda: self.decide(c, key=down_key).get("degraded") is True,
                                 timeout=5), "the dead master's key did not fall back")
        for _ in range(5):
            r = self.decide(c, key=up_key)
            self.assertIsNot(r.get("degraded"), True, "a live master's key fell back: %r" % r)
        self.assertEqual(agent.metric("spoa_ratelimit_redis_up"), 1)
        # the master comes back (same port, same nodes file): its keys recover
        self.server(victim, *node.argv[len(self.server_argv(victim)):])
        self.assertTrue(wait_for(lambda: self.decide(c, key=down_key).get("degraded") is not True,
                                 timeout=15, step=0.2),
                        "the master's keys did not recover:\n" + agent.output()[-3000:])


if __name__ == "__main__":
    unittest.main()
