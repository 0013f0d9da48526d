#!/usr/bin/env bash
# Make Debian's Prometheus, promtool and node_exporter available for the canary's fleet-view tests; print
# "PROMETHEUS PROMTOOL NODE_EXPORTER" (three paths on one line). Installs the `prometheus` and
# `prometheus-node-exporter` packages when missing (needs root); their services are never started here:
# the tests start their own processes on loopback ports and stop them. Exit 1 when none can be had.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.cache/prometheus"
mkdir -p "$state"
# shellcheck source=scripts/apt-packages.sh
. "$here/scripts/apt-packages.sh"
find_all() {
  local prometheus promtool exporter
  prometheus=$(command -v prometheus || true)
  promtool=$(command -v promtool || true)
  exporter=$(command -v prometheus-node-exporter || command -v node_exporter || true)
  if [ -n "$prometheus" ] && [ -n "$promtool" ] && [ -n "$exporter" ]; then
    echo "$prometheus $promtool $exporter"
  fi
}
found=$(find_all)
if [ -z "$found" ]; then
  apt_install prometheus.sh "$state" prometheus prometheus-node-exporter
  found=$(find_all)
fi
[ -n "$found" ] || { echo "prometheus.sh: the packages are installed but a binary is not on PATH" >&2; exit 1; }
echo "$found"
