package statebackend

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// The behaviour of TTL state is tested on real backends by
// statebackendtest.RunTTL (see the heap backend's tests); these tests pin
// the persisted encoding and the configuration checks.

func TestTTLCodecEncoding(t *testing.T) {
	c := newTTLCodec(StringCodec)
	if got, want := c.ID(), "ttl(string)"; got != want {
		t.Errorf("ID() = %q, want %q", got, want)
	}
	if got, want := ListCodec[ttlEntry[int64]](newTTLCodec(Int64Codec)).ID(), "list:ttl(int64)"; got != want {
		t.Errorf("list codec ID() = %q, want %q", got, want)
	}
	// The tag, the timestamp big endian, the inner encoding.
	got := c.Append([]byte("prefix"), ttlEntry[string]{"hi", 0x0102030405060708})
	want := []byte("prefix\xf7\x01\x02\x03\x04\x05\x06\x07\x08hi")
	if !bytes.Equal(got, want) {
		t.Fatalf("Append = %x, want %x", got, want)
	}
	for _, e := range []ttlEntry[string]{{"", 0}, {"x", -1}, {"long value", math.MaxInt64}, {"neg", math.MinInt64}} {
		back, err := c.Decode(c.Append(nil, e))
		if err != nil || back != e {
			t.Errorf("round trip of %+v: %+v, %v", e, back, err)
		}
	}
	// Values without the TTL header are state written without TTL.
	for _, bad := range [][]byte{nil, []byte("plain"), []byte("a plain string value"), append([]byte{ttlTag}, 1, 2, 3)} {
		_, err := c.Decode(bad)
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "without TTL") {
			t.Errorf("Decode(%q): error %v, want one wrapping ErrConflict that says the state had no TTL", bad, err)
		}
	}
	// An inner decoding error is passed on, not taken for a conflict.
	if _, err := newTTLCodec(BoolCodec).Decode([]byte("\xf7\x00\x00\x00\x00\x00\x00\x00\x00\x07")); err == nil || errors.Is(err, ErrConflict) {
		t.Errorf("bad inner value: error %v, want the bool codec's", err)
	}
}

func TestTTLCodecCheckedInner(t *testing.T) {
	c := newTTLCodec(JSONCodec[float64]())
	dst := []byte("keep")
	out, err := c.TryAppend(dst, ttlEntry[float64]{math.NaN(), 1})
	if err == nil {
		t.Fatal("TryAppend of NaN with the JSON codec succeeded")
	}
	if !bytes.Equal(out, []byte("keep")) {
		t.Errorf("TryAppend after an error returned %q, want the original dst", out)
	}
	// Untyped sees a CheckedCodec, so backends get the error, not a panic.
	if _, err := Untyped[ttlEntry[float64]](c).AppendValue(nil, ttlEntry[float64]{math.Inf(1), 1}); err == nil {
		t.Error("AppendValue of +Inf with the JSON codec succeeded")
	}
}

func TestTTLConfigValidate(t *testing.T) {
	ok := []TTLConfig{
		DefaultTTLConfig(time.Millisecond),
		{TTL: time.Hour, Update: UpdateOnReadAndWrite, CleanupPerAccess: 0},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", c, err)
		}
	}
	bad := map[string]TTLConfig{
		"zero TTL":          {},
		"below 1ms":         {TTL: time.Microsecond},
		"unknown update":    {TTL: time.Second, Update: 7},
		"visibility":        {TTL: time.Second, Visibility: 1},
		"negative cleanup":  {TTL: time.Second, CleanupPerAccess: -1},
		"negative duration": {TTL: -time.Second},
	}
	for name, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	if got := DefaultTTLConfig(time.Minute); got.CleanupPerAccess != DefaultCleanupPerAccess || got.Update != UpdateOnCreateAndWrite || got.Clock != nil {
		t.Errorf("DefaultTTLConfig = %+v", got)
	}
}

func TestTTLExpiredSaturates(t *testing.T) {
	c := &ttlCore{ttl: 10}
	cases := []struct {
		ts, now int64
		want    bool
	}{
		{100, 109, false},
		{100, 110, true},
		{math.MaxInt64 - 5, math.MaxInt64 - 1, false}, // ts+ttl saturates at MaxInt64
		{math.MinInt64, 0, true},
	}
	for _, tc := range cases {
		if got := c.expired(tc.ts, tc.now); got != tc.want {
			t.Errorf("expired(%d, %d) = %v, want %v", tc.ts, tc.now, got, tc.want)
		}
	}
}
