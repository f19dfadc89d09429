package lifetime

import (
	"bytes"
	"slices"
	"testing"
)

// TestEntryCodecVersion1Unchanged: without winner fields an entry is
// written in the version 1 format of earlier releases, byte for byte, so
// their checkpoints restore; with them, version 2 round-trips.
func TestEntryCodecVersion1Unchanged(t *testing.T) {
	e := entry{has: true, key: 5, start: 100, end: 200, carry: []int64{10}, hasMax: true, max: 70, pending: []int64{150, 3}}
	want := []byte{1, 3, 10, 0xc8, 0x01, 0x90, 0x03, 1, 20, 0x8c, 0x01, 2, 0xac, 0x02, 6}
	got := entryCodec{}.Append(nil, e)
	if !bytes.Equal(got, want) {
		t.Fatalf("version 1 entry %x, want %x", got, want)
	}
	if d, err := (entryCodec{}).Decode(want); err != nil || d.max != 70 || !slices.Equal(d.pending, e.pending) {
		t.Fatalf("decode: %+v, %v", d, err)
	}

	c := entryCodec{winner: 2}
	e.maxTime, e.win, e.pending = 160, []int64{7, 160}, []int64{150, 3, 8, 150}
	d, err := c.Decode(c.Append(nil, e))
	if err != nil || d.maxTime != 160 || !slices.Equal(d.win, e.win) || !slices.Equal(d.pending, e.pending) || !slices.Equal(d.carry, e.carry) {
		t.Fatalf("version 2 round trip: %+v, %v", d, err)
	}
	if _, err := c.Decode(want); err == nil {
		t.Fatal("a version 2 codec decoded a version 1 entry")
	}
	if _, err := (entryCodec{}).Decode(c.Append(nil, e)); err == nil {
		t.Fatal("a version 1 codec decoded a version 2 entry")
	}
	e.pending = e.pending[:3] // not a whole tuple
	if _, err := c.Decode(c.Append(nil, e)); err == nil {
		t.Fatal("decoded pending events that are not whole (time, value, winner...) tuples")
	}
}
