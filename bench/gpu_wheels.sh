#!/usr/bin/env bash
# Fills .whl/ with what bench/gpu_check.sh needs on a machine with no network: the build's tools
# (scikit-build-core and what it imports, pybind11, cmake, ninja) and, for the device's Python (default
# 3.12), kvstore's runtime and test packages in case that machine lacks them. Run it here, then carry .whl.
#
#   bench/gpu_wheels.sh [PYTHON_VERSION]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${1:-3.12}"
python3 -m pip download -q -d "$root/.whl" --only-binary=:all: scikit-build-core pybind11 cmake ninja
platforms=()
for p in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q -d "$root/.whl" --only-binary=:all: --python-version "$version" \
  --implementation cp "${platforms[@]}" \
  numpy msgpack xxhash rich prometheus-client pytest pytest-timeout hypothesis
ls "$root/.whl"
du -sh "$root/.whl"
