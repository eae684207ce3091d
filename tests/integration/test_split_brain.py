# SPDX-License-Identifier: Apache-2.0
"""No split brain (issue 42): what keeps an agent from writing to a master
that may have been replaced, against real redis-server processes on loopback.

- NOREPLICAS: a master with min-replicas-to-write 1 and no replica refuses
  every write. The kind is counted by name, the redis_errors warning names
  it, decisions fall back (`degraded`) with the backoff of an unreachable
  server; lifting the setting brings the agent back by itself, and the
  warning clears after [redis] errors_quiet without an error reply.

Every wait polls a condition with a deadline; nothing depends on speed."""
import unittest

from test_redis_auth import AuthCase, cli


class NoReplicas(AuthCase):
    def test_noreplicas_counted_warned_and_lifted(self):
        r = self.redis()
        a = self.agent("[redis]\nurl = redis://127.0.0.1:%d/0\nerrors_quiet = 1s\n" % r.port)
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
        self.wait_log(a, 'msg="warning cleared" kind=redis_errors', timeout=15)


if __name__ == "__main__":
    unittest.main()
