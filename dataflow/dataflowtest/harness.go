package dataflowtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// Harness holds one operator instance outside a task, with its state handled
// as the task runtime handles it: keyed state (for a stream.KeyedStateful
// operator) in the backend octx asks for, opened and restored before Open,
// snapshotted after the operator's own SnapshotState, closed after Close.
// It is for unit tests that drive an operator batch by batch; RunGraph runs
// whole graphs.
type Harness struct {
	Op    stream.Operator
	octx  *stream.OperatorContext
	state *backends.Managed
}

// Open opens op for octx, restoring snap (the operator's state in checkpoint
// checkpointID; nil starts empty) the way a task does. octx is modified:
// KeyedState is set. Close the harness when done.
func Open(ctx context.Context, op stream.Operator, octx *stream.OperatorContext, checkpointID int64, snap *stream.OperatorSnapshot) (*Harness, error) {
	h := &Harness{Op: op, octx: octx}
	ks, ok := op.(stream.KeyedStateful)
	keyed := ok && ks.UsesKeyedState()
	if keyed {
		m, err := backends.OpenManaged(octx, checkpointID, snap)
		if err != nil {
			return nil, fmt.Errorf("keyed state: %w", err)
		}
		h.state = m
		octx.KeyedState = m.Backend()
	}
	if err := op.Open(ctx, octx); err != nil {
		h.Close(false)
		return nil, fmt.Errorf("open: %w", err)
	}
	if snap == nil {
		return h, nil
	}
	rest := snap
	if keyed {
		rest = &stream.OperatorSnapshot{List: snap.List, Union: snap.Union}
	}
	cp, ok := op.(stream.Checkpointed)
	if !ok {
		if rest.Empty() {
			return h, nil
		}
		h.Close(false)
		return nil, errors.New("restore: the snapshot has operator state but the operator does not implement stream.Checkpointed")
	}
	kg := octx.KeyGroups
	if h.state != nil {
		kg = h.state.KeyGroups()
	}
	if err := cp.RestoreState(&stream.RestoreContext{CheckpointID: checkpointID, KeyGroups: kg, State: rest}); err != nil {
		h.Close(false)
		return nil, fmt.Errorf("restore: %w", err)
	}
	return h, nil
}

// Snapshot takes the operator's snapshot for checkpoint id, as a task does
// at a barrier.
func (h *Harness) Snapshot(id int64) (*stream.OperatorSnapshot, error) {
	kg := h.octx.KeyGroups
	if h.state != nil {
		kg = h.state.KeyGroups()
	}
	c := &stream.SnapshotContext{CheckpointID: id, KeyGroups: kg}
	if cp, ok := h.Op.(stream.Checkpointed); ok {
		if err := cp.SnapshotState(c); err != nil {
			return nil, err
		}
	}
	if h.state != nil {
		if err := h.state.Snapshot(c); err != nil {
			return nil, err
		}
	}
	return &c.State, nil
}

// Close closes the operator, then its keyed state; finished removes the
// local snapshots too, as for a task that finished. It is idempotent.
func (h *Harness) Close(finished bool) error {
	var err error
	if h.Op != nil {
		err = h.Op.Close()
		h.Op = nil
	}
	if h.state != nil {
		if serr := h.state.Close(!finished); err == nil {
			err = serr
		}
		h.state = nil
		h.octx.KeyedState = nil
	}
	return err
}
