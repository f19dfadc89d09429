package topn

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/weirstream/weir/operators/join/keyrows"
	"github.com/weirstream/weir/stream"
)

// TopN is one subtask of window_topn or window_max. It is not safe for
// concurrent use, except LateRecordsDropped.
type TopN struct {
	spec   *spec
	name   string
	r      *resolved
	in     *stream.Schema
	out    *stream.Schema
	maxPar int

	keys   *keyrows.Keys // nil without keyBy: every row has key 0
	panes  map[int64]*pane
	starts []int64 // pane starts with data, ascending
	wm     int64
	seq    int64 // arrival counter, for ordering equal values

	// cache of the last list touched
	lastPane *pane
	lastKey  int32
	lastList *list

	cand []cand // firing scratch
	late atomic.Int64
}

// pane holds the rows of one slide-long interval [start, start+slide).
type pane struct {
	start int64
	rows  *keyrows.Rows
	sk    []int64 // sort key of each row (larger is better)
	seq   []int64 // arrival number of each row
	lists map[int32]*list
	order []int32 // key ids in order of first row in this pane
}

// list is the best rows of one key in one pane, best first.
type list struct{ rows []int32 }

type cand struct {
	p   *pane
	row int32
}

var (
	_ stream.Operator     = (*TopN)(nil)
	_ stream.Checkpointed = (*TopN)(nil)
)

// New returns a window_topn (op TypeTopN) or window_max (TypeMax) operator
// for a JSON Config.
func New(op string, config []byte) (*TopN, error) {
	s, err := parse(op, config)
	if err != nil {
		return nil, err
	}
	return &TopN{spec: s, name: op, panes: make(map[int64]*pane), wm: stream.MinWatermark}, nil
}

// LateRecordsDropped returns how many rows arrived after all their windows
// had fired. It may be called from any goroutine.
func (o *TopN) LateRecordsDropped() int64 { return o.late.Load() }

// Open binds the operator to its input.
func (o *TopN) Open(_ context.Context, octx *stream.OperatorContext) error {
	if octx.OperatorUID != "" {
		o.name = fmt.Sprintf("%s %q", o.spec.op, octx.OperatorUID)
	}
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("%s: got %d inputs, want 1", o.name, len(octx.InputSchemas))
	}
	var keys []string
	if len(octx.InputKeys) > 0 {
		keys = octx.InputKeys[0]
	}
	r, err := o.spec.resolve(octx.InputSchemas[0], keys)
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.r, o.in, o.out = r, octx.InputSchemas[0], r.out
	if octx.OutputSchema != nil {
		if !octx.OutputSchema.Equal(r.out) {
			return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", o.name, octx.OutputSchema, r.out)
		}
		o.out = octx.OutputSchema
	}
	o.maxPar = octx.MaxParallelism
	if o.maxPar <= 0 {
		o.maxPar = stream.DefaultMaxParallelism
	}
	if len(r.keyCols) > 0 {
		o.keys = keyrows.NewKeys(o.keyTypes())
	}
	return nil
}

func (o *TopN) keyTypes() []stream.Type {
	t := make([]stream.Type, len(o.r.keyCols))
	for i, c := range o.r.keyCols {
		t[i] = o.in.Fields[c].Type
	}
	return t
}

// sortKey maps row i of c to an int64 whose order is the ranking order.
func (o *TopN) sortKey(c *stream.Column, i int) int64 {
	var k int64
	if c.Type == stream.TypeFloat64 {
		b := math.Float64bits(c.Floats[i])
		if b>>63 != 0 {
			b = ^b
		} else {
			b |= 1 << 63
		}
		k = int64(b ^ 1<<63)
	} else {
		k = c.Ints[i]
	}
	if o.spec.asc {
		k = ^k
	}
	return k
}

func (o *TopN) paneStart(ts int64) int64 {
	r := (ts - o.spec.offset) % o.spec.slide
	if r < 0 {
		r += o.spec.slide
	}
	return ts - r
}

func (o *TopN) pane(start int64) *pane {
	p, ok := o.panes[start]
	if !ok {
		p = &pane{start: start, rows: keyrows.NewRows(o.in), lists: make(map[int32]*list)}
		o.panes[start] = p
		i, _ := slices.BinarySearch(o.starts, start)
		o.starts = slices.Insert(o.starts, i, start)
	}
	return p
}

func (p *pane) list(id int32) *list {
	l, ok := p.lists[id]
	if !ok {
		l = &list{}
		p.lists[id] = l
		p.order = append(p.order, id)
	}
	return l
}

// ProcessBatch offers each row to its key's top n in its pane.
func (o *TopN) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	if len(b.Times) != n {
		return fmt.Errorf("%s: a batch of %d rows has no event timestamps (Batch.Times is empty); add a watermarks operator upstream", o.name, n)
	}
	col := &b.Cols[o.r.col]
	var cur *pane
	lo, hi := int64(1), int64(0)
	var late int64
	for i, ts := range b.Times[:n] {
		if ts < lo || ts >= hi {
			lo = o.paneStart(ts)
			hi = lo + o.spec.slide
			cur = nil
			if lo+o.spec.size-1 > o.wm { // some window of the pane is open
				cur = o.pane(lo)
			}
		}
		if cur == nil {
			late++
			continue
		}
		if keyrows.IsNull(col, i) {
			continue
		}
		var id int32
		if o.keys != nil {
			id = o.keys.ID(b, o.r.keyCols, i)
		}
		l := o.lastList
		if cur != o.lastPane || id != o.lastKey || l == nil {
			l = cur.list(id)
			o.lastPane, o.lastKey, o.lastList = cur, id, l
		}
		o.offer(cur, l, b, i, o.sortKey(col, i))
	}
	if late > 0 {
		o.late.Add(late)
	}
	return nil
}

// offer adds row i of b with sort key sk to l if it ranks in the top n.
func (o *TopN) offer(p *pane, l *list, b *stream.Batch, i int, sk int64) {
	nTop, rows := o.spec.n, l.rows
	if len(rows) >= nTop {
		worst := p.sk[rows[len(rows)-1]]
		if sk < worst || sk == worst && !o.spec.ties {
			return
		}
	}
	r := p.rows.Append(b, i)
	p.sk = append(p.sk, sk)
	p.seq = append(p.seq, o.seq)
	o.seq++
	// Insert after every row ranking at least as high (all arrived earlier).
	pos := len(rows)
	for pos > 0 && p.sk[rows[pos-1]] < sk {
		pos--
	}
	rows = slices.Insert(rows, pos, r)
	l.rows = trim(rows, nTop, o.spec.ties, func(r int32) int64 { return p.sk[r] })
}

// trim cuts a best-first list to the top n (with ties: every row equal to
// the n-th).
func trim[T any](rows []T, n int, ties bool, sk func(T) int64) []T {
	if len(rows) <= n {
		return rows
	}
	if !ties {
		return rows[:n]
	}
	thr, cut := sk(rows[n-1]), n
	for cut < len(rows) && sk(rows[cut]) == thr {
		cut++
	}
	return rows[:cut]
}

// ProcessWatermark fires the windows whose end-1 wm reached, drops the panes
// no open window needs, and forwards wm.
func (o *TopN) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm <= o.wm {
		return nil
	}
	o.advance(wm, out)
	out.EmitWatermark(wm)
	return nil
}

// Finish does nothing: the final watermark fired every window.
func (o *TopN) Finish(stream.Collector) error { return nil }

// Close does nothing.
func (o *TopN) Close() error { return nil }

func (o *TopN) advance(wm int64, out stream.Collector) {
	size, slide, prev := o.spec.size, o.spec.slide, o.wm
	o.wm = wm
	if len(o.starts) > 0 {
		e := o.starts[0] + slide
		if prev != stream.MinWatermark {
			e = max(e, o.paneStart(prev+1)+slide)
		}
		k := 0 // first pane that may be in the window ending at e
		for e-1 <= wm && e <= o.starts[len(o.starts)-1]+size {
			for k < len(o.starts) && o.starts[k] < e-size {
				k++
			}
			if k == len(o.starts) {
				break
			}
			if o.starts[k] >= e {
				e = o.starts[k] + slide // jump over windows without data
				continue
			}
			o.fire(e, k, out)
			e += slide
		}
	}
	// Drop the panes whose last window has fired.
	k := 0
	for ; k < len(o.starts) && o.starts[k]+size-1 <= wm; k++ {
		delete(o.panes, o.starts[k])
	}
	if k > 0 {
		o.starts = append(o.starts[:0], o.starts[k:]...)
		o.lastPane, o.lastList = nil, nil
		o.compactKeys()
	}
}

// fire emits the window ending at end, whose first pane is starts[k].
func (o *TopN) fire(end int64, k int, out stream.Collector) {
	start := end - o.spec.size
	var panes []*pane
	for ; k < len(o.starts) && o.starts[k] < end; k++ {
		panes = append(panes, o.panes[o.starts[k]])
	}
	var ids []int32
	if len(panes) == 1 {
		ids = panes[0].order
	} else {
		seen := make(map[int32]bool)
		for _, p := range panes {
			for _, id := range p.order {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
		slices.Sort(ids)
	}
	b := stream.NewBatch(o.out, 0)
	nIn := o.in.Len()
	for _, id := range ids {
		c := o.cand[:0]
		for _, p := range panes {
			if l, ok := p.lists[id]; ok {
				for _, r := range l.rows {
					c = append(c, cand{p, r})
				}
			}
		}
		if len(panes) > 1 {
			slices.SortFunc(c, func(x, y cand) int {
				a, b := x.p.sk[x.row], y.p.sk[y.row]
				switch {
				case a != b:
					if a > b {
						return -1
					}
					return 1
				case x.p.seq[x.row] < y.p.seq[y.row]:
					return -1
				case x.p.seq[x.row] > y.p.seq[y.row]:
					return 1
				}
				return 0
			})
			c = trim(c, o.spec.n, o.spec.ties, func(x cand) int64 { return x.p.sk[x.row] })
		}
		rank := int64(0)
		for j, x := range c {
			if j == 0 || x.p.sk[x.row] != c[j-1].p.sk[c[j-1].row] {
				rank = int64(j + 1)
			}
			rows := b.Len()
			keyrows.CopyRow(b.Cols[:nIn], rows, x.p.rows.Cols, int(x.row))
			extra := nIn
			if o.spec.bounds {
				b.Cols[extra].Ints = append(b.Cols[extra].Ints, start)
				b.Cols[extra+1].Ints = append(b.Cols[extra+1].Ints, end)
				extra += 2
			}
			if o.spec.rankAs != "" {
				b.Cols[extra].Ints = append(b.Cols[extra].Ints, rank)
			}
			b.Times = append(b.Times, end-1)
			b.SetLen(rows + 1)
		}
		o.cand = c[:0]
	}
	if b.Len() == 0 {
		b.Release()
		return
	}
	out.Collect(b)
}

// compactKeys forgets the keys no pane uses once they are most of the
// table, renumbering the rest.
func (o *TopN) compactKeys() {
	if o.keys == nil || o.keys.Len() < 4096 {
		return
	}
	live := 0
	for _, p := range o.panes {
		live += len(p.order)
	}
	if o.keys.Len() < 4*live {
		return
	}
	nk := keyrows.NewKeys(o.keyTypes())
	for _, s := range o.starts {
		p := o.panes[s]
		lists := make(map[int32]*list, len(p.lists))
		for i, id := range p.order {
			nid := nk.CopyKey(o.keys, id)
			lists[nid] = p.lists[id]
			p.order[i] = nid
		}
		p.lists = lists
	}
	o.keys = nk
	o.lastPane, o.lastList = nil, nil
}
