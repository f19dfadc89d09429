//go:build !race

package pebblestate

// raceEnabled reports whether the race detector is on (see
// race_on_internal_test.go).
const raceEnabled = false
