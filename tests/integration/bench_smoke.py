# SPDX-License-Identifier: Apache-2.0
"""A short run of what `make bench` measures, checking that the parts agree:
- spoa-bench against a standalone agent: every decision answered, allowed +
  blocked = decisions, and the limits hold;
- spoa-bench against tests/bench/noop_agent's seven-variable answer (the
  bench's reference): every decision answered and allowed;
- wrk through the kit's HAProxy with the agent deciding a hot key: every
  request answered with a 2xx, an ACK for each, the RateLimit headers there.
It prints the figures; the full benchmark is `make bench`.

usage: bench_smoke.py AGENT BENCH NOOP_AGENT"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import harness  # noqa: E402

RULES = """
[rule:bench]
key = key
rate = 10/1s
burst = 50
"""


def spoa_bench(port, n, keys):
    """allowed, or None when spoa-bench and the agent disagree."""
    p = subprocess.run([bench.bench_bin, "-a", "127.0.0.1:%d" % port, "-c", "4", "-p", "20",
                        "-n", str(n), "-k", str(keys)], capture_output=True, text=True,
                       timeout=120)
    print(p.stdout, end="")
    print(p.stderr, end="", file=sys.stderr)
    m = re.search(r"decisions (\d+) in", p.stdout)
    ab = re.search(r"allowed (\d+) blocked (\d+) errors (\d+)", p.stdout)
    if p.returncode != 0 or not m or int(m.group(1)) != n or not ab or \
            int(ab.group(1)) + int(ab.group(2)) != n or int(ab.group(3)) != 0:
        return None
    return int(ab.group(1))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.rsplit("usage: ", 1)[1])
    bench.configure(sys.argv[1], sys.argv[2], noop=sys.argv[3])
    ok = True

    a = harness.Agent(RULES, workers=2)
    try:
        allowed = spoa_bench(a.port, 20000, 100)
        # 100 keys x burst 50 admits at least 5000, plus 1000/s of refill
        if allowed is None or not 5000 <= allowed < 20000:
            print("FAIL: standalone agent: allowed %s of 20000" % allowed)
            ok = False
    finally:
        if a.stop() != 0:
            ok = False

    noop = bench.NoopAgent("full")
    try:
        allowed = spoa_bench(noop.port, 20000, 100)
        if allowed != 20000:
            print("FAIL: noop_agent: allowed %s of 20000" % allowed)
            ok = False
    finally:
        noop.stop()

    try:  # raises when a request went unanswered, refused or undecided
        rate, cpu = bench.through_haproxy(bench.HOT, False, 1)
        print("through HAProxy %s: %.0f requests/s, agent %.2f us per request"
              % (bench.haproxy_version(), rate, cpu))
    except (RuntimeError, AssertionError) as e:
        print("FAIL: through HAProxy: %s" % e)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
