#!/usr/bin/env bash
# `make run`: start a local Weir cluster (one jobmanager, two taskmanagers),
# submit the example keyed-window job, wait for it, and show where its tasks
# ran and what it computed. The cluster is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./bin
RUN=.run
mkdir -p "$RUN"
OUT=/tmp/weir-window-counts
rm -rf "$OUT"

RPC=127.0.0.1:${WEIR_RPC_PORT:-6123}
REST=127.0.0.1:${WEIR_REST_PORT:-8081}
export WEIR_JOBMANAGER=$RPC

"$BIN/weir" local --taskmanagers 2 --slots 2 --rpc-address "$RPC" --rest-address "$REST" >"$RUN/local.log" 2>&1 &
LOCAL=$!
trap 'kill $LOCAL 2>/dev/null; wait $LOCAL 2>/dev/null || true' EXIT

for _ in $(seq 1 300); do
  if grep -q "weir local: jobmanager at" "$RUN/local.log"; then break; fi
  if ! kill -0 $LOCAL 2>/dev/null; then echo "weir local exited:"; cat "$RUN/local.log"; exit 1; fi
  sleep 0.2
done
grep -q "weir local: jobmanager at" "$RUN/local.log" || { echo "the local cluster did not start:"; cat "$RUN/local.log"; exit 1; }

echo "== taskmanagers"
"$BIN/weir" taskmanagers list
echo
echo "== submitting examples/window-counts.yaml"
"$BIN/weir" submit examples/window-counts.yaml --wait
JOB=$("$BIN/weir" jobs list -o json | sed -n 's/.*"jobId": *"\([0-9a-f]*\)".*/\1/p' | tail -n 1)
echo
echo "== job $JOB: where each task ran"
"$BIN/weir" jobs status "$JOB"
echo
echo "== output ($OUT): per key and 1-second window, count, sum and max of value"
head -n 6 "$OUT"/part-* | sed 's/^/   /'
echo "   ..."
rows=$(cat "$OUT"/part-* | grep -vc '^key,' || true)
total=$(cat "$OUT"/part-* | grep -v '^key,' | awk -F, '{s+=$4} END {print s}')
echo "== $rows window rows; their counts add up to $total input rows (the job generated 200000)"
echo "== REST: http://$REST/v1/jobs/$JOB"
