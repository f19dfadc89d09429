//go:build !race

package clustertest

// raceEnabled: the test binary runs without the race detector (benchmarks),
// and so do the processes it starts.
const raceEnabled = false
