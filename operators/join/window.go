package join

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/weirstream/weir/operators/join/keyrows"
	"github.com/weirstream/weir/stream"
)

// WindowJoin is one subtask of window_join. Rows are assigned to the
// tumbling window [start, start+size) of their event time (Batch.Times, set
// by a watermarks operator upstream) and stored per window and key. When the
// watermark reaches a window's end-1 the window's pairs are emitted — per
// key in order of the key's first row, each left row (in arrival order) with
// each right row (in arrival order) — with event time end-1, and its rows
// are dropped. A row whose window has already fired is late: it is dropped
// and counted (LateRecordsDropped).
type WindowJoin struct {
	joinBase
	panes  map[int64]*pane
	starts []int64 // window starts with a pane, ascending
	wm     int64
	late   atomic.Int64
}

// pane is the state of one window.
type pane struct {
	start int64
	keys  *keyrows.Keys
	sides [2]side
}

var (
	_ stream.Operator     = (*WindowJoin)(nil)
	_ stream.Checkpointed = (*WindowJoin)(nil)
)

// NewWindowJoin returns a window_join operator for a JSON Config.
func NewWindowJoin(config []byte) (*WindowJoin, error) {
	s, err := parse(TypeWindowJoin, config)
	if err != nil {
		return nil, err
	}
	return &WindowJoin{joinBase: joinBase{spec: s, name: TypeWindowJoin}, panes: make(map[int64]*pane), wm: stream.MinWatermark}, nil
}

// Open binds the operator to its two keyed inputs.
func (o *WindowJoin) Open(_ context.Context, octx *stream.OperatorContext) error {
	return o.open(octx)
}

// LateRecordsDropped returns how many rows arrived after their window had
// fired. It may be called from any goroutine.
func (o *WindowJoin) LateRecordsDropped() int64 { return o.late.Load() }

func (o *WindowJoin) pane(start int64) *pane {
	p, ok := o.panes[start]
	if !ok {
		p = &pane{start: start, keys: keyrows.NewKeys(o.keyTypes()), sides: [2]side{newSide(o.in[0]), newSide(o.in[1])}}
		o.panes[start] = p
		i, _ := slices.BinarySearch(o.starts, start)
		o.starts = slices.Insert(o.starts, i, start)
	}
	return p
}

func (o *WindowJoin) windowStart(ts int64) int64 {
	r := (ts - o.spec.offset) % o.spec.size
	if r < 0 {
		r += o.spec.size
	}
	return ts - r
}

// ProcessBatch stores the rows of b in their windows.
func (o *WindowJoin) ProcessBatch(input int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	if len(b.Times) != n {
		return fmt.Errorf("%s: a batch of %d rows on input %d has no event timestamps (Batch.Times is empty); add a watermarks operator upstream of that input", o.name, n, input)
	}
	keyCols := o.r.keyCols[input]
	var cur *pane
	lo, hi := int64(1), int64(0)
	var late int64
	for i, ts := range b.Times[:n] {
		if ts < lo || ts >= hi {
			lo = o.windowStart(ts)
			hi = lo + o.spec.size
			cur = nil
			if hi-1 > o.wm {
				cur = o.pane(lo)
			}
		}
		if cur == nil {
			late++
			continue
		}
		if o.nullKey(b, input, i) {
			continue
		}
		cur.sides[input].add(b, i, cur.keys.ID(b, keyCols, i))
	}
	if late > 0 {
		o.late.Add(late)
	}
	return nil
}

// ProcessWatermark emits and drops every window whose end-1 wm reached,
// then forwards wm.
func (o *WindowJoin) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm <= o.wm {
		return nil
	}
	o.wm = wm
	k := 0
	for ; k < len(o.starts) && o.starts[k]+o.spec.size-1 <= wm; k++ {
		p := o.panes[o.starts[k]]
		o.fire(p, out)
		delete(o.panes, p.start)
	}
	o.starts = append(o.starts[:0], o.starts[k:]...)
	out.EmitWatermark(wm)
	return nil
}

// fire emits the pairs of window p.
func (o *WindowJoin) fire(p *pane, out stream.Collector) {
	l, r := &p.sides[0], &p.sides[1]
	start, end := p.start, p.start+o.spec.size
	for id := range int32(p.keys.Len()) {
		for a := l.first(id); a >= 0; a = l.next[a] {
			for c := r.first(id); c >= 0; c = r.next[c] {
				o.left = append(o.left, a)
				o.right = append(o.right, c)
				o.times = append(o.times, end-1)
				if len(o.left) == maxPairs {
					o.emit(l.rows.Cols, r.rows.Cols, true, o.spec.bounds, start, end, out)
				}
			}
		}
	}
	o.emit(l.rows.Cols, r.rows.Cols, true, o.spec.bounds, start, end, out)
}

// Windows returns the number of windows holding rows.
func (o *WindowJoin) Windows() int { return len(o.panes) }
