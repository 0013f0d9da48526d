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
# The engram_v3 tier has its own target (make test-v3): the module proxy here refuses v2/v3 tags.
tier_filter=(-m "not engram_v3 and not nightly")
if [ "${ENGRAM_KIT_TIER:-}" = nightly ]; then
  tier_filter=(-m "nightly and not engram_v3")
fi
if [ "${ENGRAM_KIT_TIER:-}" = v3 ]; then
  ENGRAM_BIN_V3=$("$BIN/engram-harness" engram install "${ENGRAM_V3_VERSION:-v3.2.1}")
  export ENGRAM_BIN_V3
  tier_filter=(-m engram_v3)
fi

started_docker=0
if ! timeout 10 docker info >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    bash scripts/docker-engine.sh up && started_docker=1
  else
    echo "test.sh: no Docker engine answers and starting one needs root; the docker tier will skip" >&2
  fi
fi
postgres_dir=""
stop_services() {
  if [ -n "$postgres_dir" ]; then bash scripts/postgres.sh down "$postgres_dir"; fi
  if [ "$started_docker" = 1 ]; then bash scripts/docker-engine.sh down; fi
}
trap stop_services EXIT
if timeout 10 docker info >/dev/null 2>&1; then bash scripts/docker-engine.sh base; fi
if timeout 10 docker info >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  bash scripts/docker-engine.sh compose \
    || echo "test.sh: could not install docker-compose; the compose test will skip (fail under CI=true)" >&2
fi

# A throwaway Postgres for the differential tests against the real `engram cloud serve`.
if [ -z "${ENGRAM_KIT_POSTGRES_URL:-}" ]; then
  if read -r postgres_dir ENGRAM_KIT_POSTGRES_URL < <(bash scripts/postgres.sh up); then
    export ENGRAM_KIT_POSTGRES_URL
  else
    postgres_dir=""
    echo "test.sh: no PostgreSQL could be started; the differential tests will skip" >&2
  fi
fi

# Debian's headless Chromium for the validate report's browser check (installs it when root).
bash scripts/chromium.sh >/dev/null \
  || echo "test.sh: no chromium; the validate HTML browser check will skip (fail under CI=true)" >&2

# Debian's Prometheus, promtool and node_exporter for the canary's fleet-view tests (installs them when root;
# the tests start their own processes on loopback and stop them).
if prometheus_tools=$(bash scripts/prometheus.sh); then
  export ENGRAM_KIT_PROMETHEUS="$prometheus_tools"
else
  echo "test.sh: no prometheus; the fleet-view tests will skip (fail under CI=true)" >&2
fi
# Debian's Alertmanager and amtool for the fleet view's one-problem-one-page tests (installs them when root).
if alertmanager_tools=$(bash scripts/alertmanager.sh); then
  export ENGRAM_KIT_ALERTMANAGER="$alertmanager_tools"
else
  echo "test.sh: no alertmanager; the fleet-view notification tests will skip (fail under CI=true)" >&2
fi

export TESTCONTAINERS_RYUK_DISABLED=true
export TESTCONTAINERS_CONNECTION_MODE=docker_host
export TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
# The scenario library plays twice, side by side: process clouds, and docker clouds (items named
# scenario[docker], held to the process run's baseline results; they skip, or fail under CI, without an image).
# Four workers on two cores: most of the slow tests wait for engram's 30 s worker ticks, not the CPU.
# --scenario-engram-installed: the scenario items play the v1.20.0 installed above (the plugin never falls
# back to that cache unless asked, so a gate that forgot ENGRAM_BIN cannot test an old release).
"$BIN/pytest" -n 4 --dist loadgroup --durations=20 --scenario-cloud process,docker --scenario-engram-installed \
  "${tier_filter[@]}" "$@"
