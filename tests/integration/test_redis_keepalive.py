# SPDX-License-Identifier: Apache-2.0
"""[redis] keepalive and TCP keepalive, against a real redis-server that
closes idle clients (`timeout 2`, as a proxy's idle timeout would):

- an agent left idle for 20 s keeps its Redis connection: no "redis
  connection lost", the same client ids in CLIENT LIST before and after,
  PINGs counted, no error; then a decision is exact (from Redis);
- its sockets to Redis have SO_KEEPALIVE (a keepalive timer in
  /proc/net/tcp), and so do its short-lived queries to a Sentinel (Cluster
  nodes: test_redis_topologies);
- with keepalive = 0 the same idle agent does lose its connection, which is
  what makes the first test mean something;
- a PING that Redis does not answer (Redis frozen) counts as an error and
  the watchdog drops the connection, as for any command."""
import os
import signal
import socket
import subprocess
import time
import unittest

import fleet
from harness import Agent, Redis, free_port, wait_for
from test_redis import RedisCase

RULES = """
[rule:exact]
key = key
rate = 3/1m
lease = off
"""

IDLE_S = 20


def agent_clients(port):
    """{id: 'ip:port'} of the clients in CLIENT LIST of the Redis on port,
    less the asking one."""
    out = {}
    listing = subprocess.run(["redis-cli", "-p", str(port), "CLIENT", "LIST"],
                             capture_output=True, text=True, timeout=10).stdout
    for line in listing.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("cmd", "").startswith("client"):
            continue  # this redis-cli
        out[f["id"]] = f["addr"]
    return out


def tcp_timer(local_port, remote_port):
    """The 'tr' field of the socket 127.0.0.1:local_port ->
    127.0.0.1:remote_port in /proc/net/tcp (2: keepalive timer), or None."""
    want = (":%04X" % local_port, ":%04X" % remote_port)
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[1].endswith(want[0]) and parts[2].endswith(want[1]):
                return int(parts[5].split(":")[0], 16)
    return None


def assert_keepalive_sockets(test, redis_port, clients):
    """Every agent socket to redis_port in clients ({id: 'ip:port'}, from
    agent_clients) has its keepalive timer armed."""
    for addr in clients.values():
        local = int(addr.rsplit(":", 1)[1])
        test.assertEqual(wait_for(lambda: tcp_timer(local, redis_port) == 2, timeout=2), True,
                         "no keepalive timer on the agent's socket %s -> %d (tr %r)"
                         % (addr, redis_port, tcp_timer(local, redis_port)))


class Keepalive(RedisCase):
    def start(self, keepalive=None, timeout="1s"):
        self.redis = Redis(args=["--timeout", "2"])
        self.addCleanup(self.redis.kill)
        ini = fleet.redis_ini(self.redis.port, timeout=timeout)
        if keepalive is not None:
            ini = ini.replace("[redis]\n", "[redis]\nkeepalive = %s\n" % keepalive)
        # the epoch check's EVAL and the resets' read ([rules] poll), each
        # every second by default, would keep the connection busy
        ini = ini.replace("[redis]\n", "[redis]\nepoch_check = 0\n")
        ini += "\n[rules]\npoll = 1h\n"
        self.agent = Agent(ini + RULES, workers=2)
        self.addCleanup(lambda: self.agent.stop(timeout=8))
        fleet.wait_redis_up(self.agent)

    def lost(self):
        return self.agent.output().count('"redis connection lost"')

    def test_idle_connection_survives_redis_timeout(self):
        """keepalive at its default (1s): 20 s without a request, Redis
        closing clients idle for 2 s, and the agent's connection lives on."""
        self.start()
        before = agent_clients(self.redis.port)
        self.assertGreaterEqual(len(before), 1, before)
        assert_keepalive_sockets(self, self.redis.port, before)
        errors = self.metric(self.agent, "spoa_ratelimit_redis_errors_total")
        time.sleep(IDLE_S)
        after = agent_clients(self.redis.port)
        self.assertEqual(after, before, "the agent's Redis connections changed while idle")
        self.assertEqual(self.lost(), 0, self.agent.output()[-2000:])
        pings = self.metric(self.agent, "spoa_ratelimit_redis_keepalives_total")
        # about one a second on each connection; a loaded machine may skip some
        self.assertGreaterEqual(pings, IDLE_S / 4 * len(before))
        self.assertLessEqual(pings, (IDLE_S + 5) * len(before) + 5)
        self.assertEqual(self.metric(self.agent, "spoa_ratelimit_redis_errors_total"), errors)
        self.assertEqual(self.metric(self.agent, "spoa_ratelimit_redis_up"), 1)
        # and Redis decides, exactly: 3 then blocked, none degraded
        c = self.seq(self.agent)
        key = fleet.unique()
        got = [c.decide(key=key) for _ in range(5)]
        self.assertEqual([g["blocked"] for g in got], [False] * 3 + [True] * 2, got)
        self.assertTrue(all(g.get("degraded") is not True for g in got), got)
        self.assertEqual(agent_clients(self.redis.port), before)

    def test_keepalive_off_idle_connection_dropped(self):
        """keepalive = 0: the same idle agent loses its connection to Redis'
        idle timeout (and reconnects): the setup above really is idle."""
        self.start(keepalive="0")
        before = agent_clients(self.redis.port)
        self.assertTrue(wait_for(lambda: self.lost() >= 1, timeout=15),
                        "no connection lost to Redis' timeout 2 with keepalive off:\n"
                        + self.agent.output()[-2000:])
        self.assertEqual(self.metric(self.agent, "spoa_ratelimit_redis_keepalives_total"), 0)
        fleet.wait_redis_up(self.agent)
        self.assertNotEqual(agent_clients(self.redis.port), before)

    def test_unanswered_ping_drops_connection(self):
        """Redis frozen while the agent is idle: the PING is not answered,
        counts as an error once past the timeout, and the watchdog drops the
        connection (after max(10 x timeout, 1 s)); thawed, the agent is back."""
        self.start(keepalive="200ms", timeout="100ms")
        errors = self.metric(self.agent, "spoa_ratelimit_redis_errors_total")
        os.kill(self.redis.p.pid, signal.SIGSTOP)
        try:
            ok = wait_for(lambda: "redis not answering; reconnecting" in self.agent.output(),
                          timeout=10)
        finally:
            os.kill(self.redis.p.pid, signal.SIGCONT)
        self.assertTrue(ok, self.agent.output()[-2000:])
        self.assertGreater(self.metric(self.agent, "spoa_ratelimit_redis_errors_total"), errors)
        fleet.wait_redis_up(self.agent)

    def test_sentinel_query_has_tcp_keepalive(self):
        """The agent's query to a Sentinel (here one that never answers) goes
        over a socket with TCP keepalive too."""
        lsock = socket.socket()
        self.addCleanup(lsock.close)
        port = free_port()
        lsock.bind(("127.0.0.1", port))
        lsock.listen(8)
        lsock.settimeout(10)
        agent = Agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = m\ntimeout = 2s\n" % port
                      + RULES, workers=1)
        self.addCleanup(lambda: agent.stop(timeout=8))
        conn, peer = lsock.accept()
        self.addCleanup(conn.close)
        self.assertTrue(wait_for(lambda: tcp_timer(peer[1], port) == 2, timeout=2),
                        "no keepalive timer on the agent's socket to the sentinel (tr %r)"
                        % tcp_timer(peer[1], port))


if __name__ == "__main__":
    unittest.main()
