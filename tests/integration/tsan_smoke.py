# SPDX-License-Identifier: Apache-2.0
"""The agent built with ThreadSanitizer (configure --enable-tsan), run with
two workers against a real redis-server: spoa-bench traffic on leased token
buckets, rate leases, a sliding window decided in Redis, a fixed window and
concurrency slots (never released: freed by max_hold); the stats listener
read all the while (/metrics, /status.json, /top, /key, POST /reset); a
SIGHUP reload in the middle of the traffic, then SIGTERM. Fails when the
agent reports a data race (or anything else TSan finds), when a decision
goes unanswered, or when the agent does not exit 0.

usage: tsan_smoke.py AGENT BENCH [SECONDS]"""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

# halt_on_error: the first report stops the agent with exitcode 66, so a race
# fails the run even if its report scrolled past. The suppressions file names
# only other libraries' false positives, each with its reason.
SUPP = os.path.join(HERE, "..", "tsan.supp")
TSAN_OPTIONS = "halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=%s" % SUPP

RULES = """
[lease]
interval = 100ms
ttl = 1s
rate_leases = on

[rule:leased]
key = key
rate = %d/1s
burst = 50

[rule:window]
key = key
rate = 200/1s
algorithm = sliding-window
lease = off

[rule:fixed]
key = path
rate = 1000/1s
algorithm = fixed-window

[rule:inflight]
key = ip
algorithm = concurrency
limit = 5
release = release
max_hold = 1s
"""


def reader(agent, stop, errors):
    """The stats listener, read while the workers decide: what it shows
    comes from counters and tables the workers write; a reset clears a key
    the workers hold leases on."""
    n = 0
    while not stop.is_set():
        key = "key-%d" % (n % 40)
        n += 1
        for method, path in (("GET", "/metrics"), ("GET", "/status.json"), ("GET", "/top"),
                             ("GET", "/key?rule=leased&key=" + key),
                             ("POST", "/reset?rule=leased&key=" + key)):
            try:
                req = urllib.request.Request("http://127.0.0.1:%d%s" % (agent.stats_port, path),
                                             method=method, data=b"" if method == "POST" else None)
                with urllib.request.urlopen(req, timeout=30) as r:
                    r.read()
            except OSError as e:
                errors.append("%s %s: %s" % (method, path, e))
                return
        time.sleep(0.05)


def metric(agent, name):
    """One sample, or None when the agent does not answer (a report with
    halt_on_error has ended it: the report is shown at the end)."""
    try:
        return agent.metric(name)
    except OSError:
        return None


def bench(agent, seconds):
    return subprocess.Popen([harness.BENCH, "-a", "127.0.0.1:%d" % agent.port, "-c", "4",
                             "-p", "20", "-d", str(seconds), "-k", "40"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.rsplit("usage: ", 1)[1])
    harness.AGENT, harness.BENCH = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seconds = int(sys.argv[3]) if len(sys.argv) == 4 else 6
    os.environ["TSAN_OPTIONS"] = TSAN_OPTIONS
    failures = []
    redis = harness.Redis()
    agent, b, stop = None, None, threading.Event()
    try:
        extra = "[redis]\nurl = redis://127.0.0.1:%d/0\n" % redis.port
        agent = harness.Agent(extra + RULES % 100, workers=2)
        # generous deadlines: the TSan build runs several times slower
        if not harness.wait_for(lambda: metric(agent, "spoa_ratelimit_redis_up") == 1, 60):
            raise AssertionError("the agent never connected to Redis:\n" + agent.output())
        errors = []
        t = threading.Thread(target=reader, args=(agent, stop, errors))
        t.start()
        b = bench(agent, seconds)
        # the reload in the middle of the traffic: a new rate for every worker
        time.sleep(seconds / 2)
        agent.rewrite(extra + RULES % 150)
        agent.kill_sig(signal.SIGHUP)
        # (a report ends the agent: no point waiting then)
        if not harness.wait_for(lambda: agent.p.poll() is not None or
                                metric(agent, "spoa_ratelimit_reloads_total") == 1, 60) \
                or agent.p.poll() is not None:
            failures.append("the SIGHUP reload was never counted")
        out, _ = b.communicate(timeout=seconds + 120)
        stop.set()
        t.join(60)
        print(out, end="")
        failures += errors
        m = re.search(r"decisions (\d+) in", out)
        ab = re.search(r"allowed (\d+) blocked (\d+) errors (\d+)", out)
        if b.returncode != 0 or not m or int(m.group(1)) == 0 or not ab or \
                int(ab.group(1)) + int(ab.group(2)) != int(m.group(1)) or int(ab.group(3)) != 0:
            failures.append("spoa-bench: exit %s, decisions not all answered" % b.returncode)
        rc = agent.stop(timeout=60, check=False)
        if rc != 0:
            failures.append("agent exit code %s after SIGTERM (66: a ThreadSanitizer report)" % rc)
    except (AssertionError, OSError, RuntimeError, subprocess.SubprocessError) as e:
        failures.append("%s: %s" % (type(e).__name__, e))
    finally:
        stop.set()
        if b is not None and b.poll() is None:
            b.kill()
            b.wait()
        if agent is not None:
            agent.kill()
        redis.stop()
    log = agent.output() if agent is not None else ""
    if "ThreadSanitizer" in log:
        report = log[log.find("=================="):]
        failures.append("ThreadSanitizer reported:\n" + report[:20000])
    for f in failures:
        print("FAIL: tsan smoke: %s" % f)
    if failures:
        if "ThreadSanitizer" not in log:
            print(log[-4000:])
        return 1
    print("tsan smoke: ok (workers = 2, Redis, leases and rate leases, a SIGHUP reload, "
          "SIGTERM; no ThreadSanitizer report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
