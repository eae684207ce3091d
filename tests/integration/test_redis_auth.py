# SPDX-License-Identifier: Apache-2.0
"""Redis as production runs it (issue 23): passwords everywhere, and error
replies that mean Redis cannot decide for us, against real redis-server
processes on loopback.

- AUTH: a missing or wrong password is named (NOAUTH, WRONGPASS); a
  password from password_file, rotated with SIGHUP (no restart); a url
  password percent-decoded; Sentinel with a password on the master and on
  the sentinels; Redis Cluster with requirepass.
- Refusals: an ACL user without evalsha, or whose key pattern misses the
  prefix (NOPERM); a replica, or a master demoted with REPLICAOF, in url mode
  (READONLY: the agent says it points at a replica and recovers by itself
  once promoted); a full Redis with noeviction (OOM). In each case
  spoa_ratelimit_redis_up is 0, decisions fall back locally (`degraded`),
  the kind is counted, and there is no Redis call per decision: the agent
  probes with the backoff of an unreachable server.

Every wait polls a condition with a deadline."""
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import fleet
from harness import Agent, Proc, Redis, free_port, wait_for, wait_port

RULES = """
[rule:u]
key = key
rate = 10/1m
burst = 10
"""


def cli(port, *args, password=None, user=None, timeout=10):
    auth = []
    if password:
        auth = (["--user", user] if user else []) + ["-a", password, "--no-auth-warning"]
    return subprocess.run(["redis-cli", "-p", str(port)] + auth + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout).stdout.strip()


def info(port, section, password=None):
    out = {}
    for line in cli(port, "INFO", section, password=password).splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


class AuthCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rl-auth-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.servers = []
        # registered before any agent's cleanup: runs after the agents stopped
        self.addCleanup(lambda: [s.kill() for s in self.servers])

    def redis(self, *args):
        # --dir: a replica writes the RDB it receives (dump.rdb) there
        r = Redis(args=["--dir", self.dir] + [str(a) for a in args])
        self.servers.append(r)
        return r

    def agent(self, redis_section, rules=RULES, log_level="info"):
        a = Agent(redis_section + "timeout = 1s\n\n" + rules,
                  extra_agent="log_level = %s\n" % log_level)
        self.addCleanup(lambda: self.assertEqual(a.stop(timeout=8), 0, a.output()[-3000:]))
        return a

    def seq(self, agent):
        c = fleet.Seq(agent.addr)
        self.addCleanup(c.close)
        return c

    def wait_log(self, agent, text, timeout=10.0):
        self.assertTrue(wait_for(lambda: text in agent.output(), timeout=timeout),
                        "%r not logged:\n%s" % (text, agent.output()[-3000:]))

    def wait_up(self, agent, up=1, timeout=10.0):
        self.assertTrue(wait_for(lambda: agent.p.poll() is None and
                                 agent.metric("spoa_ratelimit_redis_up") == up, timeout=timeout),
                        "redis_up never %d:\n%s" % (up, agent.output()[-3000:]))

    def acl_agent(self, *rules):
        """A Redis with the ACL user lim (password pw) of these rules, and an
        agent up on it as lim."""
        r = self.redis()
        self.assertEqual(cli(r.port, "ACL", "SETUSER", "lim", "on", ">pw", *rules), "OK")
        a = self.agent("[redis]\nurl = redis://lim:pw@127.0.0.1:%d/0\n" % r.port)
        self.wait_up(a)  # AUTH and SCRIPT LOAD pass: only the calls are refused
        return r, a

    def assert_ten_of(self, c, key, n=12):
        got = [c.decide(key=key) for _ in range(n)]
        self.assertEqual([g.get("blocked") for g in got], [False] * 10 + [True] * (n - 10), got)
        self.assertEqual([g for g in got if g.get("degraded")], [], got)

    def wait_backoff(self, agent):
        """Until the agent's retries have slowed down: at most one attempt
        (its setup: up to 13 commands) in the last second."""
        samples = []

        def slow():
            now = time.monotonic()
            samples.append((now, agent.metric("spoa_ratelimit_redis_commands_total")))
            old = [v for t, v in samples if now - t >= 1.0]
            return old and samples[-1][1] - old[-1] <= 13
        self.assertTrue(wait_for(slow, timeout=15, step=0.1),
                        "retries never slowed down: %r" % samples[-5:])

    def assert_degraded_without_calls(self, agent, c, kind=None):
        """redis_up 0; 200 decisions all degraded, and far fewer Redis
        commands than decisions once the retries have backed off (each
        attempt: setup and a probe, up to 13 commands)."""
        self.assertEqual(agent.metric("spoa_ratelimit_redis_up"), 0)
        self.wait_backoff(agent)
        before = agent.metric("spoa_ratelimit_redis_commands_total")
        t0 = time.monotonic()
        got = [c.decide(key="fallback-%d" % (i % 3)) for i in range(200)]
        took = time.monotonic() - t0
        after = agent.metric("spoa_ratelimit_redis_commands_total")
        self.assertEqual([g for g in got if g.get("degraded") is not True], [], got[:5])
        # once backed off: at most one attempt a second (2 s at the cap), and
        # one more for the edges
        self.assertLessEqual(after - before, 13 * (int(took / 1.0) + 2),
                             "a Redis call per decision? %d commands for 200 decisions in "
                             "%.1f s" % (after - before, took))
        self.assertLess(after - before, 200)
        if kind:
            self.assertGreater(agent.metric("spoa_ratelimit_redis_error_replies_total",
                                            kind=kind), 0)

    def error_kinds(self, agent):
        kinds = ("READONLY", "MASTERDOWN", "NOPERM", "OOM", "NOAUTH", "WRONGPASS", "NOSCRIPT",
                 "other")
        return {k: agent.metric("spoa_ratelimit_redis_error_replies_total", kind=k)
                for k in kinds}


# ---- passwords ---------------------------------------------------------------


class Passwords(AuthCase):
    def test_missing_password_is_noauth(self):
        r = self.redis("--requirepass", "s3cret")
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port)
        self.wait_log(a, '"redis needs a password (NOAUTH)')
        self.assertNotIn("unauthenticated bulk length\" addr", a.output())
        # every kind is rendered, 0 included
        kinds = self.error_kinds(a)
        self.assertNotIn(None, kinds.values(), kinds)
        self.assertGreater(kinds["NOAUTH"], 0, kinds)
        self.assert_degraded_without_calls(a, self.seq(a), "NOAUTH")

    def test_wrong_password_is_wrongpass(self):
        r = self.redis("--requirepass", "s3cret")
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\npassword = wrong\n" % r.port)
        self.wait_log(a, '"redis refused the password (WRONGPASS)')
        c = self.seq(a)
        self.assert_degraded_without_calls(a, c, "WRONGPASS")
        # more attempts, with backoff: still one line (10 s gate)
        self.assertTrue(wait_for(lambda: a.metric("spoa_ratelimit_redis_error_replies_total",
                                                  kind="WRONGPASS") >= 4, timeout=15))
        self.assertEqual(a.output().count('msg="redis refused the password (WRONGPASS)'), 1,
                         a.output())

    def test_percent_decoded_url_password(self):
        r = self.redis("--requirepass", "p@ss:w/rd")
        a = self.agent("[redis]\nurl = redis://:p%%40ss%%3Aw%%2Frd@127.0.0.1:%d/0\n" % r.port)
        self.wait_up(a)
        self.assert_ten_of(self.seq(a), "pct")
        self.assertEqual(cli(r.port, "EXISTS", "rl:t2:u:pct", password="p@ss:w/rd"), "1")

    def test_password_file_and_sighup_rotation(self):
        r = self.redis("--requirepass", "old-pw")
        pwfile = os.path.join(self.dir, "redis.pass")
        with open(pwfile, "w") as f:
            f.write("old-pw\n")
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\npassword_file = %s\n"
                       % (r.port, pwfile))
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "before")
        page = a.get("/config")
        self.assertIn("password_file = %s" % pwfile, page)
        self.assertNotIn("old-pw", page)
        pid = a.p.pid

        # Redis' password rotated; the agent's connection is cut: refused
        self.assertEqual(cli(r.port, "CONFIG", "SET", "requirepass", "new-pw",
                             password="old-pw"), "OK")
        cli(r.port, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", password="new-pw")
        self.wait_log(a, "(WRONGPASS)")
        self.wait_up(a, 0)
        self.assertIs(c.decide(key="between").get("degraded"), True)

        # the new secret in the file, SIGHUP: exact again, same process
        with open(pwfile, "w") as f:
            f.write("new-pw\n")
        os.kill(pid, signal.SIGHUP)
        self.wait_log(a, '"redis credentials changed: reconnecting"')
        self.wait_up(a)
        self.assert_ten_of(c, "after")
        self.assertEqual(a.p.pid, pid)
        self.assertIsNone(a.p.poll())
        self.assertEqual(cli(r.port, "EXISTS", "rl:t2:u:after", password="new-pw"), "1")


    def test_sighup_applies_a_new_url(self):
        """url mode: a url changed in the file (another Redis, another db)
        is used after SIGHUP, same process; GET /config has no restart
        pending for it."""
        r1 = self.redis()
        r2 = self.redis("--requirepass", "two")
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % r1.port)
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "one")
        pid = a.p.pid
        a.rewrite("[redis]\nurl = redis://:two@127.0.0.1:%d/2\ntimeout = 1s\n\n%s"
                  % (r2.port, RULES))
        os.kill(pid, signal.SIGHUP)
        self.wait_log(a, '"redis url and credentials changed: reconnecting"')
        self.wait_log(a, '"redis up" addr=127.0.0.1:%d' % r2.port)
        self.wait_up(a)
        self.assert_ten_of(c, "two")
        self.assertEqual(cli(r2.port, "-n", 2, "EXISTS", "rl:t2:u:two", password="two"), "1")
        self.assertEqual(cli(r1.port, "EXISTS", "rl:t2:u:two"), "0")
        self.assertEqual(a.p.pid, pid)
        page = a.get("/config")
        self.assertIn("; restart pending: none", page)
        self.assertIn("url = redis://:***@127.0.0.1:%d/2" % r2.port, page)
        self.assertNotIn(":two@", page)

    def test_check_names_an_unreadable_password_file(self):
        ini = os.path.join(self.dir, "a.ini")
        pwfile = os.path.join(self.dir, "missing.pass")
        with open(ini, "w") as f:
            f.write("[redis]\nurl = redis://127.0.0.1:6379\npassword_file = %s\n" % pwfile)
        from harness import AGENT
        p = subprocess.run([AGENT, "-c", ini, "--check"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("%s:3: cannot read password_file '%s': No such file or directory"
                      % (ini, pwfile), p.stderr)
        with open(pwfile, "w") as f:
            f.write("hidden-secret\n")
        p = subprocess.run([AGENT, "-c", ini, "--check", "--print"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("password_file = %s\n" % pwfile, p.stdout)
        self.assertNotIn("hidden-secret", p.stdout + p.stderr)


# ---- ACL -----------------------------------------------------------------------


class Acl(AuthCase):
    def test_user_without_evalsha(self):
        # (without fcall too: a user with FCALL calls the scripts as functions,
        # test_functions.Functions.test_acl_without_fcall)
        r, a = self.acl_agent("~rl:*", "+@all", "-evalsha", "-fcall")
        c = self.seq(a)
        # A key new to the agent goes as one plain SET (limiter_first.c), which
        # this user may run: Redis decides it. The next decision on it is a
        # script call, which the ACL denies.
        self.assertIsNot(c.decide(key="x").get("degraded"), True)
        self.assertIs(c.decide(key="x").get("degraded"), True)
        self.wait_log(a, '"redis ACL denied a command (NOPERM)')
        out = a.output()
        self.assertIn('user=lim command="EVALSHA', out)
        self.assertIn('key_pattern="~rl:*"', out)
        self.assertIn("'evalsha' command", out)
        self.wait_up(a, 0)
        self.assert_degraded_without_calls(a, c, "NOPERM")
        # the operator fixes the ACL: the agent's probe passes, by itself
        self.assertEqual(cli(r.port, "ACL", "SETUSER", "lim", "+evalsha"), "OK")
        self.wait_up(a, 1, timeout=15)
        self.assert_ten_of(c, "fixed")

    def test_key_pattern_misses_the_prefix(self):
        r, a = self.acl_agent("~other:*", "+@all")
        c = self.seq(a)
        self.assertIs(c.decide(key="x").get("degraded"), True)
        self.wait_log(a, '"redis ACL denied a command (NOPERM)')
        self.assertIn("access one of the keys", a.output())
        self.assertIn('key_pattern="~rl:*"', a.output())
        self.wait_up(a, 0)
        self.assert_degraded_without_calls(a, c, "NOPERM")
        self.assertEqual(cli(r.port, "KEYS", "*"), "")


# ---- not the master --------------------------------------------------------------


class NotMaster(AuthCase):
    def replica_of(self, master):
        rep = self.redis("--replicaof", "127.0.0.1", master.port)
        self.assertTrue(wait_for(lambda: info(rep.port, "replication").get("master_link_status")
                                 == "up", timeout=15), "replica never synced")
        return rep

    def refused_as_replica(self, a, c):
        self.assertIs(c.decide(key="on-replica").get("degraded"), True)
        # at the default log level: the kind, and what the url points at
        self.wait_log(a, '"redis is a replica, not the master (READONLY)')
        self.wait_log(a, '"redis url points at a replica, not the master')
        self.wait_up(a, 0)
        self.assert_degraded_without_calls(a, c, "READONLY")

    def test_url_points_at_a_replica(self):
        m = self.redis()
        rep = self.replica_of(m)
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % rep.port)
        self.wait_up(a)
        c = self.seq(a)
        self.refused_as_replica(a, c)
        # promoted: the agent sees it by itself
        self.assertEqual(cli(rep.port, "REPLICAOF", "NO", "ONE"), "OK")
        self.wait_up(a, 1, timeout=15)
        self.assert_ten_of(c, "promoted")
        self.assertEqual(cli(rep.port, "EXISTS", "rl:t2:u:promoted"), "1")

    def test_master_demoted_under_the_agent(self):
        m = self.redis()
        other = self.redis()
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % m.port)
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "before")
        self.assertEqual(cli(m.port, "REPLICAOF", "127.0.0.1", other.port), "OK")
        self.assertTrue(wait_for(lambda: info(m.port, "replication").get("role") == "slave"))
        self.refused_as_replica(a, c)
        self.assertEqual(cli(m.port, "REPLICAOF", "NO", "ONE"), "OK")
        self.wait_up(a, 1, timeout=15)
        self.assert_ten_of(c, "again")


# ---- a full Redis -----------------------------------------------------------------


class Full(AuthCase):
    def test_oom_then_room_again(self):
        r = self.redis("--maxmemory-policy", "noeviction")
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port)
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "before")
        # 2 MB of data (one script: past its first write it is not stopped),
        # then a 1 MB limit: every write is refused
        fill = "for i = 1, 20000 do redis.call('SET', 'fill:' .. i, string.rep('x', 100)) end"
        cli(r.port, "EVAL", fill, "0")
        self.assertEqual(cli(r.port, "CONFIG", "SET", "maxmemory", "1mb"), "OK")
        self.assertIs(c.decide(key="full").get("degraded"), True)
        self.wait_log(a, '"redis is full (OOM)')
        self.wait_up(a, 0)
        self.assert_degraded_without_calls(a, c, "OOM")
        # room again (an empty Redis 7 takes about 1 MB itself): the probe
        # passes, by itself
        self.assertEqual(cli(r.port, "FLUSHALL"), "OK")
        self.assertEqual(cli(r.port, "CONFIG", "SET", "maxmemory", "64mb"), "OK")
        self.wait_up(a, 1, timeout=15)
        self.assert_ten_of(c, "room")


# ---- Sentinel and Cluster with passwords ---------------------------------------------


class Topologies(AuthCase):
    def test_sentinel_with_auth_on_master_and_sentinels(self):
        m = self.redis("--requirepass", "m4ster")
        sport = free_port()
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nrequirepass s3nt\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                    "sentinel auth-pass mymaster m4ster\n"
                    "sentinel down-after-milliseconds mymaster 1000\n" % (sport, self.dir, m.port))
        s = Proc(["redis-server", conf, "--sentinel"], "sentinel", cwd=self.dir)
        self.servers.append(s)
        wait_port(sport, proc=s.p)
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\npassword = m4ster\n"
                       "sentinel_password = s3nt\n" % sport)
        self.wait_up(a)
        self.assert_ten_of(self.seq(a), "through-sentinel")
        self.assertEqual(cli(m.port, "EXISTS", "rl:t2:u:through-sentinel", password="m4ster"),
                         "1")
        page = a.get("/config")
        self.assertNotIn("s3nt", page)
        self.assertNotIn("m4ster", page)

    def test_sentinel_refusing_the_agent_says_so(self):
        m = self.redis()
        sport = free_port()
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nrequirepass s3nt\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n" % (sport, self.dir, m.port))
        s = Proc(["redis-server", conf, "--sentinel"], "sentinel", cwd=self.dir)
        self.servers.append(s)
        wait_port(sport, proc=s.p)
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n" % sport)
        self.wait_log(a, '"sentinel needs a password (NOAUTH)')
        self.wait_log(a, "no sentinel knows the master")
        self.assertEqual(a.metric("spoa_ratelimit_redis_up"), 0)

    def test_cluster_with_requirepass(self):
        ports = [free_port(plus=(10000,)) for _ in range(3)]
        for p in ports:
            srv = Proc(["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--protected-mode", "no", "--dir", self.dir,
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", os.path.join(self.dir, "nodes-%d.conf" % p),
                        "--requirepass", "c1uster", "--masterauth", "c1uster"],
                       "redis", cwd=self.dir)
            self.servers.append(srv)
            wait_port(p, proc=srv.p)
        out = subprocess.run(["redis-cli", "-a", "c1uster", "--no-auth-warning", "--cluster",
                              "create"] + ["127.0.0.1:%d" % p for p in ports] +
                             ["--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertTrue(wait_for(lambda: all("cluster_state:ok" in cli(p, "CLUSTER", "INFO",
                                                                        password="c1uster")
                                             for p in ports), timeout=15), "cluster never ok")
        a = self.agent("[redis]\ncluster = 127.0.0.1:%d\npassword = c1uster\n" % ports[0])
        self.wait_up(a)
        c = self.seq(a)
        for i in range(6):
            self.assert_ten_of(c, "ck%d" % i)
        keys = sum(len([k for k in cli(p, "--scan", "--pattern", "rl:t2:*",
                                       password="c1uster").splitlines() if k]) for p in ports)
        self.assertEqual(keys, 6)
        self.assertEqual(self.error_kinds(a)["NOAUTH"], 0)


if __name__ == "__main__":
    unittest.main()
