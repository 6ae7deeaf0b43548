#!/usr/bin/env bash
# Measures rangealloc against etcd in the same run, the way
# docs/PERFORMANCE.md reports it: per round, etcd's baseline first
# (etcdalloc: plain puts at 1, 16 and 64 clients, Kubernetes' whole-bitmap
# compare-and-swap at 1 and 16), then a fresh three-node rangealloc cluster
# on loopback (scripts/cluster.sh, plain HTTP) with the chosen log store,
# driven by `rangealloc bench` with clients spread over every node. Each
# round ends with its ratios beside the targets.
#
#   ETCDALLOC=/path/to/etcdalloc scripts/perf-round.sh              # 3 rounds, bolt
#   ETCDALLOC=/path/to/etcdalloc STORE=wal ROUNDS=1 scripts/perf-round.sh
#
# BIN, when given, is the rangealloc binary to measure; otherwise this
# checkout is built into bin/rangealloc first. ETCDALLOC is the etcd
# baseline program (`-members 3 -mode put|cas -c N -n OPS`, printing
# rate=N/s), a binary or a Go source directory to build it from.
# Nothing else may run on the machine meanwhile: the servers, the load
# generator and etcd share its CPUs, and the ratios are only as good as
# the quiet they were measured in. A round takes about two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BIN:+no}
BIN=${BIN:-bin/rangealloc}
STORE=${STORE:-bolt}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-6s}
ETCDALLOC=${ETCDALLOC:?set ETCDALLOC to the etcdalloc binary or its source directory}
work=$(mktemp -d /tmp/perf-round.XXXXXX)
cluster=

cleanup() {
  if [ -n "$cluster" ]; then kill -TERM "$cluster" 2>/dev/null || true; wait "$cluster" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "$build" ]; then # measure this checkout, not an older build
  echo "building $BIN"; make -s build BIN="$BIN"
fi
if [ -d "$ETCDALLOC" ]; then
  echo "building etcdalloc from $ETCDALLOC"
  (cd "$ETCDALLOC" && go build -o "$work/etcdalloc" .)
  ETCDALLOC=$work/etcdalloc
fi
for port in 7080 7081 7082 7083 7084 7085; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is in use: stop whatever runs there (another cluster?) first" >&2; exit 1
  fi
done

# etcd MODE CLIENTS OPS: etcd's allocations/s.
etcd() {
  local out
  out=$("$ETCDALLOC" -members 3 -mode "$1" -c "$2" -n "$3" 2>&1) || { echo "$out" >&2; return 1; }
  sed -n 's/.* rate=\([0-9.]*\)\/s.*/\1/p' <<<"$out" | tail -1
}

# bench FLAGS...: the summary line of rangealloc bench.
bench() {
  "$BIN" bench --nodes all --duration "$DURATION" "$@" 2>&1 | tail -1
}

# col LINE N: the Nth column of a summary line, units dropped.
col() { awk -v n="$2" '{v=$n; sub(/[^0-9.]+$/, "", v); print v}' <<<"$1"; }
us() { # a duration column in µs
  awk -v n="$2" '{v=$n; if (v ~ /ms$/) {sub(/ms$/,"",v); v*=1000} else if (v ~ /µs$/) {sub(/µs$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v*=1e6}; print v}' <<<"$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "n/a" }'; }
check() { awk -v r="$1" -v t="$2" -v dir="${3:-ge}" 'BEGIN{ ok = (dir == "ge") ? (r >= t) : (r <= t); print (ok ? "met" : "NOT met") }'; }

echo "$("$BIN" version 2>/dev/null | head -1); store $STORE; $ROUNDS round(s) of about two minutes"
for round in $(seq "$ROUNDS"); do
  start=$SECONDS
  echo "== round $round: etcd"
  p1=$(etcd put 1 10000); p16=$(etcd put 16 30000); p64=$(etcd put 64 60000)
  c1=$(etcd cas 1 4000); c16=$(etcd cas 16 2000)
  echo "   put 1/16/64: $p1 / $p16 / $p64 per s; cas 1/16: $c1 / $c16 per s"

  echo "== round $round: rangealloc ($STORE)"
  data=$work/data-$round
  PLAIN=1 BIN=$BIN DATA=$data EXTRA_FLAGS="--log-store $STORE" scripts/cluster.sh >"$work/cluster-$round.log" 2>&1 &
  cluster=$!
  for _ in $(seq 150); do
    grep -q "Three nodes run" "$work/cluster-$round.log" 2>/dev/null && break
    sleep 0.2
  done
  grep -q "Three nodes run" "$work/cluster-$round.log" || { cat "$work/cluster-$round.log" >&2; exit 1; }
  # The lone client writes to the first member: straight to the leader,
  # or through a follower that forwards (docs/PERFORMANCE.md).
  first=$("$BIN" cluster | awk 'seen && NF { print $1 " (" $4 ")"; exit } /^ID /{ seen = 1 }')
  a1=$(bench --clients 1 --mix allocate=1); a16=$(bench --clients 16 --mix allocate=1); a64=$(bench --clients 64 --mix allocate=1)
  h64=$(bench --clients 64 --mix health=1)
  cnt=$(bench --clients 8 --count 4096 --mix allocate=1,release=1)
  kill -TERM "$cluster"; wait "$cluster" || true; cluster=

  r1=$(col "$a1" 4); r16=$(col "$a16" 4); r64=$(col "$a64" 4); values=$(col "$cnt" 5)
  cpuA=$(us "$a64" 11); cpuH=$(us "$h64" 11)
  echo "   allocate 1/16/64: $r1 (p50 $(awk '{print $6}' <<<"$a1"), to $first) / $r16 / $r64 per s; health at 64: CPU/OP ${cpuH}µs; count 4096: $values values/s"
  echo
  echo "| round $round ($STORE, $((SECONDS - start)) s) | ratio | target | |"
  echo "|---|---:|---:|---|"
  t1=0.65; [ "$STORE" = wal ] && t1=1.0
  x=$(ratio "$r1" "$p1");  echo "| 1 client vs etcd put | ${x}× | ${t1}× | $(check "$x" "$t1") |"
  x=$(ratio "$r1" "$c1");  echo "| 1 client vs etcd cas | ${x}× | 1.3× | $(check "$x" 1.3) |"
  x=$(ratio "$r16" "$p16"); echo "| 16 clients vs etcd put | ${x}× | 1.5× | $(check "$x" 1.5) |"
  x=$(ratio "$r64" "$p64"); echo "| 64 clients vs etcd put | ${x}× | 1.5× | $(check "$x" 1.5) |"
  x=$(ratio "$r16" "$c16"); echo "| 16 clients vs etcd cas | ${x}× | 20× | $(check "$x" 20) |"
  x=$(ratio "$cpuA" "$cpuH"); echo "| CPU/op at 64 clients vs health's (${cpuA} / ${cpuH} µs) | ${x}× | ≤ 2.5× | $(check "$x" 2.5 le) |"
  x=$(ratio "$values" "$p64"); echo "| count 4096 values/s vs etcd put at 64 | ${x}× | 40× | $(check "$x" 40) |"
  echo
done
