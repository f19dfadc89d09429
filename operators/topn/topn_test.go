package topn_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/operators/topn"
	"github.com/weirstream/weir/stream"
)

var schema = stream.MustSchema(
	stream.Field{Name: "k", Type: stream.TypeInt64},
	stream.Field{Name: "v", Type: stream.TypeFloat64},
	stream.Field{Name: "s", Type: stream.TypeString})

type rec struct {
	k   int64
	v   float64
	ts  int64
	seq int
}

type step struct {
	recs []rec
	wm   int64
}

func genSteps(r *rand.Rand, n int) []step {
	var steps []step
	ts, seq := int64(0), 0
	for range n {
		var recs []rec
		for range 1 + r.IntN(10) {
			ts += int64(r.IntN(30))
			t := ts
			if r.IntN(8) == 0 {
				t = max(0, ts-r.Int64N(300))
			}
			recs = append(recs, rec{k: r.Int64N(5), v: float64(r.IntN(20)), ts: t, seq: seq})
			seq++
		}
		steps = append(steps, step{recs: recs})
		if r.IntN(3) == 0 {
			steps = append(steps, step{wm: ts - 1})
		}
	}
	return append(steps, step{wm: stream.MaxWatermark})
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

func subtaskOf(k int64, par int) int {
	b := stream.NewBatch(schema, 1)
	defer b.Release()
	b.AppendRow(k, 0.0, "")
	h := make([]uint64, 1)
	stream.HashKeys(b, []int{0}, h)
	return stream.SubtaskForKeyGroup(16, par, stream.KeyGroupForHash(h[0], 16))
}

func run(t *testing.T, cfg string, keyed bool, steps []step, cut int) []string {
	t.Helper()
	newOp := func(sub, par int) *topn.TopN {
		op, err := topn.New(topn.TypeTopN, []byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		var keys [][]string
		if keyed {
			keys = [][]string{{"k"}}
		}
		if err := op.Open(context.Background(), &stream.OperatorContext{OperatorUID: "t", Subtask: sub, Parallelism: par, MaxParallelism: 16,
			KeyGroups: stream.KeyGroupRangeFor(16, par, sub), InputSchemas: []*stream.Schema{schema}, InputKeys: keys}); err != nil {
			t.Fatal(err)
		}
		return op
	}
	c := &collector{}
	ops := []*topn.TopN{newOp(0, 1)}
	for i, s := range steps {
		if i == cut {
			snap := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: stream.KeyGroupRangeFor(16, 1, 0)}
			if err := ops[0].SnapshotState(snap); err != nil {
				t.Fatal(err)
			}
			par := 1
			if keyed {
				par = 2
			}
			ops = nil
			for sub := range par {
				op := newOp(sub, par)
				if err := op.RestoreState(&stream.RestoreContext{CheckpointID: 1, KeyGroups: stream.KeyGroupRangeFor(16, par, sub), State: &snap.State}); err != nil {
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
			if len(ops) > 1 {
				sub = subtaskOf(r.k, len(ops))
			}
			parts[sub] = append(parts[sub], r)
		}
		for sub, p := range parts {
			if len(p) == 0 {
				continue
			}
			b := stream.NewBatch(schema, len(p))
			for _, r := range p {
				b.AppendRow(r.k, r.v, fmt.Sprintf("r%d", r.seq))
				b.Times = append(b.Times, r.ts)
			}
			if err := ops[sub].ProcessBatch(0, b, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(c.rows)
	return c.rows
}

// oracle computes the top n per key and window by brute force.
func oracle(steps []step, size, slide int64, n int, asc, ties, keyed bool) []string {
	type kw struct{ k, end int64 }
	groups := map[kw][]rec{}
	wm := stream.MinWatermark
	for _, s := range steps {
		if s.recs == nil {
			wm = max(wm, s.wm)
			continue
		}
		for _, r := range s.recs {
			k := r.k
			if !keyed {
				k = 0
			}
			last := r.ts - r.ts%slide // start of the last window containing ts
			for st := last; st > r.ts-size; st -= slide {
				if end := st + size; end-1 > wm {
					groups[kw{k, end}] = append(groups[kw{k, end}], r)
				}
			}
		}
	}
	var out []string
	for g, rs := range groups {
		slices.SortFunc(rs, func(a, b rec) int {
			if a.v != b.v {
				if asc {
					return cmp.Compare(a.v, b.v)
				}
				return cmp.Compare(b.v, a.v)
			}
			return cmp.Compare(a.seq, b.seq)
		})
		keep := min(n, len(rs))
		if ties {
			for keep < len(rs) && rs[keep].v == rs[n-1].v {
				keep++
			}
		}
		rank := 0
		for i, r := range rs[:keep] {
			if i == 0 || r.v != rs[i-1].v {
				rank = i + 1
			}
			out = append(out, fmt.Sprint(r.k, r.v, fmt.Sprintf("r%d", r.seq), g.end-size, g.end, rank)+fmt.Sprintf("@%d", g.end-1))
		}
	}
	slices.Sort(out)
	return out
}

func TestTopNMatchesBruteForce(t *testing.T) {
	cases := []struct {
		size, slide int64
		n           int
		asc, ties   bool
		keyed       bool
	}{
		{100, 100, 1, false, true, true},
		{100, 100, 2, false, false, true},
		{100, 25, 3, false, false, true},
		{100, 25, 2, true, true, true},
		{120, 40, 1, false, true, false},
		{100, 100, 3, true, false, false},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("size%d_slide%d_n%d_asc%v_ties%v_keyed%v", tc.size, tc.slide, tc.n, tc.asc, tc.ties, tc.keyed)
		t.Run(name, func(t *testing.T) {
			order := "desc"
			if tc.asc {
				order = "asc"
			}
			cfg := fmt.Sprintf(`{"size": "%dms", "slide": "%dms", "field": "v", "n": %d, "order": %q, "withTies": %v, "rankAs": "rank"}`,
				tc.size, tc.slide, tc.n, order, tc.ties)
			for seed := range 20 {
				steps := genSteps(rand.New(rand.NewPCG(uint64(seed), 3)), 50)
				want := oracle(steps, tc.size, tc.slide, tc.n, tc.asc, tc.ties, tc.keyed)
				for _, cut := range []int{-1, len(steps) / 2} {
					got := run(t, cfg, tc.keyed, steps, cut)
					if strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Fatalf("seed %d cut %d: got %d rows, want %d\ngot  %v\nwant %v", seed, cut, len(got), len(want), got, want)
					}
				}
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	reg := stream.NewRegistry()
	topn.Register(reg)
	tests := []struct{ typ, config, want string }{
		{topn.TypeMax, `{"size": "10s", "field": "s"}`, "rank by an int64"},
		{topn.TypeMax, `{"size": "10s", "field": "v", "n": 2}`, "n is not an option"},
		{topn.TypeTopN, `{"size": "10s", "slide": "3s", "field": "v"}`, "divide size"},
		{topn.TypeTopN, `{"field": "v"}`, "size is required"},
		{topn.TypeTopN, `{"size": "1s", "field": "v", "rankAs": "k"}`, "output schema"},
	}
	for _, tc := range tests {
		typ, _ := reg.Lookup(tc.typ, false)
		_, err := typ.Plan(&stream.PlanContext{Config: []byte(tc.config), Inputs: []stream.PlanInput{{Schema: schema}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err = %v, want one containing %q", tc.typ, tc.config, err, tc.want)
		}
	}
}
