package rowenc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/weirstream/weir/stream"
)

var schema = stream.MustSchema(
	stream.Field{Name: "i", Type: stream.TypeInt64},
	stream.Field{Name: "f", Type: stream.TypeFloat64},
	stream.Field{Name: "s", Type: stream.TypeString},
	stream.Field{Name: "b", Type: stream.TypeBool},
	stream.Field{Name: "t", Type: stream.TypeTimestamp},
)

var negZero = math.Copysign(0, -1)

// rows returns a batch with every type, nulls and a -0.
func rows() *stream.Batch {
	b := stream.NewBatch(schema, 4)
	b.AppendRow(int64(-3), 1.5, "héllo", true, int64(1_700_000_000_000))
	b.AppendRow(nil, negZero, "", false, nil)
	b.AppendRow(int64(math.MaxInt64), nil, nil, nil, int64(-1))
	b.AppendRow(int64(0), math.Inf(-1), "x", true, int64(0))
	return b
}

func TestLayout(t *testing.T) {
	b := rows()
	defer b.Release()
	tests := []struct {
		name  string
		col   int
		row   int
		exact bool
		want  []byte
	}{
		{"int", 0, 0, false, []byte{0, 5}},
		{"null int", 0, 1, false, []byte{1}},
		{"float", 1, 0, false, binary.LittleEndian.AppendUint64([]byte{0}, math.Float64bits(1.5))},
		{"-0 as key", 1, 1, false, binary.LittleEndian.AppendUint64([]byte{0}, 0)},
		{"-0 exact", 1, 1, true, binary.LittleEndian.AppendUint64([]byte{0}, 1<<63)},
		{"string", 2, 0, false, append([]byte{0, 6}, "héllo"...)},
		{"empty string", 2, 1, false, []byte{0, 0}},
		{"null string", 2, 2, false, []byte{1}},
		{"true", 3, 0, false, []byte{0, 1}},
		{"false", 3, 1, false, []byte{0, 0}},
		{"timestamp", 4, 2, false, []byte{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			if tt.exact {
				got = AppendExactValue([]byte{}, &b.Cols[tt.col], tt.row)
			} else {
				got = AppendValue([]byte{}, &b.Cols[tt.col], tt.row)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("got %x, want %x", got, tt.want)
			}
		})
	}
}

// TestRoundTrip writes every row with AppendExactValue and reads it back
// into fresh columns, which must hold the same values and nulls.
func TestRoundTrip(t *testing.T) {
	b := rows()
	defer b.Release()
	var buf []byte
	for i := range b.Len() {
		for j := range b.Cols {
			buf = AppendExactValue(buf, &b.Cols[j], i)
		}
	}
	out := stream.NewBatch(schema, b.Len())
	defer out.Release()
	r := &Reader{B: buf}
	for i := range b.Len() {
		for j := range out.Cols {
			r.Value(&out.Cols[j], i)
		}
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	out.SetLen(b.Len())
	for i := range b.Len() {
		for j := range b.Cols {
			want, got := b.Cols[j].Value(i), out.Cols[j].Value(i)
			if f, ok := want.(float64); ok && f == 0 {
				if g, ok := got.(float64); !ok || math.Signbit(f) != math.Signbit(g) {
					t.Errorf("row %d col %d: got %v, want %v with the same sign", i, j, got, want)
				}
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("row %d col %d: got %#v, want %#v", i, j, got, want)
			}
		}
	}
}

func TestHeader(t *testing.T) {
	types := []stream.Type{stream.TypeString, stream.TypeInt64}
	buf := AppendHeader(nil, 1, 300, types)
	want := []byte{1, 0xac, 0x02, 2, byte(stream.TypeString), byte(stream.TypeInt64)}
	if !bytes.Equal(buf, want) {
		t.Fatalf("header %x, want %x", buf, want)
	}
	tests := []struct {
		name  string
		want  []stream.Type
		n     int
		same  bool
		isErr bool
	}{
		{"same", types, 2, true, false},
		{"other type", []stream.Type{stream.TypeString, stream.TypeFloat64}, 2, false, false},
		{"fewer fields", types[:1], 2, false, false},
		{"more fields", append(types, stream.TypeBool), 2, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reader{B: buf}
			if v, g := r.Byte(), r.Uvarint(); v != 1 || g != 300 {
				t.Fatalf("version %d, key group %d", v, g)
			}
			n, same := r.SameTypes(tt.want)
			if n != tt.n || same != tt.same || (r.Err != nil) != tt.isErr {
				t.Fatalf("SameTypes = %d, %v (error %v), want %d, %v", n, same, r.Err, tt.n, tt.same)
			}
		})
	}
	r := &Reader{B: buf[:4]}
	r.Byte()
	r.Uvarint()
	if _, same := r.SameTypes(types); same || !errors.Is(r.Err, ErrTruncated) {
		t.Fatalf("truncated types: same %v, error %v", same, r.Err)
	}
}

func TestReaderErrors(t *testing.T) {
	str := &stream.Column{Type: stream.TypeString}
	flt := &stream.Column{Type: stream.TypeFloat64}
	tests := []struct {
		name string
		buf  []byte
		read func(r *Reader)
		want error
	}{
		{"byte of nothing", nil, func(r *Reader) { r.Byte() }, ErrTruncated},
		{"bad uvarint", []byte{0x80}, func(r *Reader) { r.Uvarint() }, ErrTruncated},
		{"bad varint", []byte{0xff}, func(r *Reader) { r.Varint() }, ErrTruncated},
		{"short uint64", make([]byte, 7), func(r *Reader) { r.Uint64() }, ErrTruncated},
		{"count above bytes left", []byte{3, 0, 0}, func(r *Reader) { r.Count() }, ErrTruncated},
		{"field longer than bytes left", []byte{5, 'a'}, func(r *Reader) { r.Bytes() }, ErrTruncated},
		{"string value cut", []byte{0, 4, 'a', 'b'}, func(r *Reader) { r.Value(str, 0) }, ErrTruncated},
		{"float value cut", []byte{0, 1, 2}, func(r *Reader) { r.Value(flt, 0) }, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reader{B: tt.buf}
			tt.read(r)
			if !errors.Is(r.Err, tt.want) {
				t.Fatalf("error %v, want %v", r.Err, tt.want)
			}
			// Later reads keep the first error and return zero values.
			if r.Varint() != 0 || r.Byte() != 0 || r.Bytes() != nil || !errors.Is(r.Done(), tt.want) {
				t.Fatal("read after an error did not return zero values and the first error")
			}
		})
	}
	r := &Reader{B: []byte{1, 2}}
	r.Byte()
	if err := r.Done(); err == nil || err.Error() != "1 unexpected trailing bytes" {
		t.Fatalf("Done with a byte left: %v", err)
	}
}

func TestNulls(t *testing.T) {
	c := &stream.Column{Type: stream.TypeInt64, Ints: make([]int64, 130)}
	c.SetNull(65, 66)
	if !IsNull(c, 65) || IsNull(c, 64) || IsNull(c, 129) {
		t.Fatal("IsNull wrong on a short bitmap")
	}
	if len(c.Nulls) != 2 {
		t.Fatalf("bitmap of %d words, want 2 (short) for the test to mean something", len(c.Nulls))
	}
	PadNulls(c, 130)
	if len(c.Nulls) != 3 || !IsNull(c, 65) {
		t.Fatalf("after PadNulls: %d words", len(c.Nulls))
	}
	none := &stream.Column{Type: stream.TypeInt64}
	PadNulls(none, 200)
	if none.Nulls != nil {
		t.Fatal("PadNulls gave a column without nulls a bitmap")
	}
}
