package twophase

import (
	"context"
	"errors"

	"github.com/weirstream/weir/stream"
)

// Operator is a sink subtask that drives a System through the two-phase
// commit protocol (see the package comment). Build it with NewOperator.
type Operator struct {
	sys  System
	ctx  context.Context
	octx *stream.OperatorContext

	cur     Txn   // the open transaction, nil between a pre-commit and the next row
	curID   TxnID // its id
	seq     int64 // transactions begun in this attempt
	lastCkp int64 // the last checkpoint snapshotted or restored
	pending []Pending
	// recovered is set once System.Recover ran.
	recovered bool
	// commitOnFinish: no checkpointing, so Finish commits.
	commitOnFinish bool
}

var (
	_ stream.Operator           = (*Operator)(nil)
	_ stream.Checkpointed       = (*Operator)(nil)
	_ stream.CheckpointListener = (*Operator)(nil)
)

// NewOperator returns a sink operator that writes through sys.
func NewOperator(sys System) *Operator { return &Operator{sys: sys} }

// System returns the System the operator drives.
func (o *Operator) System() System { return o.sys }

// Pending returns the transactions pre-committed and not yet committed,
// oldest first (for tests and metrics).
func (o *Operator) Pending() []Pending { return append([]Pending(nil), o.pending...) }

// Open opens the System.
func (o *Operator) Open(ctx context.Context, octx *stream.OperatorContext) error {
	o.ctx, o.octx = ctx, octx
	o.commitOnFinish = !octx.Checkpointing
	return o.sys.Open(ctx, octx)
}

// recoverFresh runs System.Recover for a subtask that restored nothing.
func (o *Operator) recoverFresh() error {
	if o.recovered {
		return nil
	}
	o.recovered = true
	err := o.sys.Recover(o.ctx, Recovery{
		Subtask:        o.octx.Subtask,
		Parallelism:    max(1, o.octx.Parallelism),
		Subtasks:       []int{o.octx.Subtask},
		OldParallelism: max(1, o.octx.Parallelism),
		Attempt:        o.octx.Attempt,
	})
	if err != nil {
		return errorf(o.octx, "abort transactions left by an earlier run: %w", err)
	}
	return nil
}

// ProcessBatch writes b into the current transaction, beginning one if
// none is open.
func (o *Operator) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	if b.Len() == 0 {
		return nil
	}
	if err := o.recoverFresh(); err != nil {
		return err
	}
	if o.cur == nil {
		o.seq++
		id := TxnID{
			JobID:       o.octx.JobID,
			OperatorUID: o.octx.OperatorUID,
			Subtask:     o.octx.Subtask,
			Attempt:     o.octx.Attempt,
			Checkpoint:  o.lastCkp + 1,
			Seq:         o.seq,
		}
		txn, err := o.sys.Begin(o.ctx, id)
		if err != nil {
			return errorf(o.octx, "begin transaction %s: %w", id.Name(), err)
		}
		o.cur, o.curID = txn, id
	}
	if err := o.cur.Write(o.ctx, b); err != nil {
		return errorf(o.octx, "write to transaction %s: %w", o.curID.Name(), err)
	}
	return nil
}

// preCommit pre-commits the open transaction, if any, as part of
// checkpoint ckp.
func (o *Operator) preCommit(ckp int64) error {
	if o.cur == nil {
		return nil
	}
	txn, id := o.cur, o.curID
	o.cur = nil
	h, err := txn.PreCommit(o.ctx)
	if err != nil {
		_ = txn.Abort(o.ctx)
		return errorf(o.octx, "pre-commit transaction %s: %w", id.Name(), err)
	}
	o.pending = append(o.pending, Pending{ID: id, Checkpoint: ckp, Handle: h})
	return nil
}

// Finish commits the open transaction when the job does not checkpoint;
// otherwise its rows wait for the checkpoint taken after the end of input.
func (o *Operator) Finish(stream.Collector) error {
	if err := o.recoverFresh(); err != nil {
		return err
	}
	if !o.commitOnFinish {
		return nil
	}
	if err := o.preCommit(o.lastCkp + 1); err != nil {
		return err
	}
	return o.commitUpTo(o.lastCkp + 1)
}

// ProcessWatermark forwards nothing: a sink has no output.
func (o *Operator) ProcessWatermark(int64, stream.Collector) error { return nil }

// SnapshotState pre-commits the open transaction and records every
// pre-committed one.
func (o *Operator) SnapshotState(c *stream.SnapshotContext) error {
	if err := o.recoverFresh(); err != nil {
		return err
	}
	if c.CheckpointID <= o.lastCkp {
		// Transaction names derive from checkpoint ids: ids that do not
		// grow would name two transactions alike.
		return errorf(o.octx, "checkpoint %d is not after checkpoint %d, which this sink restored or took; checkpoint ids must grow", c.CheckpointID, o.lastCkp)
	}
	if err := o.preCommit(c.CheckpointID); err != nil {
		return err
	}
	o.lastCkp = max(o.lastCkp, c.CheckpointID)
	for _, p := range o.pending {
		c.AddListState(PendingState, encodePending(p))
	}
	c.AddUnionState(WritersState, encodeWriter(o.octx.Subtask, max(1, o.octx.Parallelism), o.pending))
	if ss, ok := o.sys.(SystemState); ok {
		return ss.SnapshotSystem(c)
	}
	return nil
}

// RestoreState commits the transactions of the checkpoint given to this
// subtask and has the System abort every other one its predecessors left.
func (o *Operator) RestoreState(c *stream.RestoreContext) error {
	o.lastCkp = max(o.lastCkp, c.CheckpointID)
	if c.State == nil {
		return nil
	}
	if ss, ok := o.sys.(SystemState); ok {
		if err := ss.RestoreSystem(c); err != nil {
			return err
		}
	}
	mine, keep, oldPar, ok, err := o.restored(c)
	if err != nil || !ok {
		return err // !ok: no state of this sink, Recover runs as on a fresh start
	}
	restoreJob := c.JobID
	if restoreJob == "" {
		restoreJob = o.octx.JobID
	}
	sortPending(mine)
	for _, p := range mine {
		if err := o.sys.Commit(o.ctx, p); err != nil {
			return errorf(o.octx, "commit transaction %s of restored checkpoint %d: %w", p.ID.Name(), c.CheckpointID, err)
		}
	}
	par := max(1, o.octx.Parallelism)
	subtasks := []int{o.octx.Subtask}
	for j := par; j < oldPar; j++ {
		if j%par == o.octx.Subtask {
			subtasks = append(subtasks, j)
		}
	}
	o.recovered = true
	err = o.sys.Recover(o.ctx, Recovery{
		Restored:       true,
		CheckpointID:   c.CheckpointID,
		RestoreJobID:   restoreJob,
		Committed:      mine,
		KeepNames:      keep,
		Subtask:        o.octx.Subtask,
		Parallelism:    par,
		Subtasks:       subtasks,
		OldParallelism: oldPar,
		Attempt:        o.octx.Attempt,
	})
	if err != nil {
		return errorf(o.octx, "abort transactions left after checkpoint %d: %w", c.CheckpointID, err)
	}
	return nil
}

// restored decodes the transactions of the checkpoint given to this
// subtask, the names of all pending in it and the parallelism it was
// taken with; ok false when it holds no state of this sink.
func (o *Operator) restored(c *stream.RestoreContext) (mine []Pending, keep map[string]bool, oldPar int, ok bool, err error) {
	items, writers := c.State.List[PendingState], c.State.Union[WritersState]
	if len(items) == 0 && len(writers) == 0 {
		ls, isLegacy := o.sys.(LegacyState)
		if !isLegacy {
			return nil, nil, 0, false, nil
		}
		l, ok, err := ls.RestoreLegacy(c)
		if err != nil || !ok {
			return nil, nil, 0, false, err
		}
		if l.OldParallelism <= 0 {
			return nil, nil, 0, false, errorf(o.octx, "checkpoint %d: legacy state without a parallelism", c.CheckpointID)
		}
		if l.KeepNames == nil {
			l.KeepNames = make(map[string]bool)
		}
		for _, p := range l.Pending {
			l.KeepNames[p.ID.Name()] = true
		}
		return l.Pending, l.KeepNames, l.OldParallelism, true, nil
	}
	keep = make(map[string]bool)
	for _, w := range writers {
		_, par, names, err := decodeWriter(w)
		if err != nil {
			return nil, nil, 0, false, errorf(o.octx, "checkpoint %d: corrupt %s state: %v", c.CheckpointID, WritersState, err)
		}
		if oldPar != 0 && par != oldPar {
			return nil, nil, 0, false, errorf(o.octx, "checkpoint %d: corrupt %s state: parallelism %d and %d in one checkpoint", c.CheckpointID, WritersState, oldPar, par)
		}
		oldPar = par
		for _, n := range names {
			keep[n] = true
		}
	}
	if oldPar == 0 {
		return nil, nil, 0, false, errorf(o.octx, "checkpoint %d holds pending transactions but no %s state; the checkpoint is damaged", c.CheckpointID, WritersState)
	}
	for _, item := range items {
		p, err := decodePending(item)
		if err != nil {
			return nil, nil, 0, false, errorf(o.octx, "checkpoint %d: corrupt %s state: %v", c.CheckpointID, PendingState, err)
		}
		if !keep[p.ID.Name()] {
			return nil, nil, 0, false, errorf(o.octx, "checkpoint %d: corrupt state: transaction %s is pending but not listed in %s", c.CheckpointID, p.ID.Name(), WritersState)
		}
		mine = append(mine, p)
	}
	return mine, keep, oldPar, true, nil
}

// NotifyCheckpointComplete commits every transaction pre-committed at or
// before checkpoint id.
func (o *Operator) NotifyCheckpointComplete(id int64) error { return o.commitUpTo(id) }

// NotifyCheckpointAborted keeps the aborted checkpoint's transactions
// pre-committed: the next checkpoint that completes commits them.
func (o *Operator) NotifyCheckpointAborted(int64) error { return nil }

func (o *Operator) commitUpTo(id int64) error {
	n := 0
	for _, p := range o.pending {
		if p.Checkpoint > id {
			break
		}
		if err := o.sys.Commit(o.ctx, p); err != nil {
			o.pending = o.pending[n:]
			return errorf(o.octx, "commit transaction %s of checkpoint %d: %w", p.ID.Name(), p.Checkpoint, err)
		}
		n++
	}
	o.pending = append(o.pending[:0], o.pending[n:]...)
	return nil
}

// Close aborts the open transaction and closes the System.
func (o *Operator) Close() error {
	var err error
	if o.cur != nil {
		ctx := o.ctx
		if ctx == nil || ctx.Err() != nil {
			ctx = context.Background()
		}
		err = o.cur.Abort(ctx)
		o.cur = nil
	}
	return errors.Join(err, o.sys.Close())
}
