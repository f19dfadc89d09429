package dataflow

import "errors"

// Failures that have no exported error of their own, for errors.Is in
// this package.
var (
	// errAbandoned marks the SnapshotFailed error of a checkpoint whose
	// alignment was abandoned because the barrier of a later checkpoint
	// arrived first.
	errAbandoned = errors.New("dataflow: checkpoint alignment abandoned")
	// errUpstreamStopped marks the error a consumer fails with when its
	// producer stopped without ending the channel.
	errUpstreamStopped = errors.New("dataflow: upstream task stopped")
)
