package window

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

var ckSchema = stream.MustSchema(
	stream.Field{Name: "k", Type: stream.TypeString},
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "v", Type: stream.TypeInt64},
	stream.Field{Name: "x", Type: stream.TypeFloat64},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
)

// ckBatches returns n rows of ckSchema in batches of 50: keys from small
// pools, some null values, timestamps rising about 7ms per row with up to
// 400ms of disorder (so some records are late).
func ckBatches(seed uint64, n int) []*stream.Batch {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []*stream.Batch
	for i := 0; i < n; {
		b := stream.NewBatch(ckSchema, 50)
		for j := 0; j < 50 && i < n; j, i = j+1, i+1 {
			var v, x any = rng.Int64N(100) - 20, rng.Float64() * 10
			if rng.IntN(10) == 0 {
				v = nil
			}
			if rng.IntN(10) == 0 {
				x = nil
			}
			k := any(fmt.Sprintf("k%d", rng.IntN(5)))
			if rng.IntN(50) == 0 {
				k = nil
			}
			b.AppendRow(k, rng.Int64N(23), v, x, int64(1_000_000+7*i-rng.IntN(400)))
		}
		out = append(out, b)
	}
	return out
}

// copyBatch returns a copy of b (the operators take ownership of batches).
func copyBatch(b *stream.Batch) *stream.Batch {
	c := stream.NewBatch(b.Schema, b.Len())
	for i := range b.Len() {
		c.AppendRow(b.Row(i)...)
	}
	return c
}

type ckCase struct {
	name    string
	op      string
	keys    []string
	ooo     string
	config  string
	rescale bool
}

var ckCases = []ckCase{
	{"tumbling two-field key", TypeTumblingWindow, []string{"k", "id"}, "200ms",
		`{"size": "1s", "aggregates": [{"fn": "count"}, {"fn": "sum", "field": "v"}, {"fn": "min", "field": "x"}, {"fn": "max", "field": "v"}, {"fn": "avg", "field": "x"}]}`, true},
	{"sliding int key with lateness", TypeSlidingWindow, []string{"id"}, "100ms",
		`{"size": "3s", "slide": "1s", "allowedLateness": "300ms", "aggregates": [{"fn": "count", "field": "v"}, {"fn": "sum", "field": "x"}, {"fn": "min", "field": "v"}, {"fn": "max", "field": "x"}, {"fn": "avg", "field": "v"}]}`, true},
	{"tumbling global", TypeTumblingWindow, nil, "0s",
		`{"size": "500ms", "offset": "100ms", "aggregates": [{"fn": "count"}, {"fn": "sum", "field": "v"}]}`, false},
}

// pipeline is a watermarks operator feeding window subtasks: batches are
// routed by key group as a keyBy edge would, watermarks go to all.
type pipeline struct {
	t       *testing.T
	wmOp    *Watermarks
	windows []*Window
	ranges  []stream.KeyGroupRange
	chains  []*chain
	outs    []*recorder
	keyCols []int
}

func newPipeline(t *testing.T, tc ckCase, ranges []stream.KeyGroupRange) *pipeline {
	p := &pipeline{t: t, ranges: ranges}
	wmCfg := []byte(`{"timestampField": "ts", "maxOutOfOrderness": "` + tc.ooo + `"}`)
	wmOp, err := NewWatermarks(wmCfg)
	if err != nil {
		t.Fatal(err)
	}
	openSub(t, wmOp, planWatermarks, wmCfg, nil, stream.KeyGroupRange{Start: 0, End: -1}, 0, 1)
	p.wmOp = wmOp
	plan := func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(tc.op, pc) }
	for i, r := range ranges {
		w, err := newWindow(tc.op, []byte(tc.config))
		if err != nil {
			t.Fatal(err)
		}
		openSub(t, w, plan, []byte(tc.config), tc.keys, r, i, len(ranges))
		rec := newRecorder(t)
		p.windows = append(p.windows, w)
		p.outs = append(p.outs, rec)
		p.chains = append(p.chains, newChain(t, w, rec))
	}
	p.keyCols, _ = ckSchema.Lookup(tc.keys...)
	return p
}

func openSub(t *testing.T, op stream.Operator, plan func(*stream.PlanContext) (*stream.Schema, error), config []byte, keys []string, r stream.KeyGroupRange, sub, par int) {
	t.Helper()
	out, err := plan(&stream.PlanContext{UID: "op", Config: config, Inputs: []stream.PlanInput{{Schema: ckSchema, KeyFields: keys}}, Parallelism: par})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	octx := &stream.OperatorContext{
		OperatorUID: "op", Subtask: sub, Parallelism: par, MaxParallelism: stream.DefaultMaxParallelism, KeyGroups: r,
		InputSchemas: []*stream.Schema{ckSchema}, InputKeys: [][]string{keys}, OutputSchema: out, Config: config,
	}
	if err := op.Open(context.Background(), octx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { op.Close() })
}

// Collect routes the watermarks operator's output to the windows.
func (p *pipeline) Collect(b *stream.Batch) {
	if len(p.windows) == 1 {
		p.chains[0].Collect(b)
		return
	}
	hashes := make([]uint64, b.Len())
	stream.HashKeys(b, p.keyCols, hashes)
	parts := make([]*stream.Batch, len(p.windows))
	for i := range b.Len() {
		kg := stream.KeyGroupForHash(hashes[i], stream.DefaultMaxParallelism)
		for s, r := range p.ranges {
			if r.Contains(kg) {
				if parts[s] == nil {
					parts[s] = stream.NewBatch(b.Schema, 0)
				}
				parts[s].AppendRow(b.Row(i)...)
				parts[s].Times = append(parts[s].Times, b.Times[i])
			}
		}
	}
	b.Release()
	for s, part := range parts {
		if part != nil {
			p.chains[s].Collect(part)
		}
	}
}

func (p *pipeline) EmitWatermark(wm int64) {
	for _, c := range p.chains {
		c.EmitWatermark(wm)
	}
}

func (p *pipeline) feed(batches []*stream.Batch) {
	for _, b := range batches {
		if err := p.wmOp.ProcessBatch(0, copyBatch(b), p); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *pipeline) finish() {
	if err := p.wmOp.ProcessWatermark(stream.MaxWatermark, p); err != nil {
		p.t.Fatal(err)
	}
	for i, w := range p.windows {
		if err := w.Finish(p.outs[i]); err != nil {
			p.t.Fatal(err)
		}
	}
}

// snapshotAll snapshots the watermarks operator and the one window.
func (p *pipeline) snapshot(id int64) (wm, win *stream.OperatorSnapshot) {
	p.t.Helper()
	c1 := &stream.SnapshotContext{CheckpointID: id, KeyGroups: stream.KeyGroupRange{Start: 0, End: -1}}
	if err := p.wmOp.SnapshotState(c1); err != nil {
		p.t.Fatal(err)
	}
	c2 := &stream.SnapshotContext{CheckpointID: id, KeyGroups: p.ranges[0]}
	if err := p.windows[0].SnapshotState(c2); err != nil {
		p.t.Fatal(err)
	}
	return &c1.State, &c2.State
}

func (p *pipeline) restore(id int64, wm, win *stream.OperatorSnapshot) {
	p.t.Helper()
	if err := p.wmOp.RestoreState(&stream.RestoreContext{CheckpointID: id, State: wm}); err != nil {
		p.t.Fatal(err)
	}
	for i, w := range p.windows {
		if err := w.RestoreState(&stream.RestoreContext{CheckpointID: id, KeyGroups: p.ranges[i], State: win}); err != nil {
			p.t.Fatal(err)
		}
	}
}

var fullRange = []stream.KeyGroupRange{{Start: 0, End: stream.DefaultMaxParallelism - 1}}

func TestWindowCheckpointRoundTrip(t *testing.T) {
	for _, tc := range ckCases {
		t.Run(tc.name, func(t *testing.T) {
			data := ckBatches(uint64(len(tc.name)), 4000)
			defer func() {
				for _, b := range data {
					b.Release()
				}
			}()
			ref := newPipeline(t, tc, fullRange)
			ref.feed(data)
			ref.finish()
			want := ref.outs[0].rows()
			if len(want) < 50 {
				t.Fatalf("the reference run produced only %d rows", len(want))
			}
			// Independent check of the reference: every record is either
			// counted in some window or dropped as late.
			if strings.Contains(tc.config, `{"fn": "count"}`) {
				var counted int64
				for _, r := range want {
					counted += r[len(tc.keys)+2].(int64)
				}
				if n := 4000 - ref.windows[0].LateRecordsDropped(); counted != n {
					t.Fatalf("windows counted %d records, want %d", counted, n)
				}
			}

			for _, half := range []int{1, len(data) / 2, len(data) - 1} {
				a := newPipeline(t, tc, fullRange)
				a.feed(data[:half])
				wmSnap, winSnap := a.snapshot(9)
				got := a.outs[0].rows()
				a.feed(data[half : half+1]) // output after the snapshot is lost with the "crash"

				b := newPipeline(t, tc, fullRange)
				b.restore(9, wmSnap, winSnap)
				b.feed(data[half:])
				b.finish()
				got = append(got, b.outs[0].rows()...)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("snapshot after %d batches: restored run differs from the uninterrupted one:\n%s", half, firstDiff(got, want))
				}
			}

			if !tc.rescale {
				return
			}
			// One snapshot restored into two subtasks that split the key
			// groups: each sees only its keys, together they give the same
			// results.
			half := len(data) / 2
			a := newPipeline(t, tc, fullRange)
			a.feed(data[:half])
			before := a.outs[0].rows()
			wmSnap, winSnap := a.snapshot(4)
			split := []stream.KeyGroupRange{{Start: 0, End: 63}, {Start: 64, End: stream.DefaultMaxParallelism - 1}}
			b := newPipeline(t, tc, split)
			b.restore(4, wmSnap, winSnap)
			b.feed(data[half:])
			b.finish()
			got := before
			for s, rec := range b.outs {
				rows := rec.rows()
				if len(rows) == 0 {
					t.Fatalf("subtask %d produced nothing", s)
				}
				for _, r := range rows {
					if kg := keyGroupOf(r[:len(tc.keys)], b.windows[s].out); !split[s].Contains(kg) {
						t.Fatalf("subtask %d (key groups %v) emitted %v of key group %d", s, split[s], r, kg)
					}
				}
				got = append(got, rows...)
			}
			if g, w := sortedRows(got), sortedRows(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("rescaled restore differs from the uninterrupted run:\n%s", firstDiff(g, w))
			}
		})
	}
}

func keyGroupOf(key []any, out *stream.Schema) int {
	b := stream.NewBatch(stream.MustSchema(out.Fields[:len(key)]...), 1)
	defer b.Release()
	b.AppendRow(key...)
	cols := make([]int, len(key))
	for i := range cols {
		cols[i] = i
	}
	h := make([]uint64, 1)
	stream.HashKeys(b, cols, h)
	return stream.KeyGroupForHash(h[0], stream.DefaultMaxParallelism)
}

func sortedRows(rows [][]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprint(r...)
	}
	slices.Sort(out)
	return out
}

func firstDiff[T any](got, want []T) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("first difference at row %d: got %v, want %v (%d vs %d rows)", i, got[i], want[i], len(got), len(want))
		}
	}
	return fmt.Sprintf("got %d rows, want %d", len(got), len(want))
}

func TestWindowRestoreRejectsOtherLayoutAndCorruption(t *testing.T) {
	tc := ckCases[0]
	a := newPipeline(t, tc, fullRange)
	a.feed(ckBatches(1, 300))
	_, winSnap := a.snapshot(1)
	if len(winSnap.Keyed) == 0 {
		t.Fatal("no keyed state written")
	}

	other := tc
	other.config = `{"size": "1s", "aggregates": [{"fn": "count"}, {"fn": "sum", "field": "x"}]}`
	b := newPipeline(t, other, fullRange)
	err := b.windows[0].RestoreState(&stream.RestoreContext{CheckpointID: 1, KeyGroups: fullRange[0], State: winSnap})
	if err == nil || !strings.Contains(err.Error(), "other aggregates") {
		t.Fatalf("restore into other aggregates = %v", err)
	}

	for kg, chunks := range winSnap.Keyed {
		bad := &stream.OperatorSnapshot{Keyed: map[int][][]byte{kg: {chunks[0][:len(chunks[0])-1]}}}
		c := newPipeline(t, tc, fullRange)
		err := c.windows[0].RestoreState(&stream.RestoreContext{CheckpointID: 1, KeyGroups: fullRange[0], State: bad})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("key group %d: corrupt state", kg)) {
			t.Fatalf("restore of a truncated chunk = %v", err)
		}
		wrong := &stream.OperatorSnapshot{Keyed: map[int][][]byte{(kg + 1) % 128: chunks}}
		d := newPipeline(t, tc, fullRange)
		err = d.windows[0].RestoreState(&stream.RestoreContext{CheckpointID: 1, KeyGroups: fullRange[0], State: wrong})
		if err == nil || !strings.Contains(err.Error(), "holds key group") {
			t.Fatalf("restore of a chunk under another key group = %v", err)
		}
		break
	}
}
