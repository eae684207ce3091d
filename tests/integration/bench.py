"""`make bench`: the full benchmark, every figure side by side in one run.

1. Throughput: spoa-bench against the agent (1 worker) in several modes,
   REPEAT times each (the modes of 1000 keys or fewer after WARM_S seconds
   of warm-up: steady state): medians of decisions/s, latency percentiles, Redis
   script calls (EVALSHA, from INFO commandstats) and script operations (a
   batch carries many) per decision. Ratios are against the do-nothing SPOP
   path (the agent with no rule that matches: what the SPOP side costs).
2. The textbook design on the same Redis: redis-benchmark -P16 EVALSHA of a
   one-call-per-request token bucket script over 1M random keys, and the
   agent's 1M-random-key row as a ratio of it.
3. Light load after a key churn: p50/p99 at 200 decisions/s on a fresh agent,
   then after 4 s of 1M-random-key traffic (with Redis' default hz 10, and
   with hz 100); and bytes of agent memory per lease entry after the churn.

The machine is shared and noisy: read medians and ratios, not single runs.

usage: bench.py AGENT BENCH [REPEAT] [DECISIONS]"""
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

agent_bin, bench_bin = sys.argv[1], sys.argv[2]
repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 5
n = int(sys.argv[4]) if len(sys.argv) > 4 else 200000
harness.AGENT = agent_bin

NOTHING = "[rule:nothing]\nmessage = no-such-message\nkey = key\nrate = 1/1s\n"
HOT = "[rule:bench]\nkey = key\nrate = 1000000/1s\nburst = 1000000\n"
LIMITED = "[rule:bench]\nkey = key\nrate = 100/1s\nburst = 50\n"
EXACT = HOT + "lease = off\n"
PER_IP = "[rule:perip]\nkey = ip\nrate = 100/1m\nburst = 20\n"

# Modes with this many keys or fewer are measured after WARM_S seconds of the
# same traffic (another seed): their figures are steady-state ones. The 1M-key
# modes are cold by design: they start on a fresh agent, as the textbook does.
WARM_KEYS = 1000
WARM_S = 0.3

# (name, rules, redis?, keys)
MODES = [
    ("do-nothing SPOP path (no rule)", NOTHING, False, 20),
    ("standalone, 20 hot keys", HOT, False, 20),
    ("standalone, 1M keys (cold)", HOT, False, 1000000),
    ("standalone, 1000 keys over limit", LIMITED, False, 1000),
    ("redis lease, 20 hot keys", HOT, True, 20),
    ("redis lease, 1000 keys over limit", LIMITED, True, 1000),
    ("redis exact (lease=off), 20 keys", EXACT, True, 20),
    ("redis, 1M random keys, per-IP 100/1m", PER_IP, True, 1000000),
]
PER_IP_MODE = MODES[-1][0]

# The textbook design: one script call per request, on the same Redis.
TEXTBOOK = """
local key = KEYS[1]
local rate, burst = tonumber(ARGV[1]) / tonumber(ARGV[2]), tonumber(ARGV[3])
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + tonumber(tm[2]) / 1000
local v = redis.call('HMGET', key, 't', 'ts')
local t, ts = tonumber(v[1]) or burst, tonumber(v[2]) or now
t = math.min(burst, t + (now - ts) * rate)
local allowed = 0
if t >= 1 then t = t - 1; allowed = 1 end
redis.call('HSET', key, 't', t, 'ts', now)
redis.call('PEXPIRE', key, math.ceil((burst - t) / rate) + 1000)
return {allowed, math.floor(t)}
"""


def evalsha_calls(redis):
    out = redis.cli("INFO", "commandstats")
    m = re.search(r"cmdstat_evalsha:calls=(\d+)", out)
    return int(m.group(1)) if m else 0


def wait_redis_up(agent):
    for _ in range(200):
        if agent.metric("spoa_ratelimit_redis_up") == 1:
            return
        time.sleep(0.05)
    raise RuntimeError("agent never connected to Redis")


def spoa_bench(agent, *args):
    p = subprocess.run([bench_bin, "-a", "127.0.0.1:%d" % agent.port] + list(args),
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stdout + p.stderr)
    rate = float(re.search(r"([\d.]+) decisions/s", p.stdout).group(1))
    lat = [int(x) for x in re.search(r"p50 (\d+) p99 (\d+) p99.9 (\d+) max (\d+)",
                                     p.stdout).groups()]
    return rate, lat


def script_ops(agent):
    """Script operations so far: single calls plus the calls batches carried."""
    batched = agent.metric("spoa_ratelimit_redis_batched_calls_total") or 0
    batches = agent.metric("spoa_ratelimit_redis_batches_total") or 0
    cmds = agent.metric("spoa_ratelimit_redis_commands_total") or 0
    return cmds - batches + batched


def run_once(rules, redis, keys):
    r = harness.Redis() if redis else None
    extra = "[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port if r else ""
    a = harness.Agent(rules + extra, workers=1)
    try:
        if r:
            wait_redis_up(a)
        if keys <= WARM_KEYS:
            # steady state, not the first lease intervals: a 200k-decision
            # run lasts about one interval, and a fresh key's lease takes a
            # few round trips to reach its demand
            spoa_bench(a, "-c", "8", "-p", "20", "-d", str(WARM_S), "-k", str(keys), "-s", "99")
        c0, ops0 = (evalsha_calls(r), script_ops(a)) if r else (0, 0)
        rate, lat = spoa_bench(a, "-c", "8", "-p", "20", "-n", str(n), "-k", str(keys))
        c1, ops1 = (evalsha_calls(r), script_ops(a)) if r else (0, 0)
        ops = ops1 - ops0
    finally:
        if r:
            r.stop()
        a.stop()  # last: raises unless the agent exits 0
    return rate, lat, (c1 - c0) / n, ops / n


def textbook(keys, requests):
    """redis-benchmark -P16 EVALSHA of the textbook script: requests/s."""
    r = harness.Redis()
    try:
        sha = r.cli("SCRIPT", "LOAD", TEXTBOOK).strip()
        p = subprocess.run(["redis-benchmark", "-p", str(r.port), "-P", "16", "-q",
                            "-n", str(requests), "-r", str(keys), "evalsha", sha, "1",
                            "tb:__rand_int__", "100", "60000", "20"],
                           capture_output=True, text=True, timeout=600)
        m = re.findall(r"([\d.]+) requests per second", p.stdout.replace("\r", "\n"))
        if not m:
            raise RuntimeError(p.stdout + p.stderr)
        return float(m[-1])
    finally:
        r.stop()


def light(agent, seed):
    return spoa_bench(agent, "-c", "2", "-p", "20", "-r", "200", "-d", "3", "-k", "1000000",
                      "-s", str(seed))[1]


def churn_once(redis_args=()):
    """Light-load latency on a fresh agent, then right after 4 s of 1M-key
    traffic; memory per lease entry after the churn. Control: a second, fresh
    agent on the same Redis right after a churn of the first one, which shows
    what Redis itself adds after a churn (its keys expiring in bulk).
    redis_args: the Redis run with them (hz 100: shorter expire cycles)."""
    r = harness.Redis(args=redis_args)
    ini = PER_IP + "[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port
    a = harness.Agent(ini, workers=1)
    b = None
    try:
        wait_redis_up(a)
        fresh = light(a, 1)
        rss0 = harness.rss_kb(a.p.pid)
        spoa_bench(a, "-c", "8", "-p", "20", "-d", "4", "-k", "1000000", "-s", "2")
        entries = a.metric("spoa_ratelimit_lease_keys") or 0
        rss1 = harness.rss_kb(a.p.pid)
        after = light(a, 3)
        time.sleep(3)  # Redis settles: the churned keys are gone
        spoa_bench(a, "-c", "8", "-p", "20", "-d", "4", "-k", "1000000", "-s", "4")
        b = harness.Agent(ini, workers=1)
        wait_redis_up(b)
        control = light(b, 5)
    finally:
        r.stop()
        try:
            a.stop()  # raises unless the agent exits 0
        finally:
            if b:
                b.stop()
    per_entry = (rss1 - rss0) * 1024 / entries if entries else 0
    return fresh, after, entries, per_entry, control


def main():
    print("spoa-bench: 8 connections x 20 pipelined, %d decisions per run, %d rounds over the "
          "modes, agent with 1 worker, %d CPUs; ratio: median of each round's ratio to the "
          "do-nothing path" % (n, repeat, os.cpu_count()))
    print("%-38s %12s %7s %8s %8s %8s %10s %10s" % (
        "mode", "decisions/s", "ratio", "p50 us", "p99 us", "p99.9 us", "calls/dec",
        "ops/dec"))
    # Repeats go round the modes (and the textbook), not one mode at a time:
    # on a shared machine a slow spell then hits every mode of one round, and
    # each ratio is the median of ratios within a round.
    runs = {name: [] for name, _, _, _ in MODES}
    tbs = []
    for _ in range(repeat):
        for name, rules, redis, keys in MODES:
            runs[name].append(run_once(rules, redis, keys))
        tbs.append(textbook(1000000, max(n, 200000)))
    base_name = MODES[0][0]
    for name, _, _, _ in MODES:
        rs = runs[name]
        rate = statistics.median(x[0] for x in rs)
        ratio = statistics.median(x[0] / b[0] for x, b in zip(rs, runs[base_name]))
        p50, p99, p999 = (statistics.median(x[1][i] for x in rs) for i in range(3))
        calls = statistics.median(x[2] for x in rs)
        ops = statistics.median(x[3] for x in rs)
        print("%-38s %12.0f %7.2f %8.0f %8.0f %8.0f %10.4f %10.4f" % (
            name, rate, ratio, p50, p99, p999, calls, ops), flush=True)

    tb = statistics.median(tbs)
    print("%-38s %12.0f %7s %8s %8s %8s %10.4f %10.4f" % (
        "textbook EVALSHA -P16, 1M random keys", tb, "", "", "", "", 1.0, 1.0))
    per_round = [x[0] / t for x, t in zip(runs[PER_IP_MODE], tbs)]
    print("agent (1M random keys) / textbook: %.2f (median of the rounds' ratios: %s)"
          % (statistics.median(per_round), " ".join("%.2f" % x for x in per_round)))

    churns = [churn_once() for _ in range(max(1, min(repeat, 3)))]
    f50 = statistics.median(c[0][0] for c in churns)
    f99 = statistics.median(c[0][1] for c in churns)
    a50 = statistics.median(c[1][0] for c in churns)
    a99 = statistics.median(c[1][1] for c in churns)
    amax = statistics.median(c[1][3] for c in churns)
    ent = statistics.median(c[2] for c in churns)
    per = statistics.median(c[3] for c in churns)
    c50 = statistics.median(c[4][0] for c in churns)
    c99 = statistics.median(c[4][1] for c in churns)
    print("light load (200/s, 1M random keys): fresh agent p50 %.0f us p99 %.0f us; right after "
          "4 s of 1M-key traffic p50 %.0f us p99 %.0f us max %.0f us (p99 ratio %.2f)"
          % (f50, f99, a50, a99, amax, a99 / f99 if f99 else 0))
    print("  control, a fresh agent on the same Redis right after another agent's churn: "
          "p50 %.0f us p99 %.0f us (what Redis adds while the churned keys expire)"
          % (c50, c99))
    hz = [churn_once(("--hz", "100")) for _ in range(max(1, min(repeat, 3)))]
    print("  the same with Redis at hz 100 (expire cycles of 2.5 ms at most, not 25 ms): "
          "fresh agent p99 %.0f us, right after the churn p99 %.0f us max %.0f us"
          % (statistics.median(c[0][1] for c in hz), statistics.median(c[1][1] for c in hz),
             statistics.median(c[1][3] for c in hz)))
    print("memory: %.0f lease entries after the churn, %.0f bytes of agent RSS per entry"
          % (ent, per))
    return 0


if __name__ == "__main__":
    sys.exit(main())
