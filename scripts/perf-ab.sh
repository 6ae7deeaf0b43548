#!/usr/bin/env bash
# Compares two rangealloc builds on this machine, the way the "What
# changed" figures of docs/PERFORMANCE.md are measured: fresh three-node
# clusters on loopback (scripts/cluster.sh, plain HTTP, a new data
# directory each time), the two builds alternated, and per cluster
# `rangealloc bench --nodes all --duration 6s` at 64 clients (allocate,
# then the health check) and at one client (allocate).
#
#   git stash; make -s build BIN=/tmp/a; git stash pop; make -s build BIN=/tmp/b
#   scripts/perf-ab.sh /tmp/a /tmp/b 3        # 3 pairs, about 4 minutes
#
# Each line is one cluster: A or B, then allocations/s, CPU/op and the
# load generator's share of it at 64 clients, the health check's, and the
# one-client rate and p50. Nothing else may run on the machine meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: scripts/perf-ab.sh BIN_A BIN_B [PAIRS]}
B=${2:?usage: scripts/perf-ab.sh BIN_A BIN_B [PAIRS]}
PAIRS=${3:-3}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
work=$(mktemp -d /tmp/perf-ab.XXXXXX)
cluster=

cleanup() {
  if [ -n "$cluster" ]; then kill -TERM "$cluster" 2>/dev/null || true; wait "$cluster" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in 7080 7081 7082 7083 7084 7085; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is in use: stop whatever runs there (another cluster?) first" >&2; exit 1
  fi
done

# bench BIN FLAGS...: the summary line of rangealloc bench.
bench() {
  local bin=$1; shift
  "$bin" bench --addr http://127.0.0.1:7080 --nodes all --duration 6s "$@" 2>/dev/null | tail -1
}

# one BIN LABEL: a fresh cluster of BIN, measured.
one() {
  local bin=$1 label=$2 data=$work/data
  rm -rf "$data"
  PLAIN=1 DATA=$data BIN=$bin EXTRA_FLAGS=$EXTRA_FLAGS scripts/cluster.sh >"$work/cluster.out" 2>&1 &
  cluster=$!
  for _ in $(seq 100); do
    "$bin" cluster --addr http://127.0.0.1:7080 -o json 2>/dev/null | grep -q '"apiAddr": "http' && break
    sleep 0.2
  done
  "$bin" bench --addr http://127.0.0.1:7080 --nodes all --clients 64 --duration 2s --mix allocate=1 >/dev/null 2>&1 # warm up
  local a64 h64 a1
  a64=$(bench "$bin" --clients 64 --mix allocate=1)
  h64=$(bench "$bin" --clients 64 --mix health=1)
  a1=$(bench "$bin" --clients 1 --mix allocate=1)
  # NODES CLIENTS OPS OPS/S VALUES/S P50 P90 P99 ERRORS CPU CPU/OP BENCH/OP
  printf '%s  allocate at 64: %s/s, CPU/op %s (load generator %s)  health at 64: %s/s, CPU/op %s  allocate at 1: %s/s, p50 %s\n' \
    "$label" "$(awk '{print $4}' <<<"$a64")" "$(awk '{print $11}' <<<"$a64")" "$(awk '{print $12}' <<<"$a64")" \
    "$(awk '{print $4}' <<<"$h64")" "$(awk '{print $11}' <<<"$h64")" "$(awk '{print $4}' <<<"$a1")" "$(awk '{print $6}' <<<"$a1")"
  kill -TERM "$cluster"; wait "$cluster" 2>/dev/null || true
  cluster=
}

for _ in $(seq "$PAIRS"); do
  one "$A" A
  one "$B" B
done
