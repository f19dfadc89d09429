package backends_test

import (
	"fmt"
	"path/filepath"

	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

func TestOpen(t *testing.T) {
	kg := stream.KeyGroupRange{Start: 0, End: 7}
	tests := []struct {
		backend string
		want    string
		wantErr bool
	}{
		{"", "heap", false},
		{stream.StateBackendHeap, "heap", false},
		{stream.StateBackendPebble, "pebble", false},
		{"rocksdb", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.backend, func(t *testing.T) {
			octx := &stream.OperatorContext{OperatorUID: "count/1", KeyGroups: kg, StateBackend: tt.backend, LocalStateDir: t.TempDir()}
			for range 2 { // a second open in the same directory works
				b, err := backends.Open(octx)
				if tt.wantErr {
					if err == nil {
						t.Fatal("want an error")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var got string
				switch b.(type) {
				case *heap.Backend:
					got = "heap"
				case *pebblestate.Backend:
					got = "pebble"
				}
				if got != tt.want {
					t.Fatalf("got %T, want %s", b, tt.want)
				}
				v, err := statebackend.GetValueState(b, "n", statebackend.Int64Codec)
				if err != nil {
					t.Fatal(err)
				}
				b.SetCurrentKey([]byte("k"), 3)
				v.Update(5)
				if n, ok := v.Value(); !ok || n != 5 {
					t.Fatalf("value = %d, %v; want 5", n, ok)
				}
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestFullSnapshots checks that a Pebble backend opened with FullSnapshots
// (state: {incremental: false}) is no IncrementalSnapshotter, and that its
// full snapshots restore into the heap backend and back: a job can switch
// backends through a full checkpoint.
func TestFullSnapshots(t *testing.T) {
	kg := stream.KeyGroupRange{Start: 0, End: 15}
	octx := func(backend string) *stream.OperatorContext {
		return &stream.OperatorContext{OperatorUID: "count", KeyGroups: kg, StateBackend: backend, FullSnapshots: true, LocalStateDir: t.TempDir()}
	}
	const keys = 500
	write := func(b statebackend.Backend, gen int64) {
		v, err := statebackend.GetValueState(b, "n", statebackend.Int64Codec)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			b.SetCurrentKey([]byte(fmt.Sprint("key-", i)), i%kg.Len())
			v.Update(int64(i) * gen)
		}
	}
	check := func(name string, b statebackend.Backend, gen int64) {
		t.Helper()
		v, err := statebackend.GetValueState(b, "n", statebackend.Int64Codec)
		if err != nil {
			t.Fatal(err)
		}
		var missing, wrong int
		for i := range keys {
			b.SetCurrentKey([]byte(fmt.Sprint("key-", i)), i%kg.Len())
			n, ok := v.Value()
			switch {
			case !ok:
				missing++
			case n != int64(i)*gen:
				wrong++
			}
		}
		if missing+wrong > 0 {
			t.Fatalf("%s: %d of %d keys missing, %d with a wrong value", name, missing, keys, wrong)
		}
	}
	snapshot := func(b statebackend.Backend, id int64) *stream.OperatorSnapshot {
		c := &stream.SnapshotContext{CheckpointID: id, KeyGroups: kg}
		if err := b.Snapshot(c); err != nil {
			t.Fatal(err)
		}
		if len(c.State.Files) > 0 {
			t.Fatalf("full snapshot lists %d files", len(c.State.Files))
		}
		return &c.State
	}
	restore := func(backend string, snap *stream.OperatorSnapshot, id int64) statebackend.Backend {
		b, err := backends.Open(octx(backend))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if err := b.Restore(&stream.RestoreContext{CheckpointID: id, KeyGroups: kg, State: snap}); err != nil {
			t.Fatal(err)
		}
		return b
	}

	peb, err := backends.Open(octx(stream.StateBackendPebble))
	if err != nil {
		t.Fatal(err)
	}
	defer peb.Close()
	if _, ok := peb.(statebackend.IncrementalSnapshotter); ok {
		t.Fatal("a Pebble backend opened with FullSnapshots is an IncrementalSnapshotter")
	}
	write(peb, 3)
	hp := restore(stream.StateBackendHeap, snapshot(peb, 1), 1)
	check("pebble → heap", hp, 3)
	write(hp, 7)
	peb2 := restore(stream.StateBackendPebble, snapshot(hp, 2), 2)
	if _, ok := peb2.(statebackend.IncrementalSnapshotter); ok {
		t.Fatal("a restored Pebble backend with FullSnapshots is an IncrementalSnapshotter")
	}
	check("heap → pebble", peb2, 7)

	// From incremental files to full snapshots: OpenFromSnapshots keeps
	// FullSnapshots too.
	inc, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(t.TempDir(), "db"), DeleteOnClose: true}, kg)
	if err != nil {
		t.Fatal(err)
	}
	defer inc.Close()
	write(inc, 11)
	dir := filepath.Join(t.TempDir(), "chk-3")
	if _, err := inc.SnapshotFiles(dir); err != nil {
		t.Fatal(err)
	}
	fromFiles, err := backends.OpenFromSnapshots(octx(stream.StateBackendPebble), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer fromFiles.Close()
	if _, ok := fromFiles.(statebackend.IncrementalSnapshotter); ok {
		t.Fatal("OpenFromSnapshots with FullSnapshots returned an IncrementalSnapshotter")
	}
	check("incremental files → pebble with full snapshots", fromFiles, 11)
	check("… → heap", restore(stream.StateBackendHeap, snapshot(fromFiles, 4), 4), 11)
}

// TestOpenStateCacheBytes checks that a subtask's cache budget is split
// between Pebble's block cache, the timer index and the write-back value
// cache, and that 0 keeps the defaults.
func TestOpenStateCacheBytes(t *testing.T) {
	for _, tc := range []struct {
		budget                       int64
		wantBlock, wantVC, wantTimer int64
	}{
		{0, pebblestate.DefaultCacheBytes, pebblestate.DefaultValueCacheBytes, pebblestate.DefaultTimerCacheBytes},
		{8 << 20, 4 << 20, 3 << 20, 1 << 20},
		{3, 1, 2, 1},
	} {
		octx := &stream.OperatorContext{OperatorUID: "count/1", KeyGroups: stream.KeyGroupRange{Start: 0, End: 7},
			StateBackend: stream.StateBackendPebble, LocalStateDir: t.TempDir(), StateCacheBytes: tc.budget}
		b, err := backends.Open(octx)
		if err != nil {
			t.Fatal(err)
		}
		o := b.(*pebblestate.Backend).Options()
		if o.CacheBytes != tc.wantBlock || o.ValueCacheBytes != tc.wantVC || o.TimerCacheBytes != tc.wantTimer {
			t.Errorf("budget %d: block cache %d, value cache %d, timer index %d; want %d, %d and %d", tc.budget,
				o.CacheBytes, o.ValueCacheBytes, o.TimerCacheBytes, tc.wantBlock, tc.wantVC, tc.wantTimer)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSharedCache checks that backends opened with a SharedCache use it
// as their block cache, work on after its creator released it, and that
// the others keep their own.
func TestSharedCache(t *testing.T) {
	c := backends.NewSharedCache(4 << 20)
	if c.Bytes() != 4<<20 {
		t.Fatalf("shared cache of %d bytes, want %d", c.Bytes(), 4<<20)
	}
	open := func(uid string, shared any) *pebblestate.Backend {
		octx := &stream.OperatorContext{OperatorUID: uid, KeyGroups: stream.KeyGroupRange{Start: 0, End: 7},
			StateBackend: stream.StateBackendPebble, LocalStateDir: t.TempDir(), StateCache: shared}
		b, err := backends.Open(octx)
		if err != nil {
			t.Fatal(err)
		}
		return b.(*pebblestate.Backend)
	}
	a, b, own := open("a", c), open("b", c), open("own", nil)
	c.Close()
	c.Close() // idempotent
	if a.Options().Cache == nil || a.Options().Cache != b.Options().Cache {
		t.Errorf("backends opened with one shared cache use block caches %p and %p", a.Options().Cache, b.Options().Cache)
	}
	if own.Options().Cache != nil {
		t.Errorf("a backend opened without a shared cache uses one")
	}
	for _, be := range []*pebblestate.Backend{a, b, own} {
		s, err := statebackend.GetValueState(be, "v", statebackend.Int64Codec)
		if err != nil {
			t.Fatal(err)
		}
		be.SetCurrentKey([]byte("k"), 3)
		s.Update(42)
		if _, err := be.Checkpoint(filepath.Join(t.TempDir(), "chk")); err != nil { // flushes to sstables
			t.Fatal(err)
		}
		if v, ok := s.Value(); !ok || v != 42 {
			t.Errorf("value %d, %v after a flush; want 42", v, ok)
		}
		if err := be.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
