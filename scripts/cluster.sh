#!/usr/bin/env bash
# Starts three rangealloc nodes on 127.0.0.1 for trying things out, each
# with its own data directory under ./cluster-data, and stops them all
# cleanly on Ctrl-C (SIGTERM: a leader hands leadership over first).
#
# The nodes run the secure setup of a real install: mutual TLS between
# nodes, HTTPS and tokens on the API. The first start makes a CA and node
# certificates (cluster-data/certs) and an admin token (cluster-data/admin.token)
# and prints the environment a client needs. PLAIN=1 starts them without TLS
# and tokens (loopback allows it), to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/rangealloc}
DATA=${DATA:-cluster-data}
CERTS=$DATA/certs
mkdir -p "$DATA"

scheme=https
if [ -n "${PLAIN:-}" ]; then
  scheme=http
  client=(--addr http://127.0.0.1:7080)
else
  if [ ! -f "$CERTS/ca.crt" ]; then
    "$BIN" certs init --dir "$CERTS" --node n1=127.0.0.1,localhost --node n2=127.0.0.1,localhost --node n3=127.0.0.1,localhost >/dev/null
  fi
  if [ ! -f "$DATA/admin.token" ]; then
    out=$("$BIN" token create --role admin --name make-cluster 2>/dev/null)
    (umask 077; head -n1 <<<"$out" > "$DATA/admin.token")
    tail -n1 <<<"$out" >> "$DATA/tokens"
  fi
  client=(--addr https://127.0.0.1:7080 --cacert "$CERTS/ca.crt" --token "$(cat "$DATA/admin.token")")
fi
PEERS="n1=127.0.0.1:7081=$scheme://127.0.0.1:7080,n2=127.0.0.1:7083=$scheme://127.0.0.1:7082,n3=127.0.0.1:7085=$scheme://127.0.0.1:7084"

pids=()
stop() {
  echo; echo "stopping the cluster..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait || true
  echo "stopped; data kept in $DATA (rm -rf $DATA to start afresh)"
}
trap stop INT TERM
for i in 1 2 3; do
  http=$((7078 + 2*i)); raft=$((7079 + 2*i))
  secure=()
  if [ -z "${PLAIN:-}" ]; then
    secure=(--tls-cert "$CERTS/n$i.crt" --tls-key "$CERTS/n$i.key" --tls-ca "$CERTS/ca.crt"
      --api-tls-cert "$CERTS/n$i.crt" --api-tls-key "$CERTS/n$i.key" --token-file "$DATA/tokens")
  fi
  "$BIN" server --id "n$i" --data-dir "$DATA/n$i" --http-addr "127.0.0.1:$http" --raft-addr "127.0.0.1:$raft" \
    --peers "$PEERS" "${secure[@]}" --log-level "${LOG_LEVEL:-warn}" ${EXTRA_FLAGS:-} 2> "$DATA/n$i.log" &
  pids+=($!)
done
for _ in $(seq 100); do # until a leader is known and has written the members' rows
  "$BIN" cluster "${client[@]}" -o json 2>/dev/null | grep -q '"apiAddr": "http' && break
  sleep 0.2
done
"$BIN" cluster "${client[@]}" || true
if [ -n "${PLAIN:-}" ]; then
  env="export RANGEALLOC_ADDR=http://127.0.0.1:7080"
else
  env="export RANGEALLOC_ADDR=https://127.0.0.1:7080 RANGEALLOC_CACERT=$CERTS/ca.crt RANGEALLOC_TOKEN=\$(cat $DATA/admin.token)"
fi
cat <<MSG

Three nodes run: the API on $scheme://127.0.0.1:7080, :7082, :7084 (logs in $DATA/n*.log).
In another shell:
  $env
  $BIN allocate clusterip-ipv4 --owner default/web
  $BIN list clusterip-ipv4 --addr $scheme://127.0.0.1:7084
  $BIN bench --nodes all --clients 64 --duration 10s
Ctrl-C stops all three.
MSG
wait
