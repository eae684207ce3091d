# SPDX-License-Identifier: Apache-2.0
"""`make bench`: the full benchmark, every figure side by side in one run.

How it is measured (issue 47): every row runs back to back with its
reference in each of REPEAT rounds (at least 5), the order alternating from
round to round, and a row's ratio is the median of the rounds' ratios, shown
with their spread (min-max and the interquartile range), beside the absolute
medians. The references: tests/bench/noop_agent answering the seven
variables (at the row's depth) for the SPOP rows and the HAProxy rows; the
textbook EVALSHA token bucket (and the other Redis designs) at the same depth
for the cold per-IP rows. With BENCH_PIN=1 (the default of `make bench`) the
agent (or noop_agent) runs on CPU 0 and everything else - Redis, spoa-bench,
redis-benchmark, HAProxy, wrk - on CPU 1; BENCH_PIN=0 leaves them to the
scheduler (the unpinned run to compare with).

1. Throughput: spoa-bench against the agent (1 worker) in several modes,
   REPEAT times each (the modes of 1000 keys or fewer after WARM_S seconds
   of warm-up: steady state): medians of decisions/s, latency percentiles, Redis
   script calls (EVALSHA, from INFO commandstats) and script operations (a
   batch carries many) per decision, and what a decision costs in CPU: Redis'
   (used_cpu_user + used_cpu_sys of INFO cpu, all its threads) and the agent's
   (the run time of each of its threads, /proc/PID/task/*/schedstat), in microseconds per
   decision, and the microseconds Redis spent per EVALSHA (INFO commandstats).
   Ratios are against noop_agent's seven variables at the same depth.
2. What a user would deploy instead, on the same Redis build, 1M random keys,
   at 256 and 32 requests in flight (redis-benchmark -P16 with 16 or 2
   clients): the textbook token bucket script (HMGET, HSET, PEXPIRE: one
   EVALSHA per request); a lean GCRA script (one string key per client, GET
   and SET PX); and envoy ratelimit's fixed window (INCRBY then EXPIRE,
   pipelined, no Lua: the cheapest global limiter there is; measured as the
   two commands' runs, whose times and CPU add up, since Redis runs commands
   one after another); and SET key v NX PX pipelined (one small write per new
   key). Each with decisions/s and Redis CPU per decision (INFO cpu, and the
   commands' own time from INFO commandstats); the agent's per-IP rows (the
   honest cold-key workload: `100/1m burst 20` over 1M client IPs) as ratios
   of the textbook at the same depth, their Redis CPU as ratios of each.
3. Through HAProxy (Debian's, with the shipped kit): wrk's requests/s with
   the agent deciding on a hot key (standalone, and with Redis leases)
   against the same HAProxy with noop_agent's seven variables: what a decision costs
   where it is used. Each row checks that every request was answered (no
   socket error, no non-2xx) and that the agent sent an ACK for each.
4. Light load after a key churn: p50/p99 at 200 decisions/s on a fresh agent,
   then after 4 s of 1M-random-key traffic (with Redis' default hz 10, and
   with hz 100); and the lease entries left and the agent's RSS growth after
   the churn (a key seen once leaves no entry, only a 56-byte ghost).

The machine is shared and noisy: read medians and ratios, not single runs.

usage: [BENCH_PIN=0] bench.py AGENT BENCH [REPEAT] [DECISIONS] [NOOP_AGENT]

NOOP_AGENT (tests/bench/noop_agent, `make bench` passes it): an SPOP agent
that decides nothing, answering blocked=false, or the seven variables of an
allowed decision with fixed values; its rows say what the SPOP plumbing and
the answer cost apart from the deciding, and the seven-variable answer is
the reference of the SPOP and HAProxy rows. Without it the reference is the
agent with no rule that matches."""
import contextlib
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# set by configure(): the command line's, or an importer's (bench_smoke.py)
bench_bin = noop_bin = None
repeat, n = 5, 200000
pin = False

# With pin: the agent (or noop_agent) on AGENT_CPU, Redis and the load
# generators (spoa-bench, redis-benchmark, HAProxy and wrk) on LOAD_CPU.
AGENT_CPU, LOAD_CPU = 0, 1


def configure(agent, bench, rounds=5, decisions=200000, noop=None, pinned=False):
    global bench_bin, noop_bin, repeat, n, pin
    harness.AGENT, bench_bin, noop_bin, repeat, n = agent, bench, noop, rounds, decisions
    pin = pinned and len(os.sched_getaffinity(0)) >= 2


@contextlib.contextmanager
def on_cpu(cpu):
    """The processes started inside run on this CPU (when pinning): they
    inherit this process' affinity, set for the while and restored after,
    so every thread they start later is pinned too."""
    if not pin:
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


NOTHING = "[rule:nothing]\nmessage = no-such-message\nkey = key\nrate = 1/1s\n"
HOT = "[rule:bench]\nkey = key\nrate = 1000000/1s\nburst = 1000000\n"
LIMITED = "[rule:bench]\nkey = key\nrate = 100/1s\nburst = 50\n"
EXACT = HOT + "lease = off\n"
PER_IP = "[rule:perip]\nkey = ip\nrate = 100/1m\nburst = 20\n"

# The rules of a mode run by tests/bench/noop_agent instead of the agent: its answer.
NOOP = "noop:"

# Modes with this many keys or fewer are measured after WARM_S seconds of the
# same traffic (another seed): their figures are steady-state ones. The 1M-key
# modes are cold by design: they start on a fresh agent, as the textbook does.
WARM_KEYS = 1000
WARM_S = 0.3

# (name, rules, redis?, keys, connections, pipelined per connection): each
# run back to back with its reference in every round, noop_agent's seven
# variables at the same depth (REF_FULL) or, for the cold per-IP rows, the
# Redis designs at the same depth (PER_IP_MODES)
MODES = [
    ("do-nothing SPOP path (no rule)", NOTHING, False, 20, 8, 20),
    ("noop_agent: blocked=false only", NOOP + "blocked", False, 20, 8, 20),
    ("standalone, 20 hot keys", HOT, False, 20, 8, 20),
    ("standalone, 1M keys (cold)", HOT, False, 1000000, 8, 20),
    ("standalone, 1000 keys over limit", LIMITED, False, 1000, 8, 20),
    ("redis lease, 20 hot keys", HOT, True, 20, 8, 20),
    ("redis lease, 1000 keys over limit", LIMITED, True, 1000, 8, 20),
    ("redis exact (lease=off), 20 keys", EXACT, True, 20, 8, 20),
    ("redis, 1M keys, per-IP 100/1m, 32 fly", PER_IP, True, 1000000, 2, 16),
    ("redis, 1M keys, per-IP 100/1m, 256 fly", PER_IP, True, 1000000, 8, 32),
]
# the reference of the SPOP rows: noop_agent's seven variables
REF_FULL = NOOP + "full"
HOT_MODES = ("standalone, 20 hot keys", "redis lease, 20 hot keys")
assert set(HOT_MODES) <= {m[0] for m in MODES}
# the agent's cold rows, against the Redis designs at the same depth: 32 in
# flight is the headline
PER_IP_MODES = {32: MODES[-2][0], 256: MODES[-1][0]}

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

# A lean GCRA (the generic cell rate algorithm): one string per client, the
# theoretical arrival time in ms; ARGV: ms per token, burst.
GCRA = """
local key, per, burst = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + tonumber(tm[2]) / 1000
local tat = tonumber(redis.call('GET', key)) or now
if tat < now then tat = now end
local new = tat + per
if new - burst * per > now then return {0, 0} end
redis.call('SET', key, new, 'PX', math.ceil(new - now))
return {1, math.floor((now - (new - burst * per)) / per)}
"""


def script_calls(redis):
    """Script calls so far: EVALSHA, and FCALL (the agent's [redis]
    functions, on by default)."""
    out = redis.cli("INFO", "commandstats")
    return sum(int(x) for x in re.findall(r"cmdstat_(?:evalsha|fcall):calls=(\d+)", out))


def redis_cpu(redis):
    """Seconds of CPU Redis has used (user + sys, all its threads)."""
    out = redis.cli("INFO", "cpu")
    return sum(float(x) for x in re.findall(r"used_cpu_(?:user|sys):([\d.]+)", out))


def command_usec(redis, cmd):
    """(calls, usec) of one command so far, from INFO commandstats; cmd a
    regular expression ("evalsha|fcall": both)."""
    found = re.findall(r"cmdstat_(?:%s):calls=(\d+),usec=(\d+)" % cmd,
                       redis.cli("INFO", "commandstats"))
    return (sum(int(c) for c, _ in found), sum(int(u) for _, u in found))


# what the bench itself asks Redis, left out of redis_usec()
OWN_COMMANDS = re.compile(r"^(?:info|config|dbsize|script|ping|client|hello|command)\b")


def redis_usec(redis):
    """Microseconds Redis spent running commands so far (INFO commandstats),
    all of them but the bench's own; a script's nested commands are counted
    again within its own time (a few % of a script's time)."""
    found = re.findall(r"cmdstat_([^:]+):calls=\d+,usec=(\d+)", redis.cli("INFO", "commandstats"))
    return sum(int(u) for c, u in found if not OWN_COMMANDS.match(c))


def proc_cpu(pid):
    """Seconds of CPU the process has used, all its threads (the first field
    of each thread's schedstat, in ns: finer than /proc/PID/stat's ticks)."""
    total = 0
    task = "/proc/%d/task" % pid
    for tid in os.listdir(task):
        try:
            with open("%s/%s/schedstat" % (task, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total / 1e9


def used_memory(redis):
    return int(re.search(r"used_memory:(\d+)", redis.cli("INFO", "memory")).group(1))


def wait_redis_up(agent):
    for _ in range(200):
        if agent.metric("spoa_ratelimit_redis_up") == 1:
            return
        time.sleep(0.05)
    raise RuntimeError("agent never connected to Redis")


def spoa_bench(agent, *args):
    with on_cpu(LOAD_CPU):
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


class NoopAgent(harness.Proc):
    """tests/bench/noop_agent on a free port, answering "blocked" or "full"."""

    def __init__(self, answer):
        for attempt in range(3):
            self.port = harness.free_port()
            super().__init__([noop_bin, "127.0.0.1:%d" % self.port, answer], "noop-agent")
            try:
                harness.wait_port(self.port, proc=self.p)
                return
            except RuntimeError:
                self.kill()
                if attempt == 2:
                    raise RuntimeError("noop_agent did not start:\n" + self.output())

    def stop(self):
        rc = super().stop()
        if rc != 0:
            raise RuntimeError("noop_agent exit code %s:\n%s" % (rc, self.output()))
        return rc


def start_agent(rules, extra=""):
    """The agent (1 worker) with these rules, or noop_agent for a NOOP mode."""
    with on_cpu(AGENT_CPU):
        if rules.startswith(NOOP):
            return NoopAgent(rules[len(NOOP):])
        return harness.Agent(rules + extra, workers=1)


def start_redis(args=()):
    with on_cpu(LOAD_CPU):
        return harness.Redis(args=args)


def modes():
    """MODES, without noop_agent's when it was not given."""
    return [m for m in MODES if noop_bin or not m[1].startswith(NOOP)]


def run_once(rules, redis, keys, conns, pipe):
    """{rate: decisions/s, lat: [p50, p99, p99.9, max] us, calls: script
    calls per decision, ops: script operations per decision, rcpu: Redis CPU
    us per decision (INFO cpu), per_call: Redis us per script call, usec:
    Redis us per decision running commands (INFO commandstats), acpu: agent CPU us per
    decision, per_key: Redis bytes per key}."""
    r = start_redis() if redis else None
    extra = "[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port if r else ""
    a = start_agent(rules, extra)
    try:
        if r:
            wait_redis_up(a)
        if keys <= WARM_KEYS:
            # steady state, not the first lease intervals: a 200k-decision
            # run lasts about one interval, and a fresh key's lease takes a
            # few round trips to reach its demand
            spoa_bench(a, "-c", str(conns), "-p", str(pipe), "-d", str(WARM_S), "-k", str(keys),
                       "-s", "99")
        if r:
            c0, ops0, cpu0, u0 = script_calls(r), script_ops(a), redis_cpu(r), \
                command_usec(r, "evalsha|fcall")
            all0 = redis_usec(r)
            mem0, keys0 = used_memory(r), int(r.cli("DBSIZE") or 0)
        acpu0 = proc_cpu(a.p.pid)
        rate, lat = spoa_bench(a, "-c", str(conns), "-p", str(pipe), "-n", str(n), "-k",
                               str(keys))
        acpu = (proc_cpu(a.p.pid) - acpu0) * 1e6 / n
        calls = ops = rcpu = per_call = per_key = usec = 0
        if r:
            c1, ops1, cpu1, u1 = script_calls(r), script_ops(a), redis_cpu(r), \
                command_usec(r, "evalsha|fcall")
            calls, ops, rcpu = (c1 - c0) / n, (ops1 - ops0) / n, (cpu1 - cpu0) * 1e6 / n
            per_call = (u1[1] - u0[1]) / (u1[0] - u0[0]) if u1[0] > u0[0] else 0
            usec = (redis_usec(r) - all0) / n
            # what a client key costs Redis' memory (a cold run: mostly new keys)
            dk = int(r.cli("DBSIZE") or 0) - keys0
            per_key = (used_memory(r) - mem0) / dk if dk > 1000 else 0
    finally:
        if r:
            r.stop()
        a.stop()  # last: raises unless the agent exits 0
    return dict(rate=rate, lat=lat, calls=calls, ops=ops, rcpu=rcpu, per_call=per_call,
                usec=usec, acpu=acpu, per_key=per_key)


HAPROXY_SECONDS = int(os.environ.get("BENCH_HAPROXY_SECONDS", "3"))


def haproxy_version(binary="haproxy"):
    out = subprocess.run([binary, "-v"], capture_output=True, text=True).stdout
    m = re.search(r"version ([\w.-]+)", out)
    return m.group(1) if m else "?"


# (name, rules, redis?) of the rows through HAProxy: the base, noop_agent's seven
# variables, then the agent deciding
HAPROXY_MODES = [
    ("HAProxy + do-nothing agent", NOTHING, False),
    ("HAProxy + noop_agent, the seven variables", NOOP + "full", False),
    ("HAProxy + agent standalone, 1 hot key", HOT, False),
    ("HAProxy + agent, Redis leases, 1 hot key", HOT, True),
]
HAPROXY_CONNS = 32
API_KEY = "bench-key"


def wrk(port, seconds, conns=HAPROXY_CONNS):
    """(requests/s, requests, non-2xx, socket errors) of wrk against
    127.0.0.1:port with one API key (the kit's key arg)."""
    with on_cpu(LOAD_CPU):
        p = subprocess.run(["wrk", "-t", "1", "-c", str(conns), "-d",
                            "%ds" % max(1, round(seconds)), "-H", "X-API-Key: " + API_KEY,
                            "http://127.0.0.1:%d/" % port],
                           capture_output=True, text=True, timeout=seconds + 60)
    if p.returncode != 0:
        raise RuntimeError("wrk: " + p.stdout + p.stderr)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", p.stdout).group(1))
    total = int(re.search(r"(\d+) requests in", p.stdout).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", p.stdout)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       p.stdout)
    return rate, total, int(non2xx.group(1)) if non2xx else 0, \
        sum(int(x) for x in errors.groups()) if errors else 0


def through_haproxy(rules, redis, seconds, haproxy_bin="haproxy"):
    """(requests/s, agent CPU us per request) of wrk through the shipped kit's
    HAProxy with this agent behind it. Raises when a request went unanswered,
    was refused, or passed without a decision (the agent not yet up in
    HAProxy's eyes: RateLimit-Status: unavailable)."""
    r = start_redis() if redis else None
    extra = "[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port if r else ""
    a = start_agent(rules, extra)
    noop = rules.startswith(NOOP)
    h = None
    try:
        if r:
            wait_redis_up(a)
        for attempt in range(3):  # a port taken between its check and HAProxy's bind
            try:
                with on_cpu(LOAD_CPU):
                    h = harness.HAProxy(a.port, binary=haproxy_bin)
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        # HAProxy's check marks the agent up after two good checks: until then
        # a request passes undecided
        key = {"X-API-Key": API_KEY}
        if not harness.wait_for(lambda: "ratelimit-status" not in h.request("/", key)[1], 15):
            raise RuntimeError("HAProxy never used the agent")
        if rules is not NOTHING and "ratelimit" not in h.request("/", key)[1]:
            raise RuntimeError("no RateLimit header through HAProxy")
        wrk(h.http_port, 1)  # warm: connections, leases
        acks0 = 0 if noop else a.metric("spoa_ratelimit_acks_total") or 0
        cpu0 = proc_cpu(a.p.pid)
        rate, total, non2xx, errors = wrk(h.http_port, seconds)
        cpu = proc_cpu(a.p.pid) - cpu0
        # noop_agent counts nothing: the RateLimit header above says it answered
        acks = total if noop else (a.metric("spoa_ratelimit_acks_total") or 0) - acks0
        if non2xx or errors or acks < total:
            raise RuntimeError("through HAProxy: %d requests, %d non-2xx, %d socket errors, "
                               "%d ACKs" % (total, non2xx, errors, acks))
        return rate, cpu * 1e6 / total
    finally:
        if h:
            h.stop()
        if r:
            r.stop()
        a.stop()


def redis_benchmark(r, requests, keys, clients, *cmd):
    """One redis-benchmark -P16 run on r: (requests/s, Redis CPU us per
    request, us per call of cmd[0] from INFO commandstats)."""
    r.cli("CONFIG", "RESETSTAT")
    cpu0 = redis_cpu(r)
    with on_cpu(LOAD_CPU):
        p = subprocess.run(["redis-benchmark", "-p", str(r.port), "-P", "16", "-c",
                            str(clients), "-q", "-n", str(requests), "-r", str(keys)] + list(cmd),
                           capture_output=True, text=True, timeout=600)
    cpu = (redis_cpu(r) - cpu0) * 1e6 / requests
    m = re.findall(r"([\d.]+) requests per second", p.stdout.replace("\r", "\n"))
    if not m:
        raise RuntimeError(p.stdout + p.stderr)
    calls, usec = command_usec(r, cmd[0].lower())
    return float(m[-1]), cpu, usec / calls if calls else 0


# The references: (name, script or None, the command; after the script's
# sha for a script). SET NX PX and INCRBY+EXPIRE are the floors: one small
# write per new key, the cheapest designs that are not token buckets.
TEXTBOOK_NAME = "textbook EVALSHA token bucket"
REFERENCES = [
    (TEXTBOOK_NAME, TEXTBOOK, ["1", "tb:__rand_int__", "100", "60000", "20"]),
    ("GCRA EVALSHA (one string, SET PX)", GCRA, ["1", "g:__rand_int__", "600", "20"]),
    ("SET key v NX PX, pipelined, no Lua", None, ["set", "nx:__rand_int__", "1", "NX", "PX",
                                                   "60000"]),
    ("fixed window INCRBY+EXPIRE, no Lua", None, None),
]
FLOORS = [name for name, script, _ in REFERENCES if not script]


def reference(name, script, args, keys, requests, clients):
    """One reference row at clients x 16 in flight: {rate: decisions/s,
    rcpu: Redis CPU us per decision (INFO cpu), usec: Redis us per decision
    (INFO commandstats), per_key: Redis bytes per key}."""
    r = start_redis()
    try:
        mem0 = used_memory(r)
        if script:
            sha = r.cli("SCRIPT", "LOAD", script).strip()
            x = redis_benchmark(r, requests, keys, clients, "evalsha", sha, *args)
        elif args:
            x = redis_benchmark(r, requests, keys, clients, *args)
        else:
            # INCRBY then EXPIRE per decision: Redis runs one command after
            # another, so a decision costs the two runs' times and CPU added
            i = redis_benchmark(r, requests, keys, clients, "incrby", "fw:__rand_int__", "1")
            e = redis_benchmark(r, requests, keys, clients, "expire", "fw:__rand_int__", "60")
            x = 1 / (1 / i[0] + 1 / e[0]), i[1] + e[1], i[2] + e[2]
        dk = int(r.cli("DBSIZE") or 0)
        return dict(rate=x[0], rcpu=x[1], usec=x[2],
                    per_key=(used_memory(r) - mem0) / dk if dk else 0)
    finally:
        r.stop()


def light(agent, seed):
    return spoa_bench(agent, "-c", "2", "-p", "20", "-r", "200", "-d", "3", "-k", "1000000",
                      "-s", str(seed))[1]


def churn_once(redis_args=()):
    """Light-load latency on a fresh agent, then right after 4 s of 1M-key
    traffic; lease entries and agent RSS growth after the churn. Control: a second, fresh
    agent on the same Redis right after a churn of the first one, which shows
    what Redis itself adds after a churn (its keys expiring in bulk).
    redis_args: the Redis run with them (hz 100: shorter expire cycles)."""
    r = start_redis(redis_args)
    ini = PER_IP + "[redis]\nurl = redis://127.0.0.1:%d/0\n" % r.port
    with on_cpu(AGENT_CPU):
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
        with on_cpu(AGENT_CPU):
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
    return fresh, after, entries, (rss1 - rss0) * 1024, control


def spread(xs):
    """The median of xs with their spread: "0.91 [0.85-0.97, IQR 0.89-0.93]"."""
    xs = sorted(xs)
    if len(xs) < 2:
        return "%.2f" % xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return "%.2f [%.2f-%.2f, IQR %.2f-%.2f]" % (statistics.median(xs), xs[0], xs[-1], q[0],
                                                q[2])


def back_to_back(rnd, runs):
    """Call runs (functions) one right after the other, in reverse order in
    odd rounds: their results, in runs' order."""
    out = [None] * len(runs)
    for i in (reversed(range(len(runs))) if rnd % 2 else range(len(runs))):
        out[i] = runs[i]()
    return out


def main():
    ref_rules = REF_FULL if noop_bin else NOTHING
    ref_name = "noop_agent, seven variables" if noop_bin else "do-nothing SPOP path"
    print("spoa-bench: %d decisions per run, %d rounds, agent with 1 worker, %d CPUs; %s; "
          "each row back to back with its reference in every round, the order alternating; "
          "ratio: median of the rounds' ratios [min-max, IQR]"
          % (n, repeat, os.cpu_count(),
             "pinned: agent on CPU %d, Redis and load generators on CPU %d" % (AGENT_CPU, LOAD_CPU)
             if pin else "unpinned"))
    rows = [m for m in modes() if m[0] not in PER_IP_MODES.values() and m[1] != ref_rules]
    runs = {m[0]: [] for m in rows}  # [(row, reference)] per round
    cold = {depth: [] for depth in PER_IP_MODES}  # [(agent, {reference name: ...})]
    hap_rows = [m for m in HAPROXY_MODES[:1] + HAPROXY_MODES[2:]]
    hap_ref = HAPROXY_MODES[1] if noop_bin else HAPROXY_MODES[0]
    if not noop_bin:
        hap_rows = hap_rows[1:]
    hap = {name: [] for name, _, _ in hap_rows}
    for rnd in range(repeat):
        for name, rules, redis, keys, conns, pipe in rows:
            runs[name].append(back_to_back(rnd, [
                lambda: run_once(rules, redis, keys, conns, pipe),
                lambda: run_once(ref_rules, False, keys, conns, pipe)]))
        for depth, mode in sorted(PER_IP_MODES.items()):
            m = next(m for m in MODES if m[0] == mode)
            x = back_to_back(rnd, [lambda: run_once(*m[1:])] + [
                (lambda ref=ref: reference(ref[0], ref[1], ref[2], 1000000, max(n, 200000),
                                           depth // 16)) for ref in REFERENCES])
            cold[depth].append((x[0], {ref[0]: y for ref, y in zip(REFERENCES, x[1:])}))
        for name, rules, redis in hap_rows:
            hap[name].append(back_to_back(rnd, [
                lambda: through_haproxy(rules, redis, HAPROXY_SECONDS),
                lambda: through_haproxy(hap_ref[1], hap_ref[2], HAPROXY_SECONDS)]))

    print("%-38s %11s %11s %-32s %6s %6s %8s %9s %7s %8s %8s %8s %7s" % (
        "mode", "decisions/s", "ref dec/s", "ratio to " + ref_name, "p50us", "p99us",
        "p99.9us", "calls/dec", "ops/dec", "redis us", "us/call", "agent us", "cpu/ref"))
    for name, _, redis, _, _, _ in rows:
        rs = runs[name]
        med = lambda k, xs=[x for x, _ in rs]: statistics.median(x[k] for x in xs)  # noqa: E731
        p50, p99, p999 = (statistics.median(x["lat"][i] for x, _ in rs) for i in range(3))
        tail = "%9.4f %7.4f %8.2f %8.2f %8.2f" % (
            med("calls"), med("ops"), med("rcpu"), med("per_call"), med("acpu")) if redis else \
            "%9s %7s %8s %8s %8.2f" % ("", "", "", "", med("acpu"))
        # the agent's CPU per decision against the reference's, round by
        # round: steadier than decisions/s on a shared host
        cpu = statistics.median(x["acpu"] / r["acpu"] for x, r in rs) \
            if all(r["acpu"] > 0 for _, r in rs) else 0
        print("%-38s %11.0f %11.0f %-32s %6.0f %6.0f %8.0f %s %7.2f" % (
            name, med("rate"), statistics.median(r["rate"] for _, r in rs),
            spread([x["rate"] / r["rate"] for x, r in rs]), p50, p99, p999, tail, cpu),
            flush=True)
    print("  reference agent CPU: %.2f us per decision (median of all its runs)"
          % statistics.median(r["acpu"] for rs in runs.values() for _, r in rs))

    print("\ncold, per-IP (`100/1m burst 20`, 1M keys) against the Redis designs on the same "
          "Redis at the same depth, redis-benchmark -P16; redis us: INFO cpu, cmd us: INFO "
          "commandstats, both per decision")
    for depth, mode in sorted(PER_IP_MODES.items()):
        xs = cold[depth]
        print("%d in flight%s" % (depth, " (the headline)" if depth == 32 else ""))
        print("  %-40s %12s %9s %9s %9s" % ("design", "decisions/s", "redis us", "cmd us",
                                           "bytes/key"))
        designs = [("agent: " + mode, [a for a, _ in xs])] + \
            [(name, [refs[name] for _, refs in xs]) for name, _, _ in REFERENCES]
        for name, ys in designs:
            print("  %-40s %12.0f %9.2f %9.2f %9.0f" % (
                name, statistics.median(y["rate"] for y in ys),
                statistics.median(y["rcpu"] for y in ys), statistics.median(y["usec"] for y in ys),
                statistics.median(y["per_key"] for y in ys)))
        for ref in [TEXTBOOK_NAME] + FLOORS:
            pairs = [(a, refs[ref]) for a, refs in xs]
            line = "  agent / %s: " % ref
            if ref == TEXTBOOK_NAME:
                line += "%sx decisions/s; " % spread([a["rate"] / t["rate"] for a, t in pairs])
            line += "Redis CPU per decision %sx (INFO cpu), %sx (commandstats)" % (
                spread([a["rcpu"] / t["rcpu"] for a, t in pairs if t["rcpu"] > 0] or [0]),
                spread([a["usec"] / t["usec"] for a, t in pairs if t["usec"] > 0] or [0]))
            print(line, flush=True)
    print("ceilings: INCRBY+EXPIRE and SET NX PX are what any Redis limiter that writes per new "
          "key cannot beat;\n  GCRA what an exact token bucket with one script call per "
          "decision can reach;\n  the textbook script is what users deploy.")

    print("\nthrough HAProxy %s (the kit), wrk 1 thread x %d connections, %g s per run; each row "
          "back to back with %s in every round"
          % (haproxy_version(), HAPROXY_CONNS, HAPROXY_SECONDS, hap_ref[0]))
    print("%-42s %11s %11s %-32s %9s" % ("mode", "requests/s", "ref req/s", "ratio", "agent us"))
    for name, _, _ in hap_rows:
        xs = hap[name]
        print("%-42s %11.0f %11.0f %-32s %9.2f" % (
            name, statistics.median(x[0] for x, _ in xs), statistics.median(r[0] for _, r in xs),
            spread([x[0] / r[0] for x, r in xs]), statistics.median(x[1] for x, _ in xs)),
            flush=True)

    churns = [churn_once() for _ in range(max(1, min(repeat, 3)))]
    f50 = statistics.median(c[0][0] for c in churns)
    f99 = statistics.median(c[0][1] for c in churns)
    a50 = statistics.median(c[1][0] for c in churns)
    a99 = statistics.median(c[1][1] for c in churns)
    amax = statistics.median(c[1][3] for c in churns)
    ent = statistics.median(c[2] for c in churns)
    grew = statistics.median(c[3] for c in churns)
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
    print("memory: %.0f lease entries after the churn, agent RSS grew %.1f MB over it"
          % (ent, grew / 1e6))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.rsplit("usage: ", 1)[1])
    configure(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5,
              int(sys.argv[4]) if len(sys.argv) > 4 else 200000,
              sys.argv[5] if len(sys.argv) > 5 else None,
              pinned=os.environ.get("BENCH_PIN", "1") != "0")
    sys.exit(main())
