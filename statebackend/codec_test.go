package statebackend_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/weirstream/weir/statebackend"
)

func roundTrip[T any](t *testing.T, c statebackend.Codec[T], vals ...T) {
	t.Helper()
	for _, v := range vals {
		enc := c.Append([]byte("prefix"), v)
		if !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatalf("Append(%v) did not append", v)
		}
		got, err := c.Decode(enc[len("prefix"):])
		if err != nil {
			t.Fatalf("Decode(Append(%v)): %v", v, err)
		}
		if !reflect.DeepEqual(got, v) && !(isNaN(v) && isNaN(got)) {
			t.Fatalf("Decode(Append(%v)) = %v", v, got)
		}
	}
}

func isNaN(v any) bool { f, ok := v.(float64); return ok && math.IsNaN(f) }

func TestCodecsRoundTrip(t *testing.T) {
	roundTrip(t, statebackend.Int64Codec, 0, 1, -1, 63, -64, 64, math.MaxInt64, math.MinInt64)
	roundTrip(t, statebackend.Float64Codec, 0, -0.5, math.Inf(1), math.NaN(), math.SmallestNonzeroFloat64)
	roundTrip(t, statebackend.StringCodec, "", "a", "héllo\x00\xff")
	roundTrip(t, statebackend.BytesCodec, []byte{}, []byte{0}, []byte("abc"))
	roundTrip(t, statebackend.BoolCodec, true, false)
	type acc struct {
		N    int
		Keys []string
		M    map[string]float64
	}
	roundTrip(t, statebackend.JSONCodec[acc](), acc{}, acc{N: 3, Keys: []string{"x"}, M: map[string]float64{"a": 1.5}})
}

func TestCodecsRejectBadInput(t *testing.T) {
	cases := []struct {
		name string
		dec  func([]byte) error
		in   []byte
	}{
		{"int64 empty", decErr(statebackend.Int64Codec), nil},
		{"int64 trailing", decErr(statebackend.Int64Codec), []byte{1, 2}},
		{"int64 unterminated", decErr(statebackend.Int64Codec), []byte{0x80}},
		{"float64 short", decErr(statebackend.Float64Codec), []byte{1, 2, 3}},
		{"bool 2", decErr(statebackend.BoolCodec), []byte{2}},
		{"bool empty", decErr(statebackend.BoolCodec), nil},
		{"json", decErr(statebackend.JSONCodec[struct{ A int }]()), []byte("{")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.dec(tc.in); err == nil {
				t.Errorf("Decode(%q) succeeded", tc.in)
			}
		})
	}
}

func decErr[T any](c statebackend.Codec[T]) func([]byte) error {
	return func(b []byte) error { _, err := c.Decode(b); return err }
}

func TestBytesCodecDoesNotAlias(t *testing.T) {
	src := []byte("abc")
	v, _ := statebackend.BytesCodec.Decode(src)
	src[0] = 'X'
	if string(v) != "abc" {
		t.Fatalf("decoded bytes alias the input: %q", v)
	}
}

func TestJSONCodecEncodeError(t *testing.T) {
	c := statebackend.Untyped(statebackend.JSONCodec[func()]())
	if _, err := c.AppendValue(nil, func() {}); err == nil {
		t.Fatal("encoding a func with the JSON codec succeeded")
	}
	if _, err := statebackend.Untyped(statebackend.Int64Codec).AppendValue(nil, "string"); err == nil {
		t.Fatal("int64 codec accepted a string")
	}
}

func TestCodecIDs(t *testing.T) {
	ids := map[string]string{
		statebackend.Untyped(statebackend.Int64Codec).ID():            "int64",
		statebackend.Untyped(statebackend.JSONCodec[[]int]()).ID():    "json:[]int",
		statebackend.ListCodec(statebackend.StringCodec).ID():         "list:string",
		statebackend.Untyped[int64](anonCodec{}).ID():                 "statebackend_test.anonCodec",
		statebackend.ListCodec[int64](anonCodec{}).ID():               "list:statebackend_test.anonCodec",
		statebackend.Untyped(statebackend.JSONCodec[struct{}]()).ID(): "json:struct {}",
	}
	for got, want := range ids {
		if got != want {
			t.Errorf("ID %q, want %q", got, want)
		}
	}
}

// anonCodec has no ID method: it is named by its type.
type anonCodec struct{}

func (anonCodec) Append(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}
func (anonCodec) Decode(src []byte) (int64, error) {
	if len(src) != 8 {
		return 0, errors.New("want 8 bytes")
	}
	return int64(binary.BigEndian.Uint64(src)), nil
}

func TestListCodec(t *testing.T) {
	c := statebackend.ListCodec(statebackend.StringCodec)
	long := string(bytes.Repeat([]byte("x"), 300))
	lists := [][]string{nil, {""}, {"a", "", "bc"}, {long, "a", long}}
	for _, l := range lists {
		enc, err := c.AppendValue(nil, l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.DecodeValue(enc)
		if err != nil {
			t.Fatal(err)
		}
		if gl, _ := got.([]string); !slices.Equal(gl, l) {
			t.Errorf("list %q decoded as %q", l, got)
		}
	}
	// Concatenated encodings decode as the concatenated list.
	a, _ := c.AppendValue(nil, []string{"a", long})
	ab, _ := c.AppendValue(a, []string{"b"})
	got, err := c.DecodeValue(ab)
	if err != nil || !slices.Equal(got.([]string), []string{"a", long, "b"}) {
		t.Errorf("concatenation decoded as %v, %v", got, err)
	}
	for _, bad := range [][]byte{{5, 'a'}, {0x80}} {
		if _, err := c.DecodeValue(bad); err == nil {
			t.Errorf("DecodeValue(%q) succeeded", bad)
		}
	}
}

func TestFixLengthPrefix(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 1 << 21} {
		payload := bytes.Repeat([]byte{0xAB}, n)
		dst := []byte("head")
		at := len(dst)
		dst = append(dst, 0)
		dst = append(dst, payload...)
		dst = statebackend.FixLengthPrefix(dst, at)
		got, w := binary.Uvarint(dst[at:])
		if w <= 0 || got != uint64(n) || !bytes.Equal(dst[at+w:], payload) || string(dst[:at]) != "head" {
			t.Errorf("n=%d: prefix %d (width %d), payload intact %v", n, got, w, bytes.Equal(dst[at+w:], payload))
		}
	}
}

func TestDescriptorValidate(t *testing.T) {
	c := statebackend.Untyped(statebackend.Int64Codec)
	cases := []struct {
		d  statebackend.Descriptor
		ok bool
	}{
		{statebackend.Descriptor{Name: "a", Kind: statebackend.KindValue, Codec: c}, true},
		{statebackend.Descriptor{Name: "a", Kind: statebackend.KindMap, Codec: c, UserKeyCodec: c}, true},
		{statebackend.Descriptor{Kind: statebackend.KindValue, Codec: c}, false},
		{statebackend.Descriptor{Name: "a", Kind: 9, Codec: c}, false},
		{statebackend.Descriptor{Name: "a", Kind: statebackend.KindList}, false},
		{statebackend.Descriptor{Name: "a", Kind: statebackend.KindMap, Codec: c}, false},
		{statebackend.Descriptor{Name: "a", Kind: statebackend.KindValue, Codec: c, UserKeyCodec: c}, false},
	}
	for _, tc := range cases {
		if err := tc.d.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v", tc.d, err)
		}
	}
	a := statebackend.Descriptor{Name: "a", Kind: statebackend.KindValue, Codec: c}
	b := statebackend.Descriptor{Name: "a", Kind: statebackend.KindValue, Codec: statebackend.Untyped(statebackend.StringCodec)}
	if err := a.Compatible(a); err != nil {
		t.Error(err)
	}
	if err := a.Compatible(b); !errors.Is(err, statebackend.ErrConflict) {
		t.Errorf("Compatible with another codec: %v", err)
	}
}
