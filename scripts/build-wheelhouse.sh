#!/usr/bin/env bash
# Build the wheels the container installs, into .cache/wheelhouse (or $1): deps/ holds the runtime
# dependencies, project/ this project's own wheel. Containers here cannot reach a package index, so the
# Dockerfile installs only from these directories. Two directories keep the image's dependency layer
# cached while the project changes. The image's Python (Debian bookworm: 3.11) must match the host
# interpreter that builds the wheels, since some dependencies ship compiled wheels.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
wheelhouse=${1:-"$here/.cache/wheelhouse"}
python=${PYTHON:-"$here/.venv/bin/python"}
[ -x "$python" ] || python=python3
image_python=${ENGRAM_KIT_IMAGE_PYTHON:-3.11}

host_python=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if [ "$host_python" != "$image_python" ]; then
  echo "build-wheelhouse: the host Python is $host_python but the image runs $image_python;" \
    "run with PYTHON=python$image_python (or set ENGRAM_KIT_IMAGE_PYTHON to the image's version)" >&2
  exit 1
fi

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# The build log is shown only when the build fails.
# A fixed SOURCE_DATE_EPOCH makes the project wheel byte-identical when the source is, so the image
# layer that installs it stays cached.
SOURCE_DATE_EPOCH=315532800 "$python" -m pip wheel --disable-pip-version-check -c "$here/constraints.txt" --find-links "$wheelhouse/deps" "$here" -w "$build" \
  >"$build/pip.log" 2>&1 || { tail -n 30 "$build/pip.log" >&2; exit 1; }

mkdir -p "$wheelhouse/deps" "$wheelhouse/project"
rm -f "$wheelhouse/project"/*.whl
mv "$build"/engram_sync_kit-*.whl "$wheelhouse/project/"
# A dependency's wheel is replaced only when its file name changes, so the dependency layer stays cached;
# wheels no longer needed (an old pin) go, or the image would install two versions.
for wheel in "$wheelhouse"/deps/*.whl; do
  [ -e "$wheel" ] && [ ! -e "$build/$(basename "$wheel")" ] && rm -f "$wheel"
done
for wheel in "$build"/*.whl; do
  [ -e "$wheelhouse/deps/$(basename "$wheel")" ] || mv "$wheel" "$wheelhouse/deps/"
done
echo "$wheelhouse"
