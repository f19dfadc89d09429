//go:build race

package clustertest

// raceEnabled: the test binary runs under the race detector, and so do the
// processes it starts.
const raceEnabled = true
