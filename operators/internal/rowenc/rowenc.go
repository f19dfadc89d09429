// Package rowenc owns the byte encoding of key and row values that Weir's
// stateful operators write into checkpoints and keyed state (package keyed,
// package window, the joins and top-n), the header of
// their per-key-group chunks, and the Reader that decodes both with bounds
// checks. Each operator keeps its own chunk layout and version; this package
// only supplies the pieces they share, so that they encode a value the same
// way.
//
// A value is one row of a column: a null byte (1 for null, else 0) and,
// when not null, the value by the column's type: int64 and timestamp a
// zig-zag varint; float64 8 bytes little-endian IEEE 754 bits; string a
// uvarint length and the bytes; bool one byte (1 for true). Varints are
// those of encoding/binary.
//
// rowenc imports the standard library and package stream only. Nothing in
// it is safe for concurrent use on the same Reader or Column.
package rowenc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/weirstream/weir/stream"
)

// IsNull reports whether row i of c is null, tolerating a null bitmap
// shorter than the column (Batch.AppendRow and Column.SetNull grow it only
// up to the last null).
func IsNull(c *stream.Column, i int) bool {
	w := i >> 6
	return w < len(c.Nulls) && c.Nulls[w]&(1<<(uint(i)&63)) != 0
}

// PadNulls extends a short null bitmap of c (if it has one) to cover n
// rows.
func PadNulls(c *stream.Column, n int) {
	if c.Nulls != nil {
		for len(c.Nulls) < (n+63)>>6 {
			c.Nulls = append(c.Nulls, 0)
		}
	}
}

// PadBatchNulls extends every short null bitmap of b to cover all its rows,
// as stream.HashKeys expects.
func PadBatchNulls(b *stream.Batch) {
	for j := range b.Cols {
		PadNulls(&b.Cols[j], b.Len())
	}
}

// AppendValue appends row i of c as a value, writing a float64 -0 as +0 so
// that values equal as keys (see stream.HashKeys) encode equally.
func AppendValue(buf []byte, c *stream.Column, i int) []byte {
	return appendValue(buf, c, i, true)
}

// AppendExactValue appends row i of c as a value, writing a float64's bits
// as they are (-0 stays -0).
func AppendExactValue(buf []byte, c *stream.Column, i int) []byte {
	return appendValue(buf, c, i, false)
}

func appendValue(buf []byte, c *stream.Column, i int, zero bool) []byte {
	if IsNull(c, i) {
		return append(buf, 1)
	}
	buf = append(buf, 0)
	switch c.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		buf = binary.AppendVarint(buf, c.Ints[i])
	case stream.TypeFloat64:
		f := c.Floats[i]
		if zero && f == 0 {
			f = 0 // -0 and +0 are one key
		}
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(f))
	case stream.TypeString:
		buf = binary.AppendUvarint(buf, uint64(len(c.Strs[i])))
		buf = append(buf, c.Strs[i]...)
	case stream.TypeBool:
		if c.Bools[i] {
			return append(buf, 1)
		}
		buf = append(buf, 0)
	}
	return buf
}

// AppendHeader appends the start of a chunk of keyed state: the version
// byte, the key group (uvarint), the number of key fields (uvarint) and one
// stream.Type byte per key field. Reader.SameTypes reads the types back.
func AppendHeader(buf []byte, version byte, keyGroup int, keyTypes []stream.Type) []byte {
	buf = append(buf, version)
	buf = binary.AppendUvarint(buf, uint64(keyGroup))
	buf = binary.AppendUvarint(buf, uint64(len(keyTypes)))
	for _, t := range keyTypes {
		buf = append(buf, byte(t))
	}
	return buf
}

// ErrTruncated is the error of a Reader that ran out of bytes, or read a
// length or count larger than the bytes left.
var ErrTruncated = errors.New("truncated")

// Reader decodes what the Append functions of this package and
// encoding/binary's varint functions wrote. B holds the bytes not read yet.
// Err is the first error; after it every read returns a zero value, so a
// caller may read a whole record and check Err once.
type Reader struct {
	B   []byte
	Err error
}

func (r *Reader) fail() {
	if r.Err == nil {
		r.Err = ErrTruncated
	}
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.Err != nil || len(r.B) == 0 {
		r.fail()
		return 0
	}
	v := r.B[0]
	r.B = r.B[1:]
	return v
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a signed (zig-zag) varint.
func (r *Reader) Varint() int64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Varint(r.B)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Uint64 reads 8 bytes little-endian.
func (r *Reader) Uint64() uint64 {
	if r.Err != nil || len(r.B) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.B)
	r.B = r.B[8:]
	return v
}

// Count reads an unsigned varint that counts items of at least one byte
// each, failing if more are announced than bytes remain.
func (r *Reader) Count() int {
	n := r.Uvarint()
	if r.Err == nil && n > uint64(len(r.B)) {
		r.fail()
		return 0
	}
	return int(n)
}

// Bytes reads a uvarint length and that many bytes, which alias B.
func (r *Reader) Bytes() []byte {
	n := r.Count()
	if r.Err != nil {
		return nil
	}
	v := r.B[:n]
	r.B = r.B[n:]
	return v
}

// Value reads one value written by AppendValue or AppendExactValue and
// appends it to c (of the type it was written with) as row i.
func (r *Reader) Value(c *stream.Column, i int) {
	null := r.Byte() == 1
	switch c.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		var v int64
		if !null {
			v = r.Varint()
		}
		c.Ints = append(c.Ints, v)
	case stream.TypeFloat64:
		var v float64
		if !null {
			v = math.Float64frombits(r.Uint64())
		}
		c.Floats = append(c.Floats, v)
	case stream.TypeString:
		var v string
		if !null {
			v = string(r.Bytes())
		}
		c.Strs = append(c.Strs, v)
	case stream.TypeBool:
		var v bool
		if !null {
			v = r.Byte() == 1
		}
		c.Bools = append(c.Bools, v)
	}
	if null {
		c.SetNull(i, i+1)
	}
}

// SameTypes reads the key field types of a chunk header written by
// AppendHeader and reports whether they are want. n is the number of types
// the header announces.
func (r *Reader) SameTypes(want []stream.Type) (n int, same bool) {
	n = int(r.Uvarint())
	same = r.Err == nil && n == len(want)
	for j := 0; j < n && r.Err == nil; j++ {
		t := stream.Type(r.Byte())
		same = same && t == want[j]
	}
	return n, same
}

// Done returns the first error, or an error if bytes are left over.
func (r *Reader) Done() error {
	if r.Err == nil && len(r.B) > 0 {
		r.Err = fmt.Errorf("%d unexpected trailing bytes", len(r.B))
	}
	return r.Err
}
