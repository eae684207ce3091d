# SPDX-License-Identifier: Apache-2.0
"""`make warm-fleet`: the warm-key scenario on real agents, token leases
against rate leases, on the same schedule.

4 agents (one worker each) on one redis-server, 50 API keys at 60 % of
`100/10s burst 20`, requests spread evenly over keys and agents (Poisson,
300/s in all: ~1.5 requests/s per key per agent), replayed at their
instants (fleet.Replayer). Per mode: Redis script calls (EVALSHA) and script
operations per decision, requests denied that an exact token bucket per key
(run here on the instants the requests were really sent) admits, and the
latency from sending a NOTIFY to reading its ACK.

usage: warm_fleet.py AGENT [SECONDS] [MODES]   (MODES: off,on; default both)"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet  # noqa: E402
import harness  # noqa: E402

AGENTS, KEYS, RPS, LIMIT, PERIOD, BURST = 4, 50, 300.0, 100, 10.0, 20
RULE = "\n[rule:warm]\nkey = key\nrate = %d/%ds\nburst = %d\n" % (LIMIT, PERIOD, BURST)


def schedule(seconds, seed=11):
    rng = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rng.expovariate(RPS)
        if t >= seconds:
            return out
        out.append((t, rng.randrange(KEYS), rng.randrange(AGENTS)))


def exact_admits(events):
    """events: [(sent, key)] -> set of indexes an exact bucket per key admits."""
    rate = LIMIT / PERIOD
    level, last, ok = {}, {}, set()
    for i in sorted(range(len(events)), key=lambda i: events[i][0]):
        t, k = events[i]
        lv = min(BURST, level.get(k, BURST) + rate * (t - last.get(k, t)))
        last[k] = t
        if lv >= 1:
            lv -= 1
            ok.add(i)
        level[k] = lv
    return ok


def run(mode, reqs, seconds):
    redis = harness.Redis()
    agents = []
    try:
        text = fleet.redis_ini(redis.port, rate_leases=mode) + RULE
        for _ in range(AGENTS):
            agents.append(harness.Agent(text, workers=1))
        for a in agents:
            fleet.wait_redis_up(a)
        c0, o0 = fleet.redis_counts(agents)
        players = [fleet.Replayer(agents[i].addr, [r for r in reqs if r[2] == i])
                   for i in range(AGENTS)]
        t0 = time.monotonic() + 0.2
        for p in players:
            p.t0 = t0
            p.start()
        for p in players:
            p.join(seconds + 60)
        errors = [p.error for p in players if p.error or p.is_alive()]
        if errors:
            raise RuntimeError("replay failed: %r" % errors)
        c1, o1 = fleet.redis_counts(agents)
    finally:
        for a in agents:
            a.stop()
        redis.kill()
    events, blocked, lat, degraded = [], [], [], 0
    for p in players:
        for i, (_, key, _) in enumerate(p.reqs):
            a = p.answers[i + 1]
            events.append((p.sent[i], key))
            blocked.append(a.get("blocked") is True)
            degraded += a.get("degraded") is True
            lat.append(p.acked[i] - p.sent[i])
    ok = exact_admits(events)
    false_den = sum(1 for i in ok if blocked[i])
    n = len(events)
    lat.sort()
    return {"mode": mode, "decisions": n, "admitted": n - sum(blocked), "exact": len(ok),
            "false_denials": false_den, "calls": (c1 - c0) / n, "ops": (o1 - o0) / n,
            "p50_ms": 1000 * lat[n // 2], "p99_ms": 1000 * lat[int(n * 0.99)],
            "degraded": degraded}


def main():
    harness.AGENT = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["off", "on"]
    reqs = schedule(seconds)
    print("warm keys on real agents: %d agents, %d keys at 60 %% of %d/%ds burst %d, %.0f "
          "requests/s for %.0f s (%d requests)" % (AGENTS, KEYS, LIMIT, PERIOD, BURST, RPS,
                                                   seconds, len(reqs)))
    print("| rate leases | decisions | admitted | exact admits | under-limit denied | "
          "EVALSHA / decision | script ops / decision | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    bad = 0
    for mode in modes:
        r = run(mode, reqs, seconds)
        print("| %s | %d | %d | %d | %d (%.2f %%) | %.3f | %.3f | %.2f | %.2f |"
              % (r["mode"], r["decisions"], r["admitted"], r["exact"], r["false_denials"],
                 100.0 * r["false_denials"] / r["decisions"], r["calls"], r["ops"], r["p50_ms"],
                 r["p99_ms"]))
        sys.stdout.flush()
        bad += r["degraded"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
