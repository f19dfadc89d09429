#!/usr/bin/env bash
# `make bench`: runs the end-to-end benchmarks once each (no race detector)
# and prints their name=value lines.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3-)"
go test -run '^$' -bench . -benchtime 1x -timeout 60m ./test/bench/ | grep -E '^[a-z0-9_]+=' || {
  echo "benchmarks failed; rerun: go test -run '^\$' -bench . -benchtime 1x ./test/bench/" >&2
  exit 1
}
