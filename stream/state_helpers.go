package stream

import "fmt"

// State backend names, for JobGraph.State.Backend and
// OperatorContext.StateBackend. Empty means the cluster default.
const (
	StateBackendHeap   = "heap"
	StateBackendPebble = "pebble"
)

// StateConfig is a job's keyed-state settings.
type StateConfig struct {
	// Backend is StateBackendHeap, StateBackendPebble, or empty for the
	// cluster default.
	Backend string
}

// ValidateStateBackend reports a state backend name that is not known.
func ValidateStateBackend(name string) error {
	switch name {
	case "", StateBackendHeap, StateBackendPebble:
		return nil
	}
	return fmt.Errorf("unknown state backend %q; want %s or %s", name, StateBackendHeap, StateBackendPebble)
}
