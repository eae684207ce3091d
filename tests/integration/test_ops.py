"""What an operator relies on: live reload, graceful stop, metrics, /top,
logs, and clear start-up failures."""
import json
import os
import signal
import socket
import subprocess
import time
import unittest

import spop
from harness import AGENT, Agent, Redis, free_port

RULE_A = """
[rule:a]
key = key
rate = 3/1m
"""
RULE_B = """
[rule:b]
key = ip
rate = 1/1m
"""


def wait_for(pred, timeout=5.0, step=0.02):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


class Reload(unittest.TestCase):
    def setUp(self):
        self.agent = Agent(RULE_A)
        self.c = spop.Client(self.agent.addr)
        self.c.handshake()
        self.sid = 0

    def tearDown(self):
        self.c.close()
        self.assertEqual(self.agent.stop(), 0, self.agent.output())

    def decide(self, **args):
        self.sid += 1
        return self.c.decide(args, stream=self.sid, fid=1)

    def reload(self, ini):
        before = self.agent.metric("spoa_ratelimit_reloads_total")
        failed = self.agent.metric("spoa_ratelimit_reload_failures_total")
        self.agent.rewrite(ini)
        self.agent.p.send_signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: self.agent.metric("spoa_ratelimit_reloads_total") > before
                                 or self.agent.metric("spoa_ratelimit_reload_failures_total")
                                 > failed))
        time.sleep(0.05)  # workers pick the new rules up through their loops

    def test_add_change_remove_on_open_connection(self):
        ip = ("ipv4", "192.0.2.1")
        self.assertEqual(self.decide(key="k", ip=ip)["remaining"], 2)
        self.assertEqual(self.decide(key="k", ip=ip)["remaining"], 1)
        # add rule b: applies on the connection already open; a keeps its bucket
        self.reload(RULE_A + RULE_B)
        r = self.decide(key="k", ip=ip)
        self.assertEqual(r["rule"], "a")
        self.assertEqual(r["remaining"], 0)
        r = self.decide(key="other", ip=ip)  # b's first decision for this ip
        self.assertEqual(r["rule"], "b")
        r = self.decide(key="other2", ip=ip)
        self.assertIs(r["blocked"], True)
        self.assertEqual(r["rule"], "b")
        # a broken file leaves the old rules in force
        self.reload(RULE_A + RULE_B + "\n[rule:c]\nkey = key\nrate = lots/1s\n")
        self.assertEqual(self.agent.metric("spoa_ratelimit_reload_failures_total"), 1)
        self.assertRegex(self.agent.output(), r"agent\.ini:\d+: ")
        self.assertEqual(self.decide(key="other3", ip=ip)["rule"], "b")
        # remove b, change a's rate
        self.reload(RULE_A.replace("3/1m", "100/1m"))
        r = self.decide(key="fresh", ip=ip)
        self.assertEqual(r["rule"], "a")
        self.assertEqual(r["limit"], 100)
        self.assertIsNone(self.agent.p.poll())


class Stop(unittest.TestCase):
    def test_sigterm_with_open_connections(self):
        agent = Agent(RULE_A)
        c = spop.Client(agent.addr)
        c.handshake()
        c.decide({"key": "x"})
        idle = socket.create_connection(agent.addr)  # a peer that never spoke
        t0 = time.time()
        rc = agent.stop(signal.SIGTERM, timeout=10)
        self.assertEqual(rc, 0, agent.output())
        self.assertLess(time.time() - t0, 5.0)
        f = c.recv_frame()
        self.assertEqual(f["type"], spop.AGENT_DISCONNECT)
        self.assertEqual(spop.decode_kv(f["payload"])["status-code"], 0)
        c.close()
        idle.close()

    def test_sigterm_returns_leases(self):
        redis = Redis()
        try:
            agent = Agent(RULE_A.replace("3/1m", "1000/1s\nburst = 1000") +
                          "[redis]\nurl = redis://127.0.0.1:%d/0\n[lease]\nttl = 5s\n"
                          % redis.port)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            c = spop.Client(agent.addr)
            c.handshake()
            for i in range(50):
                c.decide({"key": "lk"}, stream=i, fid=1)
            keys = redis.cli("--scan", "--pattern", "rl:*").split()
            self.assertEqual(len(keys), 1, keys)
            held = [f for f in redis.cli("hkeys", keys[0]).split() if f.startswith("h:")]
            self.assertTrue(held, "the agent should hold a lease while busy")
            self.assertEqual(agent.stop(), 0, agent.output())
            c.close()
            held = [f for f in redis.cli("hkeys", keys[0]).split() if f.startswith("h:")]
            self.assertEqual(held, [], "leases must be given back at SIGTERM")
        finally:
            redis.stop()


class Metrics(unittest.TestCase):
    def run_25(self, extra=""):
        agent = Agent("[rule:hourly]\nkey = key\nrate = 10/1h\n" + extra)
        try:
            if "[redis]" in extra:
                self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            c = spop.Client(agent.addr)
            c.handshake()
            got = [c.decide({"key": "m"}, stream=i, fid=1) for i in range(25)]
            c.close()
            self.assertEqual(sum(not g["blocked"] for g in got), 10)
            m = agent.metrics()
            self.assertIn('spoa_ratelimit_decisions_total{rule="hourly",result="allowed"} 10\n', m)
            self.assertIn('spoa_ratelimit_decisions_total{rule="hourly",result="blocked"} 15\n', m)
            self.assertIn('spoa_ratelimit_decision_seconds_bucket{le="+Inf"} 25\n', m)
            self.assertIn("spoa_ratelimit_decision_seconds_count 25\n", m)
            self.assertIn("# TYPE spoa_ratelimit_decision_seconds histogram", m)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_connections") == 0))
            top = json.loads(agent.get("/top"))
            self.assertEqual(top["rules"]["hourly"][0]["key"], "m")
            self.assertEqual(top["rules"]["hourly"][0]["blocked"], 15)
            return m
        finally:
            self.assertEqual(agent.stop(), 0, agent.output())

    def test_standalone(self):
        m = self.run_25()
        self.assertIn("spoa_ratelimit_redis_up 0\n", m)

    def test_with_redis(self):
        redis = Redis()
        try:
            m = self.run_25("[redis]\nurl = redis://127.0.0.1:%d/0\n" % redis.port)
            self.assertIn("spoa_ratelimit_redis_up 1\n", m)
            self.assertIn("spoa_ratelimit_redis_latency_seconds_count", m)
        finally:
            redis.stop()

    def test_404_and_methods(self):
        agent = Agent(RULE_A)
        try:
            import urllib.error
            import urllib.request
            with self.assertRaises(urllib.error.HTTPError) as e:
                agent.get("/nope")
            self.assertEqual(e.exception.code, 404)
        finally:
            agent.stop()


class Logs(unittest.TestCase):
    def test_shadow_rule_logs_counts_not_lines(self):
        agent = Agent("[rule:sh]\nkey = key\nrate = 1/1m\nshadow = yes\n")
        try:
            c = spop.Client(agent.addr)
            c.handshake()
            for i in range(30):
                self.assertIs(c.decide({"key": "noisy"}, stream=i, fid=1)["blocked"], False)
            c.close()
            self.assertTrue(wait_for(lambda: "shadow rule would have blocked" in agent.output(),
                                     timeout=15, step=0.2))
            out = agent.output()
            self.assertEqual(out.count("shadow rule would have blocked"), 1, out)
            self.assertIn("rule=sh would_block=29", out)
            self.assertIn('top_key="noisy"', out)
            for line in out.splitlines():
                self.assertRegex(line, r"^ts=\S+ level=(error|warn|info|debug) msg=")
        finally:
            agent.stop()


class StartupFailures(unittest.TestCase):
    def test_port_in_use(self):
        sk = socket.socket()
        sk.bind(("127.0.0.1", 0))
        sk.listen(1)
        port = sk.getsockname()[1]
        path = "/tmp/spoa-inuse-%d.ini" % os.getpid()
        with open(path, "w") as f:
            f.write("[agent]\nlisten = 127.0.0.1:%d\n%s" % (port, RULE_A))
        try:
            p = subprocess.run([AGENT, "-c", path], capture_output=True, text=True, timeout=10)
        finally:
            os.unlink(path)
            sk.close()
        self.assertNotEqual(p.returncode, 0)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("127.0.0.1:%d" % port, lines[0])
        self.assertIn("in use", lines[0])

    def test_bad_redis_url(self):
        path = "/tmp/spoa-badurl-%d.ini" % os.getpid()
        with open(path, "w") as f:
            f.write("[agent]\nlisten = 127.0.0.1:%d\n[redis]\nurl = redis://host:99999/0\n%s"
                    % (free_port(), RULE_A))
        try:
            p = subprocess.run([AGENT, "-c", path], capture_output=True, text=True, timeout=10)
        finally:
            os.unlink(path)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()


class RedisConnection(unittest.TestCase):
    """AUTH and db from the URL; unix sockets."""

    def start_redis(self, *args):
        from harness import Proc, wait_port
        port = free_port()
        p = Proc(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no"] + list(args), "redis")
        wait_port(port, proc=p.p)
        return p, port

    def decide_10(self, agent):
        c = spop.Client(agent.addr)
        c.handshake()
        got = [c.decide({"key": "u"}, stream=i, fid=1) for i in range(12)]
        c.close()
        self.assertEqual([g["blocked"] for g in got], [False] * 10 + [True] * 2)
        self.assertTrue(all("degraded" not in g for g in got), got)

    def test_password_and_db(self):
        redis, port = self.start_redis("--requirepass", "s3cret")
        try:
            agent = Agent("[rule:u]\nkey = key\nrate = 10/1m\n"
                          "[redis]\nurl = redis://:s3cret@127.0.0.1:%d/3\n" % port)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            self.decide_10(agent)
            cli = ["redis-cli", "-p", str(port), "-a", "s3cret", "--no-auth-warning"]
            in3 = subprocess.run(cli + ["-n", "3", "--scan"], capture_output=True, text=True)
            in0 = subprocess.run(cli + ["-n", "0", "--scan"], capture_output=True, text=True)
            self.assertEqual(in3.stdout.split(), ["rl:tb:u:u"])
            self.assertEqual(in0.stdout.split(), [])
            self.assertEqual(agent.stop(), 0, agent.output())
        finally:
            redis.stop()

    def test_wrong_password_is_reported_and_falls_back(self):
        redis, port = self.start_redis("--requirepass", "s3cret")
        try:
            agent = Agent("[rule:u]\nkey = key\nrate = 10/1m\n"
                          "[redis]\nurl = redis://:wrong@127.0.0.1:%d/0\n" % port)
            try:
                self.assertTrue(wait_for(lambda: "redis refused setup" in agent.output()))
                c = spop.Client(agent.addr)
                c.handshake()
                r = c.decide({"key": "u"})
                self.assertIs(r["degraded"], True)
                c.close()
                self.assertEqual(agent.metric("spoa_ratelimit_redis_up"), 0)
                time.sleep(0.5)  # several reconnection attempts: still one line
                self.assertEqual(agent.output().count("redis refused setup"), 1, agent.output())
            finally:
                self.assertEqual(agent.stop(), 0, agent.output())
        finally:
            redis.stop()

    def test_unix_socket(self):
        import tempfile
        d = tempfile.mkdtemp()
        sock = os.path.join(d, "redis.sock")
        redis, port = self.start_redis("--unixsocket", sock, "--unixsocketperm", "700")
        try:
            self.assertTrue(wait_for(lambda: os.path.exists(sock)))
            agent = Agent("[rule:u]\nkey = key\nrate = 10/1m\n[redis]\nurl = unix:%s\n" % sock)
            self.assertTrue(wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1))
            self.decide_10(agent)
            self.assertEqual(agent.stop(), 0, agent.output())
        finally:
            redis.stop()
