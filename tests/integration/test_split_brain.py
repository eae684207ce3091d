# SPDX-License-Identifier: Apache-2.0
"""No split brain (issue 42): what keeps an agent from writing to a master
that may have been replaced, against real redis-server processes (and a real
Sentinel, redis-server --sentinel) on loopback.

- NOREPLICAS: a master with min-replicas-to-write 1 and no replica refuses
  every write. The kind is counted by name, the redis_errors warning names
  it, decisions fall back (`degraded`) with the backoff of an unreachable
  server; lifting the setting brings the agent back by itself, and the
  warning clears after [redis] errors_quiet without an error reply.
- A Sentinel that stops answering while the master stays up: past [redis]
  sentinel_window the master counts as unconfirmed (redis_unconfirmed,
  degraded decisions, redis_up 0); the sentinel back, the agent reconnects
  and the warning clears.

Every wait polls a condition with a deadline; nothing depends on speed."""
import os
import signal
import unittest

from harness import Proc, free_port, wait_port
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


class Unconfirmed(AuthCase):
    def sentinel(self, master_port):
        port = free_port()
        conf = os.path.join(self.dir, "sentinel-%d.conf" % port)
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds mymaster 1000\n"
                    "sentinel failover-timeout mymaster 5000\n" % (port, self.dir, master_port))
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


if __name__ == "__main__":
    unittest.main()
