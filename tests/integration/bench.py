"""`make bench`: the full benchmark. Runs spoa-bench against the agent in
several modes, REPEAT times each, and prints medians (decisions/s, latency
percentiles, Redis commands per decision) and each mode's throughput as a
ratio of standalone. The machine is shared and noisy: read medians and
ratios, not single runs.

usage: bench.py AGENT BENCH [REPEAT] [DECISIONS]"""
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

agent_bin, bench_bin = sys.argv[1], sys.argv[2]
repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 5
n = int(sys.argv[4]) if len(sys.argv) > 4 else 200000
harness.AGENT = agent_bin

HOT = "[rule:bench]\nkey = key\nrate = 1000000/1s\nburst = 1000000\n"
LIMITED = "[rule:bench]\nkey = key\nrate = 100/1s\nburst = 50\n"
EXACT = HOT + "lease = off\n"

# (name, rules, redis?, keys)
MODES = [
    ("standalone, 20 hot keys", HOT, False, 20),
    ("standalone, 1M keys (cold)", HOT, False, 1000000),
    ("standalone, 1000 keys over limit", LIMITED, False, 1000),
    ("redis lease, 20 hot keys", HOT, True, 20),
    ("redis lease, 1M keys (cold)", HOT, True, 1000000),
    ("redis lease, 1000 keys over limit", LIMITED, True, 1000),
    ("redis exact (lease=off), 20 keys", EXACT, True, 20),
]


def run_once(rules, redis, keys):
    extra = ""
    r = None
    if redis:
        r = harness.Redis()
        extra = "[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port
    a = harness.Agent(rules + extra, workers=2)
    try:
        if redis:
            import time
            for _ in range(100):
                if a.metric("spoa_ratelimit_redis_up") == 1:
                    break
                time.sleep(0.05)
        c0 = a.metric("spoa_ratelimit_redis_commands_total") or 0
        p = subprocess.run([bench_bin, "-a", "127.0.0.1:%d" % a.port, "-c", "8", "-p", "20",
                            "-n", str(n), "-k", str(keys)], capture_output=True, text=True,
                           timeout=600)
        c1 = a.metric("spoa_ratelimit_redis_commands_total") or 0
    finally:
        a.stop()
        if r:
            r.stop()
    if p.returncode != 0:
        raise RuntimeError(p.stdout + p.stderr)
    rate = float(re.search(r"([\d.]+) decisions/s", p.stdout).group(1))
    lat = [int(x) for x in re.search(r"p50 (\d+) p99 (\d+) p99.9 (\d+) max (\d+)",
                                     p.stdout).groups()]
    return rate, lat, (c1 - c0) / n


def main():
    print("spoa-bench: 8 connections x 20 pipelined, %d decisions per run, %d runs per mode, "
          "%d CPUs" % (n, repeat, os.cpu_count()))
    print("%-36s %12s %7s %8s %8s %8s %10s" % ("mode", "decisions/s", "ratio", "p50 us",
                                               "p99 us", "p99.9 us", "redis/dec"))
    base = None
    for name, rules, redis, keys in MODES:
        runs = [run_once(rules, redis, keys) for _ in range(repeat)]
        rate = statistics.median(r[0] for r in runs)
        p50, p99, p999 = (statistics.median(r[1][i] for r in runs) for i in range(3))
        cmds = statistics.median(r[2] for r in runs)
        base = base or rate
        print("%-36s %12.0f %7.2f %8.0f %8.0f %8.0f %10.4f" % (name, rate, rate / base, p50,
                                                               p99, p999, cmds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
