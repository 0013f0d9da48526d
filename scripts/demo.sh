#!/usr/bin/env bash
# `make demo`: the main job on the embedded default (the fake cloud as a local process).
# 1. The scenario library against real engram v1.20.0: per-lane delivery tables and expectations.
#    Design expectations fail on today's engram by design, so the exit code is judged on the baseline
#    ones (what v1.20.0 does); EXPECT=all gates on the design too.
# 2. The canary's verdict and the virtual inbox on a messy deployment shaped like the design's machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
ENGRAM_BIN=$("$BIN/engram-harness" engram install v1.20.0)
export ENGRAM_BIN
work=$(mktemp -d "${TMPDIR:-/tmp}/engram-demo.XXXXXX")

set +e
"$BIN/engram-harness" run scenarios --cloud process --expect "${EXPECT:-baseline}" --json "$work/report.json"
scenarios_status=$?
set -e

echo
echo "== The canary on a messy deployment (engram-harness make-deployment --scale 1 --seed 7)"
mkdir -p "$work/messy" "$work/workspace"
"$BIN/engram-harness" make-deployment --scale 1 --seed 7 --out "$work/messy/engram.db" --engram "$ENGRAM_BIN" \
  --workspace "$work/workspace" >"$work/deployment.json"
set +e
"$BIN/engram-canary" check --no-baseline --db "$work/messy/engram.db" >"$work/check.txt"
check_status=$?
set -e
head -n 8 "$work/check.txt"
echo "(engram-canary check exit status: $check_status; 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; full text: $work/check.txt)"
echo
"$BIN/engram-canary" inbox list --db "$work/messy/engram.db" >"$work/inbox.txt"
head -n 40 "$work/inbox.txt"
echo
echo "Scenario report (JSON): $work/report.json"
exit "$scenarios_status"
