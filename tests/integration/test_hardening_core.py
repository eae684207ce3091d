# SPDX-License-Identifier: Apache-2.0
"""Odd configs and hostile keys against the real agent (issue 11): ACKs that do
not fit HAProxy's smallest frame, absurd durations, max_entries, keys that
try to forge log lines. Standalone mode (no Redis) unless said otherwise."""
import os
import subprocess
import tempfile
import unittest

import harness
import spop
import test_redis_topologies as topo
from harness import Agent, AGENT, Redis

NAME40 = "r" * 40


def check(text):
    """Run --check on text; (exit code, stderr)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
        f.write(text)
    try:
        p = subprocess.run([AGENT, "-c", f.name, "--check"], capture_output=True, text=True,
                           timeout=10)
        return p.returncode, p.stderr, f.name
    finally:
        os.unlink(f.name)


class SmallFrame(unittest.TestCase):
    """HAProxy may offer max-frame-size 256. An ACK for a blocked request
    with a 40-character rule name takes 260 bytes: the agent used to answer
    with AGENT-DISCONNECT, and HAProxy let the request through."""

    def test_blocked_ack_fits_256(self):
        agent = Agent("[rule:%s]\nkey = key\nrate = 1/1h\nburst = 1\n" % NAME40)
        try:
            c = spop.Client(agent.addr)
            h = c.handshake(max_frame=256)
            self.assertEqual(h["max-frame-size"], 256)
            first = c.decide({"key": "k"}, stream=1, fid=1)
            self.assertIs(first["blocked"], False)
            self.assertEqual(first["rule"], NAME40)  # fits whole
            # Stream ids as large as HAProxy 2.6's global counter makes them.
            c.send(spop.notify(2 ** 40, 7, [("check-rate", [("key", "k")])]))
            f = c.recv_frame()
            self.assertIsNotNone(f, "connection closed instead of an ACK")
            self.assertEqual(f["type"], spop.ACK, "expected an ACK, got frame type %d: %r" %
                             (f["type"], spop.decode_kv(f["payload"])
                              if f["type"] == spop.AGENT_DISCONNECT else f))
            self.assertLessEqual(len(f["payload"]) + 30, 256)
            second = spop.decode_actions(f["payload"])
            self.assertEqual(second, {"blocked": True, "retry_after": 3600})
            # the connection is still usable
            third = c.decide({"key": "other"}, stream=3, fid=1)
            self.assertIs(third["blocked"], False)
            c.close()
            self.assertEqual(agent.metric("spoa_ratelimit_acks_truncated_total"), 1)
            self.assertEqual(agent.metric("spoa_ratelimit_protocol_errors_total", status="3"), 0)
        finally:
            rc = agent.stop()
            self.assertEqual(rc, 0, agent.output())

    def test_check_refuses_too_small_max_frame_size(self):
        rc, err, path = check("[agent]\nmax_frame_size = 256\n[rule:%s]\nrate = 1/1h\n" % NAME40)
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:2: max_frame_size 256 is too small for the ACK of rule '%s'"
                      % (path, NAME40), err)
        rc, err, _ = check("[agent]\nmax_frame_size = 256\n[rule:api-key]\nrate = 100/1m\n"
                           "burst = 20\n")
        self.assertEqual(rc, 0, err)


class Durations(unittest.TestCase):
    """Durations past a year are refused with FILE:LINE (they used to pass
    and leave the fallback backstop with period 0: no limit at all)."""

    def test_check_refuses_absurd_durations(self):
        rc, err, path = check("[rule:r]\nrate = 1/20000000d\n")
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:2: rate '1/20000000d': the duration is longer than the maximum of 365d"
                      % path, err)
        rc, err, path = check("[lease]\nttl = 366d\n")
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:2: duration '366d' for 'ttl' is longer than the maximum of 365d" % path,
                      err)
        rc, err, _ = check("[rule:r]\nrate = 1/365d\n[fallback]\nshare = 1e-300\n")
        self.assertEqual(rc, 0, err)

    def test_tiny_share_backstop_still_limits(self):
        """A year-long rate with the smallest share: the backstop (Redis
        unreachable) must still limit."""
        agent = Agent("[redis]\nurl = redis://127.0.0.1:1\ntimeout = 20ms\n"
                      "[fallback]\nshare = 1e-300\n"
                      "[rule:r]\nkey = key\nrate = 5/365d\nburst = 5\n")
        try:
            c = spop.Client(agent.addr)
            c.handshake()
            answers = [c.decide({"key": "k"}, stream=i + 1, fid=1) for i in range(3)]
            self.assertTrue(all(a.get("degraded") for a in answers), answers)
            self.assertIs(answers[0]["blocked"], False)
            self.assertIs(answers[1]["blocked"], True)
            self.assertIs(answers[2]["blocked"], True)
            c.close()
        finally:
            rc = agent.stop()
            self.assertEqual(rc, 0, agent.output())


def wait_for(pred, timeout=15.0, step=0.1):
    """harness.wait_for, with this module's defaults."""
    return harness.wait_for(pred, timeout, step)


class LogInjection(unittest.TestCase):
    """The most blocked key of a shadow rule is logged every 10 s. A key with
    '"' used to add fields to that line, one with a newline to add lines."""

    def test_client_key_cannot_forge_fields_or_lines(self):
        evil = 'x" level=error msg="forged\nts=2000-01-01T00:00:00.000Z level=error msg="forged'
        agent = Agent("[rule:sh]\nkey = key\nrate = 1/1m\nshadow = yes\n")
        try:
            c = spop.Client(agent.addr)
            c.handshake()
            for i in range(5):
                self.assertIs(c.decide({"key": evil}, stream=i + 1, fid=1)["blocked"], False)
            c.close()
            self.assertTrue(wait_for(lambda: "shadow rule would have blocked" in agent.output()))
            out = agent.output()
            lines = out.splitlines()
            for line in lines:
                self.assertRegex(line, r"^ts=\S+ level=(error|warn|info|debug) msg=")
                self.assertNotIn("2000-01-01", line.split(" ")[0])
            self.assertNotIn("level=error", "\n".join(l for l in lines if "forged" not in l))
            [line] = [l for l in lines if "shadow rule would have blocked" in l]
            # the sketch keeps 64 bytes of a key
            self.assertIn('top_key="x\\" level=error msg=\\"forged\\nts=2000-01-01T00:00:00.000Z '
                          'level=err"', line)
        finally:
            self.assertEqual(agent.stop(), 0)


class MaxEntries(unittest.TestCase):
    """Client-chosen keys used to create buckets without bound. Past
    [agent] max_entries the least recently used ones are dropped."""

    def pipeline(self, c, keys, first_stream):
        """One NOTIFY per key, all sent at once; the answers by key."""
        c.send(b"".join(spop.notify(first_stream + i, 1, [("check-rate", [("key", k)])])
                        for i, k in enumerate(keys)))
        out = {}
        for _ in keys:
            f = c.recv_frame()
            self.assertEqual(f["type"], spop.ACK)
            out[f["stream"] - first_stream] = spop.decode_actions(f["payload"])
        return [out[i] for i in range(len(keys))]

    def test_standalone_buckets_bounded_lru(self):
        agent = Agent("[rule:r]\nkey = key\nrate = 1/1h\nburst = 1\n",
                      extra_agent="max_entries = 1000\n")
        try:
            c = spop.Client(agent.addr)
            c.handshake()
            self.assertIs(c.decide({"key": "hot"}, stream=1, fid=1)["blocked"], False)
            sid = 10
            for batch in range(20):
                # 500 new clients, and the hot one every 10 requests
                keys = []
                for i in range(500):
                    keys.append("cold-%d-%d" % (batch, i))
                    if i % 10 == 9:
                        keys.append("hot")
                got = self.pipeline(c, keys, sid)
                sid += len(keys)
                for k, g in zip(keys, got):
                    # a new client passes; the hot one stays remembered: blocked
                    self.assertIs(g["blocked"], k == "hot", (k, g))
            c.close()
            # the gauge is refreshed every second
            self.assertTrue(wait_for(lambda: 1000 - 64 <= agent.metric("spoa_ratelimit_buckets")
                                     <= 1000 + 64), agent.metrics())
            self.assertGreaterEqual(agent.metric("spoa_ratelimit_evictions_total"),
                                    10001 - 1000 - 64)
        finally:
            self.assertEqual(agent.stop(), 0)

    def test_redis_lease_entries_bounded(self):
        # burst 1, each key twice: the second is denied, and a denied key's
        # record stays (the negative cache; a key seen once and allowed
        # leaves none), so 2,000 keys must be held within max_entries
        redis = Redis()
        agent = Agent("[redis]\nurl = redis://127.0.0.1:%d\ntimeout = 1s\n"
                      "[rule:r]\nkey = key\nrate = 1/1h\nburst = 1\n" % redis.port,
                      extra_agent="max_entries = 200\n")
        try:
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            c = spop.Client(agent.addr)
            c.handshake()
            sid, hot_allowed = 1, 0
            for batch in range(10):
                keys = ["k-%d-%d" % (batch, i // 2) for i in range(400)] + ["hot"] * 2
                got = self.pipeline(c, keys, sid)
                sid += len(keys)
                self.assertFalse([g for g in got if g.get("degraded")])
                self.assertEqual([g["blocked"] for g in got[:400]], [False, True] * 200)
                hot_allowed += sum(1 for g in got[400:] if not g["blocked"])
            # the hot key: 1 in all (Redis keeps the count), whatever was dropped
            got = self.pipeline(c, ["hot"] * 10, sid)
            hot_allowed += sum(1 for g in got if not g["blocked"])
            self.assertEqual(hot_allowed, 1)
            c.close()
            self.assertLessEqual(agent.metric("spoa_ratelimit_lease_keys"), 200 + 64)
            self.assertGreater(agent.metric("spoa_ratelimit_evictions_total"), 1500)
        finally:
            self.assertEqual(agent.stop(), 0)
            redis.stop()


class ClusterHashtags(topo.TopologyCase):
    """A client key holding {x} used to choose its Redis Cluster slot: every
    such key on one master. The agent now fences such keys ("{}" first), so
    Redis hashes the whole key."""

    owner = topo.Cluster.owner
    slots = topo.Cluster.slots

    def setUp(self):
        # topo.Cluster's setUp (not its tests): three masters, no replicas
        super().setUp()
        self.start_cluster()

    def test_client_hashtags_do_not_choose_the_slot(self):
        agent, c = self.agent("[redis]\ncluster = 127.0.0.1:%d\n" % self.ports[0],
                              log_level="debug")
        for i in range(30):
            got = [self.decide(c, key="{same}%d" % i) for _ in range(12)]
            self.assert_ten_of(got, 12, "key {same}%d" % i)
        per_node = {p: [k for k in topo.cli(p, "--scan", "--pattern", "rl:t2:*").splitlines() if k]
                    for p in self.ports}
        keys = sorted(k for v in per_node.values() for k in v)
        self.assertEqual(keys, sorted("rl:t2:t:{}{same}%d" % i for i in range(30)))
        used = [p for p in self.ports if per_node[p]]
        self.assertGreaterEqual(len(used), 2, per_node)  # not all on one master
        slots = set()
        for p, ks in per_node.items():
            for k in ks:  # Redis agrees with the agent's CRC16: no redirect
                slot = int(topo.cli(p, "CLUSTER", "KEYSLOT", k))
                self.assertEqual(self.owner(slot), p, k)
                slots.add(slot)
        self.assertGreater(len(slots), 25)
        self.assertNotIn('"redis redirect"', agent.output())


if __name__ == "__main__":
    unittest.main()
