#!/usr/bin/env bash
# Make Debian's Prometheus, promtool and node_exporter available for the canary's fleet-view tests; print
# "PROMETHEUS PROMTOOL NODE_EXPORTER" (three paths on one line). Installs the `prometheus` and
# `prometheus-node-exporter` packages when missing (needs root); their services are never started here:
# the tests start their own processes on loopback ports and stop them. Exit 1 when none can be had.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.cache/prometheus"
mkdir -p "$state"
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
  if [ "$(id -u)" != 0 ]; then
    echo "prometheus.sh: no prometheus/promtool/node_exporter and installing Debian's packages needs root" >&2
    exit 1
  fi
  # Other set-up scripts may hold dpkg's lock: wait for it rather than fail.
  lock_wait=(-o DPkg::Lock::Timeout=300)
  if [ ! -f "$state/apt-updated" ]; then apt-get "${lock_wait[@]}" update -qq && touch "$state/apt-updated"; fi
  # policy-rc.d 101: the packages' maintainer scripts must not start their services on this machine.
  policy=/usr/sbin/policy-rc.d
  restore_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && restore_policy=1; fi
  status=0
  DEBIAN_FRONTEND=noninteractive apt-get "${lock_wait[@]}" install -y -qq --no-install-recommends \
    prometheus prometheus-node-exporter >"$state/install.log" 2>&1 || status=$?
  if [ "$restore_policy" = 1 ]; then rm -f "$policy"; fi
  [ "$status" = 0 ] || { echo "prometheus.sh: apt-get install failed; see $state/install.log" >&2; exit 1; }
  found=$(find_all)
fi
[ -n "$found" ] || { echo "prometheus.sh: the packages are installed but a binary is not on PATH" >&2; exit 1; }
echo "$found"
