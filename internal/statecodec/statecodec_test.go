package statecodec

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// item is an item of every field kind, written by the Append functions.
func item() []byte {
	b := []byte{2}
	b = AppendUvarint(b, 300)
	b = AppendVarint(b, -2)
	b = AppendVarint(b, math.MinInt64)
	b = AppendString(b, "topic")
	b = AppendBool(b, true)
	b = AppendBool(b, false)
	b = AppendUvarint(b, math.MaxUint32)
	b = AppendUvarint(b, 2) // a count of two strings
	b = AppendString(b, "")
	return AppendString(b, "x")
}

// TestEncoding pins the bytes of item: they are in committed checkpoints,
// so they must never change.
func TestEncoding(t *testing.T) {
	want := []byte{
		2,          // version
		0xac, 0x02, // uvarint 300
		0x03,                                                       // varint -2
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // varint MinInt64
		5, 't', 'o', 'p', 'i', 'c', // string
		1, 0, // bools
		0xff, 0xff, 0xff, 0xff, 0x0f, // uvarint MaxUint32
		2, 0, 1, 'x', // count, strings "" and "x"
	}
	if got := item(); !bytes.Equal(got, want) {
		t.Fatalf("encoding changed:\ngot  %x\nwant %x", got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	r := NewReader(item())
	v := r.Version(2)
	u, i, minInt, s := r.Uvarint(), r.Int(), r.Varint(), r.String(5)
	yes, no, u32 := r.Bool(), r.Bool(), r.Uint32()
	n := r.Count(1)
	var strs []string
	for range n {
		strs = append(strs, r.String(MaxString))
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	if v != 2 || u != 300 || i != -2 || minInt != math.MinInt64 || s != "topic" || !yes || no || u32 != math.MaxUint32 ||
		len(strs) != 2 || strs[0] != "" || strs[1] != "x" {
		t.Fatalf("read %d %d %d %d %q %v %v %d %q", v, u, i, minInt, s, yes, no, u32, strs)
	}
}

// readAll reads item's fields as TestRoundTrip does.
func readAll(b []byte) error {
	r := NewReader(b)
	r.Version(2)
	r.Uvarint()
	r.Int()
	r.Varint()
	r.String(5)
	r.Bool()
	r.Bool()
	r.Uint32()
	for range r.Count(1) {
		r.String(MaxString)
	}
	return r.Done()
}

func TestTruncated(t *testing.T) {
	full := item()
	for n := range len(full) {
		if err := readAll(full[:n]); !errors.Is(err, ErrTruncated) {
			t.Errorf("item cut to %d of %d bytes: error %v, want ErrTruncated", n, len(full), err)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		item []byte
		read func(r *Reader)
		is   error  // errors.Is target, or nil
		text string // the error's text
	}{
		{"leftover bytes", []byte{1, 7, 8, 9}, func(r *Reader) { r.Version(1); r.Byte() }, nil, "2 unexpected trailing bytes"},
		{"version 0", []byte{0}, func(r *Reader) { r.Version(1) }, ErrVersion, "unknown format version 0 (this build reads version 1)"},
		{"newer version", []byte{4}, func(r *Reader) { r.Version(3) }, ErrVersion, "unknown format version 4 (this build reads versions 1 to 3)"},
		{"string at the limit", AppendString(nil, "abcd"), func(r *Reader) { r.String(4) }, nil, ""},
		{"string over the limit", AppendString(nil, "abcde"), func(r *Reader) { r.String(4) }, nil, "a string of 5 bytes, more than the limit of 4"},
		{"string longer than the item", []byte{9, 'a'}, func(r *Reader) { r.String(MaxString) }, ErrTruncated, "truncated"},
		{"uint32 overflow", AppendUvarint(nil, math.MaxUint32+1), func(r *Reader) { r.Uint32() }, nil, "value 4294967296 does not fit in 32 bits"},
		// Elements of two bytes each: a count of 3 needs 6 bytes. A
		// failed Count reads as 0, so the loop reads nothing.
		{"count over the bytes", []byte{3, 0, 0, 0, 0, 0}, readPairs, ErrTruncated, "truncated"},
		{"count that fits", []byte{3, 0, 0, 0, 0, 0, 0}, readPairs, nil, ""},
		{"overlong varint", bytes.Repeat([]byte{0xff}, 11), func(r *Reader) { r.Varint() }, ErrTruncated, "truncated"},
		// The first error stays: the later reads neither replace it nor
		// consume bytes.
		{"first error kept", []byte{1, 0x80}, func(r *Reader) { r.Version(1); r.Uvarint(); r.String(MaxString); r.Uint32() }, ErrTruncated, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.item)
			tc.read(r)
			err := r.Done()
			if r.Err() != err {
				t.Errorf("Err() = %v, Done() = %v", r.Err(), err)
			}
			switch {
			case tc.text == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.text == "":
				return
			case err == nil || err.Error() != tc.text:
				t.Fatalf("error %v, want %q", err, tc.text)
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("error %v is not %v", err, tc.is)
			}
		})
	}
}

// readPairs reads a count of elements of two bytes.
func readPairs(r *Reader) {
	for range r.Count(2) {
		r.Byte()
		r.Byte()
	}
}

// TestZeroAfterError checks that every read after the first error returns
// the zero value, so that a decoder can read a whole item and check once.
func TestZeroAfterError(t *testing.T) {
	r := NewReader(AppendString([]byte{7}, strings.Repeat("y", 3)))
	if v := r.Version(1); v != 7 || !errors.Is(r.Err(), ErrVersion) {
		t.Fatalf("Version = %d, %v", v, r.Err())
	}
	if s, n, b := r.String(MaxString), r.Count(1), r.Bool(); s != "" || n != 0 || b {
		t.Fatalf("reads after the error: %q %d %v", s, n, b)
	}
}

// TestCountTooLarge checks that a count the bytes cannot hold reads as 0,
// so that a caller never allocates by a corrupt count.
func TestCountTooLarge(t *testing.T) {
	r := NewReader(AppendUvarint(nil, math.MaxUint64))
	if n := r.Count(1); n != 0 || !errors.Is(r.Err(), ErrTruncated) {
		t.Fatalf("Count = %d, %v; want 0, ErrTruncated", n, r.Err())
	}
}
