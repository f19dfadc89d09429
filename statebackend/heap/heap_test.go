package heap_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/statebackend/statebackendtest"
	"github.com/weirstream/weir/stream"
)

func TestConformance(t *testing.T) {
	statebackendtest.RunConformance(t, func(kg stream.KeyGroupRange) statebackend.Backend {
		return heap.New(kg)
	})
}

// TestSizeBytesReturnsToEmpty checks the heap backend's exact accounting:
// once every entry is gone, the estimate is what it was before.
func TestSizeBytesReturnsToEmpty(t *testing.T) {
	b := heap.New(stream.KeyGroupRange{Start: 0, End: 3})
	v, _ := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
	l, _ := statebackend.GetListState(b, "l", statebackend.StringCodec)
	m, _ := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
	empty := b.SizeBytes()
	for i := range 100 {
		b.SetCurrentKey([]byte(fmt.Sprint("key", i)), i%4)
		v.Update(int64(i))
		l.Add("x")
		for j := range i % 5 {
			m.Put(fmt.Sprint(j), 1)
		}
	}
	if b.SizeBytes() <= empty {
		t.Fatalf("SizeBytes did not grow: %d", b.SizeBytes())
	}
	for i := range 100 {
		b.SetCurrentKey([]byte(fmt.Sprint("key", i)), i%4)
		v.Clear()
		l.Clear()
		if i%2 == 0 {
			m.Clear()
		} else {
			m.Range(func(k string, _ int64) bool { m.Remove(k); return true })
		}
	}
	if got := b.SizeBytes(); got != empty {
		t.Fatalf("SizeBytes after removing everything = %d, want %d", got, empty)
	}
}

// TestRestoreErrorNamesTheChunk checks that a corrupt chunk's error names the
// checkpoint, key group and reason.
func TestRestoreErrorNamesTheChunk(t *testing.T) {
	b := heap.New(stream.KeyGroupRange{Start: 0, End: 7})
	err := b.Restore(&stream.RestoreContext{
		CheckpointID: 42,
		KeyGroups:    b.KeyGroups(),
		State:        &stream.OperatorSnapshot{Keyed: map[int][][]byte{5: {[]byte("WKG\x01garbage!")}}},
	})
	if err == nil {
		t.Fatal("Restore accepted garbage")
	}
	for _, want := range []string{"checkpoint 42", "key group 5", "checksum mismatch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

// TestRestoredDecodeErrorNamesTheKey checks the error when restored state does
// not decode with the codec it is asked for with.
func TestRestoredDecodeErrorNamesTheKey(t *testing.T) {
	r := stream.KeyGroupRange{Start: 0, End: 1}
	b := heap.New(r)
	s, _ := statebackend.GetValueState(b, "count", statebackend.StringCodec)
	b.SetCurrentKey([]byte("user-7"), 1)
	s.Update("seven")
	c := &stream.SnapshotContext{KeyGroups: r}
	if err := b.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	b2 := heap.New(r)
	if err := b2.Restore(&stream.RestoreContext{KeyGroups: r, State: &c.State}); err != nil {
		t.Fatal(err)
	}
	_, err := statebackend.GetValueState(b2, "count", statebackend.BoolCodec)
	if err == nil {
		t.Fatal("decoding a string as bool succeeded")
	}
	for _, want := range []string{`"count"`, "key group 1", `"user-7"`, "bool"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestTTL(t *testing.T) {
	statebackendtest.RunTTL(t, func(kg stream.KeyGroupRange) statebackend.Backend {
		return heap.New(kg)
	})
}

// TestTTLSnapshotLeavesOutExpired checks that the heap backend honours
// Descriptor.SnapshotFilter: a snapshot leaves out expired values, list
// elements and map entries, and the live state keeps them until cleanup.
func TestTTLSnapshotLeavesOutExpired(t *testing.T) {
	clk := statebackendtest.NewManualClock(1000)
	cfg := statebackend.TTLConfig{TTL: 100 * time.Millisecond, Clock: clk.Now} // no incremental cleanup
	ttl := statebackend.WithTTL(cfg)
	r := stream.KeyGroupRange{Start: 0, End: 3}
	b := heap.New(r)
	defer b.Close()
	v, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec, ttl)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := statebackend.GetListState(b, "l", statebackend.StringCodec, ttl)
	m, _ := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec, ttl)
	b.SetCurrentKey([]byte("old"), 0)
	v.Update(1)
	l.Add("old")
	m.Put("old", 1)
	b.SetCurrentKey([]byte("mixed"), 1)
	l.Add("old")
	m.Put("old", 1)
	clk.Advance(60)
	l.Add("new")
	m.Put("new", 2)
	b.SetCurrentKey([]byte("new"), 2)
	v.Update(2)
	clk.Advance(40) // "old" values are 100ms old: expired

	keys := func(b statebackend.Backend, table string) []string {
		var out []string
		for kg := r.Start; kg <= r.End; kg++ {
			b.Keys(table, kg, func(k []byte) bool { out = append(out, string(k)); return true })
		}
		slices.Sort(out)
		return out
	}
	c := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: r}
	if err := b.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	b2 := heap.New(r)
	defer b2.Close()
	if err := b2.Restore(&stream.RestoreContext{CheckpointID: 1, KeyGroups: r, State: &c.State}); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string][]string{"v": {"new"}, "l": {"mixed"}, "m": {"mixed"}} {
		if got := keys(b2, table); !slices.Equal(got, want) {
			t.Errorf("restored table %s has keys %q, want %q", table, got, want)
		}
	}
	// Look at the stored elements and entries with codecs that accept the
	// TTL encoding as bytes.
	b2.SetCurrentKey([]byte("mixed"), 1)
	rawList, err := statebackend.GetListState(b2, "l", statebackend.BytesCodec)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rawList.Get()); n != 1 {
		t.Errorf("restored list has %d elements, want 1 (the expired one left out)", n)
	}
	rawMap, err := statebackend.GetMapState(b2, "m", statebackend.StringCodec, statebackend.BytesCodec)
	if err != nil {
		t.Fatal(err)
	}
	var uks []string
	rawMap.Range(func(k string, _ []byte) bool { uks = append(uks, k); return true })
	if !slices.Equal(uks, []string{"new"}) {
		t.Errorf("restored map has user keys %q, want [new]", uks)
	}
	// The live state is not changed by the snapshot.
	if got := keys(b, "v"); !slices.Equal(got, []string{"new", "old"}) {
		t.Errorf("live value table has keys %q after the snapshot, want [new old]", got)
	}
}
