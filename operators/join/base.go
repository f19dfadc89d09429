package join

import (
	"fmt"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Keyed state. The key is the rowenc encoding of the key fields
// (rowenc.Keys), so the keys of the two inputs meet; rows are encoded as
// row describes. Both joins keep, per key, the stored rows of each input in
// arrival order:
//
//   - by default (window_join, and stream_join without ttl) in value state
//     rowsTable: one keyRows per key holding both inputs' rows (codec
//     keyRowsCodec, ID "join.keyrows(join.row(<input 0 column types>),
//     join.row(<input 1 column types>))"), so that the rows of a key in a
//     batch cost one read and one write of state;
//   - stream_join with a ttl, in list state leftTable (input 0) and
//     rightTable (input 1) with TTL, one element per row (codec rowCodec, ID
//     "join.row(<column types>)"; with TTL "list:ttl(join.row(...))"), so
//     that every row expires on its own.
//
// window_join also keeps one event-time timer per key and window (at the
// window's end-1). Both write union operator state: signatureState, the key
// and row types and the layout (a restore checks them, as running_count
// does), and window_join watermarkState, its watermark.
const (
	rowsTable      = "rows"
	leftTable      = "left"
	rightTable     = "right"
	signatureState = "signature"
	watermarkState = "watermark"
)

var sideTables = [2]string{leftTable, rightTable}

// joinBase is what both joins share: the resolved inputs, the keyed state
// and output building.
type joinBase struct {
	spec   *spec
	name   string
	r      *resolved
	in     [2]*stream.Schema
	out    *stream.Schema
	maxPar int
	nLeft  int // output columns from input 0

	backend statebackend.Backend
	keys    [2]rowenc.Keys
	codecs  [2]rowCodec
	arena   rowArena // rows of list state
	blocks  blockWriter
	// layout names the state layout in the signature: "rows" or
	// "ttl rows".
	layout string
	// dec holds stored rows of each input decoded for the pairs pending
	// output.
	dec [2]decoded
	// rows of the current batch to store, and their groups by key.
	rows  []int32
	group grouper
	idx   []int32 // decoded rows of the current key

	// pair scratch: output row k joins left row left[k] with right row
	// right[k] (of the column sets given to emit), at event time times[k]
	// (when timed) in the window starting at starts[k] (when bounds).
	left, right   []int32
	times, starts []int64
}

func (j *joinBase) open(octx *stream.OperatorContext) error {
	if octx.OperatorUID != "" {
		j.name = fmt.Sprintf("%s %q", j.spec.op, octx.OperatorUID)
	}
	if len(octx.InputSchemas) != 2 || len(octx.InputKeys) != 2 {
		return fmt.Errorf("%s: got %d inputs (%d keyed), want 2 keyed inputs", j.name, len(octx.InputSchemas), len(octx.InputKeys))
	}
	r, err := j.spec.resolve([2]*stream.Schema{octx.InputSchemas[0], octx.InputSchemas[1]}, [2][]string{octx.InputKeys[0], octx.InputKeys[1]})
	if err != nil {
		return fmt.Errorf("%s: %w", j.name, err)
	}
	j.r, j.in, j.out = r, [2]*stream.Schema{octx.InputSchemas[0], octx.InputSchemas[1]}, r.out
	if octx.OutputSchema != nil {
		if !octx.OutputSchema.Equal(r.out) {
			return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", j.name, octx.OutputSchema, r.out)
		}
		j.out = octx.OutputSchema
	}
	j.nLeft = octx.InputSchemas[0].Len()
	j.maxPar = octx.MaxParallelism
	if j.maxPar <= 0 {
		j.maxPar = stream.DefaultMaxParallelism
	}
	for s := range 2 {
		j.keys[s] = rowenc.Keys{Cols: r.keyCols[s], MaxParallelism: j.maxPar}
		j.codecs[s] = newRowCodec(j.in[s])
		j.dec[s] = newDecoded(j.in[s])
	}
	if j.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return fmt.Errorf("%s: %w", j.name, err)
	}
	return nil
}

// openRows returns the value state of the keys' rows (rowsTable).
func (j *joinBase) openRows() (statebackend.ValueState[keyRows], error) {
	j.layout = "rows"
	st, err := statebackend.GetValueState[keyRows](j.backend, rowsTable, newKeyRowsCodec(j.codecs[0], j.codecs[1]))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", j.name, err)
	}
	return st, nil
}

// openSides returns the list states of the two inputs' rows with TTL
// (leftTable, rightTable).
func (j *joinBase) openSides(ttl statebackend.TTLConfig) ([2]statebackend.ListState[row], error) {
	j.layout = "ttl rows"
	var sides [2]statebackend.ListState[row]
	for s := range 2 {
		var err error
		if sides[s], err = statebackend.GetListState[row](j.backend, sideTables[s], j.codecs[s], statebackend.WithTTL(ttl)); err != nil {
			return sides, fmt.Errorf("%s: %w", j.name, err)
		}
	}
	return sides, nil
}

// setKey makes row i of b (from input, whose keys j.keys[input] encoded)
// the backend's current key. A key outside the backend's key groups is an
// error: the record was routed to the wrong subtask.
func (j *joinBase) setKey(input, i int) error {
	key, kg := j.keys[input].Key(i)
	if owned := j.backend.KeyGroups(); !owned.Contains(kg) {
		return fmt.Errorf("%s: a record of input %d with key group %d reached this subtask, which owns %v; records were routed to the wrong subtask (are the inputs keyed by the join fields?)", j.name, input, kg, owned)
	}
	j.backend.SetCurrentKey(key, kg)
	return nil
}

// nullKey reports whether row i of b (from input) has a null key field.
func (j *joinBase) nullKey(b *stream.Batch, input, i int) bool {
	for _, c := range j.r.keyCols[input] {
		if rowenc.IsNull(&b.Cols[c], i) {
			return true
		}
	}
	return false
}

// maxPairs bounds the rows of one output batch.
const maxPairs = 4096

// pending reports whether pairs wait for emit.
func (j *joinBase) pending() bool { return len(j.left) > 0 }

// resetDecoded drops the decoded rows; only when no pairs are pending.
func (j *joinBase) resetDecoded() {
	j.dec[0].reset()
	j.dec[1].reset()
}

// emit builds one output batch from the pending pairs, reading input 0's
// columns from left and input 1's from right, with event times when timed
// and window bounds [start, start+size) when bounds, and clears the pairs.
// The decoded rows stay: pairs still to be added may refer to them.
func (j *joinBase) emit(left, right []stream.Column, timed, bounds bool, size int64, out stream.Collector) {
	n := len(j.left)
	if n == 0 {
		return
	}
	b := stream.NewBatch(j.out, n)
	for c := range left {
		rowenc.Gather(&b.Cols[c], &left[c], j.left)
	}
	for c := range right {
		rowenc.Gather(&b.Cols[j.nLeft+c], &right[c], j.right)
	}
	if bounds {
		s, e := &b.Cols[j.nLeft+len(right)], &b.Cols[j.nLeft+len(right)+1]
		for _, start := range j.starts {
			s.Ints = append(s.Ints, start)
			e.Ints = append(e.Ints, start+size)
		}
	}
	if timed {
		b.Times = append(b.Times[:0], j.times...)
	}
	b.SetLen(n)
	j.left, j.right, j.times, j.starts = j.left[:0], j.right[:0], j.times[:0], j.starts[:0]
	out.Collect(b)
}

// signature names the state layout, the key's and the inputs' field types,
// e.g. "rows: key (string) input 0 (string, int64) input 1 (string,
// float64)".
func (j *joinBase) signature() string {
	types := func(s *stream.Schema, cols []int) string {
		var names []string
		if cols == nil {
			for _, f := range s.Fields {
				names = append(names, f.Type.String())
			}
		}
		for _, c := range cols {
			names = append(names, s.Fields[c].Type.String())
		}
		return "(" + strings.Join(names, ", ") + ")"
	}
	return fmt.Sprintf("%s: key %s input 0 %s input 1 %s", j.layout, types(j.in[0], j.r.keyCols[0]), types(j.in[0], nil), types(j.in[1], nil))
}

// SnapshotState records the key and row types as union state; the rows
// are keyed state, which the runtime snapshots.
func (j *joinBase) SnapshotState(c *stream.SnapshotContext) error {
	c.AddUnionState(signatureState, []byte(j.signature()))
	return nil
}

// RestoreState checks that the restored rows were written for the same key
// and row types.
func (j *joinBase) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	want := j.signature()
	for _, sig := range c.State.Union[signatureState] {
		if string(sig) != want {
			return fmt.Errorf("%s: restoring checkpoint %d: the state was written for other types or another ttl setting (%s); this operator has %s (\"ttl rows\" is stream_join with a ttl); restore it into the job that wrote it, or start without the checkpoint", j.name, c.CheckpointID, sig, want)
		}
	}
	return nil
}

// UsesKeyedState says the task runtime holds the stored rows.
func (j *joinBase) UsesKeyedState() bool { return true }

// Close lets go of the backend; the runtime closes it.
func (j *joinBase) Close() error {
	j.backend = nil
	j.arena = rowArena{}
	return nil
}

// Finish does nothing: event-time results were emitted on the final
// watermark.
func (j *joinBase) Finish(stream.Collector) error { return nil }
