#!/usr/bin/env bash
# Checks a wheel as a user gets it: installs it (with its dependencies from the index) into a fresh virtual
# environment and, from a folder outside any checkout, imports kvstore and transfer_engine from that
# environment, runs `kvstore --help`, starts `kvstore master` and `kvstore node` in the background (stdin
# from /dev/null, as a service manager starts them) and stores and reads back a value through them.
#
#   tools/check_wheel.sh WHEEL [PYTHON]        (PYTHON: the interpreter to make the environment; python3)
#
# Exits non-zero, saying what failed, on any step's failure; the servers are stopped either way.
set -euo pipefail
wheel="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
python="${2:-python3}"
work="$(mktemp -d -t kvstore-wheel-check.XXXXXX)"
pids=()
finish() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap finish EXIT
# (kvstore's processes refuse KVSTORE_* variables they do not know: start from none of the caller's)
while read -r variable; do unset "$variable"; done < <(compgen -e | grep '^KVSTORE_' || true)
export PIP_DISABLE_PIP_VERSION_CHECK=1
cd "$work"

echo "== $(basename "$wheel"): a fresh environment ($("$python" --version 2>&1))"
"$python" -m venv "$work/venv"
bin="$work/venv/bin"
"$bin/python" -m pip install -q "$wheel"
"$bin/python" - <<'EOF'
import sys, sysconfig
import kvstore, transfer_engine
from importlib.metadata import version
site = sysconfig.get_paths()["purelib"]
for package in (kvstore, transfer_engine):
    if not package.__file__.startswith(site):
        sys.exit(f"{package.__name__} was imported from {package.__file__}, not the environment ({site})")
print(f"   import: kvstore-llm {version('kvstore-llm')} from {site}")
EOF
"$bin/kvstore" --help >/dev/null
echo "   kvstore --help: ok"

# Waits (60 s at most) for a server's READY line in FILE; prints the rest of it.
ready() {
  for _ in $(seq 600); do
    line="$(grep -m1 '^READY ' "$1" || true)"
    if [ -n "$line" ]; then
      echo "${line#READY }"
      return 0
    fi
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "no READY line from $1 (its stderr: $(tail -5 "${1%.out}.err"))" >&2
  return 1
}
"$bin/kvstore" secret new "$work/cluster.secret" >/dev/null
export KVSTORE_CLUSTER_SECRET_FILE="$work/cluster.secret"
"$bin/kvstore" master --port 0 </dev/null >"$work/master.out" 2>"$work/master.err" &
pids+=($!)
master="$(ready "$work/master.out" "${pids[-1]}" | cut -d' ' -f1)"
"$bin/kvstore" node --master "$master" --segment-size 64MiB --memory-dir "$work" \
  </dev/null >"$work/node.out" 2>"$work/node.err" &
pids+=($!)
ready "$work/node.out" "${pids[-1]}" >/dev/null
"$bin/python" - "$master" <<'EOF'
import os, sys
from kvstore import Store
value = os.urandom(1 << 20)
with Store.connect(sys.argv[1], segment_size=0) as store:
    store.put("wheel-check/value", value)  # (raises on failure)
    if store.get("wheel-check/value") != value:
        sys.exit("the get did not return the bytes put")
print(f"   put and get of 1 MiB through a master ({sys.argv[1]}) and a node: ok")
EOF
echo "== $(basename "$wheel"): ok"
