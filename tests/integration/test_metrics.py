# SPDX-License-Identifier: Apache-2.0
"""/metrics against the table of doc/operations.md: every metric documented there is
exported and every exported metric is documented (standalone and Redis
mode), and each one counts what the table says it counts, after traffic whose
counts are known."""
import os
import re
import signal
import unittest

import spop
from fleet import Seq, unique, wait_redis_up
from harness import TOP, Agent, Redis, wait_for


def doc_metrics():
    """{name: type} from the table under '## Metrics and alerts' of doc/operations.md."""
    with open(os.path.join(TOP, "doc", "operations.md")) as f:
        text = f.read()
    section = text.split("## Metrics and alerts", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"(?m)^\| `(spoa_ratelimit_[a-z_]+)` \| (counter|gauge|histogram) \|",
                      section)
    return dict(rows)


def exported(text):
    """{name: type} from the # TYPE lines of a /metrics page."""
    return dict(re.findall(r"(?m)^# TYPE (spoa_ratelimit_[a-z_]+) (\w+)$", text))


def sample(text, name, **labels):
    """Value of one series, or None when absent."""
    want = name
    if labels:
        want += "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}"
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


STANDALONE = """
[rule:api]
key = key
rate = 5/1m

[rule:sh]
key = ip
rate = 2/1m
shadow = yes
"""

REDIS_RULES = """
[rule:hot]
key = key
match = path ^/hot/
rate = 1000/1s
burst = 1000

[rule:low]
key = key
match = path ^/low/
rate = 2/1h
"""


class Metrics(unittest.TestCase):
    def check_against_doc(self, text):
        doc = doc_metrics()
        self.assertGreaterEqual(len(doc), 26,
                                "doc/operations.md metrics table not found: %r" % doc)
        got = exported(text)
        self.assertEqual(sorted(set(doc) - set(got)), [], "in doc/operations.md, not exported")
        self.assertEqual(sorted(set(got) - set(doc)), [],
                         "exported, not in doc/operations.md's table")
        for name, kind in doc.items():
            self.assertEqual(got[name], kind, "%s: doc/operations.md says %s" % (name, kind))

    def test_standalone_counts(self):
        agent = Agent(STANDALONE)
        try:
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_connections") == 0))
            # the harness's own connect (waiting for the port) was accepted too
            accepted0 = agent.metric("spoa_ratelimit_connections_accepted_total")
            ip = ("ipv4", "192.0.2.9")
            c = spop.Client(agent.addr)
            c.handshake()                                       # hello 1
            got = [c.decide({"key": "k1", "ip": ip}, stream=i + 1, fid=1) for i in range(10)]
            c.send(spop.frame(spop.NOTIFY, b"", 50, 1))         # empty NOTIFY: an ACK
            self.assertEqual(c.recv_frame()["type"], spop.ACK)
            c.send(spop.frame(77, b"x", 51, 1))                 # unknown type: other
            self.assertIn("blocked", c.decide({"key": "k2"}, stream=52, fid=1))
            c.send(spop.frame(spop.HAPROXY_DISCONNECT,
                              spop.kv([("status-code", ("uint32", 0)), ("message", "bye")])))
            self.assertEqual(c.recv_frame()["type"], spop.AGENT_DISCONNECT)
            c.close()
            bad = spop.Client(agent.addr)                        # NOTIFY before HELLO: 4
            bad.send(spop.frame(spop.NOTIFY, b"", 1, 1))
            self.assertEqual(spop.decode_kv(bad.recv_frame()["payload"])["status-code"], 4)
            bad.close()
            small = spop.Client(agent.addr)                      # max-frame-size 100: 9
            small.send(spop.hello(max_frame=100))                # hello 2
            self.assertEqual(spop.decode_kv(small.recv_frame()["payload"])["status-code"], 9)
            small.close()
            self.assertEqual([g["blocked"] for g in got], [False] * 5 + [True] * 5)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_connections") == 0),
                            "connections gauge not back to 0")
            # the buckets gauge is refreshed by the once-a-second expiry tick
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_buckets") == 3),
                            "buckets gauge %r, want 3 (api:k1, api:k2, sh:192.0.2.9)"
                            % agent.metric("spoa_ratelimit_buckets"))
            m = agent.metrics()
            self.check_against_doc(m)
            want = {
                ("spoa_ratelimit_decisions_total", (("rule", "api"), ("result", "allowed"))): 6,
                ("spoa_ratelimit_decisions_total", (("rule", "api"), ("result", "blocked"))): 5,
                ("spoa_ratelimit_decisions_total", (("rule", "sh"), ("result", "allowed"))): 2,
                ("spoa_ratelimit_decisions_total",
                 (("rule", "sh"), ("result", "would_block"))): 8,
                ("spoa_ratelimit_connections_accepted_total", ()): accepted0 + 3,
                ("spoa_ratelimit_frames_total", (("type", "haproxy_hello"),)): 2,
                ("spoa_ratelimit_frames_total", (("type", "haproxy_disconnect"),)): 1,
                ("spoa_ratelimit_frames_total", (("type", "notify"),)): 13,
                ("spoa_ratelimit_frames_total", (("type", "other"),)): 1,
                ("spoa_ratelimit_acks_total", ()): 12,
                ("spoa_ratelimit_decision_seconds_count", ()): 12,
                ("spoa_ratelimit_protocol_errors_total", (("status", "4"),)): 1,
                ("spoa_ratelimit_protocol_errors_total", (("status", "9"),)): 1,
                ("spoa_ratelimit_protocol_errors_total", (("status", "3"),)): 0,
                ("spoa_ratelimit_buckets", ()): 3,  # api:k1, api:k2, sh:192.0.2.9
                ("spoa_ratelimit_redis_up", ()): 0,
                ("spoa_ratelimit_redis_configured", ()): 0,
                ("spoa_ratelimit_redis_commands_total", ()): 0,
                ("spoa_ratelimit_lease_claims_total", ()): 0,
                ("spoa_ratelimit_lease_keys", ()): 0,
                ("spoa_ratelimit_reloads_total", ()): 0,
                ("spoa_ratelimit_reload_failures_total", ()): 0,
            }
            wrong = {}
            for (name, labels), v in want.items():
                g = sample(m, name, **dict(labels))
                if g != v:
                    wrong["%s%r" % (name, labels)] = (g, v)
            self.assertEqual(wrong, {}, "(got, want):\n" + m)
            self.assertIn(sample(m, "spoa_ratelimit_degraded_decisions_total", rule="api"),
                          (None, 0), "degraded decisions in standalone mode")
            # reloads, counted
            with open(agent.ini) as f:
                ini = f.read()
            with open(agent.ini, "w") as f:
                f.write(ini)
            agent.p.send_signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_reloads_total") == 1))
            with open(agent.ini, "w") as f:
                f.write(ini + "\n[rule:bad]\nrate = x\n")
            agent.p.send_signal(signal.SIGHUP)
            self.assertTrue(wait_for(
                lambda: agent.metric("spoa_ratelimit_reload_failures_total") == 1))
            self.assertEqual(agent.metric("spoa_ratelimit_reloads_total"), 1)
        finally:
            agent.stop()

    def test_redis_counts(self):
        redis = Redis()
        agent = Agent("[redis]\nurl = redis://127.0.0.1:%d/0\ntimeout = 1s\n" % redis.port
                      + REDIS_RULES, workers=1)
        try:
            wait_redis_up(agent)
            c = Seq(agent.addr)
            hot = [c.decide(key="h", path="/hot/x") for _ in range(300)]
            low = [c.decide(key="l", path="/low/x") for _ in range(10)]
            self.assertTrue(all(g["blocked"] is False for g in hot))
            self.assertEqual([g["blocked"] for g in low], [False] * 2 + [True] * 8)
            self.assertTrue(all(g.get("degraded") is not True for g in hot + low))
            m = agent.metrics()
            self.check_against_doc(m)
            v = {n: sample(m, "spoa_ratelimit_" + n) for n in (
                "redis_up", "redis_configured", "redis_commands_total", "redis_errors_total",
                "redis_latency_seconds_count", "redis_batches_total",
                "redis_batched_calls_total", "lease_claims_total", "lease_tokens_granted_total",
                "lease_local_decisions_total", "lease_negative_hits_total",
                "lease_waiters_total", "lease_keys", "buckets")}
            print("\n  after 300 hot + 10 low decisions: %r" % v)
            self.assertEqual((v["redis_up"], v["redis_configured"]), (1, 1))
            self.assertEqual(v["redis_errors_total"], 0)
            self.assertGreaterEqual(v["lease_claims_total"], 1)
            # every lease decision was either local or waited for a claim
            self.assertEqual(v["lease_local_decisions_total"] + v["lease_waiters_total"]
                             + v["lease_negative_hits_total"], 310)
            self.assertGreater(v["lease_local_decisions_total"], 200, "leases not used")
            self.assertGreaterEqual(v["lease_negative_hits_total"], 1,
                                    "an exhausted key should be blocked locally")
            self.assertGreaterEqual(v["lease_tokens_granted_total"], 302)
            # the gauge is counted at each lease tick (100 ms)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_lease_keys") == 2),
                            agent.metric("spoa_ratelimit_lease_keys"))
            self.assertEqual(v["buckets"], 0, "in-memory buckets with Redis up")
            # SCRIPT LOADs + claims (batched ones count once)
            self.assertGreaterEqual(v["redis_commands_total"], v["lease_claims_total"] -
                                    v["redis_batched_calls_total"] + v["redis_batches_total"])
            self.assertGreaterEqual(v["redis_latency_seconds_count"], 1)
            self.assertGreaterEqual(v["redis_batched_calls_total"], v["redis_batches_total"])
            # idle: the hot lease is given back, so granted - returned = spent
            self.assertTrue(wait_for(lambda: agent.metric(
                "spoa_ratelimit_lease_tokens_granted_total") - agent.metric(
                "spoa_ratelimit_lease_tokens_returned_total") == 302),
                "granted - returned != the 302 allowed: %r / %r" % (
                    agent.metric("spoa_ratelimit_lease_tokens_granted_total"),
                    agent.metric("spoa_ratelimit_lease_tokens_returned_total")))
            # Redis gone: up 0, and every degraded answer is counted per rule
            redis.kill()
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 0))
            # (the low rule: its backstop bucket, share x 2/1h, is not full again
            # within the test, and a bucket full again is dropped as it costs
            # nothing to make anew)
            key = unique("down")
            got = [c.decide(key=key, path="/low/x") for _ in range(7)]
            self.assertTrue(all(g.get("degraded") is True for g in got), got)
            self.assertEqual(agent.metric("spoa_ratelimit_degraded_decisions_total", rule="low"),
                             7)
            self.assertEqual(agent.metric("spoa_ratelimit_degraded_decisions_total", rule="hot"),
                             0)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_buckets") >= 1),
                            "the fallback backstop is an in-memory bucket (gauge refreshed "
                            "every second)")
            c.close()
        finally:
            redis.stop()
            agent.stop()  # last: it raises unless the agent exits 0


if __name__ == "__main__":
    unittest.main()
