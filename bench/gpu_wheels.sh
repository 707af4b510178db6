#!/usr/bin/env bash
# Fills .whl/ with what bench/gpu_check.sh needs on a machine with no network: the build's Python tools
# (scikit-build-core and what it imports, pybind11, ninja), UCX's wheel (libucx-cu12: its CUDA transports,
# for GPU memory over ucx) and, for the device's Python (default 3.12), kvstore's runtime and test packages
# in case that machine lacks them. CMake's wheel (30 MB) is left out unless --with-cmake: the device
# machine has cmake, and the carry is limited to 64 MiB. Run it here, then carry .whl.
#
#   bench/gpu_wheels.sh [--with-cmake] [PYTHON_VERSION]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools=(scikit-build-core pybind11 ninja)
if [ "${1:-}" = "--with-cmake" ]; then
  tools+=(cmake)
  shift
fi
version="${1:-3.12}"
python3 -m pip download -q -d "$root/.whl" --only-binary=:all: "${tools[@]}"
python3 -m pip download -q -d "$root/.whl" --only-binary=:all: --no-deps libucx-cu12
platforms=()
for p in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q -d "$root/.whl" --only-binary=:all: --python-version "$version" \
  --implementation cp "${platforms[@]}" \
  numpy msgpack xxhash rich prometheus-client pytest pytest-timeout hypothesis
ls "$root/.whl"
du -sh "$root/.whl"
