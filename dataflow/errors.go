package dataflow

import (
	"errors"
	"fmt"
)

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
	// errRuntimePanic marks the error of a panic in the task runtime's own
	// code, as opposed to an operator's (ErrOperatorPanic).
	errRuntimePanic = errors.New("dataflow: task runtime panicked")
	// errPeerProtocol marks the error a network stream fails with when the
	// peer sending on it broke the exchange protocol.
	errPeerProtocol = errors.New("dataflow: peer broke the exchange protocol")
	// errCreditExceeded is the errPeerProtocol of a peer that sent a batch
	// on a channel without a credit for it.
	errCreditExceeded = fmt.Errorf("%w: credit exceeded", errPeerProtocol)
)
