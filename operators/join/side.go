package join

import (
	"fmt"

	"github.com/weirstream/weir/operators/join/keyrows"
	"github.com/weirstream/weir/stream"
)

// side holds the stored rows of one input, chained per key in arrival
// order: head and tail by key id, next by row id (-1 ends a chain).
type side struct {
	rows       *keyrows.Rows
	head, tail []int32
	next       []int32
}

func newSide(s *stream.Schema) side { return side{rows: keyrows.NewRows(s)} }

// add stores row i of b under key id.
func (s *side) add(b *stream.Batch, i int, id int32) {
	s.link(s.rows.Append(b, i), id)
}

// link chains stored row r under key id.
func (s *side) link(r, id int32) {
	for int(id) >= len(s.head) {
		s.head = append(s.head, -1)
		s.tail = append(s.tail, -1)
	}
	s.next = append(s.next, -1)
	if t := s.tail[id]; t >= 0 {
		s.next[t] = r
	} else {
		s.head[id] = r
	}
	s.tail[id] = r
}

// first returns the oldest row of key id, or -1.
func (s *side) first(id int32) int32 {
	if int(id) >= len(s.head) {
		return -1
	}
	return s.head[id]
}

// count returns the number of rows of key id.
func (s *side) count(id int32) int {
	n := 0
	for r := s.first(id); r >= 0; r = s.next[r] {
		n++
	}
	return n
}

// joinBase is what both joins share: the resolved inputs and output
// building.
type joinBase struct {
	spec   *spec
	name   string
	r      *resolved
	in     [2]*stream.Schema
	out    *stream.Schema
	maxPar int
	nLeft  int // output columns from input 0

	// pair scratch: output row k joins left row left[k] of leftSrc with
	// right row right[k] of rightSrc.
	left, right []int32
	times       []int64
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
	return nil
}

func (j *joinBase) keyTypes() []stream.Type {
	t := make([]stream.Type, len(j.r.keyCols[0]))
	for i, c := range j.r.keyCols[0] {
		t[i] = j.in[0].Fields[c].Type
	}
	return t
}

// nullKey reports whether row i of b (from input) has a null key field.
func (j *joinBase) nullKey(b *stream.Batch, input, i int) bool {
	for _, c := range j.r.keyCols[input] {
		if keyrows.IsNull(&b.Cols[c], i) {
			return true
		}
	}
	return false
}

// maxPairs bounds the rows of one output batch.
const maxPairs = 4096

// emit builds one output batch from the pairs in j.left/j.right (and
// j.times when timed), reading input 0's columns from left and input 1's
// from right, appending window bounds when bounds is set, and resets the
// scratch.
func (j *joinBase) emit(left, right []stream.Column, timed bool, bounds bool, start, end int64, out stream.Collector) {
	n := len(j.left)
	if n == 0 {
		return
	}
	b := stream.NewBatch(j.out, n)
	for c := range left {
		keyrows.Gather(&b.Cols[c], &left[c], j.left)
	}
	for c := range right {
		keyrows.Gather(&b.Cols[j.nLeft+c], &right[c], j.right)
	}
	if bounds {
		s, e := &b.Cols[j.nLeft+len(right)], &b.Cols[j.nLeft+len(right)+1]
		for range n {
			s.Ints = append(s.Ints, start)
			e.Ints = append(e.Ints, end)
		}
	}
	if timed {
		b.Times = append(b.Times[:0], j.times...)
	}
	b.SetLen(n)
	j.left, j.right, j.times = j.left[:0], j.right[:0], j.times[:0]
	out.Collect(b)
}

// Close does nothing; the state is garbage collected.
func (j *joinBase) Close() error { return nil }

// Finish does nothing: event-time results were emitted on the final
// watermark.
func (j *joinBase) Finish(stream.Collector) error { return nil }
