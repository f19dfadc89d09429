package keyed

import (
	"context"
	"fmt"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
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

// lastTable is sequence_check's state table: the last sequence value per
// key.
const lastTable = "last"

// SequenceCheck is one subtask of sequence_check: it passes records through
// and fails the task unless each key's sequence field arrives as 1, 2, 3,
// ... . The last value per key is keyed state (ValueState[int64]).
type SequenceCheck struct {
	stream.BaseOperator
	cfg     SequenceCheckConfig
	name    string
	in      *stream.Schema
	keyCols []int
	col     int
	backend statebackend.Backend
	last    statebackend.ValueState[int64]
	keys    rowenc.Keys
}

var (
	_ stream.Operator      = (*SequenceCheck)(nil)
	_ stream.KeyedStateful = (*SequenceCheck)(nil)
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

// UsesKeyedState says the runtime holds the last values.
func (o *SequenceCheck) UsesKeyedState() bool { return true }

// Open binds the operator to its keyed input and its state.
func (o *SequenceCheck) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.name = instanceName(TypeSequenceCheck, octx)
	in, cols, err := keyedOpen(o.name, octx)
	if err != nil {
		return err
	}
	if o.col, err = seqColumn(in, o.cfg.Field); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.in, o.keyCols = in, cols
	o.keys = rowenc.Keys{Cols: cols, MaxParallelism: octx.MaxParallelism}
	if o.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if o.last, err = statebackend.GetValueState(o.backend, lastTable, statebackend.Int64Codec); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return nil
}

// ProcessBatch checks the sequence of every record and forwards b.
func (o *SequenceCheck) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	n := b.Len()
	if n == 0 {
		b.Release()
		return nil
	}
	o.keys.Encode(b)
	owned := o.backend.KeyGroups()
	c := &b.Cols[o.col]
	for i, v := range c.Ints[:n] {
		key, kg := o.keys.Key(i)
		if !owned.Contains(kg) {
			b.Release()
			return misrouted(o.name, kg, owned)
		}
		o.backend.SetCurrentKey(key, kg)
		last, _ := o.last.Value()
		if want := last + 1; v != want || c.Nulls != nil && rowenc.IsNull(c, i) {
			err := o.mismatch(b, i, want)
			b.Release()
			return err
		}
		o.last.Update(v)
	}
	out.Collect(b)
	return nil
}

func (o *SequenceCheck) mismatch(b *stream.Batch, i int, want int64) error {
	key := describeKey(o.in, o.keyCols, b, i)
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

// Close lets go of the backend; the runtime closes it.
func (o *SequenceCheck) Close() error {
	o.backend, o.last = nil, nil
	return nil
}

// describeKey returns row i's key as "name=value, ..." for error messages.
func describeKey(in *stream.Schema, keyCols []int, b *stream.Batch, i int) string {
	var sb strings.Builder
	for j, kc := range keyCols {
		if j > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s=%v", in.Fields[kc].Name, b.Cols[kc].Value(i))
	}
	return sb.String()
}

// misrouted is the error for a record of key group kg reaching a subtask
// that owns another range.
func misrouted(name string, kg int, owned stream.KeyGroupRange) error {
	return fmt.Errorf("%s: a record of key group %d reached this subtask, which owns %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", name, kg, owned)
}
