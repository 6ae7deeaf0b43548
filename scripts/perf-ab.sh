#!/usr/bin/env bash
# Compares two rangealloc builds on this machine, the way the "What
# changed" figures of docs/PERFORMANCE.md are measured: fresh three-node
# clusters on loopback (scripts/cluster.sh, plain HTTP, a new data
# directory each time), the two builds alternated, and per cluster
# `rangealloc bench --nodes all --duration 6s` at 64 clients (allocate,
# then the health check) and at one client (allocate).
#
#   git worktree add --detach /tmp/old HEAD~1 && make -s -C /tmp/old build BIN=/tmp/a
#   make -s build BIN=/tmp/b
#   scripts/perf-ab.sh /tmp/a /tmp/b 4        # 4 pairs, about 3 minutes
#
# The pairs alternate their order (A B, B A, A B, ...), so that a machine
# that drifts during the run favours neither build. Each line is one
# cluster: A or B, then allocations/s, CPU/op and the load generator's
# share of it at 64 clients, the health check's, and the one-client rate
# and p50; a run with errors fails. Nothing else may run on the machine
# meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: scripts/perf-ab.sh BIN_A BIN_B [PAIRS]}
B=${2:?usage: scripts/perf-ab.sh BIN_A BIN_B [PAIRS]}
PAIRS=${3:-4}
for bin in "$A" "$B"; do
  [ -x "$bin" ] || { echo "$bin: not an executable rangealloc binary" >&2; exit 2; }
done
EXTRA_FLAGS=${EXTRA_FLAGS:-}
work=$(mktemp -d /tmp/perf-ab.XXXXXX)
cluster=

cleanup() {
  local rc=$?
  if [ -n "$cluster" ]; then kill -TERM "$cluster" 2>/dev/null || true; wait "$cluster" 2>/dev/null || true; fi
  if [ "$rc" -eq 0 ]; then rm -rf "$work"; else echo "failed; the cluster's output and logs are in $work" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in 7080 7081 7082 7083 7084 7085; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is in use: stop whatever runs there (another cluster?) first" >&2; exit 1
  fi
done

# bench BIN FLAGS...: the summary line of rangealloc bench; a run with
# errors fails.
bench() {
  local bin=$1 out line; shift
  out=$("$bin" bench --addr http://127.0.0.1:7080 --nodes all --duration 6s "$@" 2>&1) || { echo "$out" >&2; return 1; }
  line=$(tail -1 <<<"$out")
  # NODES CLIENTS OPS OPS/S VALUES/S P50 P90 P99 ERRORS CPU CPU/OP BENCH/OP
  if [ "$(awk '{print $9}' <<<"$line")" != 0 ]; then echo "rangealloc bench $*: errors:" >&2; echo "$out" >&2; return 1; fi
  echo "$line"
}

# one BIN LABEL: a fresh cluster of BIN, measured.
one() {
  local bin=$1 label=$2 data=$work/data
  rm -rf "$data"
  PLAIN=1 DATA=$data BIN=$bin EXTRA_FLAGS=$EXTRA_FLAGS scripts/cluster.sh >"$work/cluster.out" 2>&1 &
  cluster=$!
  local up=
  for _ in $(seq 100); do
    if "$bin" cluster --addr http://127.0.0.1:7080 -o json 2>/dev/null | grep -q '"apiAddr": "http'; then up=1; break; fi
    sleep 0.2
  done
  if [ -z "$up" ]; then
    echo "$label ($bin): the cluster did not come up in 20 s" >&2
    cat "$work/cluster.out" "$data"/n*.log >&2 2>/dev/null || true
    return 1
  fi
  "$bin" bench --addr http://127.0.0.1:7080 --nodes all --clients 64 --duration 2s --mix allocate=1 >/dev/null 2>&1 # warm up
  local a64 h64 a1
  a64=$(bench "$bin" --clients 64 --mix allocate=1)
  h64=$(bench "$bin" --clients 64 --mix health=1)
  a1=$(bench "$bin" --clients 1 --mix allocate=1)
  printf '%s  allocate at 64: %s/s, CPU/op %s (load generator %s)  health at 64: %s/s, CPU/op %s  allocate at 1: %s/s, p50 %s\n' \
    "$label" "$(awk '{print $4}' <<<"$a64")" "$(awk '{print $11}' <<<"$a64")" "$(awk '{print $12}' <<<"$a64")" \
    "$(awk '{print $4}' <<<"$h64")" "$(awk '{print $11}' <<<"$h64")" "$(awk '{print $4}' <<<"$a1")" "$(awk '{print $6}' <<<"$a1")"
  kill -TERM "$cluster" 2>/dev/null || true
  wait "$cluster" 2>/dev/null || true
  cluster=
}

for i in $(seq "$PAIRS"); do
  if [ $((i % 2)) -eq 1 ]; then
    one "$A" A; one "$B" B
  else
    one "$B" B; one "$A" A
  fi
done
