# SPDX-License-Identifier: Apache-2.0
"""Redis as production runs it (issue 23): a Redis that can evict the agent's
keys (INFO read at connect and every minute, [redis] require_noeviction), a
fail-open that opens ([fallback] share = auto: 1/N of the fleet seen through
heartbeats in Redis), and TLS through a local tunnel (HAProxy, the kit's
haproxy/redis-tls-tunnel.cfg) to a redis-server that speaks only TLS."""
import os
import shutil
import subprocess
import tempfile
import unittest

import fleet
import test_redis_topologies as topo
import harness
from harness import AGENT, BENCH, TOP, Agent, Proc, Redis, free_port, wait_port

RULE = "[rule:api]\nkey = key\nrate = 10/1h\n"  # burst 10, one token per 6 min


def wait_for(pred, timeout=15.0, step=0.05):
    """harness.wait_for, with this module's defaults."""
    return harness.wait_for(pred, timeout, step)


def decide_n(agent, n, key=None):
    """n decisions for one fresh key on one connection: (allowed, answers)."""
    key = key or fleet.unique()
    c = fleet.Seq(agent.addr)
    try:
        got = [c.decide(key=key) for _ in range(n)]
    finally:
        c.close()
    return sum(1 for g in got if g["blocked"] is False), got


EVICT_WARNING = '"redis can evict the agent\'s keys'
LRU = ["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]


class Eviction(unittest.TestCase):
    """INFO: maxmemory, maxmemory_policy, evicted_keys on the Redis in use."""

    def start(self, redis_args=(), extra="", acl=None):
        self.redis = Redis(args=list(redis_args))
        if acl:
            self.redis.cli(*acl)
        ini = fleet.redis_ini(self.redis.port, share="auto")
        ini = ini.replace("[lease]", extra + "\n[lease]", 1)
        self.agent = Agent(ini + RULE, workers=1)
        return self.agent

    def tearDown(self):
        self.redis.stop()
        self.agent.stop()

    def reconnect(self):
        """Drop the agent's connection: it reconnects and asks INFO again."""
        before = self.agent.output().count('"redis up"')
        self.redis.cli("CLIENT", "KILL", "TYPE", "normal")
        self.assertTrue(wait_for(lambda: self.agent.output().count('"redis up"') > before),
                        self.agent.output()[-2000:])

    def test_allkeys_lru_warned_once(self):
        a = self.start(LRU)
        fleet.wait_redis_up(a)
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_eviction_possible") == 1),
                        a.output()[-2000:])
        self.assertEqual(a.metric("spoa_ratelimit_redis_evicted_keys"), 0)
        self.reconnect()  # asked again at the new connection: no second warning
        n, got = decide_n(a, 12)
        self.assertEqual(n, 10, got)
        self.assertTrue(all(g.get("degraded") is not True for g in got), got)
        lines = [l for l in a.output().splitlines() if EVICT_WARNING in l]
        print("\n  " + "\n  ".join(lines))
        self.assertEqual(len(lines), 1, a.output()[-3000:])
        self.assertIn("maxmemory_policy=allkeys-lru", lines[0])
        self.assertIn("maxmemory=2097152", lines[0])

    def test_evictions_counted(self):
        """Key churn on a 2 MB allkeys-lru Redis: evicted_keys shows in the
        gauge and in a warning (read here at a reconnect; else every minute)."""
        a = self.start(LRU)
        fleet.wait_redis_up(a)
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_eviction_possible") == 1))
        out = subprocess.run([BENCH, "-a", "127.0.0.1:%d" % a.port, "-c", "4", "-p", "20",
                              "-n", "40000", "-k", "10000000"], capture_output=True, text=True,
                             timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        evicted = int(self.redis.cli("INFO", "stats").split("evicted_keys:")[1].split()[0])
        self.assertGreater(evicted, 0, "no eviction: the churn did not fill 2 MB")
        self.reconnect()
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_evicted_keys") > 0),
                        a.output()[-2000:])
        line = [l for l in a.output().splitlines() if '"redis evicted keys"' in l]
        self.assertEqual(len(line), 1, a.output()[-2000:])
        print("\n  %s\n  gauge %d" % (line[0], a.metric("spoa_ratelimit_redis_evicted_keys")))

    def test_noeviction_gauge_0(self):
        a = self.start(["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"])
        fleet.wait_redis_up(a)
        # 0 from the start; to see that INFO is really read, the policy goes
        # to allkeys-lru (gauge 1) and back (0), read at each reconnect
        self.assertEqual(a.metric("spoa_ratelimit_redis_eviction_possible"), 0)
        self.redis.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        self.reconnect()
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_eviction_possible") == 1))
        # the same as a warning (doc/operations.md, "Warnings"), naming the fix
        self.assertEqual(a.metric("spoa_ratelimit_warning", kind="redis_may_evict"), 1)
        line = [l for l in a.output().splitlines() if "kind=redis_may_evict" in l]
        self.assertEqual(len(line), 1, a.output()[-2000:])
        self.assertIn("maxmemory-policy allkeys-lru", line[0])
        self.assertIn("maxmemory-policy noeviction", line[0])
        self.redis.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        self.reconnect()
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_eviction_possible") == 0))
        self.assertEqual(a.metric("spoa_ratelimit_warning", kind="redis_may_evict"), 0)
        self.assertIn('"warning cleared" kind=redis_may_evict', a.output())
        self.assertIn('"redis no longer evicts"', a.output())
        self.assertEqual(a.output().count(EVICT_WARNING), 1)

    def test_require_noeviction_holds_redis_down(self):
        a = self.start(LRU, extra="require_noeviction = yes\n")
        self.assertTrue(wait_for(lambda: '"redis treated as down' in a.output()),
                        a.output()[-2000:])
        self.assertEqual(a.metric("spoa_ratelimit_redis_up"), 0)
        self.assertEqual(a.metric("spoa_ratelimit_redis_eviction_possible"), 1)
        n, got = decide_n(a, 3)
        self.assertTrue(all(g.get("degraded") is True for g in got), got)
        self.assertEqual(n, 3, got)  # fail open: the backstop decides
        line = [l for l in a.output().splitlines() if '"redis treated as down' in l][0]
        print("\n  " + line)
        self.assertIn("require_noeviction = yes", line)
        # the operator fixes the policy; the next INFO (here: at reconnect) lets it up
        self.redis.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        self.redis.cli("CLIENT", "KILL", "TYPE", "normal")
        fleet.wait_redis_up(a)
        n, got = decide_n(a, 2)
        self.assertTrue(all(g.get("degraded") is not True for g in got), got)
        self.assertEqual(a.metric("spoa_ratelimit_redis_eviction_possible"), 0)

    def test_info_denied_said_once(self):
        a = self.start(LRU, acl=("ACL", "SETUSER", "default", "-info"))
        fleet.wait_redis_up(a)
        self.assertTrue(wait_for(lambda: '"redis refused INFO' in a.output()),
                        a.output()[-2000:])
        self.reconnect()
        n, got = decide_n(a, 12)
        self.assertEqual(n, 10, got)
        self.assertTrue(all(g.get("degraded") is not True for g in got), got)
        lines = [l for l in a.output().splitlines() if '"redis refused INFO' in l]
        print("\n  " + "\n  ".join(lines))
        self.assertEqual(len(lines), 1, a.output()[-3000:])
        self.assertIn("NOPERM", lines[0])
        self.assertEqual(a.metric("spoa_ratelimit_redis_eviction_possible"), 0)


def only_own_tests(cls, base):
    """cls runs its own tests, not those it inherits from base."""
    for name in dir(base):
        if name.startswith("test_") and name not in cls.__dict__:
            setattr(cls, name, None)
    return cls


class SentinelEviction(topo.Sentinel):
    """The master Sentinel names is the Redis whose INFO counts."""

    def test_master_named_by_sentinel_is_checked(self):
        mport = free_port()
        self.server(mport, "--maxmemory", "2mb", "--maxmemory-policy", "volatile-lru")
        sport = self.start_sentinel(mport)
        agent, c = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n" % sport)
        self.assertTrue(wait_for(
            lambda: agent.metric("spoa_ratelimit_redis_eviction_possible") == 1))
        lines = [l for l in agent.output().splitlines() if EVICT_WARNING in l]
        self.assertEqual(len(lines), 1, agent.output()[-3000:])
        self.assertIn("addr=127.0.0.1:%d" % mport, lines[0])
        self.assertIn("maxmemory_policy=volatile-lru", lines[0])
        self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_fleet_agents") == 1))


only_own_tests(SentinelEviction, topo.Sentinel)


class ClusterEviction(topo.Cluster):
    """Every Cluster master is asked; the heartbeat's one key works there."""

    def test_every_master_is_checked(self):
        lru = self.ports[1]
        topo.cli(lru, "CONFIG", "SET", "maxmemory", "2mb")
        topo.cli(lru, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
        agent, c = self.agent("[redis]\ncluster = 127.0.0.1:%d\n" % self.ports[0])
        self.assertTrue(wait_for(
            lambda: agent.metric("spoa_ratelimit_redis_eviction_possible") == 1))
        self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_fleet_agents") == 1),
                        agent.output()[-2000:])
        lines = [l for l in agent.output().splitlines() if EVICT_WARNING in l]
        self.assertEqual(len(lines), 1, agent.output()[-3000:])
        self.assertIn("addr=127.0.0.1:%d" % lru, lines[0])
        # the heartbeat's set lives on the master of its slot
        owner = self.owner(int(topo.cli(self.ports[0], "CLUSTER", "KEYSLOT", "rl:agents")))
        self.assertEqual(topo.cli(owner, "ZCARD", "rl:agents"), "1")

    def test_require_noeviction_on_one_master(self):
        """require_noeviction: one evicting master holds the whole store down."""
        lru = self.ports[2]
        topo.cli(lru, "CONFIG", "SET", "maxmemory", "2mb")
        topo.cli(lru, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        a = Agent("[redis]\ncluster = 127.0.0.1:%d\ntimeout = 1s\nrequire_noeviction = yes\n\n"
                  % self.ports[0] + topo.RULES)
        self.addCleanup(a.stop)
        self.assertTrue(wait_for(lambda: '"redis treated as down' in a.output()),
                        a.output()[-2000:])
        self.assertEqual(a.metric("spoa_ratelimit_redis_up"), 0)


only_own_tests(ClusterEviction, topo.Cluster)


class ShareAuto(unittest.TestCase):
    """[fallback] share = auto: 1/N of each rule while Redis is away, N the
    agents live when it was last up, never below one token."""

    def setUp(self):
        self.redis = Redis()
        self.agents = []

    def tearDown(self):
        self.redis.stop()
        fleet.stop_all(self.agents)

    def fleet_of(self, n):
        ini = fleet.redis_ini(self.redis.port, share="auto") + RULE
        self.agents = [Agent(ini, workers=1) for _ in range(n)]
        for a in self.agents:
            fleet.wait_redis_up(a)
        for a in self.agents:
            self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_fleet_agents") == n,
                                     timeout=25),
                            "fleet_agents %r, not %d" % (a.metric("spoa_ratelimit_fleet_agents"), n))
        members = self.redis.cli("ZRANGE", "rl:agents", "0", "-1")
        self.assertEqual(len(members.splitlines()), n, members)
        self.assertIn("listen=127.0.0.1:%d" % self.agents[0].port, members)
        # Redis away: each agent's backstop decides
        self.redis.kill()
        for a in self.agents:
            self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_up") == 0))
        admitted = []
        for a in self.agents:
            n_ok, got = decide_n(a, 15)
            self.assertTrue(all(g.get("degraded") is True for g in got), got)
            admitted.append(n_ok)
        print("\n  fleet of %d, Redis down, burst 10: each agent admitted %r" % (n, admitted))
        # the gauge keeps the fleet as it was while Redis was up
        self.assertEqual(self.agents[0].metric("spoa_ratelimit_fleet_agents"), n)
        return admitted

    def test_lone_agent_gets_its_whole_burst(self):
        self.assertEqual(self.fleet_of(1), [10])

    def test_three_agents_get_a_third_each(self):
        self.assertEqual(self.fleet_of(3), [3, 3, 3])  # 10/3 rounded down

    def test_check_print_shows_auto(self):
        d = tempfile.mkdtemp(prefix="spoa-share-")
        try:
            path = os.path.join(d, "a.ini")
            with open(path, "w") as f:
                f.write(fleet.redis_ini(6379, share="auto") + RULE)
            out = subprocess.run([AGENT, "-c", path, "--check", "--print"], capture_output=True,
                                 text=True, timeout=10)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("\nshare = auto\n", out.stdout)
            self.assertIn("\nrequire_noeviction = no\n", out.stdout)
            with open(path, "w") as f:
                f.write(RULE)  # no [fallback]: the default
            out = subprocess.run([AGENT, "-c", path, "--check", "--print"], capture_output=True,
                                 text=True, timeout=10)
            self.assertIn("\nshare = auto\n", out.stdout)
        finally:
            shutil.rmtree(d, ignore_errors=True)


# ---- TLS through a tunnel -------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
            "-out", name + ".crt", "-days", "1", "-subj", "/CN=" + name, cwd=d)
    return os.path.join(d, name + ".crt")


def make_server_cert(d, ca):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "ext", cwd=d)


class TLSRedis(Proc):
    """redis-server speaking TLS only (port 0, tls-port)."""

    def __init__(self, d, ca):
        for attempt in range(3):
            self.port = free_port()
            super().__init__(["redis-server", "--port", "0", "--tls-port", str(self.port),
                              "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--tls-cert-file", os.path.join(d, "server.crt"),
                              "--tls-key-file", os.path.join(d, "server.key"),
                              "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"],
                             "redis-tls")
            try:
                wait_port(self.port, proc=self.p)
                return
            except RuntimeError:
                self.kill()
                if "in use" not in self.output() or attempt == 2:
                    raise


class Tunnel(Proc):
    """The kit's haproxy/redis-tls-tunnel.cfg, addresses and CA changed."""

    def __init__(self, d, redis_port, ca):
        self.port = free_port()
        with open(os.path.join(TOP, "haproxy", "redis-tls-tunnel.cfg")) as f:
            text = f.read()
        for old, new in (("127.0.0.1:6390", "127.0.0.1:%d" % self.port),
                         ("redis.example:6380", "127.0.0.1:%d" % redis_port),
                         ("/etc/ssl/certs/redis-ca.pem", ca),
                         ("redis.example", "localhost")):
            if old not in text:
                raise AssertionError("%r not in redis-tls-tunnel.cfg" % old)
            text = text.replace(old, new)
        # every connection logged on stdout: the tests see the agent's attempts
        text = "global\n    log stdout format raw local0 info\n\n" + text.replace(
            "    mode tcp\n", "    mode tcp\n    log global\n    option tcplog\n", 1)
        self.cfg = os.path.join(d, "tunnel-%d.cfg" % self.port)
        with open(self.cfg, "w") as f:
            f.write(text)
        super().__init__(["haproxy", "-db", "-f", self.cfg], "haproxy-tunnel")
        wait_port(self.port, proc=self.p)


class Stunnel(Proc):
    """contrib/stunnel-redis.conf, addresses and CA changed, in the
    foreground, no pid file, no change of user."""

    def __init__(self, d, redis_port, ca):
        self.port = free_port()
        with open(os.path.join(TOP, "contrib", "stunnel-redis.conf")) as f:
            text = f.read()
        for old, new in (("accept = 127.0.0.1:6390", "accept = 127.0.0.1:%d" % self.port),
                         ("connect = redis.example:6380", "connect = 127.0.0.1:%d" % redis_port),
                         ("CAfile = /etc/ssl/certs/redis-ca.pem", "CAfile = " + ca),
                         ("redis.example", "localhost"),
                         ("pid = /run/stunnel-redis.pid", "pid ="),
                         ("setuid = stunnel4\n", ""), ("setgid = stunnel4\n", "")):
            if old not in text:
                raise AssertionError("%r not in stunnel-redis.conf" % old)
            text = text.replace(old, new)
        self.cfg = os.path.join(d, "stunnel-%d.conf" % self.port)
        with open(self.cfg, "w") as f:
            f.write("foreground = yes\n" + text)
        super().__init__([shutil.which("stunnel4") or "stunnel", self.cfg], "stunnel")
        wait_port(self.port, proc=self.p)

    def attempts(self):
        """Connections stunnel gave up on: a failed handshake to Redis."""
        return self.output().count("certificate verify failed")


class TunnelCase:
    """The agent through a tunnel to a TLS-only redis-server: decisions exact;
    a tunnel that trusts another CA never gives the agent a Redis."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="redis-tls-")
        cls.ca = make_ca(cls.dir, "ca")
        cls.other_ca = make_ca(cls.dir, "other-ca")
        make_server_cert(cls.dir, os.path.join(cls.dir, "ca"))
        cls.redis = TLSRedis(cls.dir, cls.ca)

    @classmethod
    def tearDownClass(cls):
        cls.redis.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.procs = []

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()

    def test_decisions_exact_through_tunnel(self):
        tun = self.tunnel(self.redis.port, self.ca)
        self.procs.append(tun)
        a = Agent(fleet.redis_ini(tun.port, share="auto") + "[rule:api]\nkey = key\n"
                  "rate = 5/1h\nlease = off\n", workers=1)
        self.procs.append(a)
        fleet.wait_redis_up(a)
        n, got = decide_n(a, 8, key="tls-key")
        self.assertEqual([g["blocked"] for g in got], [False] * 5 + [True] * 3, got)
        self.assertTrue(all(g.get("degraded") is not True for g in got), got)
        # the bucket is in the TLS-only Redis (read through the tunnel)
        keys = subprocess.run(["redis-cli", "-p", str(tun.port), "--scan", "--pattern",
                               "rl:t2:api:*"], capture_output=True, text=True, timeout=10)
        self.assertIn("tls-key", keys.stdout)

    def test_wrong_ca_unreachable(self):
        """Verification is really on."""
        tun = self.tunnel(self.redis.port, self.other_ca)
        self.procs.append(tun)
        a = Agent(fleet.redis_ini(tun.port, share="auto") + RULE, workers=1)
        self.procs.append(a)
        # the agent connects to the tunnel, which closes it after the failed
        # handshake: wait until the tunnel has logged a few of its attempts
        self.assertTrue(wait_for(lambda: tun.attempts() >= 3, timeout=20),
                        tun.output()[-2000:])
        cli = subprocess.run(["redis-cli", "-p", str(tun.port), "PING"], capture_output=True,
                             text=True, timeout=10)
        self.assertNotIn("PONG", cli.stdout + cli.stderr)
        self.assertEqual(a.metric("spoa_ratelimit_redis_up"), 0, a.output()[-2000:])
        n, got = decide_n(a, 2)
        self.assertTrue(all(g.get("degraded") is True for g in got), got)
        self.assertNotIn('"redis up"', a.output())


@unittest.skipUnless(shutil.which("haproxy") and shutil.which("openssl"), "needs haproxy, openssl")
class TLSTunnel(TunnelCase, unittest.TestCase):
    """The kit's haproxy/redis-tls-tunnel.cfg in Debian's HAProxy."""

    def tunnel(self, port, ca):
        t = Tunnel(self.dir, port, ca)
        t.attempts = lambda: t.output().count("redis-tls/redis ")
        return t


@unittest.skipUnless((shutil.which("stunnel4") or shutil.which("stunnel"))
                     and shutil.which("openssl"), "needs stunnel4 (Debian package), openssl")
class StunnelTunnel(TunnelCase, unittest.TestCase):
    """contrib/stunnel-redis.conf in Debian's stunnel4."""

    def tunnel(self, port, ca):
        return Stunnel(self.dir, port, ca)


if __name__ == "__main__":
    unittest.main()
