#!/usr/bin/env bash
# Make a Docker engine answer on this machine, and build the local base image once.
#   docker-engine.sh up      start dockerd if none answers (installs docker.io when missing)
#   docker-engine.sh down    stop the dockerd that `up` started
#   docker-engine.sh base    build local/debian-python:bookworm once (debootstrap + docker import)
#   docker-engine.sh compose install Debian's docker-compose (v1) when missing
# The machine has no container registry, so the base image is made from Debian's own packages.
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
  uri=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}')
  if [ -z "$uri" ]; then uri=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $2}'); fi
  [ -n "$uri" ] || { echo "docker-engine: no Debian mirror found in the apt sources" >&2; exit 1; }
  echo "$uri"
}

up() {
  if engine_answers; then echo "docker-engine: an engine already answers"; return 0; fi
  command -v dockerd >/dev/null 2>&1 || { echo "docker-engine: installing docker.io" >&2; apt_install docker.io; }
  [ "$(id -u)" = 0 ] || { echo "docker-engine: starting dockerd needs root" >&2; exit 1; }
  dockerd --storage-driver=vfs --ip=127.0.0.1 >"$state/dockerd.log" 2>&1 &
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
  local rootfs="$state/rootfs"
  rm -rf "$rootfs"
  echo "docker-engine: debootstrap of bookworm with python3 (about a minute)" >&2
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$(debian_mirror)" >"$state/debootstrap.log" 2>&1 \
    || { tail -n 20 "$state/debootstrap.log" >&2; exit 1; }
  tar -C "$rootfs" -c . | docker import - "$base_tag" >/dev/null
  rm -rf "$rootfs"
  echo "docker-engine: built $base_tag"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  base) base ;;
  compose) command -v docker-compose >/dev/null 2>&1 || apt_install docker-compose ;;
  *) echo "usage: docker-engine.sh up|down|base|compose" >&2; exit 2 ;;
esac
