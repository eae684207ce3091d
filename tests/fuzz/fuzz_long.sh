#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fuzz_long.sh - one libFuzzer target for a long run ("make fuzz-long"):
# seeds its corpus from the smoke build, runs the target for SECONDS with its
# output in fuzz-long-NAME.log, and prints the final figures (also into
# fuzz-long-NAME.summary): executions,
# libFuzzer's coverage (cov: edges, ft: features), the corpus, peak memory.
# A crash leaves its input in ARTIFACTS (replay it with the smoke build:
# SMOKE FILE) and fails the run.
#
# usage: fuzz_long.sh NAME SMOKE FUZZER CORPUS ARTIFACT_PREFIX SECONDS [LIBFUZZER_FLAGS...]
set -u
name=$1 smoke=$2 fuzzer=$3 corpus=$4 artifacts=$5 seconds=$6
shift 6
log=fuzz-long-$name.log summary=fuzz-long-$name.summary

mkdir -p "$corpus" "$(dirname "${artifacts}x")" || exit 1
"$smoke" -d "$corpus" >/dev/null || exit 1
echo "fuzz-long $name: $seconds s, corpus $corpus, log $log"
"$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts" \
    "$@" "$corpus" >"$log" 2>&1
rc=$?
rm -f "$summary"
done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)
stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
execs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
rss=$(stat peak_rss_mb)
cov=$(printf '%s\n' "$done_line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
ft=$(printf '%s\n' "$done_line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
corp=$(printf '%s\n' "$done_line" | sed -n 's/.* corp: \([^ ]*\).*/\1/p')
files=$(find "$corpus" -type f | wc -l)
if [ "$rc" -ne 0 ]; then
    echo "fuzz-long $name: FAILED (exit $rc) after ${execs:-?} executions; the end of $log:"
    tail -n 40 "$log"
    ls -t "$(dirname "${artifacts}x")" 2>/dev/null | head -n 3 | sed 's/^/  artifact: /'
    exit "$rc"
fi
echo "fuzz-long $name: ${execs:-?} executions (${rate:-?}/s), cov ${cov:-?}, ft ${ft:-?}," \
    "corpus ${corp:-?} (inputs/bytes; $files files in $corpus), peak rss ${rss:-?} MB" |
    tee "$summary"
