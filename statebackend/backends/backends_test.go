package backends_test

import (
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

// TestOpenStateCacheBytes checks that a subtask's cache budget is split
// between Pebble's block cache and the write-back value cache, and that 0
// keeps the defaults.
func TestOpenStateCacheBytes(t *testing.T) {
	for _, tc := range []struct {
		budget            int64
		wantBlock, wantVC int64
	}{
		{0, pebblestate.DefaultCacheBytes, pebblestate.DefaultValueCacheBytes},
		{8 << 20, 4 << 20, 4 << 20},
		{3, 1, 2},
	} {
		octx := &stream.OperatorContext{OperatorUID: "count/1", KeyGroups: stream.KeyGroupRange{Start: 0, End: 7},
			StateBackend: stream.StateBackendPebble, LocalStateDir: t.TempDir(), StateCacheBytes: tc.budget}
		b, err := backends.Open(octx)
		if err != nil {
			t.Fatal(err)
		}
		o := b.(*pebblestate.Backend).Options()
		if o.CacheBytes != tc.wantBlock || o.ValueCacheBytes != tc.wantVC {
			t.Errorf("budget %d: block cache %d, value cache %d; want %d and %d", tc.budget, o.CacheBytes, o.ValueCacheBytes, tc.wantBlock, tc.wantVC)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
