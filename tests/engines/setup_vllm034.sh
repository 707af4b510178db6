#!/usr/bin/env bash
# Builds (once) the optional environment of tests/engines/test_vllm_034.py: vLLM 0.34.0's Python code (its
# CUDA wheel, installed without dependencies; nothing in the test needs a GPU) layered over the engines
# environment (setup_env.sh), whose packages it reuses (CPU torch, transformers, kvstore, ...): only the
# wheel is added, ahead of the engines' vLLM 0.32 on the import path.
#
#   tests/engines/setup_vllm034.sh ENGINES_VENV [VENV]     default VENV: $VLLM034_VENV or ENGINES_VENV/vllm034
#
# VLLM034_WHEEL: a local copy of the wheel; else pip fetches vllm==0.34.0 (about 240 MB, once: the stamp
# keeps the environment). Exits 3 when the wheel cannot be installed here, or with VLLM034_SKIP=1: the test
# is then skipped with that reason. Inside the engines environment by default, so rebuilding that one
# drops this one too.
set -euo pipefail
engines="${1:?usage: setup_vllm034.sh ENGINES_VENV [VENV]}"
venv="${2:-${VLLM034_VENV:-$engines/vllm034}}"
stamp="$venv/.vllm034-ready"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ "${VLLM034_SKIP:-}" = 1 ]; then echo "VLLM034_SKIP=1: the vLLM 0.34 environment is not built" >&2; exit 3; fi
if [ -f "$stamp" ]; then echo "$venv"; exit 0; fi

rm -rf "$venv"
purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
base="$("$engines/bin/python" -c 'import sys; print(sys.base_prefix)')"
"$base/bin/python3" -m venv "$venv"
# The engines' packages after this environment's own (where vLLM 0.34 goes), their .pth files included
# (an editable kvstore's, say).
echo "import site; site.addsitedir('$("$engines/bin/python" -c "$purelib")')" \
  > "$("$venv/bin/python" -c "$purelib")/zz-engines-env.pth"
if ! "$venv/bin/python" -m pip install -q --no-deps "${VLLM034_WHEEL:-vllm==0.34.0}" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
  echo "vLLM 0.34.0's wheel cannot be installed here (no index, no VLLM034_WHEEL)" >&2
  exit 3
fi
"$venv/bin/python" -c '
import importlib.metadata, vllm, kvstore, torch
assert importlib.metadata.version("vllm") == "0.34.0", importlib.metadata.version("vllm")
assert not torch.version.cuda, torch.version.cuda'
touch "$stamp"
echo "$venv"
