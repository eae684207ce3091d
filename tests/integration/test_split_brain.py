# SPDX-License-Identifier: Apache-2.0
"""No split brain (issue 42): what keeps an agent from writing to a master
that may have been replaced, against real redis-server processes (and a real
Sentinel, redis-server --sentinel) on loopback.

- NOREPLICAS: a master with min-replicas-to-write 1 and no replica refuses
  every write. The kind is counted by name, the redis_errors warning names
  it, decisions fall back (`degraded`) with the backoff of an unreachable
  server; lifting the setting brings the agent back by itself, and the
  warning clears after [redis] errors_quiet without an error reply.
- TRYAGAIN: with prefix = {rl}: every key is in one slot; migrating half
  of the keys under pipelined load makes the source answer TRYAGAIN to the
  batches holding keys of both halves. The agent sends such a batch's calls
  again one by one at once (counted by name, logged at debug): each runs on
  the source or follows its -ASK to the target; it keeps answering, and once
  the migration is done decides on the new owner.
- A Sentinel that stops answering while the master stays up: past [redis]
  sentinel_window the master counts as unconfirmed (redis_unconfirmed,
  degraded decisions, redis_up 0); the sentinel back, the agent reconnects
  and the warning clears. A window not shorter than the sentinels'
  down-after-milliseconds (read with SENTINEL MASTER) is warned about.

Every wait polls a condition with a deadline; nothing depends on speed."""
import os
import signal
import time
import unittest

import harness
import spop
import test_redis_topologies as topo
from harness import Proc, free_port, wait_port
from test_batch import bench_async
from test_redis_production import only_own_tests
from test_redis_auth import AuthCase, cli


class NoReplicas(AuthCase):
    def test_noreplicas_counted_warned_and_lifted(self):
        r = self.redis()
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\nerrors_quiet = 5s\n" % r.port)
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "before")
        self.assertEqual(cli(r.port, "CONFIG", "SET", "min-replicas-to-write", "1"), "OK")
        self.assertIs(c.decide(key="no-replica").get("degraded"), True)
        self.wait_log(a, "msg=warning kind=redis_errors")
        self.wait_log(a, "min-replicas-to-write (NOREPLICAS)")
        self.wait_up(a, 0)
        self.assert_degraded_without_calls(a, c, "NOREPLICAS")
        self.assertEqual(a.metric("spoa_ratelimit_redis_error_replies_total", kind="other"), 0)
        self.assertNotIn("warning cleared", a.output())  # the probes keep getting it
        # lifted: the probe passes, by itself; the warning clears once quiet
        self.assertEqual(cli(r.port, "CONFIG", "SET", "min-replicas-to-write", "0"), "OK")
        self.wait_up(a, 1, timeout=15)
        self.assert_ten_of(c, "lifted")
        self.wait_log(a, 'msg="warning cleared" kind=redis_errors', timeout=30)


class Unconfirmed(AuthCase):
    def sentinel(self, master_port, extra=""):
        port = free_port()
        conf = os.path.join(self.dir, "sentinel-%d.conf" % port)
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds mymaster 1000\n"
                    "sentinel failover-timeout mymaster 5000\n%s"
                    % (port, self.dir, master_port, extra))
        s = Proc(["redis-server", conf, "--sentinel"], "sentinel", cwd=self.dir)
        self.servers.append(s)
        wait_port(port, proc=s.p)
        return port, s

    def test_no_sentinel_past_the_window(self):
        m = self.redis()
        sport, s = self.sentinel(m.port)
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n"
                       "sentinel_window = 2s\n" % sport)
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "confirmed")
        # the sentinels start a failover after 1 s (down-after-milliseconds):
        # a 2 s window is too long to keep the agent off a replaced master
        self.wait_log(a, "sentinel_window is not shorter than the sentinels' "
                      "down-after-milliseconds")
        self.assertIn("sentinel_window_ms=2000 down_after_ms=1000 failover_timeout_ms=5000",
                      a.output())
        self.assertNotIn("kind=redis_unconfirmed", a.output())
        # the sentinel stops answering (its socket still accepts): the master
        # stays up and writable, but nobody confirms it any more
        s.p.send_signal(signal.SIGSTOP)
        self.addCleanup(s.p.send_signal, signal.SIGCONT)
        self.wait_log(a, "msg=warning kind=redis_unconfirmed", timeout=20)
        self.wait_up(a, 0)
        self.assertEqual(cli(m.port, "PING"), "PONG")
        got = [c.decide(key="cut-%d" % i) for i in range(5)]
        self.assertEqual([g for g in got if g.get("degraded") is not True], [], got)
        # the sentinel answers again: reconnected (ROLE checked), warning cleared
        s.p.send_signal(signal.SIGCONT)
        self.wait_log(a, 'msg="warning cleared" kind=redis_unconfirmed', timeout=20)
        self.wait_up(a, 1, timeout=20)
        self.assert_ten_of(c, "confirmed-again")

    def test_sentinel_master_refused_is_no_error(self):
        """An ACL that lets the agent ask where the master is but not SENTINEL
        MASTER: the window is not checked, and that is no error reply."""
        m = self.redis()
        sport, s = self.sentinel(m.port, "user default off\n"
                                 "user lim on >pw +auth +ping +sentinel|get-master-addr-by-name\n")
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n"
                       "sentinel_username = lim\nsentinel_password = pw\n" % sport,
                       log_level="debug")
        self.wait_up(a)
        self.wait_log(a, '"sentinel timing not read" master=mymaster err="NOPERM')
        self.assert_ten_of(self.seq(a), "acl")
        self.assertEqual(a.metric("spoa_ratelimit_redis_error_replies_total", kind="NOPERM"), 0)
        self.assertNotIn("kind=redis_errors", a.output())

    def test_sentinel_killed_past_the_window(self):
        m = self.redis()
        sport, s = self.sentinel(m.port)
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n"
                       "sentinel_window = 2s\n" % sport)
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "confirmed")
        s.kill()
        self.wait_log(a, "msg=warning kind=redis_unconfirmed", timeout=20)
        self.wait_up(a, 0)
        self.assertIs(c.decide(key="cut").get("degraded"), True)
        self.assertIn("no sentinel has confirmed master mymaster", a.output())


TRY_RULES = """
[rule:exact]
key = key
match = path ^/exact/
rate = 50/1s
burst = 10
lease = off
"""


class TryAgain(topo.Cluster):
    def test_tryagain_sent_again_during_a_one_slot_migration(self):
        agent = harness.Agent("[redis]\ncluster = 127.0.0.1:%d\nprefix = {rl}:\ntimeout = 1s\n\n%s"
                              % (self.ports[0], TRY_RULES), extra_agent="log_level = debug\n")
        harness.stop_cleanly(self, agent)
        self.assertTrue(topo.wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1),
                        "redis never up")
        slot = int(topo.cli(self.ports[0], "CLUSTER", "KEYSLOT", "{rl}"))
        src = self.owner(slot)
        dst = [p for p in self.ports if p != src][0]
        t, res = bench_async(agent, "/exact/x", 6, keys=40)

        def scan():
            ks = topo.cli(src, "--scan", "--pattern", "{rl}:t2:*").split()
            return ks if len(ks) >= 20 else None
        keys = topo.wait_for(scan, timeout=20)
        self.assertTrue(keys, "the load made fewer than 20 keys")
        self.assertEqual(topo.cli(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.ids[src]),
                         "OK")
        self.assertEqual(topo.cli(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.ids[dst]),
                         "OK")
        half = keys[:len(keys) // 2]
        self.assertEqual(topo.cli(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *half),
                         "OK")
        # batches holding keys of both halves meet TRYAGAIN until the rest moves
        topo.wait_for(lambda: (agent.metric("spoa_ratelimit_redis_error_replies_total",
                                            kind="TRYAGAIN") or 0) > 0, timeout=5)
        tried = agent.metric("spoa_ratelimit_redis_error_replies_total", kind="TRYAGAIN")
        # the rest, however many keys the load adds meanwhile
        def moved():
            rest = topo.cli(src, "CLUSTER", "GETKEYSINSLOT", slot, 1000).split()
            if rest:
                topo.cli(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *rest)
            return topo.cli(src, "CLUSTER", "COUNTKEYSINSLOT", slot) == "0"
        self.assertTrue(topo.wait_for(moved, timeout=20), "keys left on the source")
        for p in self.ports:
            self.assertEqual(topo.cli(p, "CLUSTER", "SETSLOT", slot, "NODE", self.ids[dst]), "OK")
        t.join(60)
        self.assertEqual(res.get("rc"), 0, res.get("out"))
        self.assertEqual(res.get("errors"), 0, res.get("out"))
        self.assertGreater(tried or 0, 0, "no batch held keys of both halves: the load did "
                           "not batch\n" + res.get("out", ""))
        # a batch meeting TRYAGAIN sends its calls one by one, at once: each
        # runs on the source or follows its -ASK to the target
        self.assertIn('"redis TRYAGAIN: sending a batch\'s calls one by one"', agent.output())
        self.assertIn('err="ASK %d ' % slot, agent.output())
        c = spop.Client(agent.addr)
        c.handshake()
        self.addCleanup(c.close)
        sid = [0]

        def global_again():
            sid[0] += 1
            g = c.decide({"key": "after-%d" % sid[0], "path": "/exact/x"}, stream=sid[0], fid=1)
            return g if g.get("degraded") is not True else None
        got = topo.wait_for(global_again, timeout=10)
        self.assertTrue(got, "decisions never global again after the migration")
        self.assertIs(got.get("blocked"), False, got)


only_own_tests(TryAgain, topo.Cluster)


if __name__ == "__main__":
    unittest.main()
