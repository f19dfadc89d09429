#!/usr/bin/env bash
# `make bench`: runs the end-to-end benchmarks once each (no race detector)
# and prints their name=value lines. WEIR_BENCH selects benchmarks by regexp
# (`make bench-nexmark` sets it to Nexmark). The full log is .run/bench.log.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .run
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3-)"
go test -run '^$' -bench "${WEIR_BENCH:-Q1|CheckpointOverhead|Recovery|IncrementalCheckpoint1GB|Savepoint1GB|StorageOverhead|ScaleCurve|ExchangeRemoteVsLocal|WideJob|UnalignedCheckpoints|Debloat}" -benchtime 1x -timeout 90m ./test/bench/ > .run/bench.log 2>&1
rc=$?
if [ -z "${WEIR_BENCH:-}" ]; then
  # Keyed state on Pebble against the heap (running_count, in-process).
  go test -run '^$' -bench 'RunningCountHeapVsPebble' -benchtime 1x ./operators/keyed/ >> .run/bench.log 2>&1 || rc=$?
  # Nexmark q5 in-process (sliding window, then window_max) on the heap
  # and on Pebble: q5_pebble_vs_heap is the ratio of their events/s/core.
  go test -run '^$' -bench 'Q5$' -benchtime 1x ./operators/topn/ >> .run/bench.log 2>&1 || rc=$?
  # What incremental checkpoints of a sliding window on Pebble upload per
  # byte of window state that changed.
  go test -run '^$' -bench 'SlidingCheckpointBytes' -benchtime 1x ./operators/window/ >> .run/bench.log 2>&1 || rc=$?
  # CPU time per checkpoint of the jobmanager's core (scheduler,
  # coordinator, manifest) at 1,000 and 10,000 subtasks.
  go test -run '^$' -bench 'CoordinatorCheckpointCPU' -benchtime 1x ./jobmanager/ >> .run/bench.log 2>&1 || rc=$?
  # Connectors: the Kafka sink exactly once against at least once (on
  # franz-go's kfake), the PostgreSQL sink exactly once against upsert (a
  # real server), the NATS source and sink, the continuous file source's
  # listing.
  go test -run '^$' -bench 'KafkaSink' -benchtime 1x ./connectors/kafka/ >> .run/bench.log 2>&1 || rc=$?
  go test -run '^$' -bench 'PostgresSink' -benchtime 1x ./connectors/postgres/ >> .run/bench.log 2>&1 || rc=$?
  go test -run '^$' -bench '.' -benchtime 1x ./connectors/nats/ >> .run/bench.log 2>&1 || rc=$?
  go test -run '^$' -bench 'ContinuousFileSourceListing' -benchtime 1x ./connectors/ >> .run/bench.log 2>&1 || rc=$?
fi
grep -E '^[a-z0-9_]+=' .run/bench.log
if [ $rc -ne 0 ]; then
  echo "benchmarks failed (exit $rc); see .run/bench.log" >&2
  tail -n 30 .run/bench.log >&2
fi
exit $rc
