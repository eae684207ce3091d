#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""hot_rows.py - make bench's two hot rows alone (standalone and Redis
leases, 20 hot keys), each back to back with noop_agent's seven variables in
every round, the order alternating, as tests/integration/bench.py runs them;
with BASE_AGENT, another build of the agent runs in the same rounds too (a
before/after in one run). Prints each row's median ratio to the reference
with its spread, and the agent's CPU per decision against the reference's.

usage: [BENCH_PIN=0] hot_rows.py AGENT BENCH NOOP_AGENT [ROUNDS] [DECISIONS] [BASE_AGENT]
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import bench  # noqa: E402
import harness  # noqa: E402


def main(agent, base, rounds):
    ref = bench.REF_FULL
    builds = [("agent", agent)] + ([("base", base)] if base else [])
    rows = [m for m in bench.MODES if m[0] in bench.HOT_MODES]
    runs = {(b, m[0]): [] for b, _ in builds for m in rows}
    print("spoa-bench: %d decisions per run, %d rounds, %s; median of the rounds' ratios "
          "[min-max, IQR]" % (bench.n, rounds, "pinned" if bench.pin else "unpinned"))
    for rnd in range(rounds):
        for name, rules, redis, keys, conns, pipe in rows:
            def one(path, rules=rules, redis=redis, keys=keys, conns=conns, pipe=pipe):
                def run():
                    harness.AGENT = path
                    return bench.run_once(rules, redis, keys, conns, pipe)
                return run
            xs = bench.back_to_back(rnd, [one(p) for _, p in builds] + [
                lambda keys=keys, conns=conns, pipe=pipe: bench.run_once(ref, False, keys, conns,
                                                                         pipe)])
            for (b, _), x in zip(builds, xs):
                runs[(b, name)].append((x, xs[-1]))
            print("  round %d %s: %s noop %.0f/s" % (
                rnd, name, " ".join("%s %.0f/s" % (b, x["rate"]) for (b, _), x in
                                    zip(builds, xs)), xs[-1]["rate"]), flush=True)
    for (b, name), rs in runs.items():
        print("%-6s %-26s %9.0f/s  ref %9.0f/s  ratio %s  cpu/ref %s" % (
            b, name, statistics.median(x["rate"] for x, _ in rs),
            statistics.median(r["rate"] for _, r in rs),
            bench.spread([x["rate"] / r["rate"] for x, r in rs]),
            bench.spread([x["acpu"] / r["acpu"] for x, r in rs if r["acpu"] > 0])))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__.rsplit("usage: ", 1)[1])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    bench.configure(sys.argv[1], sys.argv[2], rounds,
                    int(sys.argv[5]) if len(sys.argv) > 5 else 200000, sys.argv[3],
                    pinned=os.environ.get("BENCH_PIN", "1") != "0")
    sys.exit(main(sys.argv[1], sys.argv[6] if len(sys.argv) > 6 else None, rounds))
