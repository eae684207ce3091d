#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every metric family the agent exports is watched (python3, standard library only).

  a. each family (the metric table of doc/operations.md, "Metrics and alerts",
     which the integration suite holds equal to a live agent's /metrics, and
     every family name src/metrics/*.c renders) is read by an expression of
     contrib/grafana-dashboard.json or contrib/prometheus-alerts.yml, or is
     listed in tests/docs/metrics-unwatched.txt with a reason;
  b. that list names only families that exist and that neither reads (it
     does not go stale), each with its reason;
  c. every warning kind of src/core/warning.c fires SpoaRatelimitWarning in
     contrib/prometheus-alerts.test.yml (an exp_labels `kind:` of its own);
  d. every spoa_ratelimit_* name the kit (haproxy/), contrib/, README.md and
     doc/ mention is a family (or a histogram's _bucket, _sum, _count): no
     comment or runbook names a metric that does not exist.

Exit 0 when all hold; else one line per problem on stderr, then exit 1.
Usage: check_metrics_used.py [SRCDIR]  (default: the tree this file is in)."""
import glob
import json
import os
import re
import sys

TOP = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
UNWATCHED = "tests/docs/metrics-unwatched.txt"
problems = []


def read(rel):
    with open(os.path.join(TOP, rel), encoding="utf-8") as f:
        return f.read()


def families():
    """{family: where it was found}: the doc's table and the renderer's names."""
    out = {}
    for m in re.finditer(r"(?m)^\| `(spoa_ratelimit_\w+)` \| (?:counter|gauge|histogram) \|",
                         read("doc/operations.md")):
        out[m.group(1)] = "doc/operations.md"
    for path in sorted(glob.glob(os.path.join(TOP, "src", "metrics", "*.c"))):
        with open(path, encoding="utf-8") as f:
            for m in re.finditer(r'"(?:# (?:HELP|TYPE) )?(spoa_ratelimit_[a-z0-9_]*[a-z0-9])',
                                 f.read()):
                out.setdefault(m.group(1), os.path.relpath(path, TOP))
    if len(out) < 40:
        problems.append("doc/operations.md, src/metrics: metric families not found (%d)" % len(out))
    return out


def alert_exprs():
    """The expr of every rule of the alerts file: inline, or the block (| or >)
    indented under it."""
    exprs, lines = [], read("contrib/prometheus-alerts.yml").split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if not m:
            continue
        if m.group(2) and m.group(2)[0] not in "|>":
            exprs.append(m.group(2))
            continue
        body, indent = [], len(m.group(1))
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        exprs.append("\n".join(body))
    if not exprs:
        problems.append("contrib/prometheus-alerts.yml: no expr found")
    return exprs


def dashboard_exprs():
    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if "expr" in t:
                    yield t["expr"]
            yield from walk(p.get("panels", []))  # a collapsed row's panels
    exprs = list(walk(json.loads(read("contrib/grafana-dashboard.json")).get("panels", [])))
    if not exprs:
        problems.append("contrib/grafana-dashboard.json: no panel target found")
    return exprs


def unwatched():
    """{family: reason} from the list: `family  reason`, # comments."""
    out = {}
    for n, line in enumerate(read(UNWATCHED).split("\n"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not reason.strip():
            problems.append("%s:%d: %s has no reason" % (UNWATCHED, n, name))
        out[name] = reason.strip()
    return out


def reads(expr, family):
    return re.search(r"(?<![\w:])%s(?:_bucket|_sum|_count)?(?![\w:])" % re.escape(family), expr)


def main():
    fams = families()
    exprs = alert_exprs() + dashboard_exprs()
    listed = unwatched()
    for fam, where in sorted(fams.items()):
        used = any(reads(e, fam) for e in exprs)
        if not used and fam not in listed:
            problems.append("%s (%s) is neither on contrib/grafana-dashboard.json nor in "
                            "contrib/prometheus-alerts.yml nor listed in %s with a reason"
                            % (fam, where, UNWATCHED))
        elif used and fam in listed:
            problems.append("%s: %s is on the dashboard or in an alert: drop it from the list"
                            % (UNWATCHED, fam))
    for fam in sorted(set(listed) - set(fams)):
        problems.append("%s: %s is no metric family the agent exports" % (UNWATCHED, fam))

    table = read("src/core/warning.c").split("warning_kind_names", 1)[1].split("};", 1)[0]
    kinds = re.findall(r'\] = "(\w+)"', table)
    if not kinds:
        problems.append("src/core/warning.c: warning_kind_names not found")
    tests = read("contrib/prometheus-alerts.test.yml")
    for kind in kinds:
        if not re.search(r"(?m)^\s+kind: %s\s*$" % re.escape(kind), tests):
            problems.append("contrib/prometheus-alerts.test.yml: no SpoaRatelimitWarning test "
                            "fires warning kind %s" % kind)

    mentioned = ["README.md"] + [os.path.relpath(p, TOP) for d in ("haproxy", "contrib", "doc")
                                 for p in sorted(glob.glob(os.path.join(TOP, d, "*")))]
    for rel in mentioned:
        try:
            text = read(rel)
        except (UnicodeDecodeError, IsADirectoryError):
            continue  # the charts' PNG
        for name in sorted(set(re.findall(r"\bspoa_ratelimit_[a-z0-9_]*[a-z0-9]", text))):
            if name not in fams and re.sub(r"_(?:bucket|sum|count)$", "", name) not in fams:
                problems.append("%s: %s is no metric family the agent exports" % (rel, name))

    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
