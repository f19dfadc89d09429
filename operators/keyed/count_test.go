package keyed

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/stream"
)

// openOn opens running_count on the named state backend, owning every key
// group.
func openOn(t testing.TB, backend string, keys []string) *dataflowtest.Harness {
	t.Helper()
	h, err := reopenOn(t, backend, keys, 0, nil)
	if err != nil {
		t.Fatalf("Open on %s: %v", backend, err)
	}
	return h
}

// reopenOn is openOn restoring st, the state of checkpoint id.
func reopenOn(t testing.TB, backend string, keys []string, id int64, st *stream.OperatorSnapshot) (*dataflowtest.Harness, error) {
	t.Helper()
	op, err := NewRunningCount(nil)
	if err != nil {
		t.Fatal(err)
	}
	octx := &stream.OperatorContext{OperatorUID: "count", Parallelism: 1, MaxParallelism: stream.DefaultMaxParallelism,
		KeyGroups: full, InputSchemas: []*stream.Schema{inSchema}, InputKeys: [][]string{keys},
		StateBackend: backend, LocalStateDir: t.TempDir()}
	h, err := dataflowtest.Open(context.Background(), op, octx, id, st)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { h.Close(true) })
	return h, nil
}

// TestRunningCountBackends runs running_count on each backend against the
// independent count, and restores each backend's snapshot into the other.
func TestRunningCountBackends(t *testing.T) {
	keys := []string{"k", "id"}
	data := gen(3, 3000)
	want := expectedCounts(data, keys)
	half := len(data) / 2
	backends := []string{stream.StateBackendHeap, stream.StateBackendPebble}
	for _, from := range backends {
		for _, to := range backends {
			if from == stream.StateBackendPebble && to == stream.StateBackendHeap {
				continue // Pebble snapshots are incremental files: see TestRunningCountPebbleIntoHeap
			}
			t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
				var rec recorder
				a := openOn(t, from, keys)
				feed(t, a, &rec, data[:half], full, keys)
				st := snap(t, a, 5)
				b, err := reopenOn(t, to, keys, 5, st)
				if err != nil {
					t.Fatal(err)
				}
				feed(t, b, &rec, data[half:], full, keys)
				if !reflect.DeepEqual(rec.rows, want) {
					t.Fatalf("counts differ from the independent computation: %s", firstDiff(rec.rows, want))
				}
			})
		}
	}
}

// TestRunningCountPebbleIntoHeap: incremental Pebble snapshots do not
// restore into a heap backend; the error says what to do.
func TestRunningCountPebbleIntoHeap(t *testing.T) {
	keys := []string{"id"}
	a := openOn(t, stream.StateBackendPebble, keys)
	feed(t, a, &recorder{}, gen(1, 200), full, keys)
	st := snap(t, a, 1)
	if len(st.Files) == 0 || len(st.Keyed) != 0 {
		t.Fatalf("pebble snapshot has %d files and %d key groups of chunks; want files only", len(st.Files), len(st.Keyed))
	}
	_, err := reopenOn(t, stream.StateBackendHeap, keys, 1, st)
	if err == nil || !strings.Contains(err.Error(), "state.backend: pebble") {
		t.Fatalf("restore of pebble files into heap = %v", err)
	}
}
