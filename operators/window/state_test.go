package window

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/stream"
)

// TestKeyTableAgainstMap drives the open-addressing key table with few
// distinct hashes (so that keys collide and probe runs are long) through
// random inserts and removals, checking every lookup against a Go map.
func TestKeyTableAgainstMap(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "k", Type: stream.TypeInt64})
	kt := newKeyTable([]int{0}, []stream.Type{stream.TypeInt64}, 128)
	model := map[int64]int32{}
	hashOf := func(v int64) uint64 { return uint64(v%5)*0x9e3779b97f4a7c15 + uint64(v%3) } // heavy collisions
	rng := rand.New(rand.NewPCG(3, 4))
	b := stream.NewBatch(schema, 1)
	for step := 0; step < 20000; step++ {
		v := rng.Int64N(300)
		b.Release()
		b = batchOf(schema, []any{v})
		h := hashOf(v)
		got, gotInt := kt.find(h, b, 0), kt.findInt(h, v)
		want, ok := model[v]
		if !ok {
			want = -1
		}
		if got != want || gotInt != want {
			t.Fatalf("step %d: find(%d) = %d/%d, want %d", step, v, got, gotInt, want)
		}
		switch {
		case !ok:
			model[v] = kt.insert(h, b, 0)
		case rng.IntN(2) == 0:
			kt.remove(want)
			kt.free = append(kt.free, want)
			delete(model, v)
		}
		if kt.live() != len(model) {
			t.Fatalf("step %d: %d keys, want %d", step, kt.live(), len(model))
		}
	}
	b.Release()
}

// TestFloatKeys checks that -0 and +0 are one key and NaN equals NaN.
func TestFloatKeys(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "f", Type: stream.TypeFloat64})
	cfg := []byte(`{"size": "1s", "aggregates": [{"fn": "count", "as": "n"}]}`)
	w, err := NewTumblingWindow(cfg)
	if err != nil {
		t.Fatal(err)
	}
	openOp(t, w, func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeTumblingWindow, pc) }, cfg, schema, []string{"f"})
	b := batchOf(schema, []any{math.Copysign(0, -1)}, []any{0.0}, []any{math.NaN()}, []any{math.NaN()}, []any{1.5})
	b.Times = []int64{1, 2, 3, 4, 5}
	rec := newRecorder(t)
	if err := w.ProcessBatch(0, b, rec); err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessWatermark(stream.MaxWatermark, rec); err != nil {
		t.Fatal(err)
	}
	rows := rec.rows()
	if len(rows) != 3 {
		t.Fatalf("got %d keys, want 3 (0, NaN, 1.5):\n%s", len(rows), fmtRows(rows))
	}
	for _, r := range rows {
		f, n := r[0].(float64), r[3].(int64)
		if want := map[bool]int64{true: 1, false: 2}[f == 1.5]; n != want {
			t.Errorf("key %v counted %d, want %d", f, n, want)
		}
	}
}
