package dataflow

import "github.com/weirstream/weir/stream"

// isNull is Column.IsNull that accepts a null bitmap shorter than the column
// (Batch.AppendRow leaves one when the last null is not in the last word).
func isNull(c *stream.Column, i int) bool {
	w := i >> 6
	return w < len(c.Nulls) && c.Nulls[w]&(1<<(uint(i)&63)) != 0
}

// cloneBatch returns a copy of b that shares nothing mutable with it
// (strings are immutable and shared).
func cloneBatch(b *stream.Batch) *stream.Batch {
	n := b.Len()
	c := stream.NewBatch(b.Schema, n)
	for j := range b.Cols {
		src, dst := &b.Cols[j], &c.Cols[j]
		switch src.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			dst.Ints = append(dst.Ints[:0], src.Ints[:n]...)
		case stream.TypeFloat64:
			dst.Floats = append(dst.Floats[:0], src.Floats[:n]...)
		case stream.TypeString:
			dst.Strs = append(dst.Strs[:0], src.Strs[:n]...)
			dst.Dict = src.Dict
		case stream.TypeBool:
			dst.Bools = append(dst.Bools[:0], src.Bools[:n]...)
		}
		if src.Nulls != nil {
			dst.Nulls = append([]uint64(nil), src.Nulls...)
		}
	}
	if len(b.Times) != 0 {
		c.Times = append(c.Times[:0], b.Times...)
	}
	c.SetLen(n)
	return c
}

// scatter copies row i of src to the end of subs[dest[i]], column by
// column. pos[i] must be row i's index in its destination, and subs[t] must
// be a batch of src's schema with no values yet and its length already set
// (SetLen) to the number of rows it receives, for every t that dest names;
// cols is scratch space of len(subs).
func scatter(src *stream.Batch, dest []int32, pos []int32, subs []*stream.Batch, cols []*stream.Column) {
	n := src.Len()
	dest = dest[:n]
	for j := range src.Cols {
		c := &src.Cols[j]
		if n < len(subs) { // a small batch to many subtasks: only those it names
			for _, t := range dest {
				cols[t] = &subs[t].Cols[j]
			}
		} else {
			for t, s := range subs {
				if s != nil {
					cols[t] = &s.Cols[j]
				}
			}
		}
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			for i, v := range c.Ints[:n] {
				d := cols[dest[i]]
				d.Ints = append(d.Ints, v)
			}
		case stream.TypeFloat64:
			for i, v := range c.Floats[:n] {
				d := cols[dest[i]]
				d.Floats = append(d.Floats, v)
			}
		case stream.TypeString:
			for i, v := range c.Strs[:n] {
				d := cols[dest[i]]
				d.Strs = append(d.Strs, v)
			}
			for _, s := range subs {
				if s != nil {
					s.Cols[j].Dict = c.Dict
				}
			}
		case stream.TypeBool:
			for i, v := range c.Bools[:n] {
				d := cols[dest[i]]
				d.Bools = append(d.Bools, v)
			}
		}
		if c.Nulls != nil {
			for i := 0; i < n; i++ {
				if isNull(c, i) {
					s := subs[dest[i]]
					cols[dest[i]].SetNull(int(pos[i]), s.Len())
				}
			}
		}
	}
	if len(src.Times) == n && n > 0 {
		for i, v := range src.Times {
			s := subs[dest[i]]
			s.Times = append(s.Times, v)
		}
	}
}
