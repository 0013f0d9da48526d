#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the differential tests against the real `engram cloud serve`.
#   postgres.sh up          install Debian's postgresql when missing, initdb + start a cluster in a fresh
#                           tmp dir on a free loopback port; prints "DATADIR URL" on one line
#   postgres.sh down DIR    stop the cluster living in DIR and delete DIR
# No state is shared between callers, so parallel test runs each get their own cluster.
# initdb refuses to run as root, so as root the cluster belongs to the `postgres` user.
set -euo pipefail

pg_bindir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  command -v initdb >/dev/null 2>&1 && dirname "$(readlink -f "$(command -v initdb)")"
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

up() {
  local bindir; bindir=$(pg_bindir || true)
  if [ -z "$bindir" ]; then
    [ "$(id -u)" = 0 ] || { echo "postgres: PostgreSQL is not installed and installing it needs root" >&2; exit 1; }
    echo "postgres: installing Debian's postgresql" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    bindir=$(pg_bindir)
  fi
  local datadir; datadir=$(mktemp -d /tmp/engram-kit-pg.XXXXXX)
  chmod 755 "$datadir"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$datadir"; fi
  echo "$bindir" >"$datadir/bindir"
  as_owner "$bindir/initdb" -D "$datadir/data" -U postgres -A trust -E UTF8 >"$datadir/initdb.log" 2>&1 \
    || { tail -n 20 "$datadir/initdb.log" >&2; rm -rf "$datadir"; exit 1; }
  local port
  for _ in 1 2 3; do
    port=$(free_port)
    if as_owner "$bindir/pg_ctl" -D "$datadir/data" -l "$datadir/server.log" -w -t 30 start \
      -o "-p $port -k $datadir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
      >/dev/null 2>&1; then
      echo "$datadir postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
      return 0
    fi
  done
  echo "postgres: the cluster did not start; its log:" >&2
  tail -n 20 "$datadir/server.log" >&2 || true
  rm -rf "$datadir"
  exit 1
}

down() {
  local datadir=${1:-}
  [ -n "$datadir" ] && [ -f "$datadir/bindir" ] || { echo "postgres: usage: postgres.sh down DATADIR" >&2; exit 2; }
  as_owner "$(cat "$datadir/bindir")/pg_ctl" -D "$datadir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$datadir"
  echo "postgres: cluster stopped" >&2
}

case "${1:-}" in
  up) up ;;
  down) down "${2:-}" ;;
  *) echo "usage: postgres.sh up | postgres.sh down DATADIR" >&2; exit 2 ;;
esac
