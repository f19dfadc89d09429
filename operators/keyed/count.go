package keyed

import (
	"context"
	"fmt"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// countTable is the state table of running_count: one int64 per key.
const countTable = "count"

// keyTypesState is the union operator state in which running_count records
// the types of its key fields, so that a restore under another key fails
// clearly instead of reading keys of the wrong shape.
const keyTypesState = "running_count.key-types"

// RunningCount is one subtask of running_count. For each record it adds one
// to its key's count and emits a row of the key fields and the count, with
// the record's event time. The counts are keyed state (ValueState[int64] per
// key, the key being the rowenc encoding of the key fields) in the backend
// the task runtime opened for it, which also checkpoints and restores them.
type RunningCount struct {
	stream.BaseOperator
	cfg     RunningCountConfig
	name    string
	out     *stream.Schema
	in      *stream.Schema
	keyCols []int
	types   []stream.Type
	maxPar  int
	backend statebackend.Backend
	count   statebackend.ValueState[int64]
	keys    rowenc.Keys
}

var (
	_ stream.Operator      = (*RunningCount)(nil)
	_ stream.Checkpointed  = (*RunningCount)(nil)
	_ stream.KeyedStateful = (*RunningCount)(nil)
)

// NewRunningCount returns a running_count operator for a JSON
// RunningCountConfig.
func NewRunningCount(config []byte) (*RunningCount, error) {
	cfg, err := parseRunningCount(config)
	if err != nil {
		return nil, err
	}
	return &RunningCount{cfg: cfg, name: TypeRunningCount}, nil
}

// UsesKeyedState says the runtime holds the counts.
func (o *RunningCount) UsesKeyedState() bool { return true }

// Open binds the operator to its keyed input and its count state.
func (o *RunningCount) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.name = instanceName(TypeRunningCount, octx)
	in, cols, err := keyedOpen(o.name, octx)
	if err != nil {
		return err
	}
	out, err := runningCountSchema(in, cols, o.cfg.As)
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if octx.OutputSchema != nil {
		if !octx.OutputSchema.Equal(out) {
			return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", o.name, octx.OutputSchema, out)
		}
		out = octx.OutputSchema
	}
	o.out, o.in, o.keyCols = out, in, cols
	o.types = make([]stream.Type, len(cols))
	for j, kc := range cols {
		o.types[j] = in.Fields[kc].Type
	}
	o.maxPar = octx.MaxParallelism
	if o.maxPar <= 0 {
		o.maxPar = stream.DefaultMaxParallelism
	}
	o.keys = rowenc.Keys{Cols: cols, MaxParallelism: o.maxPar}
	if o.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if o.count, err = statebackend.GetValueState(o.backend, countTable, statebackend.Int64Codec); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return nil
}

// ProcessBatch counts the records of b and emits one row per record.
func (o *RunningCount) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	n := b.Len()
	if n == 0 {
		b.Release()
		return nil
	}
	o.keys.Encode(b)
	owned := o.backend.KeyGroups()
	res := stream.NewBatch(o.out, n)
	counts := res.Cols[len(o.keyCols)].Ints[:0]
	for i := range n {
		key, kg := o.keys.Key(i)
		if !owned.Contains(kg) {
			res.Release()
			b.Release()
			return misrouted(o.name, kg, owned)
		}
		o.backend.SetCurrentKey(key, kg)
		c, _ := o.count.Value()
		c++
		o.count.Update(c)
		counts = append(counts, c)
	}
	for j, kc := range o.keyCols {
		copyColumn(&res.Cols[j], &b.Cols[kc], n)
	}
	res.Cols[len(o.keyCols)].Ints = counts
	if len(b.Times) == n {
		res.Times = append(res.Times[:0], b.Times...)
	}
	res.SetLen(n)
	b.Release()
	out.Collect(res)
	return nil
}

// SnapshotState records the key's field types as union state; the counts
// are snapshotted by the runtime with the rest of the keyed state.
func (o *RunningCount) SnapshotState(c *stream.SnapshotContext) error {
	c.AddUnionState(keyTypesState, []byte(o.keySignature()))
	return nil
}

// RestoreState checks that the restored counts were written for a key of the
// same field types.
func (o *RunningCount) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	want := o.keySignature()
	for _, sig := range c.State.Union[keyTypesState] {
		if string(sig) != want {
			return fmt.Errorf("%s: restoring checkpoint %d: the state was written for another key (%s); this operator's key is %s; restore it into the job that wrote it, or start without the checkpoint", o.name, c.CheckpointID, sig, want)
		}
	}
	return nil
}

// Close lets go of the backend; the runtime closes it.
func (o *RunningCount) Close() error {
	o.backend, o.count = nil, nil
	return nil
}

// keySignature names the key's field types, e.g. "(string, int64)".
func (o *RunningCount) keySignature() string {
	names := make([]string, len(o.types))
	for j, t := range o.types {
		names[j] = t.String()
	}
	return "(" + strings.Join(names, ", ") + ")"
}
