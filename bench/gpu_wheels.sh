#!/usr/bin/env bash
# Fills .whl/ with the build tools bench/gpu_check.sh needs on a machine with no network (scikit-build-core
# and what it imports, pybind11, cmake, ninja): run it here, then carry .whl to the device machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python3 -m pip download -q -d "$root/.whl" --only-binary=:all: scikit-build-core pybind11 cmake ninja
ls "$root/.whl"
