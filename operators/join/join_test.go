package join_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/operators/join"
	"github.com/weirstream/weir/stream"
)

var (
	leftSchema = stream.MustSchema(
		stream.Field{Name: "k", Type: stream.TypeString},
		stream.Field{Name: "v", Type: stream.TypeInt64},
		stream.Field{Name: "ts", Type: stream.TypeTimestamp})
	rightSchema = stream.MustSchema(
		stream.Field{Name: "key", Type: stream.TypeString},
		stream.Field{Name: "v", Type: stream.TypeFloat64},
		stream.Field{Name: "ts", Type: stream.TypeTimestamp})
)

type rec struct {
	input int
	key   *string // nil = null key
	v     int64
	ts    int64
}

// step is one thing to feed: a record batch or a watermark.
type step struct {
	recs []rec
	wm   int64
}

func genSteps(r *rand.Rand, n int) []step {
	var steps []step
	ts := int64(0)
	for range n {
		var recs []rec
		in := r.IntN(2)
		for range 1 + r.IntN(8) {
			ts += int64(r.IntN(40))
			var k *string
			if r.IntN(20) > 0 {
				s := fmt.Sprintf("key%d", r.IntN(12))
				k = &s
			}
			t := ts
			if r.IntN(8) == 0 { // out of order, sometimes late
				t = max(0, ts-r.Int64N(150))
			}
			recs = append(recs, rec{input: in, key: k, v: r.Int64N(1000), ts: t})
		}
		steps = append(steps, step{recs: recs})
		if r.IntN(3) == 0 {
			steps = append(steps, step{wm: ts - 1})
		}
	}
	return append(steps, step{wm: stream.MaxWatermark})
}

func batchOf(recs []rec) *stream.Batch {
	s := leftSchema
	if recs[0].input == 1 {
		s = rightSchema
	}
	b := stream.NewBatch(s, len(recs))
	for _, r := range recs {
		var k any
		if r.key != nil {
			k = *r.key
		}
		if r.input == 0 {
			b.AppendRow(k, r.v, r.ts)
		} else {
			b.AppendRow(k, float64(r.v), r.ts)
		}
		b.Times = append(b.Times, r.ts)
	}
	return b
}

type collector struct{ rows []string }

func (c *collector) Collect(b *stream.Batch) {
	if err := b.Validate(); err != nil {
		panic(err)
	}
	for i := range b.Len() {
		c.rows = append(c.rows, fmt.Sprint(b.Row(i)...)+fmt.Sprintf("@%d", b.Times[i]))
	}
	b.Release()
}
func (c *collector) EmitWatermark(int64) {}

func open(t *testing.T, op stream.Operator, sub, par int) {
	t.Helper()
	octx := &stream.OperatorContext{OperatorUID: "j", Subtask: sub, Parallelism: par, MaxParallelism: 16,
		KeyGroups:    stream.KeyGroupRangeFor(16, par, sub),
		InputSchemas: []*stream.Schema{leftSchema, rightSchema}, InputKeys: [][]string{{"k"}, {"key"}}}
	if err := op.Open(context.Background(), octx); err != nil {
		t.Fatal(err)
	}
}

// subtaskOf routes a key to one of par subtasks as the runtime does.
func subtaskOf(key *string, par int) int {
	b := stream.NewBatch(leftSchema, 1)
	defer b.Release()
	var k any
	if key != nil {
		k = *key
	}
	b.AppendRow(k, int64(0), int64(0))
	h := make([]uint64, 1)
	stream.HashKeys(b, []int{0}, h)
	return stream.SubtaskForKeyGroup(16, par, stream.KeyGroupForHash(h[0], 16))
}

// run feeds steps to a fresh operator; at step cut (if >= 0) it snapshots,
// and continues in two restored subtasks that get the records of their key
// groups, as after a rescale from 1 to 2.
func run(t *testing.T, newOp func() stream.Operator, steps []step, cut int) []string {
	t.Helper()
	c := &collector{}
	ops := []stream.Operator{newOp()}
	open(t, ops[0], 0, 1)
	for i, s := range steps {
		if i == cut {
			snap := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: stream.KeyGroupRangeFor(16, 1, 0)}
			if err := ops[0].(stream.Checkpointed).SnapshotState(snap); err != nil {
				t.Fatal(err)
			}
			ops = nil
			for sub := range 2 {
				op := newOp()
				open(t, op, sub, 2)
				if err := op.(stream.Checkpointed).RestoreState(&stream.RestoreContext{CheckpointID: 1, KeyGroups: stream.KeyGroupRangeFor(16, 2, sub), State: &snap.State}); err != nil {
					t.Fatal(err)
				}
				ops = append(ops, op)
			}
		}
		if s.recs == nil {
			for _, op := range ops {
				if err := op.ProcessWatermark(s.wm, c); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		parts := make([][]rec, len(ops))
		for _, r := range s.recs {
			sub := 0
			if len(ops) == 2 {
				sub = subtaskOf(r.key, 2)
			}
			parts[sub] = append(parts[sub], r)
		}
		for sub, p := range parts {
			if len(p) > 0 {
				if err := ops[sub].ProcessBatch(p[0].input, batchOf(p), c); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	slices.Sort(c.rows)
	return c.rows
}

func fmtRow(l, r rec, extra ...int64) string {
	s := fmt.Sprint(*l.key, l.v, l.ts, *r.key, float64(r.v), r.ts)
	for _, x := range extra {
		s += fmt.Sprint(" ", x)
	}
	return s
}

func TestWindowJoinMatchesNestedLoops(t *testing.T) {
	const size = 100
	for seed := range 30 {
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		steps := genSteps(r, 60)
		// Oracle: every pair of non-late records with equal keys in one window.
		var all []rec
		wm := stream.MinWatermark
		for _, s := range steps {
			if s.recs == nil {
				wm = max(wm, s.wm)
				continue
			}
			for _, x := range s.recs {
				if w := x.ts - x.ts%size; w+size-1 > wm {
					all = append(all, x)
				}
			}
		}
		var want []string
		for _, l := range all {
			for _, rr := range all {
				if l.input == 0 && rr.input == 1 && l.key != nil && rr.key != nil && *l.key == *rr.key && l.ts/size == rr.ts/size {
					w := l.ts - l.ts%size
					want = append(want, fmtRow(l, rr, w, w+size)+fmt.Sprintf("@%d", w+size-1))
				}
			}
		}
		slices.Sort(want)
		newOp := func() stream.Operator {
			op, err := join.NewWindowJoin([]byte(`{"size": "100ms"}`))
			if err != nil {
				t.Fatal(err)
			}
			return op
		}
		for _, cut := range []int{-1, len(steps) / 2} {
			got := run(t, newOp, steps, cut)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("seed %d cut %d: got %d rows, want %d\ngot  %v\nwant %v", seed, cut, len(got), len(want), got, want)
			}
		}
	}
}

func TestStreamJoinMatchesNestedLoops(t *testing.T) {
	for seed := range 30 {
		r := rand.New(rand.NewPCG(uint64(seed), 2))
		steps := genSteps(r, 40)
		var all []rec
		for _, s := range steps {
			all = append(all, s.recs...)
		}
		var want []string
		for _, l := range all {
			for _, rr := range all {
				if l.input == 0 && rr.input == 1 && l.key != nil && rr.key != nil && *l.key == *rr.key {
					want = append(want, fmtRow(l, rr)+fmt.Sprintf("@%d", max(l.ts, rr.ts)))
				}
			}
		}
		slices.Sort(want)
		newOp := func() stream.Operator {
			op, err := join.NewStreamJoin([]byte(`{"rightPrefix": "r_"}`))
			if err != nil {
				t.Fatal(err)
			}
			return op
		}
		for _, cut := range []int{-1, len(steps) / 3} {
			got := run(t, newOp, steps, cut)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("seed %d cut %d: got %d rows, want %d", seed, cut, len(got), len(want))
			}
		}
	}
}

func TestPlan(t *testing.T) {
	reg := stream.NewRegistry()
	join.Register(reg)
	tests := []struct {
		name, typ, config string
		keys              [2][]string
		wantErr           string
		wantOut           string
	}{
		{"window", join.TypeWindowJoin, `{"size": "10s"}`, [2][]string{{"k"}, {"key"}}, "",
			"(k string, v int64, ts timestamp, key string, right_v float64, right_ts timestamp, window_start timestamp, window_end timestamp)"},
		{"stream prefix", join.TypeStreamJoin, `{"rightPrefix": "b_"}`, [2][]string{{"k"}, {"key"}}, "",
			"(k string, v int64, ts timestamp, key string, b_v float64, b_ts timestamp)"},
		{"no size", join.TypeWindowJoin, `{}`, [2][]string{{"k"}, {"key"}}, "size is required", ""},
		{"unkeyed", join.TypeStreamJoin, `{}`, [2][]string{{"k"}, nil}, "input 1 is not keyed", ""},
		{"type mismatch", join.TypeStreamJoin, `{}`, [2][]string{{"v"}, {"key"}}, "same type", ""},
		{"stream size", join.TypeStreamJoin, `{"size": "1s"}`, [2][]string{{"k"}, {"key"}}, "options of window_join", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ, _ := reg.Lookup(tc.typ, false)
			out, err := typ.Plan(&stream.PlanContext{Config: []byte(tc.config), Inputs: []stream.PlanInput{
				{Schema: leftSchema, KeyFields: tc.keys[0]}, {Schema: rightSchema, KeyFields: tc.keys[1]}}})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.wantOut {
				t.Fatalf("output %s, want %s", out, tc.wantOut)
			}
		})
	}
}
