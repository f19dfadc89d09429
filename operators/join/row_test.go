package join

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// TestRowEncoding: appendRow writes what rowenc writes, decoded.add and
// keyRowsCodec read it back, and the codec rejects rows of other types.
func TestRowEncoding(t *testing.T) {
	s := stream.MustSchema(
		stream.Field{Name: "i", Type: stream.TypeInt64},
		stream.Field{Name: "f", Type: stream.TypeFloat64},
		stream.Field{Name: "s", Type: stream.TypeString},
		stream.Field{Name: "b", Type: stream.TypeBool},
		stream.Field{Name: "t", Type: stream.TypeTimestamp})
	r := rand.New(rand.NewPCG(1, 1))
	b := stream.NewBatch(s, 200)
	for range 200 {
		vals := []any{r.Int64() - math.MaxInt64/2, r.NormFloat64(), string(make([]byte, r.IntN(300))), r.IntN(2) == 0, r.Int64N(1e12)}
		if r.IntN(5) == 0 {
			vals[1] = math.Copysign(0, -1)
		}
		for j := range vals {
			if r.IntN(6) == 0 {
				vals[j] = nil
			}
		}
		b.AppendRow(vals...)
		b.Times = append(b.Times, r.Int64N(1e12)-5e11)
	}
	codec := newKeyRowsCodec(newRowCodec(s), newRowCodec(s))
	var w blockWriter
	var v keyRows
	dec := newDecoded(s)
	for i := range b.Len() {
		want := binary.AppendVarint(nil, b.Times[i])
		for j := range b.Cols {
			want = rowenc.AppendExactValue(want, &b.Cols[j], i)
		}
		if got := appendRow(nil, b, i); !bytes.Equal(got, want) {
			t.Fatalf("row %d: appendRow wrote %x, rowenc %x", i, got, want)
		}
		v.sides[i%2] = w.add(v.sides[i%2], b, i)
	}
	v.win = -42
	got, err := codec.Decode(codec.Append(nil, v))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatal("keyRows does not round-trip")
	}
	// Decoding gives the rows back, in order.
	for side := range 2 {
		n := 0
		for p := got.sides[side]; len(p) > 0; n++ {
			var rw row
			rw, p = nextRow(p)
			k := dec.add(rw)
			i := 2*n + side
			if dec.time(k) != b.Times[i] {
				t.Fatalf("row %d: time %d, want %d", i, dec.time(k), b.Times[i])
			}
			for j := range b.Cols {
				if g, w := dec.cols[j].Value(int(k)), b.Cols[j].Value(i); !reflect.DeepEqual(g, w) {
					t.Fatalf("row %d column %d: %v, want %v", i, j, g, w)
				}
			}
		}
	}
	// Rows of other column types do not decode.
	other := newKeyRowsCodec(newRowCodec(stream.MustSchema(stream.Field{Name: "i", Type: stream.TypeString})), newRowCodec(s))
	if _, err := other.Decode(codec.Append(nil, v)); err == nil {
		t.Fatal("rows decoded with other column types")
	}
	enc := codec.Append(nil, v)
	if _, err := codec.Decode(enc[:len(enc)-1]); err == nil {
		t.Fatal("truncated rows decoded")
	}
}
