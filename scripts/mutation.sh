#!/usr/bin/env bash
# `make mutation`: mutmut over engram_contract, canary/checks, lane_health, triage and fake_cloud/protocol
# (pyproject's [tool.mutmut]), then the score into bench/results/mutation.json. Nightly, not in `make test`:
# on 2 cores it takes tens of minutes. mutmut gets a venv of its own: it needs newer click and rich than
# the kit pins, and it imports the mutated copy (mutants/), never an installed kit.
set -euo pipefail
cd "$(dirname "$0")/.."
MUTMUT_VERSION=3.8.1
venv=.cache/mutation-venv
if [ ! -x "$venv/bin/mutmut" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "mutmut==$MUTMUT_VERSION" pydantic==2.9.2 PyYAML==6.0.2 watchdog==5.0.3 \
    httpx==0.27.2 h11==0.16.0 prometheus-client==0.21.0 trustme==1.2.0 Faker==30.8.2 hypothesis==6.118.0
fi
rm -rf mutants
"$venv/bin/mutmut" run --max-children "${MUTATION_CHILDREN:-2}"
"$venv/bin/mutmut" export-cicd-stats
.venv/bin/python -m bench.mutation mutants/mutmut-cicd-stats.json "$MUTMUT_VERSION"
