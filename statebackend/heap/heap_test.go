package heap_test

import (
	"fmt"
	"strings"
	"testing"

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
