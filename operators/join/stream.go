package join

import (
	"context"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// StreamJoin is one subtask of stream_join. Every row of either input is
// stored under its key and joined with the stored rows of the other input
// with that key, oldest first; the output rows carry the later of the two
// event times when the arriving batch has event times. Watermarks are
// forwarded unchanged. Without a ttl, state grows with the input: use it
// where one side is small or bounded (Nexmark q3 joins filtered people and
// auctions), or set ttl (Config.TTL).
//
// The rows are keyed state (see base.go) in the backend the task runtime
// opened for the operator, which also checkpoints and restores them.
type StreamJoin struct {
	joinBase
	state   statebackend.ValueState[keyRows] // without ttl
	sides   [2]statebackend.ListState[row]   // with ttl
	ttlRows []row
	// clock is the processing time of TTL in Unix ms; nil is the system
	// clock. Tests set it before Open.
	clock func() int64
}

var (
	_ stream.Operator      = (*StreamJoin)(nil)
	_ stream.Checkpointed  = (*StreamJoin)(nil)
	_ stream.KeyedStateful = (*StreamJoin)(nil)
)

// NewStreamJoin returns a stream_join operator for a JSON Config.
func NewStreamJoin(config []byte) (*StreamJoin, error) {
	s, err := parse(TypeStreamJoin, config)
	if err != nil {
		return nil, err
	}
	return &StreamJoin{joinBase: joinBase{spec: s, name: TypeStreamJoin}}, nil
}

// Open binds the operator to its two keyed inputs and its state.
func (o *StreamJoin) Open(_ context.Context, octx *stream.OperatorContext) error {
	if err := o.open(octx); err != nil {
		return err
	}
	var err error
	if o.spec.ttl == 0 {
		o.state, err = o.openRows()
		return err
	}
	cfg := statebackend.DefaultTTLConfig(time.Duration(o.spec.ttl) * time.Millisecond)
	cfg.Clock = o.clock
	o.sides, err = o.openSides(cfg)
	return err
}

// ProcessBatch joins the rows of b with the stored rows of the other input
// and stores them.
func (o *StreamJoin) ProcessBatch(input int, b *stream.Batch, out stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	o.keys[input].Encode(b)
	dec := &o.dec[1-input]
	timed := len(b.Times) == n
	mine, theirs := &o.left, &o.right
	if input == 1 {
		mine, theirs = &o.right, &o.left
	}
	flush := func() {
		if input == 0 {
			o.emit(b.Cols, dec.cols, timed, false, 0, out)
		} else {
			o.emit(dec.cols, b.Cols, timed, false, 0, out)
		}
	}
	o.rows = o.rows[:0]
	for i := range n {
		if !o.nullKey(b, input, i) {
			o.rows = append(o.rows, int32(i))
		}
	}
	g := &o.group
	g.group(&o.keys[input], o.rows, n)
	for k := range g.groups() {
		first := g.first[k]
		if err := o.setKey(input, int(first)); err != nil {
			return err
		}
		// The other input's rows, decoded once for all the key's rows.
		if !o.pending() {
			o.resetDecoded()
		}
		o.idx = o.idx[:0]
		var v keyRows
		if o.state == nil {
			for _, r := range o.sides[1-input].Get() {
				o.idx = append(o.idx, dec.add(r))
			}
		} else {
			v, _ = o.state.Value()
			for p := v.sides[1-input]; len(p) > 0; {
				var r row
				r, p = nextRow(p)
				o.idx = append(o.idx, dec.add(r))
			}
		}
		for i := first; i >= 0; i = g.next[i] {
			for _, d := range o.idx {
				*mine = append(*mine, i)
				*theirs = append(*theirs, d)
				if timed {
					o.times = append(o.times, max(b.Times[i], dec.time(d)))
				}
				if len(o.left) == maxPairs {
					flush()
				}
			}
		}
		if o.state == nil {
			o.ttlRows = o.ttlRows[:0]
			for i := first; i >= 0; i = g.next[i] {
				o.ttlRows = append(o.ttlRows, o.arena.encode(b, int(i)))
			}
			o.sides[input].AddAll(o.ttlRows)
			clear(o.ttlRows)
			continue
		}
		for i := first; i >= 0; i = g.next[i] {
			v.sides[input] = o.blocks.add(v.sides[input], b, int(i))
		}
		o.state.Update(v)
	}
	flush()
	o.resetDecoded()
	return nil
}

// ProcessWatermark forwards wm.
func (o *StreamJoin) ProcessWatermark(wm int64, out stream.Collector) error {
	out.EmitWatermark(wm)
	return nil
}

// Close lets go of the state; the runtime closes the backend.
func (o *StreamJoin) Close() error {
	o.state, o.sides = nil, [2]statebackend.ListState[row]{}
	return o.joinBase.Close()
}
