# SPDX-License-Identifier: Apache-2.0
"""What open status pages cost the decisions: spoa-bench against one agent
(Redis, leases, 20 hot keys, 1 worker: the worker shares the main loop with
the stats listener, the worst case), alone and while 50 status page loads a
second come in (GET / and the whole /status.json with five minutes of
history: what a page costs when it opens; an open page's refresh is smaller),
in alternating rounds. The loads come from this Python process, whose own
CPU competes with the agent and spoa-bench on a small machine: the ratio
over-estimates what the agent pays (run it under `nice -n -10` on a busy
machine). Prints each pair and the median ratio.

    python3 page_cost.py SPOA_RATELIMIT SPOA_BENCH [ROUNDS] [SECONDS]"""
import http.client
import re
import statistics
import subprocess
import sys
import threading
import time

import harness
from harness import Agent, Redis, wait_for

RULES = """
[rule:api-key]
message = check-rate
key = key
rate = 1000000/1s
"""


def loads(agent, per_s, halt, counter):
    """per_s page loads a second, paced, until halt."""
    step, nxt = 1.0 / per_s, time.monotonic()
    while not halt.is_set():
        for path in ("/", "/status.json"):
            c = http.client.HTTPConnection("127.0.0.1", agent.stats_port, timeout=5)
            c.request("GET", path)
            c.getresponse().read()
            c.close()
        counter[0] += 1
        nxt += step
        time.sleep(max(0.0, nxt - time.monotonic()))


def bench(bench_bin, agent, seconds):
    p = subprocess.run([bench_bin, "-a", "127.0.0.1:%d" % agent.port, "-d", str(seconds),
                        "-k", "20"], capture_output=True, text=True, timeout=120)
    return float(re.search(r"([\d.]+) decisions/s", p.stdout).group(1))


def main(agent_bin, bench_bin, rounds=5, seconds=5):
    harness.AGENT = agent_bin
    redis = Redis()
    agent = Agent("[redis]\nurl = redis://127.0.0.1:%d\n" % redis.port + RULES, workers=1)
    try:
        wait_for(lambda: agent.metric("spoa_ratelimit_redis_up") == 1)
        time.sleep(2)  # some history for the page to carry
        ratios = []
        for r in range(rounds):
            alone = bench(bench_bin, agent, seconds)
            halt, n = threading.Event(), [0]
            t = threading.Thread(target=loads, args=(agent, 50, halt, n), daemon=True)
            t.start()
            loaded = bench(bench_bin, agent, seconds)
            halt.set()
            t.join()
            ratios.append(loaded / alone)
            print("round %d: alone %.0f decisions/s, with %.0f page loads/s %.0f decisions/s "
                  "(%.3f)" % (r + 1, alone, n[0] / seconds, loaded, loaded / alone), flush=True)
        print("median ratio with 50 page loads/s: %.3f (rounds: %s)"
              % (statistics.median(ratios), " ".join("%.3f" % x for x in ratios)))
    finally:
        agent.stop()
        redis.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *[int(x) for x in sys.argv[3:5]])
