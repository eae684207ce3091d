# SPDX-License-Identifier: Apache-2.0
"""Why Redis is down, by name (issue 45), against real redis-server
processes on loopback.

- /status.json's redis.last_error names what Redis said (WRONGPASS, NOAUTH)
  or the socket's error (connection_refused), with the detail, where and
  when.

Every wait polls a condition with a deadline."""
import json
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


if __name__ == "__main__":
    unittest.main()
