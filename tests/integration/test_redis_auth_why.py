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
import unittest

from harness import free_port, wait_for
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
        self.assertEqual(client_ids(r.port, password="old-pw"), before)
        self.assertNotIn('"redis credentials changed: reconnecting"', a.output())
        self.assertNotIn("redis connection lost", a.output())
        self.assertEqual(status(a)["redis"]["reconnects"], 0)

        # the password in force restored: the warning clears, same clients
        self.reload("old-pw", 'msg="warning cleared" kind=redis_auth_refused')
        self.wait_warning(False)
        self.assert_exact_on_redis(c, "restored", "old-pw")
        self.assertEqual(client_ids(r.port, password="old-pw"), before)
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


if __name__ == "__main__":
    unittest.main()
