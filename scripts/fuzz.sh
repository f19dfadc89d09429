#!/usr/bin/env bash
# `make fuzz`: run every fuzz target in the repository for a bounded time,
# one target at a time (go test accepts a single -fuzz target per run, so a
# package with several targets is run once per target). Prints one line per
# target and exits non-zero if any target fails.
#
# Settings (environment or make variables):
#   FUZZTIME          time per target, a go test -fuzztime value (default 20s)
#   FUZZ              extended regexp; only targets whose "pkg FuzzName"
#                     matches run (default: all)
#   FUZZPARALLEL      fuzzing processes per target (default: GOMAXPROCS)
#   FUZZMINIMIZETIME  time to minimize each new input (default 5s); the go
#                     default of 60s can use a whole short run on one input
#
# New interesting inputs go to the Go build cache, not the repository; a
# failing input is written to the package's testdata/fuzz/<FuzzName>/, and
# committing it (after the fix) keeps it as a regression test. Logs are in
# .run/fuzz/.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
FUZZ=${FUZZ:-}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-5s}
LOGS=.run/fuzz
mkdir -p "$LOGS"

parallel=()
if [ -n "${FUZZPARALLEL:-}" ]; then
  parallel=(-parallel "$FUZZPARALLEL")
fi

# Every "func FuzzX(f *testing.F)" in a _test.go file, as "./pkg FuzzX",
# sorted so that the order (and the output) is stable.
targets=$(grep -rE --include='*_test.go' --exclude-dir=testdata --exclude-dir=bin --exclude-dir=.run \
  -o '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
  sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort -u)
if [ -n "$FUZZ" ]; then
  targets=$(grep -E -- "$FUZZ" <<<"$targets" || true)
fi
if [ -z "$targets" ]; then
  echo "fuzz: no fuzz targets${FUZZ:+ match $FUZZ}"
  exit 1
fi

failed=0
total=0
while read -r pkg name; do
  total=$((total + 1))
  log="$LOGS/$(tr '/' '.' <<<"${pkg#./}").$name.log"
  start=$SECONDS
  "$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" \
    "${parallel[@]}" "$pkg" >"$log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
  if [ $rc -eq 0 ]; then
    printf 'ok    %-28s %-26s %4ds  %s execs\n' "$pkg" "$name" "$took" "${execs:-?}"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-28s %-26s %4ds  log: %s\n' "$pkg" "$name" "$took" "$log"
    # The failure and the input that caused it, without the progress lines.
    grep -vE '^fuzz: elapsed' "$log" | head -40 | sed 's/^/      /'
  fi
done <<<"$targets"

if [ $failed -ne 0 ]; then
  echo "fuzz: $failed of $total targets failed"
  exit 1
fi
echo "fuzz: all $total targets passed ($FUZZTIME each)"
