package keyed

import (
	"context"
	"fmt"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// copyColumn sets dst (empty, same type) to the first n values of src.
// Strings are shared, not copied: they are immutable.
func copyColumn(dst, src *stream.Column, n int) {
	switch src.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		dst.Ints = append(dst.Ints[:0], src.Ints[:n]...)
	case stream.TypeFloat64:
		dst.Floats = append(dst.Floats[:0], src.Floats[:n]...)
	case stream.TypeString:
		dst.Strs = append(dst.Strs[:0], src.Strs[:n]...)
	case stream.TypeBool:
		dst.Bools = append(dst.Bools[:0], src.Bools[:n]...)
	}
	dst.Nulls = nil
	if src.Nulls != nil {
		words := min(len(src.Nulls), (n+63)>>6)
		dst.Nulls = make([]uint64, (n+63)>>6)
		copy(dst.Nulls, src.Nulls[:words])
		if r := n & 63; r != 0 && words == len(dst.Nulls) {
			dst.Nulls[words-1] &= 1<<uint(r) - 1
		}
	}
}

// SequenceCheck is one subtask of sequence_check: it passes records through
// and fails the task unless each key's sequence field arrives as 1, 2, 3,
// ... (the last value per key is checkpointed per key group).
type SequenceCheck struct {
	stream.BaseOperator
	cfg  SequenceCheckConfig
	name string
	col  int
	keys *keyState
}

var (
	_ stream.Operator     = (*SequenceCheck)(nil)
	_ stream.Checkpointed = (*SequenceCheck)(nil)
)

// NewSequenceCheck returns a sequence_check operator for a JSON
// SequenceCheckConfig.
func NewSequenceCheck(config []byte) (*SequenceCheck, error) {
	cfg, err := parseSequenceCheck(config)
	if err != nil {
		return nil, err
	}
	return &SequenceCheck{cfg: cfg, name: TypeSequenceCheck}, nil
}

// Open binds the operator to its keyed input.
func (o *SequenceCheck) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.name = instanceName(TypeSequenceCheck, octx)
	in, cols, err := keyedOpen(o.name, octx)
	if err != nil {
		return err
	}
	if o.col, err = seqColumn(in, o.cfg.Field); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.keys = newKeyState(in, cols, octx.MaxParallelism)
	return nil
}

// ProcessBatch checks the sequence of every record and forwards b.
func (o *SequenceCheck) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	n := b.Len()
	if n == 0 {
		b.Release()
		return nil
	}
	ids := o.keys.lookup(b)
	c := &b.Cols[o.col]
	vals := o.keys.vals
	for i, v := range c.Ints[:n] {
		id := ids[i]
		if want := vals[id] + 1; v != want || c.Nulls != nil && rowenc.IsNull(c, i) {
			err := o.mismatch(b, i, want)
			b.Release()
			return err
		}
		vals[id] = v
	}
	out.Collect(b)
	return nil
}

func (o *SequenceCheck) mismatch(b *stream.Batch, i int, want int64) error {
	key := o.keys.describe(b, i)
	c := &b.Cols[o.col]
	if rowenc.IsNull(c, i) {
		return fmt.Errorf("%s: key (%s): expected %s %d, got null", o.name, key, o.cfg.Field, want)
	}
	got := c.Ints[i]
	what := "a repeat: records were duplicated"
	if got > want {
		what = fmt.Sprintf("a gap: %d records were lost", got-want)
	}
	return fmt.Errorf("%s: key (%s): expected %s %d, got %d (%s)", o.name, key, o.cfg.Field, want, got, what)
}

// SnapshotState writes the last value per key, per key group.
func (o *SequenceCheck) SnapshotState(c *stream.SnapshotContext) error {
	return o.keys.snapshot(c, o.name)
}

// RestoreState loads the last values of this subtask's key groups.
func (o *SequenceCheck) RestoreState(c *stream.RestoreContext) error {
	return o.keys.restore(c, o.name)
}
