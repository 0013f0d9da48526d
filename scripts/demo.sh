#!/usr/bin/env bash
# `make demo`: the main job on the embedded default (the fake cloud as a local process).
# Every expectation is evaluated and shown; design expectations fail on today's engram by design, so the
# exit code is judged on the baseline ones (what v1.20.0 does). Use --expect all to gate on the design.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
ENGRAM_BIN=$("$BIN/engram-harness" engram install v1.20.0)
export ENGRAM_BIN
"$BIN/engram-harness" run scenarios --cloud process --expect "${EXPECT:-baseline}" \
  --json "${TMPDIR:-/tmp}/engram-harness-report.json"
