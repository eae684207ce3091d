# SPDX-License-Identifier: Apache-2.0
"""Why Redis is down, by name, and credentials changed safely (issue 45),
against real redis-server processes on loopback.

- /status.json's redis.last_error names what Redis said (WRONGPASS, NOAUTH)
  or the socket's error (connection_refused), with the detail, where and
  when.
- A reload (SIGHUP) whose new password Redis refuses keeps the connections
  and the credentials in force: decisions stay exact (not degraded), the
  same Redis clients serve them, and the warning redis_auth_refused names
  the refusal; a reload that restores the password in force clears it.
- A rotation done right (Redis' ACL first, then the reload) is tried on a
  new connection and switched to; a refused one switches once a later
  reload brings credentials Redis takes.

Every wait polls a condition with a deadline."""
import json
import os
import signal
import subprocess
import unittest

from harness import Proc, free_port, wait_for, wait_port
from test_redis_auth import AuthCase, cli


def status(agent):
    return json.loads(agent.get("/status.json"))


def warnings(agent):
    return {w["kind"]: w for w in status(agent)["warnings"]}


def client_ids(port, password=None, user=None):
    """The ids of Redis' normal clients but the asking one."""
    out = cli(port, "CLIENT", "LIST", "TYPE", "normal", password=password, user=user)
    ids = set()
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "cmd=client" not in line:  # (redis-cli itself: CLIENT LIST)
            ids.add(fields.get("id"))
    return ids


class LastError(AuthCase):
    def wait_last_error(self, agent, names, timeout=15.0):
        got = {}

        def named():
            got.update(status(agent)["redis"])
            return got.get("last_error") in names
        self.assertTrue(wait_for(named, timeout=timeout),
                        "last_error never %r: %r\n%s" % (names, got, agent.output()[-2000:]))
        return got

    def test_wrong_password_is_named(self):
        r = self.redis("--requirepass", "s3cret")
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\npassword = wrong\n" % r.port)
        got = self.wait_last_error(a, ("WRONGPASS",))
        self.assertFalse(got["up"])
        self.assertIn("WRONGPASS", got["last_error_detail"])
        self.assertEqual(got["last_error_addr"], "127.0.0.1:%d" % r.port)
        self.assertIsInstance(got["last_error_at"], int)
        self.assertGreater(got["last_error_at"], 0)
        self.assertNotIn("wrong", json.dumps(got))  # the password is not said

    def test_missing_password_is_noauth(self):
        r = self.redis("--requirepass", "s3cret")
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port)
        got = self.wait_last_error(a, ("NOAUTH",))
        self.assertFalse(got["up"])

    def test_nothing_listening_is_connection_refused(self):
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % free_port())
        got = self.wait_last_error(a, ("connection_refused",))
        self.assertIn("refused", got["last_error_detail"])

    def test_up_from_the_start_has_none(self):
        r = self.redis()
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port)
        self.wait_up(a)
        got = status(a)["redis"]
        self.assertIsNone(got["last_error"], got)
        self.assertIn("last_error_detail", got)


class Rotation(AuthCase):
    def start(self, redis_args, pw, user=None):
        r = self.redis(*redis_args)
        self.pwfile = os.path.join(self.dir, "redis.pass")
        self.write_pw(pw)
        self.url_user = user
        a = self.agent(self.section(r))
        self.r, self.a = r, a
        self.wait_up(a)
        return r, a

    def section(self, r):
        return ("[redis]\nurl = redis://127.0.0.1:%d/0\n%spassword_file = %s\n"
                % (r.port, "username = %s\n" % self.url_user if self.url_user else "",
                   self.pwfile))

    def write_pw(self, pw):
        with open(self.pwfile, "w") as f:
            f.write(pw + "\n")

    def reload(self, pw, expect):
        """Write pw, SIGHUP, and wait for the log line expect (after this
        reload: counted)."""
        n = self.a.output().count(expect)
        self.write_pw(pw)
        os.kill(self.a.p.pid, signal.SIGHUP)
        self.assertTrue(wait_for(lambda: self.a.output().count(expect) > n, timeout=15),
                        "%r not logged after the reload:\n%s" % (expect, self.a.output()[-3000:]))

    def wait_warning(self, on, timeout=15.0):
        def state():
            w = "redis_auth_refused" in warnings(self.a)
            m = self.a.metric("spoa_ratelimit_warning", kind="redis_auth_refused")
            return w == on and m == (1 if on else 0)
        self.assertTrue(wait_for(state, timeout=timeout),
                        "redis_auth_refused never %s: %r\n%s"
                        % (on, warnings(self.a), self.a.output()[-3000:]))

    def assert_same_clients(self, before):
        """Redis' clients are those before (the trial's own connection,
        closed by the agent, may take Redis a moment to drop)."""
        got = []
        self.assertTrue(wait_for(lambda: got.append(client_ids(self.r.port, password="old-pw"))
                                 or got[-1] == before, timeout=5),
                        "clients %r, not %r" % (got[-1:], before))

    def assert_exact_on_redis(self, c, key, password, user=None):
        self.assertEqual(self.a.metric("spoa_ratelimit_redis_up"), 1)
        self.assert_ten_of(c, key)
        self.assertEqual(cli(self.r.port, "EXISTS", "rl:t2:u:%s" % key, password=password,
                             user=user), "1")

    def test_refused_password_keeps_the_connections(self):
        r, a = self.start(("--requirepass", "old-pw"), "old-pw")
        c = self.seq(a)
        self.assert_exact_on_redis(c, "before", "old-pw")
        before = client_ids(r.port, password="old-pw")
        self.assertTrue(before)
        pid = a.p.pid

        # a typo in the new password: tried, refused, nothing dropped
        self.reload("old-pw-typo", '"redis credentials changed: trying them on a new '
                    'connection"')
        self.wait_warning(True)
        msg = warnings(a)["redis_auth_refused"]["message"]
        self.assertIn("WRONGPASS", msg)
        self.assertNotIn("old-pw", msg)
        self.assertEqual(a.output().count("kind=redis_auth_refused"), 1, a.output()[-3000:])
        self.assert_exact_on_redis(c, "during", "old-pw")
        self.assert_same_clients(before)
        self.assertNotIn('"redis credentials changed: reconnecting"', a.output())
        self.assertNotIn("redis connection lost", a.output())
        self.assertEqual(status(a)["redis"]["reconnects"], 0)

        # the password in force restored: the warning clears, same clients
        self.reload("old-pw", 'msg="warning cleared" kind=redis_auth_refused')
        self.wait_warning(False)
        self.assert_exact_on_redis(c, "restored", "old-pw")
        self.assert_same_clients(before)
        self.assertEqual(a.p.pid, pid)

    def test_refused_then_right_rotation_switches(self):
        r, a = self.start(("--requirepass", "old-pw"), "old-pw")
        c = self.seq(a)
        self.assert_exact_on_redis(c, "before", "old-pw")
        before = client_ids(r.port, password="old-pw")

        # reloaded before Redis was told: refused, the old one serves
        self.reload("new-pw", '"redis credentials changed: trying them on a new connection"')
        self.wait_warning(True)
        self.assert_exact_on_redis(c, "early", "old-pw")

        # Redis takes the new one now (its clients stay); reloaded again
        self.assertEqual(cli(r.port, "CONFIG", "SET", "requirepass", "new-pw",
                             password="old-pw"), "OK")
        self.reload("new-pw", '"redis credentials changed: reconnecting" tried=yes')
        self.wait_warning(False)
        self.wait_up(a)
        self.assert_exact_on_redis(c, "after", "new-pw")
        after = client_ids(r.port, password="new-pw")
        self.assertTrue(after)
        self.assertFalse(before & after, (before, after))  # made again with new-pw

    def test_acl_rotation_done_right_switches(self):
        """An ACL user with a second password added, the agents reloaded with
        it, then the first removed: the agent switches on the reload and
        never falls back."""
        r = self.redis()
        self.assertEqual(cli(r.port, "ACL", "SETUSER", "lim", "on", ">pw1", "~rl:*", "+@all"),
                         "OK")
        self.r = r  # (not start(): the ACL user comes before the agent)
        self.pwfile = os.path.join(self.dir, "redis.pass")
        self.url_user = "lim"
        self.write_pw("pw1")
        a = self.a = self.agent(self.section(r))
        self.wait_up(a)
        c = self.seq(a)
        self.assert_exact_on_redis(c, "one", "pw1", user="lim")
        before = client_ids(r.port, password="pw1", user="lim")

        self.assertEqual(cli(r.port, "ACL", "SETUSER", "lim", ">pw2"), "OK")
        self.reload("pw2", '"redis credentials changed: reconnecting" tried=yes')
        self.wait_up(a)
        self.assertEqual(cli(r.port, "ACL", "SETUSER", "lim", "<pw1"), "OK")
        self.assert_exact_on_redis(c, "two", "pw2", user="lim")
        self.assertFalse(before & client_ids(r.port, password="pw2", user="lim"))
        self.assertNotIn("redis_auth_refused", warnings(a))
        self.assertEqual(a.metric("spoa_ratelimit_warning", kind="redis_auth_refused"), 0)

    def test_right_later_switches_by_itself(self):
        """Reloaded before Redis was told, and Redis told afterwards: the
        trial made again (every 30 s) passes, the agent switches and the
        warning clears, without another reload."""
        r, a = self.start(("--requirepass", "old-pw"), "old-pw")
        c = self.seq(a)
        self.reload("new-pw", '"redis credentials changed: trying them on a new connection"')
        self.wait_warning(True)
        self.assertEqual(cli(r.port, "CONFIG", "SET", "requirepass", "new-pw",
                             password="old-pw"), "OK")
        self.assertTrue(wait_for(lambda: '"redis credentials changed: reconnecting" tried=yes'
                                 in a.output(), timeout=60),
                        "never switched:\n" + a.output()[-3000:])
        self.wait_warning(False)
        self.wait_up(a)
        self.assert_exact_on_redis(c, "later", "new-pw")


class Topologies(AuthCase):
    """What Sentinel and Cluster give as last_error, and a refused reload
    on the Sentinel master."""

    def sentinel(self, master, conf_extra=""):
        sport = free_port()
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n%s"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds mymaster 1000\n"
                    % (sport, self.dir, conf_extra, master.port))
        s = Proc(["redis-server", conf, "--sentinel"], "sentinel", cwd=self.dir)
        self.servers.append(s)
        wait_port(sport, proc=s.p)
        return sport

    def wait_last_error(self, agent, name, addr=None, timeout=15.0):
        got = {}

        def named():
            got.update(status(agent)["redis"])
            return got.get("last_error") == name and (addr is None or
                                                      got.get("last_error_addr") == addr)
        self.assertTrue(wait_for(named, timeout=timeout),
                        "last_error never %s at %s: %r\n%s"
                        % (name, addr, got, agent.output()[-2000:]))
        return got

    def test_sentinel_master_wrong_password(self):
        m = self.redis("--requirepass", "m4ster")
        sport = self.sentinel(m, "sentinel auth-pass mymaster m4ster\n")
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\npassword = nope\n"
                       % sport)
        self.wait_last_error(a, "WRONGPASS", "127.0.0.1:%d" % m.port)

    def test_sentinel_refusing_the_agent(self):
        m = self.redis()
        sport = self.sentinel(m, "requirepass s3nt\n")
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\n" % sport)
        self.wait_last_error(a, "NOAUTH", "sentinels")

    def test_sentinel_master_refused_reload_keeps_serving(self):
        m = self.redis("--requirepass", "m4ster")
        sport = self.sentinel(m, "sentinel auth-pass mymaster m4ster\n")
        pwfile = os.path.join(self.dir, "redis.pass")
        with open(pwfile, "w") as f:
            f.write("m4ster\n")
        a = self.agent("[redis]\nsentinel = 127.0.0.1:%d\nmaster = mymaster\npassword_file = %s\n"
                       % (sport, pwfile))
        self.wait_up(a)
        c = self.seq(a)
        self.assert_ten_of(c, "s-before")
        with open(pwfile, "w") as f:
            f.write("typo\n")
        os.kill(a.p.pid, signal.SIGHUP)
        self.assertTrue(wait_for(lambda: "redis_auth_refused" in warnings(a), timeout=15),
                        a.output()[-3000:])
        self.assertIn("WRONGPASS", warnings(a)["redis_auth_refused"]["message"])
        self.assertEqual(a.metric("spoa_ratelimit_redis_up"), 1)
        self.assert_ten_of(c, "s-during")
        self.assertEqual(cli(m.port, "EXISTS", "rl:t2:u:s-during", password="m4ster"), "1")

    def test_cluster_wrong_password(self):
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
        a = self.agent("[redis]\ncluster = 127.0.0.1:%d\npassword = nope\n" % ports[0])
        got = self.wait_last_error(a, "WRONGPASS")
        self.assertEqual(got["last_error_addr"], "cluster seeds", got)


if __name__ == "__main__":
    unittest.main()
