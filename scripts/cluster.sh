#!/usr/bin/env bash
# Starts three rangealloc nodes on 127.0.0.1 for trying things out, each
# with its own data directory under ./cluster-data, and stops them all
# cleanly on Ctrl-C (SIGTERM: a leader hands leadership over first).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/rangealloc}
DATA=${DATA:-cluster-data}
PEERS="n1=127.0.0.1:7081=127.0.0.1:7080,n2=127.0.0.1:7083=127.0.0.1:7082,n3=127.0.0.1:7085=127.0.0.1:7084"
pids=()
stop() {
  echo; echo "stopping the cluster..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait || true
  echo "stopped; data kept in $DATA (rm -rf $DATA to start afresh)"
}
trap stop INT TERM
mkdir -p "$DATA"
for i in 1 2 3; do
  http=$((7078 + 2*i)); raft=$((7079 + 2*i))
  "$BIN" server --id "n$i" --data-dir "$DATA/n$i" --http-addr "127.0.0.1:$http" --raft-addr "127.0.0.1:$raft" \
    --peers "$PEERS" --log-level "${LOG_LEVEL:-warn}" ${EXTRA_FLAGS:-} 2> "$DATA/n$i.log" &
  pids+=($!)
done
for _ in $(seq 100); do # until a leader is known and has written the members' rows
  "$BIN" cluster --addr http://127.0.0.1:7080 -o json 2>/dev/null | grep -q '"apiAddr": "127' && break
  sleep 0.2
done
"$BIN" cluster --addr http://127.0.0.1:7080 || true
cat <<MSG

Three nodes run: HTTP on 127.0.0.1:7080, :7082, :7084 (logs in $DATA/n*.log). Try:
  $BIN allocate clusterip-ipv4 --owner default/web --addr http://127.0.0.1:7082
  $BIN list clusterip-ipv4 --addr http://127.0.0.1:7084
  $BIN bench --nodes all --clients 64 --duration 10s
Ctrl-C stops all three.
MSG
wait
