package join

import (
	"context"

	"github.com/weirstream/weir/operators/join/keyrows"
	"github.com/weirstream/weir/stream"
)

// StreamJoin is one subtask of stream_join. Every row of either input is
// stored under its key and joined with the stored rows of the other input
// with that key, oldest first; the output rows carry the later of the two
// event times when the arriving batch has event times. Watermarks are
// forwarded unchanged. State grows with the input: use it where one side is
// small or bounded (Nexmark q3 joins filtered people and auctions).
type StreamJoin struct {
	joinBase
	keys  *keyrows.Keys
	sides [2]side
}

var (
	_ stream.Operator     = (*StreamJoin)(nil)
	_ stream.Checkpointed = (*StreamJoin)(nil)
)

// NewStreamJoin returns a stream_join operator for a JSON Config.
func NewStreamJoin(config []byte) (*StreamJoin, error) {
	s, err := parse(TypeStreamJoin, config)
	if err != nil {
		return nil, err
	}
	return &StreamJoin{joinBase: joinBase{spec: s, name: TypeStreamJoin}}, nil
}

// Open binds the operator to its two keyed inputs.
func (o *StreamJoin) Open(_ context.Context, octx *stream.OperatorContext) error {
	if err := o.open(octx); err != nil {
		return err
	}
	o.keys = keyrows.NewKeys(o.keyTypes())
	o.sides = [2]side{newSide(o.in[0]), newSide(o.in[1])}
	return nil
}

// ProcessBatch joins the rows of b with the stored rows of the other input
// and stores them.
func (o *StreamJoin) ProcessBatch(input int, b *stream.Batch, out stream.Collector) error {
	defer b.Release()
	n := b.Len()
	me, other := &o.sides[input], &o.sides[1-input]
	keyCols := o.r.keyCols[input]
	timed := len(b.Times) == n && n > 0
	var mine, theirs *[]int32
	if input == 0 {
		mine, theirs = &o.left, &o.right
	} else {
		mine, theirs = &o.right, &o.left
	}
	flush := func() {
		if input == 0 {
			o.emit(b.Cols, other.rows.Cols, timed, false, 0, 0, out)
		} else {
			o.emit(other.rows.Cols, b.Cols, timed, false, 0, 0, out)
		}
	}
	for i := range n {
		if o.nullKey(b, input, i) {
			continue
		}
		id := o.keys.ID(b, keyCols, i)
		for r := other.first(id); r >= 0; r = other.next[r] {
			*mine = append(*mine, int32(i))
			*theirs = append(*theirs, r)
			if timed {
				o.times = append(o.times, max(b.Times[i], other.rows.Times[r]))
			}
			if len(o.left) == maxPairs {
				flush()
			}
		}
		me.add(b, i, id)
	}
	flush()
	return nil
}

// ProcessWatermark forwards wm.
func (o *StreamJoin) ProcessWatermark(wm int64, out stream.Collector) error {
	out.EmitWatermark(wm)
	return nil
}

// Rows returns the number of rows stored from each input.
func (o *StreamJoin) Rows() (left, right int) {
	return o.sides[0].rows.Len(), o.sides[1].rows.Len()
}
