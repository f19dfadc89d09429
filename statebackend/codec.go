package statebackend

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
)

// Codec encodes the values of typed state for snapshots (and for backends
// that store bytes). Encodings are persisted in checkpoints: a codec must keep
// decoding what earlier versions of it wrote.
type Codec[T any] interface {
	// Append appends the encoding of v to dst and returns the extended
	// slice. The encoding need not be self-delimiting.
	Append(dst []byte, v T) []byte
	// Decode decodes exactly src (all of it) and returns an error for
	// input it did not write. The result must not alias src.
	Decode(src []byte) (T, error)
}

// CheckedCodec is implemented by a Codec whose encoding can fail (JSONCodec,
// for values that encoding/json rejects). Backends then get the error from
// Snapshot instead of a panic from Append.
type CheckedCodec[T any] interface {
	TryAppend(dst []byte, v T) ([]byte, error)
}

// Identified is implemented by a Codec that names itself; see ValueCodec.ID.
// Codecs without it are named by their Go type.
type Identified interface {
	ID() string
}

// Built-in codecs. Int64Codec writes a zig-zag varint, Float64Codec 8 bytes
// little endian, StringCodec and BytesCodec the bytes themselves, BoolCodec
// one byte (0 or 1).
var (
	Int64Codec   Codec[int64]   = int64Codec{}
	Float64Codec Codec[float64] = float64Codec{}
	StringCodec  Codec[string]  = stringCodec{}
	BytesCodec   Codec[[]byte]  = bytesCodec{}
	BoolCodec    Codec[bool]    = boolCodec{}
)

type int64Codec struct{}

func (int64Codec) ID() string                        { return "int64" }
func (int64Codec) Append(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }
func (int64Codec) Decode(src []byte) (int64, error) {
	v, n := binary.Varint(src)
	if n <= 0 || n != len(src) {
		return 0, fmt.Errorf("int64 codec: %d bytes are not one varint", len(src))
	}
	return v, nil
}

type float64Codec struct{}

func (float64Codec) ID() string { return "float64" }
func (float64Codec) Append(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}
func (float64Codec) Decode(src []byte) (float64, error) {
	if len(src) != 8 {
		return 0, fmt.Errorf("float64 codec: %d bytes, want 8", len(src))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(src)), nil
}

type stringCodec struct{}

func (stringCodec) ID() string                         { return "string" }
func (stringCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }
func (stringCodec) Decode(src []byte) (string, error)  { return string(src), nil }

type bytesCodec struct{}

func (bytesCodec) ID() string                         { return "bytes" }
func (bytesCodec) Append(dst []byte, v []byte) []byte { return append(dst, v...) }
func (bytesCodec) Decode(src []byte) ([]byte, error) {
	out := make([]byte, len(src)) // non-nil, also when empty
	copy(out, src)
	return out, nil
}

type boolCodec struct{}

func (boolCodec) ID() string { return "bool" }
func (boolCodec) Append(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}
func (boolCodec) Decode(src []byte) (bool, error) {
	if len(src) != 1 || src[0] > 1 {
		return false, fmt.Errorf("bool codec: want one byte 0 or 1, got %d bytes", len(src))
	}
	return src[0] == 1, nil
}

// JSONCodec encodes values with encoding/json. It is convenient for
// structured accumulators that are touched rarely; it is slow and allocates,
// so prefer a hand-written Codec for state that is snapshotted in bulk. Its
// ID contains T's type name, so renaming T conflicts with a table already
// registered under the old name in the same process (restored snapshots are
// not affected).
func JSONCodec[T any]() Codec[T] {
	return jsonCodec[T]{id: "json:" + reflect.TypeFor[T]().String()}
}

type jsonCodec[T any] struct{ id string }

func (c jsonCodec[T]) ID() string { return c.id }

// Append panics if encoding/json cannot encode v; backends call TryAppend.
func (c jsonCodec[T]) Append(dst []byte, v T) []byte {
	out, err := c.TryAppend(dst, v)
	if err != nil {
		panic(err)
	}
	return out
}

func (c jsonCodec[T]) TryAppend(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("%s codec: %w", c.id, err)
	}
	return append(dst, b...), nil
}

func (c jsonCodec[T]) Decode(src []byte) (T, error) {
	var v T
	if err := json.Unmarshal(src, &v); err != nil {
		return v, fmt.Errorf("%s codec: %w", c.id, err)
	}
	return v, nil
}

// Untyped returns the ValueCodec form of c, which backends use to serialise
// values of type T.
func Untyped[T any](c Codec[T]) ValueCodec {
	return untyped[T]{c: c, id: typedCodecID(c)}
}

func typedCodecID(c any) string {
	if n, ok := c.(Identified); ok {
		return n.ID()
	}
	return fmt.Sprintf("%T", c)
}

type untyped[T any] struct {
	c  Codec[T]
	id string
}

func (u untyped[T]) ID() string { return u.id }

func (u untyped[T]) AppendValue(dst []byte, v any) ([]byte, error) {
	t, ok := v.(T)
	if !ok && v != nil {
		return dst, fmt.Errorf("codec %s: value of type %T", u.id, v)
	}
	if cc, ok := u.c.(CheckedCodec[T]); ok {
		return cc.TryAppend(dst, t)
	}
	return u.c.Append(dst, t), nil
}

func (u untyped[T]) DecodeValue(src []byte) (any, error) {
	v, err := u.c.Decode(src)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// ListCodec returns the ValueCodec of a list ([]T) of elements encoded with
// c: each element as a uvarint length and the element's encoding. The
// encoding of a concatenation of lists is the concatenation of their
// encodings, so a backend that stores bytes can append to a list without
// reading it.
func ListCodec[T any](c Codec[T]) ValueCodec {
	return listCodec[T]{elem: c, id: "list:" + typedCodecID(c)}
}

type listCodec[T any] struct {
	elem Codec[T]
	id   string
}

func (l listCodec[T]) ID() string { return l.id }

func (l listCodec[T]) AppendValue(dst []byte, v any) ([]byte, error) {
	list, ok := v.([]T)
	if !ok && v != nil {
		return dst, fmt.Errorf("codec %s: value of type %T", l.id, v)
	}
	cc, checked := l.elem.(CheckedCodec[T])
	for _, e := range list {
		// Reserve one length byte, encode, and widen the prefix in place
		// when the element turns out to need more.
		at := len(dst)
		dst = append(dst, 0)
		var err error
		if checked {
			dst, err = cc.TryAppend(dst, e)
			if err != nil {
				return dst[:at], err
			}
		} else {
			dst = l.elem.Append(dst, e)
		}
		dst = FixLengthPrefix(dst, at)
	}
	return dst, nil
}

func (l listCodec[T]) DecodeValue(src []byte) (any, error) {
	var out []T
	for len(src) > 0 {
		n, w := binary.Uvarint(src)
		if w <= 0 || n > uint64(len(src)-w) {
			return nil, fmt.Errorf("codec %s: bad element length", l.id)
		}
		e, err := l.elem.Decode(src[w : w+int(n)])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		src = src[w+int(n):]
	}
	return out, nil
}

// FixLengthPrefix finishes a uvarint-length-prefixed field that was written
// by reserving one byte at dst[at] and appending the payload after it: it
// writes the payload's length at dst[at], moving the payload right if the
// length needs more than one byte. It saves encoding the payload twice.
func FixLengthPrefix(dst []byte, at int) []byte {
	n := len(dst) - at - 1
	if n < 0x80 {
		dst[at] = byte(n)
		return dst
	}
	var tmp [binary.MaxVarintLen64]byte
	w := binary.PutUvarint(tmp[:], uint64(n))
	dst = append(dst, tmp[:w-1]...) // grow by w-1
	copy(dst[at+w:], dst[at+1:at+1+n])
	copy(dst[at:], tmp[:w])
	return dst
}
