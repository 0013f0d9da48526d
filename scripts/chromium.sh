#!/usr/bin/env bash
# Make Debian's headless Chromium available for the validate report's browser check; print its path.
# Installs the `chromium` package when missing (needs root). Exit 1 when none can be had.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.cache/chromium"
mkdir -p "$state"
find_browser() { command -v chromium || command -v chromium-browser || true; }
browser=$(find_browser)
if [ -z "$browser" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "chromium.sh: no chromium and installing Debian's package needs root" >&2
    exit 1
  fi
  if [ ! -f "$state/apt-updated" ]; then apt-get update -qq && touch "$state/apt-updated"; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >"$state/install.log" 2>&1 \
    || { echo "chromium.sh: apt-get install chromium failed; see $state/install.log" >&2; exit 1; }
  browser=$(find_browser)
fi
[ -n "$browser" ] || { echo "chromium.sh: chromium is installed but not on PATH" >&2; exit 1; }
echo "$browser"
