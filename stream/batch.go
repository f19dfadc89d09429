package stream

import (
	"fmt"
	"sync"
)

// DefaultBatchSize is the number of rows a source puts in a batch unless
// configured otherwise.
const DefaultBatchSize = 1024

// Column is one field's values for every row of a Batch. Exactly one of the
// value slices is used, chosen by Type; its length is the batch's row count.
// Nulls is a bitmap (bit i of Nulls[i/64] set means row i is null); a nil
// Nulls means the column has no nulls, and rows past the bitmap's end are not
// null. The value slot of a null row holds the
// type's zero value.
//
// Dict, on a string column, names a dictionary whose values some of the
// rows may hold, as the dictionary stores them (a source that picks values
// from a fixed list gives it). It is a hint for encoders: a row whose
// value is stored where one of Dict's values is, with its length, is that
// value, and an encoder finds its code from the address instead of
// hashing the string (StringDict.Code). Rows that hold other strings are
// just not found that way, so code that moves, drops or rewrites rows may
// keep Dict as it is, and copies of a column should keep it.
type Column struct {
	Type   Type
	Ints   []int64
	Floats []float64
	Strs   []string
	Bools  []bool
	Nulls  []uint64
	Dict   *StringDict
}

// IsNull reports whether row i is null.
func (c *Column) IsNull(i int) bool {
	w := i >> 6
	return w < len(c.Nulls) && c.Nulls[w]&(1<<(uint(i)&63)) != 0
}

// SetNull marks row i null; n is the column's row count.
func (c *Column) SetNull(i, n int) {
	if c.Nulls == nil {
		c.Nulls = make([]uint64, (n+63)>>6)
	}
	for len(c.Nulls) < (n+63)>>6 {
		c.Nulls = append(c.Nulls, 0)
	}
	c.Nulls[i>>6] |= 1 << (uint(i) & 63)
}

// Len returns the number of values held.
func (c *Column) Len() int {
	switch c.Type {
	case TypeInt64, TypeTimestamp:
		return len(c.Ints)
	case TypeFloat64:
		return len(c.Floats)
	case TypeString:
		return len(c.Strs)
	case TypeBool:
		return len(c.Bools)
	}
	return 0
}

// Value returns row i as an any (nil when null): for printing and tests,
// never for the per-record path.
func (c *Column) Value(i int) any {
	if c.IsNull(i) {
		return nil
	}
	switch c.Type {
	case TypeInt64, TypeTimestamp:
		return c.Ints[i]
	case TypeFloat64:
		return c.Floats[i]
	case TypeString:
		return c.Strs[i]
	case TypeBool:
		return c.Bools[i]
	}
	return nil
}

// reset empties the column for reuse as type t, keeping capacity.
func (c *Column) reset(t Type) {
	c.Type = t
	c.Ints = c.Ints[:0]
	c.Floats = c.Floats[:0]
	clear(c.Strs) // drop string references so the pool does not pin them
	c.Strs = c.Strs[:0]
	c.Bools = c.Bools[:0]
	c.Nulls = nil
	c.Dict = nil
}

// Batch is a group of rows with one schema, stored by column. Times, when not
// nil, holds each row's event timestamp in milliseconds; it is set by a
// timestamp assigner and read by event-time operators.
//
// Ownership: a batch passed to Collector.Collect belongs to the receiver,
// which may modify it, forward it, keep it, or Release it. The sender must not
// touch it afterwards.
type Batch struct {
	Schema *Schema
	Cols   []Column
	Times  []int64
	n      int
}

var batchPool = sync.Pool{New: func() any { return new(Batch) }}

// NewBatch returns an empty batch for schema with room for capacity rows,
// reusing a released batch when one is available.
func NewBatch(schema *Schema, capacity int) *Batch {
	b := batchPool.Get().(*Batch)
	b.Schema = schema
	b.n = 0
	b.Times = b.Times[:0]
	if b.Times != nil && cap(b.Times) == 0 {
		b.Times = nil
	}
	if cap(b.Cols) < len(schema.Fields) {
		b.Cols = make([]Column, len(schema.Fields), len(schema.Fields)+2)
	} else {
		b.Cols = b.Cols[:len(schema.Fields)]
	}
	for i, f := range schema.Fields {
		c := &b.Cols[i]
		c.reset(f.Type)
		switch f.Type {
		case TypeInt64, TypeTimestamp:
			if cap(c.Ints) < capacity {
				c.Ints = make([]int64, 0, capacity)
			}
		case TypeFloat64:
			if cap(c.Floats) < capacity {
				c.Floats = make([]float64, 0, capacity)
			}
		case TypeString:
			if cap(c.Strs) < capacity {
				c.Strs = make([]string, 0, capacity)
			}
		case TypeBool:
			if cap(c.Bools) < capacity {
				c.Bools = make([]bool, 0, capacity)
			}
		}
	}
	return b
}

// Release returns b to the pool. The caller must hold the only reference.
func (b *Batch) Release() {
	if b == nil {
		return
	}
	for i := range b.Cols {
		b.Cols[i].reset(b.Cols[i].Type)
	}
	b.Times = b.Times[:0]
	b.Schema = nil
	b.n = 0
	batchPool.Put(b)
}

// Len returns the number of rows.
func (b *Batch) Len() int { return b.n }

// SetLen sets the row count after a writer filled the columns directly. Every
// column must hold exactly n values, and Times either none or n.
func (b *Batch) SetLen(n int) { b.n = n }

// Validate checks that every column matches the schema and the row count.
func (b *Batch) Validate() error {
	if len(b.Cols) != len(b.Schema.Fields) {
		return fmt.Errorf("batch has %d columns, schema %s has %d", len(b.Cols), b.Schema, len(b.Schema.Fields))
	}
	for i := range b.Cols {
		c := &b.Cols[i]
		if c.Type != b.Schema.Fields[i].Type {
			return fmt.Errorf("column %q is %v, schema says %v", b.Schema.Fields[i].Name, c.Type, b.Schema.Fields[i].Type)
		}
		if c.Len() != b.n {
			return fmt.Errorf("column %q has %d values, batch has %d rows", b.Schema.Fields[i].Name, c.Len(), b.n)
		}
	}
	if len(b.Times) != 0 && len(b.Times) != b.n {
		return fmt.Errorf("batch has %d timestamps for %d rows", len(b.Times), b.n)
	}
	return nil
}

// Row returns row i's values (nil for null), for printing and tests.
func (b *Batch) Row(i int) []any {
	out := make([]any, len(b.Cols))
	for j := range b.Cols {
		out[j] = b.Cols[j].Value(i)
	}
	return out
}

// AppendRow appends one row given as values in schema order (int64, float64,
// string, bool or nil). It is for tests and slow paths; it panics on a type
// mismatch, which is a programming error.
func (b *Batch) AppendRow(vals ...any) {
	if len(vals) != len(b.Cols) {
		panic(fmt.Sprintf("stream: AppendRow got %d values for %d columns", len(vals), len(b.Cols)))
	}
	n := b.n
	for j, v := range vals {
		c := &b.Cols[j]
		if v == nil {
			c.SetNull(n, n+1)
		}
		switch c.Type {
		case TypeInt64, TypeTimestamp:
			x, _ := v.(int64)
			if i, ok := v.(int); ok {
				x = int64(i)
			}
			c.Ints = append(c.Ints, x)
		case TypeFloat64:
			x, _ := v.(float64)
			c.Floats = append(c.Floats, x)
		case TypeString:
			x, _ := v.(string)
			c.Strs = append(c.Strs, x)
		case TypeBool:
			x, _ := v.(bool)
			c.Bools = append(c.Bools, x)
		}
	}
	b.n++
}

// Filter keeps only the rows whose index is in sel (ascending), in place.
func (b *Batch) Filter(sel []int) {
	if len(sel) == b.n {
		return
	}
	for j := range b.Cols {
		c := &b.Cols[j]
		var nulls []uint64
		if c.Nulls != nil {
			for k, i := range sel {
				if c.IsNull(i) {
					if nulls == nil {
						nulls = make([]uint64, (len(sel)+63)>>6)
					}
					nulls[k>>6] |= 1 << (uint(k) & 63)
				}
			}
		}
		switch c.Type {
		case TypeInt64, TypeTimestamp:
			for k, i := range sel {
				c.Ints[k] = c.Ints[i]
			}
			c.Ints = c.Ints[:len(sel)]
		case TypeFloat64:
			for k, i := range sel {
				c.Floats[k] = c.Floats[i]
			}
			c.Floats = c.Floats[:len(sel)]
		case TypeString:
			for k, i := range sel {
				c.Strs[k] = c.Strs[i]
			}
			clear(c.Strs[len(sel):])
			c.Strs = c.Strs[:len(sel)]
		case TypeBool:
			for k, i := range sel {
				c.Bools[k] = c.Bools[i]
			}
			c.Bools = c.Bools[:len(sel)]
		}
		c.Nulls = nulls
	}
	if len(b.Times) != 0 {
		for k, i := range sel {
			b.Times[k] = b.Times[i]
		}
		b.Times = b.Times[:len(sel)]
	}
	b.n = len(sel)
}
