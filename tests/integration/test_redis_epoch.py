# SPDX-License-Identifier: Apache-2.0
"""Lost state is named (store_epoch.h): the agent marks its keyspace with an
epoch key, PREFIX "epoch", and checks it every second. FLUSHDB under load and
a Redis restarted empty raise redis_state_lost and count one loss per agent
in spoa_ratelimit_redis_state_lost_total; a restart that kept the keys
(SHUTDOWN SAVE, then the RDB loaded again) raises nothing. On a Redis Cluster
the epoch keys spread over the masters, so FLUSHALL of one master is named;
with a {hashtag} prefix one key does. A Sentinel failover to a replica that
lacked the keys is named once the agent follows it.

Deadlines are generous (10 s) so that a loaded machine passes; the time each
detection took is printed (the design's figure: within 2 s)."""
import os
import re
import shutil
import tempfile
import time
import unittest

import fleet
from fleet import LoadClient, unique, worst_window
from harness import Redis, free_port, wait_for
from test_redis import RedisCase
import test_redis_topologies as topo
from test_redis_topologies import TopologyCase, cli, info

RULE = """
[rule:hot]
key = key
rate = 200/1s
burst = 40
on_redis_down = closed
"""
B, R = 40, 200.0
WARNED = "msg=warning kind=redis_state_lost"
DEADLINE = 10.0
EPOCH_KEY = "rl:epoch"


def lost(agent):
    return agent.metric("spoa_ratelimit_redis_state_lost_total")


class Epoch(RedisCase):
    def wait_epoch(self, redis):
        """The epoch id, once an agent has written it."""
        self.assertTrue(wait_for(lambda: redis.cli("GET", EPOCH_KEY), DEADLINE),
                        "no epoch key %s in Redis" % EPOCH_KEY)
        return redis.cli("GET", EPOCH_KEY)

    def wait_named(self, agents, since, what):
        """Wait until every agent counted one loss; returns the seconds the
        slowest took after `since`."""
        took = []
        for a in agents:
            ok = wait_for(lambda: lost(a) == 1, DEADLINE, step=0.02)
            took.append(time.monotonic() - since)
            self.assertTrue(ok, "%s: no loss counted within %.0f s:\n%s"
                            % (what, DEADLINE, a.output()[-3000:]))
            self.assertTrue(wait_for(lambda: WARNED in a.output(), DEADLINE),
                            "%s: no redis_state_lost warning logged" % what)
        print("\n  %s: redis_state_lost named %.2f s after it (slowest of %d agent(s))"
              % (what, max(took), len(agents)))
        return max(took)

    def test_flushdb_under_load_is_named_once(self):
        """FLUSHDB while clients load a key: the loss is counted once, the
        warning is logged, the leases are voided, the keyspace gets a new
        epoch, and no window admits more than one extra b (b + r*T + b),
        decisions bracketed by their send and ACK times."""
        redis = self.start_redis()
        agent = self.start_agent(redis, RULE, workers=1, interval="100ms", ttl="1s",
                                 max_fraction="0.25")
        old = self.wait_epoch(redis)
        key = unique("flush")
        # under the rate while Redis is flushed (the agent holds leases then),
        # a flood after it (to take what the flush gave)
        clients = [LoadClient(agent.addr, {"key": key}, [(2.5, "paced", 75.0), (2.0, "flood", 4)],
                              name=i)
                   for i in range(2)]
        for c in clients:
            c.start()
        t0 = time.monotonic() + 0.05
        for c in clients:
            c.start_at(t0)
        time.sleep(max(0.0, t0 + 1.5 - time.monotonic()))
        self.assertEqual(redis.cli("FLUSHDB"), "OK")
        flushed = time.monotonic()
        self.wait_named([agent], flushed, "FLUSHDB under load")
        for c in clients:
            c.join(30)
        new = redis.cli("GET", EPOCH_KEY)
        self.assertTrue(new and new != old, "the keyspace was not marked again: %r" % new)
        dropped = re.search(r'msg="leases dropped: redis state lost" held=(\d+)', agent.output())
        self.assertTrue(dropped, "the leases were not settled")
        print("  leases voided at the detection: %s entries held tokens" % dropped.group(1))
        recs = fleet.collect(clients)
        ex, count, Tw, _, _ = worst_window(recs, 2 * B, R, True)
        print("  worst window %d in %.3f s: excess over b + r*T + b %.2f" % (count, Tw, ex))
        self.assertLessEqual(ex, 1e-9, "a window admitted more than b + r*T + one extra b")
        # one loss, counted once: later checks find the new epoch
        time.sleep(2.5)
        self.assertEqual(lost(agent), 1)
        self.assertEqual(agent.output().count(WARNED), 1)

    def test_restart_empty_is_named(self):
        """Redis killed and restarted empty on its port: named once the
        agent is connected again."""
        redis = self.start_redis()
        agent = self.start_agent(redis, RULE, workers=1)
        self.wait_epoch(redis)
        self.assertEqual(lost(agent), 0)
        redis.kill()
        killed = time.monotonic()
        redis = self.start_redis(redis.port)  # empty
        self.wait_named([agent], killed, "Redis restarted empty")
        self.assertTrue(redis.cli("GET", EPOCH_KEY), "the keyspace was not marked again")

    def test_restart_with_keys_is_not_named(self):
        """A restart that keeps the keys (SHUTDOWN SAVE, the RDB loaded at
        start) is no loss: the agent reconnects, finds its epoch, says
        nothing."""
        d = tempfile.mkdtemp(prefix="spoa-epoch-")
        self.addCleanup(shutil.rmtree, d, True)
        args = ["--dir", d, "--dbfilename", "dump.rdb"]
        redis = Redis(args=args)
        self._redises.append(redis)
        agent = self.start_agent(redis, RULE, workers=1)
        old = self.wait_epoch(redis)
        reconnects = self.metric(agent, "spoa_ratelimit_redis_reconnects_total")
        redis.cli("SHUTDOWN", "SAVE")
        redis.p.wait(10)
        self.assertTrue(os.path.exists(os.path.join(d, "dump.rdb")), "no RDB saved")
        redis = Redis(redis.port, args=args)
        self._redises.append(redis)
        self.assertEqual(redis.cli("GET", EPOCH_KEY), old, "the RDB did not keep the epoch")
        self.assertTrue(wait_for(lambda: self.metric(agent, "spoa_ratelimit_redis_reconnects_total")
                                 > reconnects, DEADLINE), "the agent did not reconnect")
        fleet.wait_redis_up(agent)
        # several checks after the reconnect (one at once, then every second)
        time.sleep(3.0)
        self.assertEqual(lost(agent), 0, agent.output()[-3000:])
        self.assertNotIn(WARNED, agent.output())
        self.assertEqual(redis.cli("GET", EPOCH_KEY), old)

    def test_two_agents_count_each_loss_once(self):
        """Two agents share one epoch; after FLUSHALL each counts the loss
        once, exactly one of them marks the keyspace again (its SET won) and
        both then agree on the new epoch."""
        redis = self.start_redis()
        agents = [self.start_agent(redis, RULE, workers=1) for _ in range(2)]
        old = self.wait_epoch(redis)
        time.sleep(1.5)  # both have checked it: they share the id
        for a in agents:
            self.assertIn('epoch="%s"' % old, a.output())
        self.assertEqual(redis.cli("FLUSHALL"), "OK")
        flushed = time.monotonic()
        self.wait_named(agents, flushed, "FLUSHALL, two agents")
        new = redis.cli("GET", EPOCH_KEY)
        self.assertTrue(new and new != old)
        time.sleep(2.5)
        logs = [a.output() for a in agents]
        self.assertEqual([lost(a) for a in agents], [1, 1])
        lines = [ln for log in logs for ln in log.splitlines() if 'msg="redis state lost"' in ln]
        self.assertEqual(len(lines), 2, lines)
        self.assertEqual(sum("by=this_agent" in ln for ln in lines), 1, lines)
        for ln in lines:
            self.assertIn('epoch="%s"' % new, ln)
            self.assertIn("epoch_was=%s" % old, ln)


class EpochOnCluster(TopologyCase):
    def test_flush_of_one_master_is_named(self):
        """Redis Cluster, three masters: the agent writes an epoch key in
        every range of 1024 slots, so each master holds some; FLUSHALL on one
        master alone is named, once."""
        self.start_cluster()
        agent, _ = self.agent("[redis]\ncluster = 127.0.0.1:%d\n" % self.ports[0])

        def marks():
            return {p: [k for k in cli(p, "--scan", "--pattern", "rl:epoch*").splitlines() if k]
                    for p in self.ports}
        self.assertTrue(wait_for(lambda: sum(len(v) for v in marks().values()) == 16,
                                 DEADLINE), marks())
        self.assertTrue(all(marks().values()), "a master holds no epoch key: %r" % marks())
        time.sleep(1.5)  # every key answered once: adopted
        self.assertEqual(lost(agent), 0)
        self.assertEqual(cli(self.ports[1], "FLUSHALL"), "OK")
        flushed = time.monotonic()
        ok = wait_for(lambda: lost(agent) == 1, DEADLINE, step=0.02)
        took = time.monotonic() - flushed
        self.assertTrue(ok, "FLUSHALL of one master not named:\n" + agent.output()[-3000:])
        print("\n  Cluster, FLUSHALL of one master of 3: named %.2f s after it" % took)
        self.assertTrue(wait_for(lambda: WARNED in agent.output(), DEADLINE))
        self.assertTrue(wait_for(lambda: marks()[self.ports[1]], DEADLINE), "not marked again")
        time.sleep(2.5)
        self.assertEqual(lost(agent), 1)
        line = [ln for ln in agent.output().splitlines() if 'msg="redis state lost"' in ln]
        self.assertEqual(len(line), 1, line)
        self.assertIn("keys=16", line[0])

    def test_hashtag_prefix_needs_one_key(self):
        """A prefix with a {hashtag} keeps every key in one slot: one epoch
        key, PREFIX "epoch", beside the buckets, sees every loss."""
        self.start_cluster()
        agent, _ = self.agent("[redis]\ncluster = 127.0.0.1:%d\nprefix = {rl}:\n" % self.ports[0])

        def marks():
            return sorted(k for p in self.ports
                          for k in cli(p, "--scan", "--pattern", "{rl}:epoch*").splitlines() if k)
        self.assertTrue(wait_for(lambda: marks(), DEADLINE), "no epoch key")
        time.sleep(1.5)
        self.assertEqual(marks(), ["{rl}:epoch"])
        self.assertEqual(lost(agent), 0)


class EpochOnSentinel(TopologyCase):
    def test_failover_to_a_replica_without_the_keys_is_named(self):
        """Sentinel: the replica lost its copy of the keys (writable, then
        FLUSHALL on it alone: not propagated); a failover promotes it. The
        agent follows the sentinels to it and names the loss, once."""
        mport, rport = free_port(), free_port()
        self.server(mport)
        self.server(rport, "--replicaof", "127.0.0.1", mport, "--replica-read-only", "no")
        self.assertTrue(wait_for(lambda: info(rport, "replication").get("master_link_status")
                                 == "up"), "replica never synced")
        sport = topo.Sentinel.start_sentinel(self, mport)
        agent, _ = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n" % sport)
        self.assertTrue(wait_for(lambda: cli(rport, "GET", EPOCH_KEY), DEADLINE),
                        "the epoch never reached the replica")
        self.assertEqual(cli(rport, "FLUSHALL"), "OK")
        self.assertEqual(cli(rport, "EXISTS", EPOCH_KEY), "0")
        self.assertEqual(lost(agent), 0)
        self.assertTrue(wait_for(lambda: cli(sport, "SENTINEL", "FAILOVER", "mymaster") == "OK",
                                 timeout=15, step=0.5), "sentinel refused FAILOVER")
        self.assertTrue(wait_for(lambda: cli(sport, "SENTINEL", "get-master-addr-by-name",
                                             "mymaster").split() == ["127.0.0.1", str(rport)],
                                 timeout=15), "failover did not complete")
        switched = time.monotonic()
        ok = wait_for(lambda: lost(agent) == 1, DEADLINE, step=0.02)
        took = time.monotonic() - switched
        self.assertTrue(ok, "failover to a replica without the keys not named:\n"
                        + agent.output()[-3000:])
        print("\n  Sentinel failover to a replica without the keys: named %.2f s after the "
              "sentinel named the new master" % took)
        self.assertTrue(wait_for(lambda: WARNED in agent.output(), DEADLINE))
        self.assertTrue(cli(rport, "GET", EPOCH_KEY), "the new master was not marked")
        time.sleep(2.5)
        self.assertEqual(lost(agent), 1)


if __name__ == "__main__":
    unittest.main()
