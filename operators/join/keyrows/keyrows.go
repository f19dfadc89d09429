// Package keyrows holds rows of a stream by key, for operators that keep
// whole records in operator-owned state (the top-n windows of package
// topn): Keys interns key values as dense ids and tells each key's key
// group, Rows stores copies of records column by column (strings copied into
// an arena so that state never pins an input batch's buffers), and Gather
// builds output columns from stored or incoming rows (package join uses
// Gather and IsNull; its rows are keyed state of the task runtime). The
// snapshot encodings of keys and rows are defined here too, from the value
// encoding and Reader of operators/internal/rowenc; once topn keeps its
// state in the runtime's keyed state as well, they (and Keys.Groups,
// AppendKey, ReadKey, Rows.AppendRow, ReadRow, Reader) can go.
//
// It imports the standard library, package stream and
// operators/internal/rowenc. Nothing in it is safe for concurrent use.
package keyrows

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// IsNull reports whether row i of c is null, tolerating a short bitmap. It
// is rowenc.IsNull, named here for the operators that use keyrows.
func IsNull(c *stream.Column, i int) bool { return rowenc.IsNull(c, i) }

// SameKind reports whether values of a and b can be equal keys: equal types,
// or int64 and timestamp (both hash and encode as integers).
func SameKind(a, b stream.Type) bool {
	isInt := func(t stream.Type) bool { return t == stream.TypeInt64 || t == stream.TypeTimestamp }
	return a == b || isInt(a) && isInt(b)
}

// Keys interns keys (the values of some columns of a row) as dense ids 0, 1,
// 2, ... in order of first appearance. Keys of rows of different schemas are
// equal when their values are, so two inputs keyed by fields of the same
// types share one Keys.
type Keys struct {
	schema *stream.Schema // k0, k1, ...: the key values by id
	cols   []stream.Column
	intKey bool
	ints   map[int64]int32
	index  map[string]int32
	buf    []byte
	n      int
}

// NewKeys returns an empty Keys for keys of the given field types.
func NewKeys(types []stream.Type) *Keys {
	fields := make([]stream.Field, len(types))
	for i, t := range types {
		fields[i] = stream.Field{Name: fmt.Sprintf("k%d", i), Type: t}
	}
	k := &Keys{schema: stream.MustSchema(fields...), cols: make([]stream.Column, len(types)), index: make(map[string]int32)}
	for i, t := range types {
		k.cols[i].Type = t
	}
	if len(types) == 1 && (types[0] == stream.TypeInt64 || types[0] == stream.TypeTimestamp) {
		k.intKey = true
		k.ints = make(map[int64]int32)
	}
	return k
}

// Len returns the number of keys.
func (k *Keys) Len() int { return k.n }

// ID returns the id of the key of row i of b (the values of columns cols),
// adding it if it is new.
func (k *Keys) ID(b *stream.Batch, cols []int, i int) int32 {
	if k.intKey {
		if c := &b.Cols[cols[0]]; !IsNull(c, i) {
			v := c.Ints[i]
			if id, ok := k.ints[v]; ok {
				return id
			}
			id := int32(k.n)
			k.n++
			k.ints[v] = id
			k.cols[0].Ints = append(k.cols[0].Ints, v)
			return id
		}
	}
	k.buf = k.encode(k.buf[:0], b.Cols, cols, i)
	if id, ok := k.index[string(k.buf)]; ok {
		return id
	}
	id := int32(k.n)
	k.n++
	k.index[string(k.buf)] = id
	for j, c := range cols {
		appendValue(&k.cols[j], &b.Cols[c], i, id, nil)
	}
	return id
}

// Find returns the id of the key of row i of b, or -1 if it is not held.
func (k *Keys) Find(b *stream.Batch, cols []int, i int) int32 {
	if k.intKey {
		if c := &b.Cols[cols[0]]; !IsNull(c, i) {
			if id, ok := k.ints[c.Ints[i]]; ok {
				return id
			}
			return -1
		}
	}
	k.buf = k.encode(k.buf[:0], b.Cols, cols, i)
	if id, ok := k.index[string(k.buf)]; ok {
		return id
	}
	return -1
}

// CopyKey adds key id of src (of the same types) and returns its id here.
func (k *Keys) CopyKey(src *Keys, id int32) int32 {
	cols := make([]int, len(src.cols))
	for j := range cols {
		cols[j] = j
	}
	b := stream.Batch{Schema: src.schema, Cols: src.cols}
	b.SetLen(src.Len())
	return k.ID(&b, cols, int(id))
}

// Groups returns the key group of every key, for maxParallelism key groups;
// the hash is stream.HashKeys, the one that routes records.
func (k *Keys) Groups(maxParallelism int) []int32 {
	n := k.Len()
	if n == 0 {
		return nil
	}
	cols := make([]int, len(k.cols))
	for j := range cols {
		cols[j] = j
		rowenc.PadNulls(&k.cols[j], n)
	}
	b := stream.Batch{Schema: k.schema, Cols: k.cols}
	b.SetLen(n)
	h := make([]uint64, n)
	stream.HashKeys(&b, cols, h)
	out := make([]int32, n)
	for i, x := range h {
		out[i] = int32(stream.KeyGroupForHash(x, maxParallelism))
	}
	return out
}

// encode appends the encoding of row i's key: per column a null byte (1 for
// null) and the value (integers varint, floats 8 bytes with -0 as +0,
// strings uvarint length and bytes, bools one byte).
func (k *Keys) encode(buf []byte, cols []stream.Column, idx []int, i int) []byte {
	for _, c := range idx {
		buf = rowenc.AppendValue(buf, &cols[c], i)
	}
	return buf
}

// AppendKey appends the encoding of key id (as rowenc.AppendValue per key
// field).
func (k *Keys) AppendKey(buf []byte, id int32) []byte {
	for j := range k.cols {
		buf = rowenc.AppendValue(buf, &k.cols[j], int(id))
	}
	return buf
}

// ReadKey decodes a key written by AppendKey and returns its id, adding it
// if new.
func (k *Keys) ReadKey(r *Reader) int32 {
	b := stream.NewBatch(k.schema, 1)
	defer b.Release()
	cols := make([]int, len(k.cols))
	for j := range cols {
		cols[j] = j
		r.Value(&b.Cols[j], 0)
	}
	if r.Err != nil {
		return -1
	}
	b.SetLen(1)
	return k.ID(b, cols, 0)
}

// appendValue appends row i of src to dst as row n; strings are copied into
// a when it is not nil.
func appendValue(dst, src *stream.Column, i int, n int32, a *arena) {
	null := IsNull(src, i)
	switch dst.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		dst.Ints = append(dst.Ints, src.Ints[i])
	case stream.TypeFloat64:
		dst.Floats = append(dst.Floats, src.Floats[i])
	case stream.TypeString:
		s := src.Strs[i]
		if a != nil {
			s = a.clone(s)
		}
		dst.Strs = append(dst.Strs, s)
	case stream.TypeBool:
		dst.Bools = append(dst.Bools, src.Bools[i])
	}
	if null {
		dst.SetNull(int(n), int(n)+1)
	}
}

// arena copies strings into large shared chunks. Chunks are never reused:
// output batches may still reference them after the state is dropped.
type arena struct{ cur []byte }

const arenaChunk = 64 << 10

func (a *arena) clone(s string) string {
	if len(s) == 0 {
		return ""
	}
	if len(s) > arenaChunk/4 {
		return string([]byte(s))
	}
	if cap(a.cur)-len(a.cur) < len(s) {
		a.cur = make([]byte, 0, arenaChunk)
	}
	start := len(a.cur)
	a.cur = append(a.cur, s...)
	return unsafe.String(&a.cur[start], len(s))
}

// Rows stores copies of records of one schema by column, with their event
// times (stream.MinWatermark for a record without one). Row ids are dense
// from 0 in order of Append.
type Rows struct {
	Cols  []stream.Column
	Times []int64
	a     arena
}

// NewRows returns an empty store for rows of schema.
func NewRows(schema *stream.Schema) *Rows {
	r := &Rows{Cols: make([]stream.Column, schema.Len())}
	for i, f := range schema.Fields {
		r.Cols[i].Type = f.Type
	}
	return r
}

// Len returns the number of rows.
func (r *Rows) Len() int { return len(r.Times) }

// Append copies row i of b (which has the store's schema) and returns its id.
func (r *Rows) Append(b *stream.Batch, i int) int32 {
	id := int32(len(r.Times))
	for j := range r.Cols {
		appendValue(&r.Cols[j], &b.Cols[j], i, id, &r.a)
	}
	t := stream.MinWatermark
	if len(b.Times) > i {
		t = b.Times[i]
	}
	r.Times = append(r.Times, t)
	return id
}

// AppendRow appends the state encoding of row id: its event time (varint)
// and each column's value as rowenc.AppendValue writes it.
func (r *Rows) AppendRow(buf []byte, id int32) []byte {
	buf = binary.AppendVarint(buf, r.Times[id])
	for j := range r.Cols {
		buf = rowenc.AppendValue(buf, &r.Cols[j], int(id))
	}
	return buf
}

// ReadRow decodes a row written by AppendRow, appends it and returns its id.
func (r *Rows) ReadRow(rd *Reader) int32 {
	id := int32(len(r.Times))
	t := rd.Varint()
	for j := range r.Cols {
		rd.Value(&r.Cols[j], int(id))
	}
	if rd.Err != nil {
		return -1
	}
	r.Times = append(r.Times, t)
	return id
}

// Gather appends to dst, for each index in idx, that row of src (same type).
// Strings are shared, not copied.
func Gather(dst, src *stream.Column, idx []int32) {
	n := dst.Len()
	switch dst.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		s := src.Ints
		for _, i := range idx {
			dst.Ints = append(dst.Ints, s[i])
		}
	case stream.TypeFloat64:
		s := src.Floats
		for _, i := range idx {
			dst.Floats = append(dst.Floats, s[i])
		}
	case stream.TypeString:
		s := src.Strs
		for _, i := range idx {
			dst.Strs = append(dst.Strs, s[i])
		}
	case stream.TypeBool:
		s := src.Bools
		for _, i := range idx {
			dst.Bools = append(dst.Bools, s[i])
		}
	}
	if src.Nulls != nil {
		for k, i := range idx {
			if IsNull(src, int(i)) {
				dst.SetNull(n+k, n+len(idx))
			}
		}
	}
}

// Reader decodes state written with the Append functions of this package,
// remembering the first error in Err. It is rowenc.Reader, named here for
// the operators that use keyrows.
type Reader = rowenc.Reader

// CopyRow appends row i of src to dst (columns of the same types), which
// hold row rows already. Strings are shared, not copied.
func CopyRow(dst []stream.Column, rows int, src []stream.Column, i int) {
	for j := range dst {
		appendValue(&dst[j], &src[j], i, int32(rows), nil)
	}
}
