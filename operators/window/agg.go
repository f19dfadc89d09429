package window

import (
	"math"
	"math/bits"

	"github.com/weirstream/weir/stream"
)

// aggKind is an aggregate function specialised to its input type. The order
// matters: resolveAgg maps sum to avg and min to max by adding a distance.
type aggKind uint8

const (
	aggCount      aggKind = iota // count(*): the slot's row count
	aggCountField                // count(field): non-null values
	aggSumInt
	aggSumFloat
	aggAvgInt
	aggAvgFloat
	aggMinInt // int64 and timestamp
	aggMinFloat
	aggMaxInt
	aggMaxFloat
)

// aggSpec is one resolved aggregate.
type aggSpec struct {
	kind    aggKind
	col     int // input column; -1 for count(*)
	name    string
	outType stream.Type
}

// layout places a slot's accumulators in its int64 words (the
// statebackend.Slots record of one key and pane): word 0 counts the records
// that reached the slot; then each aggregate has the words its kind uses, at
// off[j]: count(field) one (non-null values); sum one (the integer sum, or a
// float sum as IEEE 754 bits); avg, min and max two (the sum, minimum or
// maximum, then the non-null count). The layout is part of the checkpoint:
// the window's signature names the aggregate kinds, and the slot width is
// in the state's codec.
type layout struct {
	aggs  []aggSpec
	off   []int
	width int
	init  []int64 // the words of an empty slot
}

func newLayout(aggs []aggSpec) *layout {
	l := &layout{aggs: aggs, off: make([]int, len(aggs)), width: 1}
	for j, a := range aggs {
		l.off[j] = l.width
		switch a.kind {
		case aggCount:
		case aggCountField, aggSumInt, aggSumFloat:
			l.width++
		default:
			l.width += 2
		}
	}
	l.init = make([]int64, l.width)
	for j, a := range aggs {
		switch a.kind {
		case aggMinInt:
			l.init[l.off[j]] = math.MaxInt64
		case aggMaxInt:
			l.init[l.off[j]] = math.MinInt64
		case aggMinFloat:
			l.init[l.off[j]] = int64(math.Float64bits(math.Inf(1)))
		case aggMaxFloat:
			l.init[l.off[j]] = int64(math.Float64bits(math.Inf(-1)))
		}
	}
	return l
}

// update adds the rows of b to their slots, one column at a time. ws[i] is
// the words of row i's slot, or nil for a row that is dropped. mask is
// scratch of at least b.Len() entries.
func (l *layout) update(b *stream.Batch, ws [][]int64, mask [][]int64) {
	for _, w := range ws {
		if w != nil {
			w[0]++
		}
	}
	for j := range l.aggs {
		sp := &l.aggs[j]
		if sp.kind == aggCount {
			continue
		}
		col := &b.Cols[sp.col]
		sl := ws
		if col.Nulls != nil {
			// Fold the nulls into a copy so that the loops below only
			// test for a nil slot.
			sl = mask[:len(ws)]
			copy(sl, ws)
			for w, word := range col.Nulls {
				for word != 0 {
					i := w<<6 + bits.TrailingZeros64(word)
					word &= word - 1
					if i < len(sl) {
						sl[i] = nil
					}
				}
			}
		}
		updateCol(sp.kind, l.off[j], col, sl)
	}
}

func updateCol(kind aggKind, o int, col *stream.Column, ws [][]int64) {
	switch kind {
	case aggCountField:
		for _, w := range ws {
			if w != nil {
				w[o]++
			}
		}
	case aggSumInt:
		v := col.Ints[:len(ws)]
		for i, w := range ws {
			if w != nil {
				w[o] += v[i]
			}
		}
	case aggSumFloat:
		v := col.Floats[:len(ws)]
		for i, w := range ws {
			if w != nil {
				w[o] = int64(math.Float64bits(math.Float64frombits(uint64(w[o])) + v[i]))
			}
		}
	case aggAvgInt:
		v := col.Ints[:len(ws)]
		for i, w := range ws {
			if w != nil {
				w[o] += v[i]
				w[o+1]++
			}
		}
	case aggAvgFloat:
		v := col.Floats[:len(ws)]
		for i, w := range ws {
			if w != nil {
				w[o] = int64(math.Float64bits(math.Float64frombits(uint64(w[o])) + v[i]))
				w[o+1]++
			}
		}
	case aggMinInt:
		v := col.Ints[:len(ws)]
		for i, w := range ws {
			if w != nil {
				w[o] = min(w[o], v[i])
				w[o+1]++
			}
		}
	case aggMaxInt:
		v := col.Ints[:len(ws)]
		for i, w := range ws {
			if w != nil {
				w[o] = max(w[o], v[i])
				w[o+1]++
			}
		}
	case aggMinFloat:
		v := col.Floats[:len(ws)]
		for i, w := range ws {
			if w != nil {
				if x := v[i]; x < math.Float64frombits(uint64(w[o])) {
					w[o] = int64(math.Float64bits(x))
				}
				w[o+1]++
			}
		}
	case aggMaxFloat:
		v := col.Floats[:len(ws)]
		for i, w := range ws {
			if w != nil {
				if x := v[i]; x > math.Float64frombits(uint64(w[o])) {
					w[o] = int64(math.Float64bits(x))
				}
				w[o+1]++
			}
		}
	}
}

func f64(w int64) float64 { return math.Float64frombits(uint64(w)) }
func w64(f float64) int64 { return int64(math.Float64bits(f)) }

// merge adds the accumulators of src into d.
func (l *layout) merge(d, src []int64) {
	d[0] += src[0]
	for j := range l.aggs {
		o := l.off[j]
		switch l.aggs[j].kind {
		case aggCountField, aggSumInt:
			d[o] += src[o]
		case aggSumFloat:
			d[o] = w64(f64(d[o]) + f64(src[o]))
		case aggAvgInt:
			d[o] += src[o]
			d[o+1] += src[o+1]
		case aggAvgFloat:
			d[o] = w64(f64(d[o]) + f64(src[o]))
			d[o+1] += src[o+1]
		case aggMinInt:
			d[o] = min(d[o], src[o])
			d[o+1] += src[o+1]
		case aggMaxInt:
			d[o] = max(d[o], src[o])
			d[o+1] += src[o+1]
		case aggMinFloat:
			if f64(src[o]) < f64(d[o]) {
				d[o] = src[o]
			}
			d[o+1] += src[o+1]
		case aggMaxFloat:
			if f64(src[o]) > f64(d[o]) {
				d[o] = src[o]
			}
			d[o+1] += src[o+1]
		}
	}
}

// appendResult appends aggregate j's result for the accumulators w to out,
// whose row count before the append is row.
func (l *layout) appendResult(j int, w []int64, out *stream.Column, row int) {
	o := l.off[j]
	switch l.aggs[j].kind {
	case aggCount:
		out.Ints = append(out.Ints, w[0])
	case aggCountField, aggSumInt:
		out.Ints = append(out.Ints, w[o])
	case aggSumFloat:
		out.Floats = append(out.Floats, f64(w[o]))
	case aggAvgInt, aggAvgFloat:
		if w[o+1] == 0 {
			out.Floats = append(out.Floats, 0)
			out.SetNull(row, row+1)
			break
		}
		sum := f64(w[o])
		if l.aggs[j].kind == aggAvgInt {
			sum = float64(w[o])
		}
		out.Floats = append(out.Floats, sum/float64(w[o+1]))
	case aggMinInt, aggMaxInt:
		if w[o+1] == 0 {
			out.Ints = append(out.Ints, 0)
			out.SetNull(row, row+1)
			break
		}
		out.Ints = append(out.Ints, w[o])
	case aggMinFloat, aggMaxFloat:
		if w[o+1] == 0 {
			out.Floats = append(out.Floats, 0)
			out.SetNull(row, row+1)
			break
		}
		out.Floats = append(out.Floats, f64(w[o]))
	}
}

// accs is a table of accumulator slots of layout lay, lay.width words each,
// for operators that keep them outside statebackend.Slots (the session
// window, which moves them in and out of its per-key state).
type accs struct {
	lay *layout
	w   []int64
	ws  [][]int64 // update scratch
	nm  [][]int64
}

func newAccs(aggs []aggSpec) *accs { return &accs{lay: newLayout(aggs)} }

// size returns the number of slots allocated.
func (a *accs) size() int { return len(a.w) / a.lay.width }

// grow allocates slots up to n (exclusive).
func (a *accs) grow(n int) {
	for a.size() < n {
		a.w = append(a.w, a.lay.init...)
	}
}

// words returns slot s.
func (a *accs) words(s int32) []int64 {
	i := int(s) * a.lay.width
	return a.w[i : i+a.lay.width : i+a.lay.width]
}

// reset sets slot s to the empty accumulator.
func (a *accs) reset(s int32) { copy(a.words(s), a.lay.init) }

// update adds the rows of b to their slots: slots[i] is row i's slot, or
// -1 for a row that is dropped.
func (a *accs) update(b *stream.Batch, slots, _ []int32) {
	if cap(a.ws) < len(slots) {
		a.ws = make([][]int64, len(slots))
		a.nm = make([][]int64, len(slots))
	}
	ws := a.ws[:len(slots)]
	for i, s := range slots {
		ws[i] = nil
		if s >= 0 {
			ws[i] = a.words(s)
		}
	}
	a.lay.update(b, ws, a.nm[:len(slots)])
	clear(ws)
}

// merge adds src's slot s into a's slot d.
func (a *accs) merge(d int32, src *accs, s int32) { a.lay.merge(a.words(d), src.words(s)) }

// appendResult appends aggregate j's result for slot s to out, whose row
// count before the append is row.
func (a *accs) appendResult(j int, s int32, out *stream.Column, row int) {
	a.lay.appendResult(j, a.words(s), out, row)
}
