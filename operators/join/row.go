package join

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// row is one stored input row, encoded: its event time (a zig-zag varint;
// stream.MinWatermark for a row without one), then each column's value as
// rowenc.AppendExactValue writes it (a null byte, then the value). A row is
// immutable once made: state tables may hand the same slice out again, and
// output columns share its string bytes.
type row []byte

// time returns the row's event time.
func (r row) time() int64 {
	t, _ := binary.Varint(r)
	return t
}

// rowCodec is the state codec of the rows of one input schema. Decode
// validates against the schema, so that state written for other column
// types fails to restore instead of decoding as garbage.
type rowCodec struct {
	types []stream.Type
	id    string
}

func newRowCodec(s *stream.Schema) rowCodec {
	types := make([]stream.Type, s.Len())
	names := make([]string, s.Len())
	for i, f := range s.Fields {
		types[i] = f.Type
		names[i] = f.Type.String()
	}
	return rowCodec{types: types, id: "join.row(" + strings.Join(names, ",") + ")"}
}

func (c rowCodec) ID() string                      { return c.id }
func (c rowCodec) Append(dst []byte, r row) []byte { return append(dst, r...) }

func (c rowCodec) Decode(src []byte) (row, error) {
	if err := c.check(src); err != nil {
		return nil, fmt.Errorf("%s codec: %d bytes: %w", c.id, len(src), err)
	}
	return row(append([]byte(nil), src...)), nil
}

// check reports whether src is a row of c's column types.
func (c rowCodec) check(src []byte) error {
	r := &rowenc.Reader{B: src}
	r.Varint()
	for _, t := range c.types {
		if r.Byte() == 1 {
			continue
		}
		switch t {
		case stream.TypeInt64, stream.TypeTimestamp:
			r.Varint()
		case stream.TypeFloat64:
			r.Uint64()
		case stream.TypeString:
			r.Bytes()
		case stream.TypeBool:
			if r.Byte() > 1 && r.Err == nil {
				return fmt.Errorf("bool byte out of range")
			}
		}
	}
	return r.Done()
}

// appendRow appends the encoding of row i of b (see row) to dst: the
// values as rowenc.AppendExactValue writes them, in one loop.
func appendRow(dst []byte, b *stream.Batch, i int) []byte {
	t := stream.MinWatermark
	if len(b.Times) > i {
		t = b.Times[i]
	}
	dst = binary.AppendVarint(dst, t)
	w, bit := i>>6, uint64(1)<<(uint(i)&63)
	for j := range b.Cols {
		c := &b.Cols[j]
		if w < len(c.Nulls) && c.Nulls[w]&bit != 0 {
			dst = append(dst, 1)
			continue
		}
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			dst = binary.AppendVarint(append(dst, 0), c.Ints[i])
		case stream.TypeFloat64:
			dst = binary.LittleEndian.AppendUint64(append(dst, 0), math.Float64bits(c.Floats[i]))
		case stream.TypeString:
			dst = binary.AppendUvarint(append(dst, 0), uint64(len(c.Strs[i])))
			dst = append(dst, c.Strs[i]...)
		case stream.TypeBool:
			v := byte(0)
			if c.Bools[i] {
				v = 1
			}
			dst = append(dst, 0, v)
		default:
			dst = append(dst, 0)
		}
	}
	return dst
}

// rowArena encodes rows into large shared chunks, so that storing a row
// costs no allocation of its own. Chunks are never written where a row was
// handed out; a chunk lives while any of its rows (in state or in an output
// batch's strings) does.
type rowArena struct {
	cur []byte
	buf []byte
}

const arenaChunk = 64 << 10

// encode returns row i of b as a row.
func (a *rowArena) encode(b *stream.Batch, i int) row {
	buf := appendRow(a.buf[:0], b, i)
	a.buf = buf
	if len(buf) > arenaChunk/8 {
		return row(append([]byte(nil), buf...))
	}
	if cap(a.cur)-len(a.cur) < len(buf) {
		a.cur = make([]byte, 0, arenaChunk)
	}
	start := len(a.cur)
	a.cur = append(a.cur, buf...)
	return row(a.cur[start:len(a.cur):len(a.cur)])
}

// A block is a sequence of rows, each prefixed with its length (a
// uvarint): the rows of one input and key in arrival order, as keyRows
// holds them.

// blockWriter appends rows to blocks, encoding each into a scratch buffer
// first so that a block grows at most once per row.
type blockWriter struct{ buf []byte }

// add appends row i of b to block.
func (w *blockWriter) add(block []byte, b *stream.Batch, i int) []byte {
	w.buf = statebackend.FixLengthPrefix(appendRow(append(w.buf[:0], 0), b, i), 0)
	return append(block, w.buf...)
}

// nextRow splits the first row off a non-empty block (which is valid:
// written by appendBlockRow or checked by keyRowsCodec).
func nextRow(block []byte) (r row, rest []byte) {
	n, w := binary.Uvarint(block)
	end := w + int(n)
	return row(block[w:end:end]), block[end:]
}

// keyRows is the state of one key: the blocks of rows of input 0 and of
// input 1, and (window_join) the start of the window of the last timer set
// for the key. It is stored as one value, so that a row costs one read
// and one write of state. Values are never modified once stored: a new
// value appends to the blocks of the old one in place (past their length,
// which the old value does not see) or gets new blocks.
type keyRows struct {
	sides [2][]byte
	win   int64
}

// keyRowsCodec encodes a keyRows as the length of block 0 (uvarint), block
// 0, the window start (varint) and block 1. Decode checks every row
// against the inputs' column types and copies all in one allocation.
type keyRowsCodec struct {
	rows [2]rowCodec
	id   string
}

func newKeyRowsCodec(left, right rowCodec) keyRowsCodec {
	return keyRowsCodec{rows: [2]rowCodec{left, right}, id: "join.keyrows(" + left.id + "," + right.id + ")"}
}

func (c keyRowsCodec) ID() string { return c.id }

func (c keyRowsCodec) Append(dst []byte, v keyRows) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v.sides[0])))
	dst = append(dst, v.sides[0]...)
	dst = binary.AppendVarint(dst, v.win)
	return append(dst, v.sides[1]...)
}

func (c keyRowsCodec) Decode(src []byte) (keyRows, error) {
	r := &rowenc.Reader{B: src}
	left := r.Bytes()
	win := r.Varint()
	if r.Err != nil {
		return keyRows{}, fmt.Errorf("%s codec: %d bytes: %w", c.id, len(src), r.Err)
	}
	right := r.B
	for s, block := range [2][]byte{left, right} {
		for p := block; len(p) > 0; {
			br := &rowenc.Reader{B: p}
			rb := br.Bytes()
			if br.Err != nil {
				return keyRows{}, fmt.Errorf("%s codec: input %d: %w", c.id, s, br.Err)
			}
			if err := c.rows[s].check(rb); err != nil {
				return keyRows{}, fmt.Errorf("%s codec: input %d: row of %d bytes: %w", c.id, s, len(rb), err)
			}
			p = br.B
		}
	}
	buf := append([]byte(nil), left...)
	buf = append(buf, right...)
	return keyRows{sides: [2][]byte{buf[:len(left):len(left)], buf[len(left):]}, win: win}, nil
}

// decoded holds rows decoded column by column, for output building.
// Strings share the rows' bytes.
type decoded struct {
	cols  []stream.Column
	times []int64
	n     int
}

func newDecoded(s *stream.Schema) decoded {
	d := decoded{cols: make([]stream.Column, s.Len())}
	for i, f := range s.Fields {
		d.cols[i].Type = f.Type
	}
	return d
}

func (d *decoded) reset() {
	for j := range d.cols {
		c := &d.cols[j]
		c.Ints, c.Floats, c.Bools, c.Nulls = c.Ints[:0], c.Floats[:0], c.Bools[:0], nil
		clear(c.Strs) // do not pin rows
		c.Strs = c.Strs[:0]
	}
	d.times = d.times[:0]
	d.n = 0
}

// time returns the event time of decoded row i.
func (d *decoded) time(i int32) int64 { return d.times[i] }

// add appends r (a row of d's schema, valid: written by rowArena or checked
// by rowCodec) and returns its index.
func (d *decoded) add(r row) int32 {
	n := d.n
	t, w := binary.Varint(r)
	d.times = append(d.times, t)
	rowenc.DecodeRow(d.cols, int(n), r[w:])
	d.n++
	return int32(n)
}
