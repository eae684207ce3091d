# SPDX-License-Identifier: Apache-2.0
"""Warnings: nothing silent (issue 41, doc/operations.md "Warnings"). Each
kind the agent finds in itself, from the outside: the gauge
spoa_ratelimit_warning{kind} at 1, the entry in /status.json's `warnings`,
one `warning kind=` line in the log however long it lasts, the page's banner
(in headless Chromium), and each going away when the cause does:

- haproxy_never_asks: peers that send health-check HELLOs and never a
  NOTIFY, [agent] notify_silence shortened to 2s; nothing raised without
  peers; a NOTIFY clears it; and the real thing: the kit on every HAProxy
  found, less its `set-var(txn.rl_agents)` line (the agent UP, every
  request a 200, nothing asked);
- slots_never_released: a concurrency rule with max_hold = 2s whose slots
  only expire (standalone, and on Redis where the next acquire finds them
  expired); a release clears it;
- secret_readable: a password_file and a config with an inline password
  that every user can read; chmod and SIGHUP clear it.

Every wait has a deadline; nothing asserts a count of events in wall time."""
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import unittest

import browser
import spop
from fleet import Seq, redis_ini, unique, wait_redis_up
from harness import Agent, Redis, stop_cleanly, wait_for
from haproxies import KitHAProxy, per_haproxy

RATE_RULE = "\n[rule:api]\nmessage = check-rate\nkey = key\nrate = 100/1m\n"

CC_RULE = """
[rule:inflight]
message = check-rate
key = key
algorithm = concurrency
limit = 2
release = release-slot
max_hold = 2s
"""


def warning_gauge(agent, kind):
    return agent.metric("spoa_ratelimit_warning", kind=kind)


def warnings_json(agent):
    return {w["kind"]: w for w in json.loads(agent.get("/status.json"))["warnings"]}


def log_lines(agent, kind):
    return [l for l in agent.output().splitlines() if "msg=warning kind=%s " % kind in l]


class HealthChecks(threading.Thread):
    """HAProxy's `option spop-check`: connect, HELLO with healthcheck, read
    the AGENT-HELLO, close; every 0.2 s until stopped. No NOTIFY ever."""

    def __init__(self, addr):
        super().__init__(daemon=True)
        self.addr = addr
        self.halt = threading.Event()
        self.done = 0

    def run(self):
        while not self.halt.is_set():
            try:
                c = spop.Client(self.addr, timeout=5)
                c.send(spop.hello(caps="", healthcheck=True))
                c.recv_frame()
                c.close()
                self.done += 1
            except OSError:
                pass
            self.halt.wait(0.2)

    def stop(self):
        self.halt.set()
        self.join(10)


class NeverAsks(unittest.TestCase):
    KIND = "haproxy_never_asks"

    def setUp(self):
        self.agent = Agent(RATE_RULE, workers=2, extra_agent="notify_silence = 2s\n")
        stop_cleanly(self, self.agent)

    def uptime(self):
        return json.loads(self.agent.get("/status.json"))["agent"]["uptime_s"]

    def test_health_checks_without_notify(self):
        a = self.agent
        # no peer at all: nothing to say, even past the silence
        self.assertTrue(wait_for(lambda: self.uptime() >= 4, timeout=20))
        self.assertEqual(warning_gauge(a, self.KIND), 0)
        self.assertEqual(warnings_json(a), {})

        checks = HealthChecks(a.addr)
        checks.start()
        self.addCleanup(checks.stop)
        t0 = time.monotonic()
        self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 1, timeout=20),
                        a.output()[-2000:])
        print("\n  raised %.1f s after the first health check" % (time.monotonic() - t0))
        w = warnings_json(a)[self.KIND]
        self.assertIn("send-spoe-group", w["message"])
        self.assertIn("2s", w["message"])
        self.assertLessEqual(w["since"], time.time() + 1)
        self.assertGreater(w["since"], time.time() - 60)
        print("  " + log_lines(a, self.KIND)[0])

        # the page shows it as a banner
        if browser.find_chromium():
            with browser.Browser() as b:
                page = b.open("http://127.0.0.1:%d/" % a.stats_port)
                text = page.wait_for(
                    "(() => { const d = document.querySelector("
                    "'#warnings .banner[data-kind=\"%s\"]'); return d && d.textContent; })()"
                    % self.KIND, timeout=15)
                self.assertIn("send-spoe-group", text)
                self.assertIn(self.KIND, text)
                # raised stays raised while the checks go on, logged once
                before = checks.done
                self.assertTrue(wait_for(lambda: checks.done >= before + 10, timeout=20))
                self.assertEqual(warning_gauge(a, self.KIND), 1)
                self.assertEqual(len(log_lines(a, self.KIND)), 1, a.output()[-3000:])

                # a NOTIFY clears it, and the banner goes
                c = Seq(a.addr)
                self.addCleanup(c.close)
                self.assertFalse(c.decide(key=unique())["blocked"])
                self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 0, timeout=10))
                page.wait_for("document.querySelectorAll('#warnings .banner').length === 0",
                              timeout=15)
        else:
            before = checks.done
            self.assertTrue(wait_for(lambda: checks.done >= before + 10, timeout=20))
            self.assertEqual(len(log_lines(a, self.KIND)), 1, a.output()[-3000:])
            c = Seq(a.addr)
            self.addCleanup(c.close)
            self.assertFalse(c.decide(key=unique())["blocked"])
            self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 0, timeout=10))
        self.assertEqual(warnings_json(a), {})
        self.assertIn('"warning cleared" kind=%s' % self.KIND, a.output())
        self.assertEqual(len(log_lines(a, self.KIND)), 1)

    def test_notify_keeps_it_quiet(self):
        """Peers that ask: never raised, however long."""
        a = self.agent
        c = Seq(a.addr)
        self.addCleanup(c.close)
        checks = HealthChecks(a.addr)
        checks.start()
        self.addCleanup(checks.stop)
        key = unique()
        deadline = time.monotonic() + 5  # 2.5 silences, one NOTIFY a second
        while time.monotonic() < deadline:
            c.decide(key=key)
            self.assertEqual(warning_gauge(a, self.KIND), 0)
            time.sleep(0.5)
        self.assertEqual(log_lines(a, self.KIND), [])


class NeverAsksThroughKit:
    """The package's instructions once left out the line that sets
    txn.rl_agents: HAProxy checks the agent (UP), never asks it."""
    KIND = "haproxy_never_asks"
    LINE = "    http-request set-var(txn.rl_agents) nbsrv(spoe-ratelimit)\n"

    def test_kit_without_rl_agents(self):
        a = Agent(RATE_RULE.replace("key = key", "key = ip"), workers=2,
                  extra_agent="notify_silence = 2s\n")
        stop_cleanly(self, a)

        def cut(cfg):
            self.assertIn(self.LINE, cfg)
            return cfg.replace(self.LINE, "", 1)
        h = KitHAProxy(self.build, a.port, cfg_edits=[cut])
        self.addCleanup(h.stop)

        def asked_nothing():
            self.assertEqual(h.request("/")[0], 200)
            return warning_gauge(a, self.KIND) == 1
        self.assertTrue(wait_for(asked_nothing, timeout=30, step=0.3), a.output()[-2000:])
        self.assertEqual(a.metric("spoa_ratelimit_frames_total", type="notify"), 0)
        self.assertGreater(a.metric("spoa_ratelimit_frames_total", type="haproxy_hello"), 0)
        self.assertIn("set-var(txn.rl_agents)", warnings_json(a)[self.KIND]["message"])
        self.assertEqual(len(log_lines(a, self.KIND)), 1)


per_haproxy(NeverAsksThroughKit, globals())


class SlotsMixin:
    KIND = "slots_never_released"

    def agent_ini(self):
        raise NotImplementedError

    def ready(self, agent):
        pass

    def test_slots_only_expire(self):
        a = Agent(self.agent_ini(), workers=2)
        stop_cleanly(self, a)
        self.ready(a)
        c = Seq(a.addr)
        self.addCleanup(c.close)
        key = unique("cc")
        got = [c.decide(key=key) for _ in range(2)]
        taken = time.monotonic()
        self.assertEqual([g["blocked"] for g in got], [False, False], got)
        self.assertEqual(warning_gauge(a, self.KIND), 0)

        # never released: they expire after max_hold (2 s); with Redis the
        # next acquire of the key finds them so, as HAProxy's traffic would
        def expired():
            c.decide(key=key)
            return warning_gauge(a, self.KIND) == 1
        self.assertTrue(wait_for(expired, timeout=20, step=0.2), a.output()[-2000:])
        took = time.monotonic() - taken
        print("\n  raised %.1f s after the slots were taken (max_hold 2 s)" % took)
        self.assertLess(took, 2 + 8, "not within a few seconds of the first expiry")
        w = warnings_json(a)[self.KIND]
        for want in ("inflight", "release-slot", "http-response", "max_hold"):
            self.assertIn(want, w["message"])
        self.assertEqual(len(log_lines(a, self.KIND)), 1)

        # a release of that rule (here of a slot still held) clears it
        key2 = unique("cc")
        slot = c.decide(key=key2)["slot"]
        self.assertEqual(c.decide(msg="release-slot", slot=slot), {"blocked": False})
        self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 0, timeout=10),
                        a.output()[-2000:])
        self.assertNotIn(self.KIND, warnings_json(a))
        self.assertIn('"warning cleared" kind=%s' % self.KIND, a.output())

        # releases seen: later expiries (a client abort) are not a missing line
        got = [c.decide(key=key2) for _ in range(2)]
        self.assertTrue(any(not g["blocked"] for g in got), got)
        before = a.metric("spoa_ratelimit_slots_expired_total", rule="inflight")
        self.assertTrue(wait_for(lambda: c.decide(key=key2) is not None and a.metric(
            "spoa_ratelimit_slots_expired_total", rule="inflight") > before, timeout=20,
            step=0.2))
        self.assertEqual(warning_gauge(a, self.KIND), 0)
        self.assertEqual(len(log_lines(a, self.KIND)), 1)


class SlotsStandalone(SlotsMixin, unittest.TestCase):
    def agent_ini(self):
        return CC_RULE


class SlotsRedis(SlotsMixin, unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.addCleanup(self.redis.stop)

    def agent_ini(self):
        return redis_ini(self.redis.port) + CC_RULE

    def ready(self, agent):
        wait_redis_up(agent)


class SecretReadable(unittest.TestCase):
    KIND = "secret_readable"

    def test_password_file_and_inline_password(self):
        redis = Redis(args=["--requirepass", "secret"])
        self.addCleanup(redis.stop)
        d = tempfile.mkdtemp(prefix="spoa-secret-")
        self.addCleanup(shutil.rmtree, d, True)
        pw = os.path.join(d, "redis.pass")
        with open(pw, "w") as f:
            f.write("secret\n")
        os.chmod(pw, 0o644)
        ini = ("[redis]\nurl = redis://127.0.0.1:%d\npassword_file = %s\n" % (redis.port, pw)
               + RATE_RULE)
        a = Agent(ini, workers=1)
        stop_cleanly(self, a)
        self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 1, timeout=10))
        w = warnings_json(a)[self.KIND]
        self.assertIn(pw, w["message"])
        self.assertIn("chmod 640", w["message"])
        self.assertIn("0644", w["message"])
        print("\n  " + log_lines(a, self.KIND)[0])

        # fixed, then SIGHUP: cleared
        os.chmod(pw, 0o600)
        n = a.output().count('"configuration reloaded"')
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: a.output().count('"configuration reloaded"') > n))
        self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 0, timeout=10))
        self.assertIn('"warning cleared" kind=%s' % self.KIND, a.output())

        # a password in the config itself, which every user may read
        a.rewrite("[redis]\nurl = redis://127.0.0.1:%d\npassword = secret\n" % redis.port
                  + RATE_RULE)
        os.chmod(a.ini, 0o644)
        n = a.output().count('"configuration reloaded"')
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: a.output().count('"configuration reloaded"') > n))
        self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 1, timeout=10))
        msg = warnings_json(a)[self.KIND]["message"]
        self.assertIn(a.ini, msg)
        self.assertIn("password_file", msg)
        os.chmod(a.ini, 0o640)
        n = a.output().count('"configuration reloaded"')
        a.kill_sig(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: a.output().count('"configuration reloaded"') > n))
        self.assertTrue(wait_for(lambda: warning_gauge(a, self.KIND) == 0, timeout=10))
        self.assertEqual(len(log_lines(a, self.KIND)), 2)


if __name__ == "__main__":
    unittest.main()
