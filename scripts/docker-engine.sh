#!/usr/bin/env bash
# Make a Docker engine answer on this machine, and build the local base image once.
#   docker-engine.sh up      start dockerd if none answers (installs docker.io when missing); overlay2
#                            storage when the kernel allows it, else vfs (ENGRAM_KIT_STORAGE_DRIVER forces one)
#   docker-engine.sh down    stop the dockerd that `up` started
#   docker-engine.sh base    build local/debian-python:bookworm once (debootstrap + docker import)
#   docker-engine.sh compose install Debian's docker-compose (v1) when missing
# The machine has no container registry, so the base image is made from Debian's own packages (from the
# apt sources' mirror, or ENGRAM_KIT_DEBIAN_MIRROR).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.cache/docker"
mkdir -p "$state"
base_tag="${ENGRAM_KIT_BASE_IMAGE:-local/debian-python:bookworm}"

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

apt_install() {
  if [ ! -f "$state/apt-updated" ]; then apt-get update -qq && touch "$state/apt-updated"; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

debian_mirror() {
  local uri
  if [ -n "${ENGRAM_KIT_DEBIAN_MIRROR:-}" ]; then echo "$ENGRAM_KIT_DEBIAN_MIRROR"; return 0; fi
  uri=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}')
  if [ -z "$uri" ]; then uri=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $2}'); fi
  [ -n "$uri" ] || { echo "docker-engine: no Debian mirror found in the apt sources" >&2; exit 1; }
  echo "$uri"
}

# overlay2 when this kernel mounts overlayfs on the engine's filesystem: containers then start without
# copying the image. vfs (a full copy per layer and per container) is the fallback that works anywhere.
storage_driver() {
  if [ -n "${ENGRAM_KIT_STORAGE_DRIVER:-}" ]; then echo "$ENGRAM_KIT_STORAGE_DRIVER"; return 0; fi
  local probe; mkdir -p /var/lib/docker; probe=$(mktemp -d /var/lib/docker/.overlay-probe.XXXXXX)
  mkdir -p "$probe"/{lower,upper,work,merged}
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" 2>/dev/null; then
    umount "$probe/merged"; rm -rf "$probe"; echo overlay2
  else
    rm -rf "$probe"; echo vfs
  fi
}

up() {
  if engine_answers; then echo "docker-engine: an engine already answers"; return 0; fi
  command -v dockerd >/dev/null 2>&1 || { echo "docker-engine: installing docker.io" >&2; apt_install docker.io; }
  [ "$(id -u)" = 0 ] || { echo "docker-engine: starting dockerd needs root" >&2; exit 1; }
  local driver; driver=$(storage_driver)
  echo "docker-engine: starting dockerd (storage driver $driver)" >&2
  dockerd --storage-driver="$driver" --ip=127.0.0.1 >"$state/dockerd.log" 2>&1 &
  echo $! >"$state/dockerd.pid"
  for _ in $(seq 1 60); do
    if engine_answers; then echo "docker-engine: dockerd started (pid $(cat "$state/dockerd.pid"))"; return 0; fi
    sleep 0.5
  done
  echo "docker-engine: dockerd did not answer within 30 s; its log:" >&2
  tail -n 20 "$state/dockerd.log" >&2
  exit 1
}

down() {
  [ -f "$state/dockerd.pid" ] || return 0
  local pid; pid=$(cat "$state/dockerd.pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    echo "docker-engine: dockerd stopped"
  fi
  rm -f "$state/dockerd.pid"
}

base() {
  if docker image inspect "$base_tag" >/dev/null 2>&1; then echo "docker-engine: $base_tag present"; return 0; fi
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  local rootfs log
  rootfs=$(mktemp -d "$state/rootfs.XXXXXX")  # its own directory: two runs never share one
  log="$rootfs.log"
  echo "docker-engine: debootstrap of bookworm with python3 (about a minute)" >&2
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$(debian_mirror)" >"$log" 2>&1 \
    || { tail -n 20 "$log" >&2; rm -rf "$rootfs"; exit 1; }
  tar -C "$rootfs" -c . | docker import - "$base_tag" >/dev/null
  rm -rf "$rootfs" "$log"
  echo "docker-engine: built $base_tag"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  base) base ;;
  compose) command -v docker-compose >/dev/null 2>&1 || apt_install docker-compose ;;
  *) echo "usage: docker-engine.sh up|down|base|compose" >&2; exit 2 ;;
esac
