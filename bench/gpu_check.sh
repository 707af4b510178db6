#!/usr/bin/env bash
# The GPU check, for a machine with one CUDA GPU and no network (about 3-5 minutes, well under 8):
# builds and installs this checkout into a fresh environment that sees the machine's own packages
# (numpy, pytest, torch, cupy), then, from outside the checkout against the installed package,
#   1. the gpu-marked tests, the pinned-memory tests (CUDA host registration there), the transport
#      contract suite (cuda_ipc on device memory) and the cross-process CUDA IPC tests,
#   2. `kvstore bench tier --tier gpu` (1 MiB and 128 KiB values; 128 MiB batches pipelined in 32 MiB
#      chunks and whole, KVSTORE_GPU_PIPELINE_CHUNK=0) and `--tier pinned` for reference,
#   3. `kvstore bench transfer --gpu` (GPU to GPU between two processes, cuda_ipc) read and write, and
#      over ucx where the machine has a UCX with CUDA support (the gpu-marked tests cover ucx too),
# printing every figure. Exit status: non-zero when a test or a bench failed.
#
#   bench/gpu_check.sh [PYTHON]      (default python3; the device tool: bash bench/gpu_check.sh)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$(mktemp -d -t kvstore-gpu.XXXXXX)"
trap 'rm -rf "$work"' EXIT
status=0
step() { echo; echo "== $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
"$python" --version

step "build and install (offline: scikit-build-core, pybind11, cmake and ninja come from the machine or .whl/)"
"$python" -m venv --system-site-packages "$work/venv" || exit 1
py="$work/venv/bin/python"
# What the machine lacks of the build's tools comes from .whl/ (bench/gpu_wheels.sh fills it; carry it).
missing() {  # whether build tool $1 is missing here
  case "$1" in
    cmake | ninja) ! command -v "$1" >/dev/null ;;
    *) ! "$py" -c "import ${1//-/_}" 2>/dev/null ;;
  esac
}
export PATH="$work/venv/bin:$PATH"  # (cmake and ninja installed from .whl/ land there)
# (and so do the runtime and test packages the machine's Python lacks)
for tool in scikit-build-core pybind11 cmake ninja numpy msgpack xxhash rich prometheus-client pytest \
  pytest-timeout hypothesis; do
  if missing "$tool"; then
    "$py" -m pip install -q --no-index --find-links "$root/.whl" "$tool" ||
      { echo "no $tool here and none in .whl/: run bench/gpu_wheels.sh and carry .whl"; exit 1; }
  fi
done
# UCX's wheel (CUDA transports) where carried: the ucx GPU test and bench then use it, not the machine's UCX.
"$py" -m pip install -q --no-index --find-links "$root/.whl" libucx-cu12 2>/dev/null ||
  echo "no libucx-cu12 in .whl: ucx uses this machine's UCX, if it has one"
"$py" -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$work/dist" "$root" || exit 1
"$py" -m pip install -q --no-deps --no-index "$work"/dist/kvstore_llm-*.whl || exit 1
cd "$work" || exit 1  # (from the checkout, its own transfer_engine/ would shadow the installed one)
"$py" -c "from transfer_engine import cuda; cuda.require(); print('CUDA driver loaded,', cuda.device_count(), 'GPU(s)')" ||
  exit 1

step "tests: gpu-marked, pinned memory"
ln -s "$root/tests" "$work/tests"
export KVSTORE_TEST_INSTALLED=1 KVSTORE_SOURCE_DIR="$root" PYTHONDONTWRITEBYTECODE=1
timeout 300 "$py" -m pytest -c "$root/pyproject.toml" --rootdir "$work" -p no:cacheprovider -q \
  -m "gpu or not gpu" tests/unit/transfer_engine/test_cuda.py tests/unit/transfer_engine/test_pinned.py \
  tests/integration/kvstore/test_gpu_store.py tests/contract/test_transport_contract.py \
  tests/integration/test_cuda_ipc.py || status=1
timeout 120 "$py" -m pytest -c "$root/pyproject.toml" --rootdir "$work" -p no:cacheprovider -q -m gpu tests ||
  status=1

kvstore="$work/venv/bin/kvstore"
# Each line: the pipeline chunk (0: GPU staging copies not overlapped with the network), then the arguments.
# Staging large enough for a 128 MiB batch (else its tail moves through pageable blocks).
export KVSTORE_BUFFER_SIZE=256MiB
while read -r chunk args; do
  step "KVSTORE_GPU_PIPELINE_CHUNK=$chunk kvstore bench tier $args"
  # shellcheck disable=SC2086  # the arguments are split on purpose
  KVSTORE_GPU_PIPELINE_CHUNK="$chunk" timeout 120 "$kvstore" bench tier $args </dev/null || status=1
done <<'RUNS'
32MiB --tier gpu
32MiB --tier gpu --value-size 128KiB --batch-size 128
32MiB --tier gpu --batch-size 128 --memory 512MiB --total 2GiB
0 --tier gpu --batch-size 128 --memory 512MiB --total 2GiB
32MiB --tier pinned
RUNS
for op in read write; do
  step "kvstore bench transfer --gpu --op $op (GPU to GPU across two processes: cuda_ipc)"
  timeout 60 "$kvstore" bench transfer --gpu --op "$op" --duration 3 </dev/null || status=1
done
step "kvstore bench transfer --gpu --transport ucx (GPU to GPU across two processes over UCX, where it has CUDA support)"
# (informational: a UCX without CUDA support refuses GPU memory; the gpu-marked test says so as a skip)
timeout 60 "$kvstore" bench transfer --gpu --transport ucx --op read --duration 3 </dev/null ||
  echo "(the ucx GPU bench did not run: no UCX here, or one without CUDA support)"
exit "$status"
