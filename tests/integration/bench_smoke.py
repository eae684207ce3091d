"""A short spoa-bench run against a standalone agent: checks the bench and
the agent agree (every decision answered, allowed + blocked = decisions) and
prints the figures. The full benchmark is `make bench`."""
import re
import subprocess
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
import harness  # noqa: E402

agent_bin, bench_bin = sys.argv[1], sys.argv[2]
harness.AGENT = agent_bin
RULES = """
[rule:bench]
key = key
rate = 10/1s
burst = 50
"""
a = harness.Agent(RULES, workers=2)
try:
    p = subprocess.run([bench_bin, "-a", "127.0.0.1:%d" % a.port, "-c", "4", "-p", "20",
                        "-n", "20000", "-k", "100"], capture_output=True, text=True, timeout=120)
    print(p.stdout, end="")
    print(p.stderr, end="", file=sys.stderr)
    m = re.search(r"decisions (\d+) in", p.stdout)
    ab = re.search(r"allowed (\d+) blocked (\d+) errors (\d+)", p.stdout)
    ok = p.returncode == 0 and m and int(m.group(1)) == 20000 and ab and \
        int(ab.group(1)) + int(ab.group(2)) == 20000 and int(ab.group(3)) == 0
    # 100 keys x burst 50 admits at least 5000, plus 1000/s of refill
    ok = ok and 5000 <= int(ab.group(1)) < 20000
finally:
    rc = a.stop()
sys.exit(0 if ok and rc == 0 else 1)
