// Package statecodec owns the encoding of the connectors' and the
// two-phase-commit sinks' checkpoint state items: a format version byte,
// then fields that are unsigned varints, signed (zig-zag) varints, bytes,
// and strings written as a uvarint length and the bytes. The Append
// functions write the fields and Reader reads them back.
//
// These items are in committed checkpoints, so the bytes an Append
// function writes for a value never change; a caller whose item layout
// changes gives the item a new format version and keeps reading the old
// ones.
//
// statecodec imports the standard library only.
package statecodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Errors of a Reader, for errors.Is. Their text is a reason without a
// package prefix: callers wrap them in an error that names the state and
// the checkpoint ("checkpoint 4: corrupt positions state: truncated").
var (
	// ErrTruncated: the item ended inside a field, or a length or count
	// announced more than the bytes left.
	ErrTruncated = errors.New("truncated")
	// ErrVersion: the item's format version byte is one this build does
	// not read (see Reader.Version). The text begins the message of the
	// error that wraps it, which goes on with the version.
	ErrVersion = errors.New("unknown format version")
)

// MaxString is a bound on a string field for a caller whose strings
// have no tighter one of their own (see Reader.String).
const MaxString = 1 << 20

// Reader decodes a state item. It keeps the first error: after it every
// read returns the zero value and does nothing, so that a decoder reads
// all the fields and checks once, with Done. A Reader is not safe for
// concurrent use; it never modifies the item.
type Reader struct {
	b   []byte // the bytes not read yet
	err error
}

// NewReader returns a Reader of item.
func NewReader(item []byte) *Reader { return &Reader{b: item} }

// Err returns the first error, or nil.
func (r *Reader) Err() error { return r.err }

// Done returns the first error, or an error if bytes are left over.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d unexpected trailing bytes", len(r.b))
	}
	return r.err
}

// Version reads the format version byte and checks that it is between 1
// and newest, the newest version the caller reads; otherwise the Reader
// fails with ErrVersion. It returns the byte read, so that a caller that
// reads several versions decodes by it.
func (r *Reader) Version(newest byte) byte {
	v := r.Byte()
	if r.err == nil && (v == 0 || v > newest) {
		if newest == 1 {
			r.err = fmt.Errorf("%w %d (this build reads version 1)", ErrVersion, v)
		} else {
			r.err = fmt.Errorf("%w %d (this build reads versions 1 to %d)", ErrVersion, v, newest)
		}
	}
	return v
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = ErrTruncated
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Bool reads a byte written by AppendBool; any byte but 0 is true.
func (r *Reader) Bool() bool { return r.Byte() != 0 }

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = ErrTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = ErrTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Int reads a signed varint as an int.
func (r *Reader) Int() int { return int(r.Varint()) }

// Uint32 reads an unsigned varint that must fit in 32 bits.
func (r *Reader) Uint32() uint32 {
	v := r.Uvarint()
	if r.err == nil && v > math.MaxUint32 {
		r.err = fmt.Errorf("value %d does not fit in 32 bits", v)
	}
	return uint32(v)
}

// Count reads an unsigned varint that counts the elements that follow,
// each of which takes at least minSize bytes (at least 1). A count the
// bytes left cannot hold fails with ErrTruncated and reads as 0, so that
// a caller may allocate and loop by the count it returns.
func (r *Reader) Count(minSize int) int {
	n := r.Uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b))/uint64(max(minSize, 1)) {
		r.err = ErrTruncated
		return 0
	}
	return int(n)
}

// String reads a string of at most maxLen bytes (MaxString, or a bound
// of the caller's): a uvarint length and the bytes, which are copied. A
// longer string is an error, so that a corrupt length never makes the
// caller hold more than it expects.
func (r *Reader) String(maxLen int) string {
	n := r.Uvarint()
	if r.err != nil {
		return ""
	}
	switch {
	case n > uint64(len(r.b)):
		r.err = ErrTruncated
		return ""
	case n > uint64(max(maxLen, 0)):
		r.err = fmt.Errorf("a string of %d bytes, more than the limit of %d", n, maxLen)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// AppendUvarint appends v as an unsigned varint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendVarint appends v as a signed (zig-zag) varint.
func AppendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// AppendString appends s as a uvarint length and the bytes.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBool appends v as one byte, 1 or 0.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
