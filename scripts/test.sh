#!/usr/bin/env bash
# `make test`: set up what the tiers need (real engram, a Docker engine, Postgres), gate on lint and
# types, then run every tier. Under CI=true a missing engram or engine fails the run; it never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

"$BIN/ruff" check .
"$BIN/ruff" format --check .
"$BIN/mypy"

ENGRAM_BIN_V1=$("$BIN/engram-harness" engram install v1.20.0)
export ENGRAM_BIN_V1

started_docker=0
if ! timeout 10 docker info >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    bash scripts/docker-engine.sh up && started_docker=1
  else
    echo "test.sh: no Docker engine answers and starting one needs root; the docker tier will skip" >&2
  fi
fi
stop_services() { if [ "$started_docker" = 1 ]; then bash scripts/docker-engine.sh down; fi; }
trap stop_services EXIT
if timeout 10 docker info >/dev/null 2>&1; then bash scripts/docker-engine.sh base; fi

export TESTCONTAINERS_RYUK_DISABLED=true
export TESTCONTAINERS_CONNECTION_MODE=docker_host
export TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
"$BIN/pytest" -n 2 --dist loadgroup "$@"
