#!/usr/bin/env bash
# Make Debian's Alertmanager and amtool available for the canary's fleet-view tests; print
# "ALERTMANAGER AMTOOL" (two paths on one line). Installs the `prometheus-alertmanager` package when missing
# (needs root); its service is never started here: the tests start their own Alertmanager on a loopback
# port and stop it. Exit 1 when none can be had.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.cache/alertmanager"
mkdir -p "$state"
# shellcheck source=scripts/apt-packages.sh
. "$here/scripts/apt-packages.sh"
find_all() {
  local alertmanager amtool
  alertmanager=$(command -v prometheus-alertmanager || command -v alertmanager || true)
  amtool=$(command -v amtool || true)
  if [ -n "$alertmanager" ] && [ -n "$amtool" ]; then
    echo "$alertmanager $amtool"
  fi
}
found=$(find_all)
if [ -z "$found" ]; then
  apt_install alertmanager.sh "$state" prometheus-alertmanager
  found=$(find_all)
fi
[ -n "$found" ] || { echo "alertmanager.sh: the package is installed but a binary is not on PATH" >&2; exit 1; }
echo "$found"
