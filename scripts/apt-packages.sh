# Sourced by the set-up scripts: install Debian packages without starting their services.
# apt_install NAME STATE_DIR PACKAGE...: needs root; waits for another script's dpkg lock rather than fail;
# the install's output goes to STATE_DIR/install.log; exits 1 with one line naming NAME when it fails.
apt_install() {
  local name=$1 state=$2
  shift 2
  if [ "$(id -u)" != 0 ]; then
    echo "$name: $* missing, and installing Debian's packages needs root" >&2
    exit 1
  fi
  local lock_wait=(-o DPkg::Lock::Timeout=300)
  if [ ! -f "$state/apt-updated" ]; then apt-get "${lock_wait[@]}" update -qq && touch "$state/apt-updated"; fi
  # policy-rc.d 101: the packages' maintainer scripts must not start their services on this machine.
  local policy=/usr/sbin/policy-rc.d restore_policy=0 status=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && restore_policy=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get "${lock_wait[@]}" install -y -qq --no-install-recommends "$@" \
    >"$state/install.log" 2>&1 || status=$?
  if [ "$restore_policy" = 1 ]; then rm -f "$policy"; fi
  [ "$status" = 0 ] || { echo "$name: apt-get install failed; see $state/install.log" >&2; exit 1; }
}
