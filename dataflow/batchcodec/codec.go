// Package batchcodec is the wire encoding of a stream.Batch: what the network
// exchange puts in a frame and what spilled or persisted in-flight data will
// use. It is a small columnar format of Weir's own, designed so that encoding
// and decoding are copies over whole columns: no reflection, no per-row
// allocation.
//
// Layout (all integers little-endian; uvarint is encoding/binary's):
//
//	version  byte (1)
//	rows     uvarint
//	columns  uvarint
//	flags    byte (bit 0: the batch carries event times)
//	per column:
//	  type   byte (the stream.Type value)
//	  nulls  byte (0: none; 1: a bitmap of ceil(rows/64) uint64 words follows)
//	  values int64, timestamp, float64: rows × 8 bytes
//	         bool: ceil(rows/8) bytes, bit i of byte i/8 is row i
//	         string: uvarint total byte length, the bytes of all strings
//	                 back to back, then rows uvarint lengths
//	times    rows × 8 bytes, when flag bit 0 is set
//
// batchcodec imports only the standard library and package stream.
package batchcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

const version = 1

const flagTimes = 1

// maxRows bounds the row count a decoder accepts, so that a corrupt header
// cannot make it allocate without limit.
const maxRows = 1 << 26

// ErrCorrupt marks input that is not a valid encoding.
var ErrCorrupt = errors.New("batchcodec: corrupt batch")

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Append appends the encoding of b to dst and returns the extended slice.
// b is only read.
func Append(dst []byte, b *stream.Batch) []byte {
	n := b.Len()
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, uint64(len(b.Cols)))
	hasTimes := len(b.Times) == n && n > 0
	if hasTimes {
		dst = append(dst, flagTimes)
	} else {
		dst = append(dst, 0)
	}
	words := (n + 63) >> 6
	for i := range b.Cols {
		c := &b.Cols[i]
		dst = append(dst, byte(c.Type))
		if c.Nulls != nil && anySet(c.Nulls, words) {
			dst = append(dst, 1)
			for w := 0; w < words; w++ {
				var v uint64
				if w < len(c.Nulls) {
					v = c.Nulls[w]
				}
				if w == words-1 && n&63 != 0 {
					v &= (1 << (uint(n) & 63)) - 1
				}
				dst = binary.LittleEndian.AppendUint64(dst, v)
			}
		} else {
			dst = append(dst, 0)
		}
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			dst = appendInt64s(dst, c.Ints[:n])
		case stream.TypeFloat64:
			dst = appendFloat64s(dst, c.Floats[:n])
		case stream.TypeBool:
			dst = appendBools(dst, c.Bools[:n])
		case stream.TypeString:
			dst = appendStrings(dst, c.Strs[:n])
		}
	}
	if hasTimes {
		dst = appendInt64s(dst, b.Times[:n])
	}
	return dst
}

func anySet(words []uint64, n int) bool {
	for i := 0; i < n && i < len(words); i++ {
		if words[i] != 0 {
			return true
		}
	}
	return false
}

func appendInt64s(dst []byte, v []int64) []byte {
	if len(v) == 0 {
		return dst
	}
	if littleEndian {
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)...)
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(x))
	}
	return dst
}

func appendFloat64s(dst []byte, v []float64) []byte {
	if len(v) == 0 {
		return dst
	}
	if littleEndian {
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)...)
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
	}
	return dst
}

func appendBools(dst []byte, v []bool) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, (len(v)+7)>>3)...)
	out := dst[start:]
	for i, x := range v {
		if x {
			out[i>>3] |= 1 << (uint(i) & 7)
		}
	}
	return dst
}

func appendStrings(dst []byte, v []string) []byte {
	total := 0
	for _, s := range v {
		total += len(s)
	}
	dst = binary.AppendUvarint(dst, uint64(total))
	for _, s := range v {
		dst = append(dst, s...)
	}
	for _, s := range v {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
	}
	return dst
}

// Decode decodes data, which must hold exactly one encoded batch, into a new
// batch (from the stream batch pool) of schema. The column types must match
// the schema's. The caller owns the returned batch; it does not alias data.
// Decoding allocates per column (at most one string block and one null bitmap
// each), never per row.
func Decode(data []byte, schema *stream.Schema) (*stream.Batch, error) {
	d := decoder{buf: data}
	if v := d.byte(); v != version {
		if d.err != nil {
			return nil, d.err
		}
		return nil, fmt.Errorf("%w: version %d, this build reads version %d; upgrade the older taskmanager", ErrCorrupt, v, version)
	}
	rows64 := d.uvarint()
	cols64 := d.uvarint()
	flags := d.byte()
	if d.err != nil {
		return nil, d.err
	}
	if rows64 > maxRows {
		return nil, fmt.Errorf("%w: %d rows exceeds the limit of %d", ErrCorrupt, rows64, maxRows)
	}
	if cols64 != uint64(len(schema.Fields)) {
		return nil, fmt.Errorf("%w: %d columns, schema %s has %d", ErrCorrupt, cols64, schema, len(schema.Fields))
	}
	if flags&^flagTimes != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	n := int(rows64)
	b := stream.NewBatch(schema, 0)
	words := (n + 63) >> 6
	for i := range b.Cols {
		c := &b.Cols[i]
		if t := stream.Type(d.byte()); t != schema.Fields[i].Type {
			if d.err == nil {
				d.err = fmt.Errorf("%w: column %q has type %v, schema says %v", ErrCorrupt, schema.Fields[i].Name, t, schema.Fields[i].Type)
			}
			break
		}
		switch d.byte() {
		case 0:
		case 1:
			raw := d.take(words * 8)
			if d.err != nil {
				break
			}
			c.Nulls = make([]uint64, words)
			for w := range c.Nulls {
				c.Nulls[w] = binary.LittleEndian.Uint64(raw[w*8:])
			}
		default:
			if d.err == nil {
				d.err = fmt.Errorf("%w: column %q: bad null marker", ErrCorrupt, schema.Fields[i].Name)
			}
		}
		if d.err != nil {
			break
		}
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			c.Ints = d.int64s(c.Ints, n)
		case stream.TypeFloat64:
			c.Floats = d.float64s(c.Floats, n)
		case stream.TypeBool:
			c.Bools = d.bools(c.Bools, n)
		case stream.TypeString:
			c.Strs = d.strings(c.Strs, n)
		}
		if d.err != nil {
			break
		}
	}
	if d.err == nil && flags&flagTimes != 0 {
		b.Times = d.int64s(b.Times, n)
	}
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	if d.err != nil {
		b.Release()
		return nil, d.err
	}
	b.SetLen(n)
	return b, nil
}

type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated", ErrCorrupt)
	}
	d.buf = nil
}

func (d *decoder) byte() byte {
	if len(d.buf) == 0 {
		d.fail()
		return 0
	}
	v := d.buf[0]
	d.buf = d.buf[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, k := binary.Uvarint(d.buf)
	if k <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[k:]
	return v
}

func (d *decoder) take(k int) []byte {
	if k < 0 || k > len(d.buf) {
		d.fail()
		return nil
	}
	v := d.buf[:k]
	d.buf = d.buf[k:]
	return v
}

func (d *decoder) int64s(dst []int64, n int) []int64 {
	raw := d.take(n * 8)
	if d.err != nil {
		return dst[:0]
	}
	dst = resize(dst, n)
	if littleEndian && n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), n*8), raw)
		return dst
	}
	for i := range dst {
		dst[i] = int64(binary.LittleEndian.Uint64(raw[i*8:]))
	}
	return dst
}

func (d *decoder) float64s(dst []float64, n int) []float64 {
	raw := d.take(n * 8)
	if d.err != nil {
		return dst[:0]
	}
	dst = resize(dst, n)
	if littleEndian && n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), n*8), raw)
		return dst
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[i*8:]))
	}
	return dst
}

func (d *decoder) bools(dst []bool, n int) []bool {
	raw := d.take((n + 7) >> 3)
	if d.err != nil {
		return dst[:0]
	}
	dst = resize(dst, n)
	for i := range dst {
		dst[i] = raw[i>>3]&(1<<(uint(i)&7)) != 0
	}
	return dst
}

func (d *decoder) strings(dst []string, n int) []string {
	total := d.uvarint()
	if d.err != nil {
		return dst[:0]
	}
	if total > uint64(len(d.buf)) {
		d.fail()
		return dst[:0]
	}
	// Every length takes at least one byte.
	if uint64(n) > uint64(len(d.buf))-total {
		d.fail()
		return dst[:0]
	}
	block := string(d.take(int(total))) // the column's one allocation
	dst = resize(dst, n)
	off := 0
	for i := range dst {
		l, k := binary.Uvarint(d.buf)
		if k <= 0 || l > uint64(len(block)-off) {
			clear(dst)
			d.fail()
			return dst[:0]
		}
		d.buf = d.buf[k:]
		dst[i] = block[off : off+int(l)]
		off += int(l)
	}
	if off != len(block) {
		clear(dst)
		if d.err == nil {
			d.err = fmt.Errorf("%w: string lengths sum to %d, block holds %d bytes", ErrCorrupt, off, len(block))
		}
		return dst[:0]
	}
	return dst
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
