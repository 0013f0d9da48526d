#!/usr/bin/env bash
# Make Debian's Alertmanager and amtool available for the canary's fleet-view tests; print
# "ALERTMANAGER AMTOOL" (two paths on one line). Installs the `prometheus-alertmanager` package when missing
# (needs root); its service is never started here: the tests start their own Alertmanager on a loopback
# port and stop it. Exit 1 when none can be had.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.cache/alertmanager"
mkdir -p "$state"
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
  if [ "$(id -u)" != 0 ]; then
    echo "alertmanager.sh: no alertmanager/amtool and installing Debian's package needs root" >&2
    exit 1
  fi
  # Other set-up scripts may hold dpkg's lock: wait for it rather than fail.
  lock_wait=(-o DPkg::Lock::Timeout=300)
  if [ ! -f "$state/apt-updated" ]; then apt-get "${lock_wait[@]}" update -qq && touch "$state/apt-updated"; fi
  # policy-rc.d 101: the package's maintainer scripts must not start its service on this machine.
  policy=/usr/sbin/policy-rc.d
  restore_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && restore_policy=1; fi
  status=0
  DEBIAN_FRONTEND=noninteractive apt-get "${lock_wait[@]}" install -y -qq --no-install-recommends \
    prometheus-alertmanager >"$state/install.log" 2>&1 || status=$?
  if [ "$restore_policy" = 1 ]; then rm -f "$policy"; fi
  [ "$status" = 0 ] || { echo "alertmanager.sh: apt-get install failed; see $state/install.log" >&2; exit 1; }
  found=$(find_all)
fi
[ -n "$found" ] || { echo "alertmanager.sh: the package is installed but a binary is not on PATH" >&2; exit 1; }
echo "$found"
