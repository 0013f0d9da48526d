#!/usr/bin/env bash
# `make demo`: the main job on the embedded default (the fake cloud as a local process).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
ENGRAM_BIN=$("$BIN/engram-harness" engram install v1.20.0)
export ENGRAM_BIN
"$BIN/engram-harness" run scenarios --cloud process --expect all
