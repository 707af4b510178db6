#!/usr/bin/env bash
# 1 NIC vs 2 NICs over TCP (or UCX) between two "hosts" on this machine (root): a network namespace joined to this
# one by two veth pairs on two subnets, each NIC capped with tc tbf at RATE both ways (so the cap, not the
# CPU, sets the pace). Runs `kvstore bench transfer` against a target in the namespace, first with this
# side's first NIC only (--nics), then with both, and prints each run's JSON line (its `paths` field says
# what each path moved). Everything it made is removed on exit.
#
#   bench/multi_nic.sh [RATE] [BLOCK_SIZE] [OP] [TRANSPORT]
#       (defaults: 1gbit 1MiB read tcp; RATE "none": no cap; TRANSPORT ucx: a UCX rail per NIC)
#   KVSTORE=... picks the kvstore command (default: kvstore on PATH)
set -euo pipefail
rate="${1:-1gbit}"
block="${2:-1MiB}"
op="${3:-read}"
transport="${4:-tcp}"
kvstore="${KVSTORE:-kvstore}"
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, tc)"; exit 2; }
tag=$$
ns="kvbench$tag"
subnet=$((tag % 250 + 1))
a_out="kvx$tag" a_in="kvy$tag" b_out="kvz$tag" b_in="kvw$tag"
cleanup() {
  [ -n "${target_pid:-}" ] && kill "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null
  ip link del "$a_out" 2>/dev/null || true
  ip link del "$b_out" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
for pair in "$a_out $a_in 10.233" "$b_out $b_in 10.234"; do
  set -- $pair
  ip link add "$1" type veth peer name "$2"
  ip link set "$2" netns "$ns"
  ip addr add "$3.$subnet.1/30" dev "$1"
  ip link set "$1" up
  ip -n "$ns" addr add "$3.$subnet.2/30" dev "$2"
  ip -n "$ns" link set "$2" up
  if [ "$rate" != none ]; then
    tc qdisc replace dev "$1" root tbf rate "$rate" burst 256kb latency 100ms
    tc -n "$ns" qdisc replace dev "$2" root tbf rate "$rate" burst 256kb latency 100ms
  fi
done
target_host="10.233.$subnet.2"
out="$(mktemp)"
ip netns exec "$ns" "$kvstore" bench transfer --mode target --transport "$transport" --host "$target_host" --port 0 \
  --working-set 256MiB </dev/null >"$out" 2>&1 &
target_pid=$!
for _ in $(seq 100); do grep -q "^READY" "$out" && break; sleep 0.1; done
peer="$(sed -n 's/^READY \([^ ]*\).*/\1/p' "$out")"
[ -n "$peer" ] || { cat "$out"; exit 1; }
for nics in "$a_out" "$a_out,$b_out"; do
  "$kvstore" bench transfer --transport "$transport" --peer "$peer" --host "10.233.$subnet.1" --nics "$nics" \
    --block-size "$block" --op "$op" --working-set 256MiB --duration 4 --no-baseline --json </dev/null
done
