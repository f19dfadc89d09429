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

// accCol holds one aggregate's accumulators, indexed by slot. Which slices
// are used depends on the kind: n counts non-null values (count(field), and
// presence for min/max/avg); i holds integer sums, minima and maxima; f float
// ones.
type accCol struct {
	n []int64
	i []int64
	f []float64
}

// accs is a struct-of-arrays table of accumulators: slot s of every
// aggregate, plus rows[s], the number of records that reached the slot.
type accs struct {
	aggs []aggSpec
	rows []int64
	cols []accCol
}

func newAccs(aggs []aggSpec) *accs {
	return &accs{aggs: aggs, cols: make([]accCol, len(aggs))}
}

// size returns the number of slots allocated.
func (a *accs) size() int { return len(a.rows) }

// grow allocates slots up to n (exclusive).
func (a *accs) grow(n int) {
	for len(a.rows) < n {
		a.rows = append(a.rows, 0)
		for j := range a.cols {
			c := &a.cols[j]
			c.n = append(c.n, 0)
			c.i = append(c.i, 0)
			c.f = append(c.f, 0)
		}
	}
}

// reset sets slot s to the empty accumulator.
func (a *accs) reset(s int32) {
	a.rows[s] = 0
	for j := range a.cols {
		c := &a.cols[j]
		c.n[s] = 0
		c.i[s] = 0
		c.f[s] = 0
		switch a.aggs[j].kind {
		case aggMinInt:
			c.i[s] = math.MaxInt64
		case aggMaxInt:
			c.i[s] = math.MinInt64
		case aggMinFloat:
			c.f[s] = math.Inf(1)
		case aggMaxFloat:
			c.f[s] = math.Inf(-1)
		}
	}
}

// update adds the rows of b to their slots, one column at a time. slots[i]
// is row i's slot, or -1 for a row that is dropped. mask is scratch of at
// least b.Len() entries.
func (a *accs) update(b *stream.Batch, slots, mask []int32) {
	rows := a.rows
	for _, s := range slots {
		if s >= 0 {
			rows[s]++
		}
	}
	for j := range a.aggs {
		sp := &a.aggs[j]
		if sp.kind == aggCount {
			continue
		}
		col := &b.Cols[sp.col]
		sl := slots
		if col.Nulls != nil {
			// Fold the nulls into a copy of the slots so that the loops
			// below only test for a negative slot.
			sl = mask[:len(slots)]
			copy(sl, slots)
			for w, word := range col.Nulls {
				for word != 0 {
					i := w<<6 + bits.TrailingZeros64(word)
					word &= word - 1
					if i < len(sl) {
						sl[i] = -1
					}
				}
			}
		}
		updateCol(sp.kind, &a.cols[j], col, sl)
	}
}

func updateCol(kind aggKind, c *accCol, col *stream.Column, slots []int32) {
	switch kind {
	case aggCountField:
		n := c.n
		for _, s := range slots {
			if s >= 0 {
				n[s]++
			}
		}
	case aggSumInt:
		v, acc := col.Ints[:len(slots)], c.i
		for i, s := range slots {
			if s >= 0 {
				acc[s] += v[i]
			}
		}
	case aggSumFloat:
		v, acc := col.Floats[:len(slots)], c.f
		for i, s := range slots {
			if s >= 0 {
				acc[s] += v[i]
			}
		}
	case aggAvgInt:
		v, acc, n := col.Ints[:len(slots)], c.i, c.n
		for i, s := range slots {
			if s >= 0 {
				acc[s] += v[i]
				n[s]++
			}
		}
	case aggAvgFloat:
		v, acc, n := col.Floats[:len(slots)], c.f, c.n
		for i, s := range slots {
			if s >= 0 {
				acc[s] += v[i]
				n[s]++
			}
		}
	case aggMinInt:
		v, acc, n := col.Ints[:len(slots)], c.i, c.n
		for i, s := range slots {
			if s >= 0 {
				acc[s] = min(acc[s], v[i])
				n[s]++
			}
		}
	case aggMaxInt:
		v, acc, n := col.Ints[:len(slots)], c.i, c.n
		for i, s := range slots {
			if s >= 0 {
				acc[s] = max(acc[s], v[i])
				n[s]++
			}
		}
	case aggMinFloat:
		v, acc, n := col.Floats[:len(slots)], c.f, c.n
		for i, s := range slots {
			if s >= 0 {
				if x := v[i]; x < acc[s] {
					acc[s] = x
				}
				n[s]++
			}
		}
	case aggMaxFloat:
		v, acc, n := col.Floats[:len(slots)], c.f, c.n
		for i, s := range slots {
			if s >= 0 {
				if x := v[i]; x > acc[s] {
					acc[s] = x
				}
				n[s]++
			}
		}
	}
}

// merge adds src's slot s into a's slot d (a and src have the same
// aggregates).
func (a *accs) merge(d int32, src *accs, s int32) {
	a.rows[d] += src.rows[s]
	for j := range a.aggs {
		dc, sc := &a.cols[j], &src.cols[j]
		dc.n[d] += sc.n[s]
		switch a.aggs[j].kind {
		case aggSumInt, aggAvgInt:
			dc.i[d] += sc.i[s]
		case aggSumFloat, aggAvgFloat:
			dc.f[d] += sc.f[s]
		case aggMinInt:
			dc.i[d] = min(dc.i[d], sc.i[s])
		case aggMaxInt:
			dc.i[d] = max(dc.i[d], sc.i[s])
		case aggMinFloat:
			if sc.f[s] < dc.f[d] {
				dc.f[d] = sc.f[s]
			}
		case aggMaxFloat:
			if sc.f[s] > dc.f[d] {
				dc.f[d] = sc.f[s]
			}
		}
	}
}

// appendResult appends aggregate j's result for slot s to out, whose row
// count before the append is row.
func (a *accs) appendResult(j int, s int32, out *stream.Column, row int) {
	c := &a.cols[j]
	switch a.aggs[j].kind {
	case aggCount:
		out.Ints = append(out.Ints, a.rows[s])
	case aggCountField:
		out.Ints = append(out.Ints, c.n[s])
	case aggSumInt:
		out.Ints = append(out.Ints, c.i[s])
	case aggSumFloat:
		out.Floats = append(out.Floats, c.f[s])
	case aggAvgInt, aggAvgFloat:
		if c.n[s] == 0 {
			out.Floats = append(out.Floats, 0)
			out.SetNull(row, row+1)
			break
		}
		sum := c.f[s]
		if a.aggs[j].kind == aggAvgInt {
			sum = float64(c.i[s])
		}
		out.Floats = append(out.Floats, sum/float64(c.n[s]))
	case aggMinInt, aggMaxInt:
		if c.n[s] == 0 {
			out.Ints = append(out.Ints, 0)
			out.SetNull(row, row+1)
			break
		}
		out.Ints = append(out.Ints, c.i[s])
	case aggMinFloat, aggMaxFloat:
		if c.n[s] == 0 {
			out.Floats = append(out.Floats, 0)
			out.SetNull(row, row+1)
			break
		}
		out.Floats = append(out.Floats, c.f[s])
	}
}
