package topn_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/operators/topn"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

var schema = stream.MustSchema(
	stream.Field{Name: "k", Type: stream.TypeInt64},
	stream.Field{Name: "v", Type: stream.TypeFloat64},
	stream.Field{Name: "s", Type: stream.TypeString})

const maxPar = 16

type rec struct {
	k    int64
	v    float64
	null bool // v is null
	ts   int64
	seq  int
}

type step struct {
	recs []rec
	wm   int64
}

// genSteps returns n batches of records (some out of order, some with a
// null v) with watermarks in between, and a final watermark at end.
func genSteps(r *rand.Rand, n int, end int64) []step {
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
			recs = append(recs, rec{k: r.Int64N(5), v: float64(r.IntN(20)), null: r.IntN(15) == 0, ts: t, seq: seq})
			seq++
		}
		steps = append(steps, step{recs: recs})
		if r.IntN(3) == 0 {
			steps = append(steps, step{wm: ts - 1})
		}
	}
	return append(steps, step{wm: end})
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

func keyGroupOf(k int64) int {
	b := stream.NewBatch(schema, 1)
	defer b.Release()
	b.AppendRow(k, 0.0, "")
	h := make([]uint64, 1)
	stream.HashKeys(b, []int{0}, h)
	return stream.KeyGroupForHash(h[0], maxPar)
}

// subtask is one operator instance on the task runtime's keyed state.
type subtask struct {
	h    *dataflowtest.Harness
	octx *stream.OperatorContext
	kg   stream.KeyGroupRange
}

func (s *subtask) op() *topn.TopN { return s.h.Op.(*topn.TopN) }

// openSubtask opens op (config cfg, keyed by k or not) on backend as the
// subtask owning kg, restoring st (checkpoint id) if not nil.
func openSubtask(t *testing.T, backend, op, cfg string, keyed bool, kg stream.KeyGroupRange, sub, par int, id int64, st *stream.OperatorSnapshot) (*subtask, error) {
	t.Helper()
	o, err := topn.New(op, []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	var keys [][]string
	if keyed {
		keys = [][]string{{"k"}}
	}
	octx := &stream.OperatorContext{OperatorUID: "t", Subtask: sub, Parallelism: par, MaxParallelism: maxPar, KeyGroups: kg,
		InputSchemas: []*stream.Schema{schema}, InputKeys: keys, StateBackend: backend, LocalStateDir: t.TempDir()}
	h, err := dataflowtest.Open(t.Context(), o, octx, id, st)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { h.Close(true) })
	return &subtask{h: h, octx: octx, kg: kg}, nil
}

// run feeds steps through the operator; at step cut it snapshots, and goes
// on with restored instances: one owning every key group, or (split, keyed
// only) two splitting them. It returns the output rows, sorted, and the
// instances that ran last.
func run(t *testing.T, backend, op, cfg string, keyed bool, steps []step, cut int, split bool) ([]string, []*subtask, int64) {
	t.Helper()
	all := stream.KeyGroupRange{Start: 0, End: maxPar - 1}
	first, err := openSubtask(t, backend, op, cfg, keyed, all, 0, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	subs := []*subtask{first}
	var late int64
	for i, s := range steps {
		if i == cut {
			st, err := subs[0].h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			late += subs[0].op().LateRecordsDropped()
			ranges := []stream.KeyGroupRange{all}
			if split {
				ranges = []stream.KeyGroupRange{{Start: 0, End: 6}, {Start: 7, End: maxPar - 1}}
			}
			subs = nil
			for sub, r := range ranges {
				s, err := openSubtask(t, backend, op, cfg, keyed, r, sub, len(ranges), 1, st)
				if err != nil {
					t.Fatal(err)
				}
				subs = append(subs, s)
			}
		}
		if s.recs == nil {
			for _, sub := range subs {
				if err := sub.h.Op.ProcessWatermark(s.wm, c); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		for _, sub := range subs {
			b := stream.NewBatch(schema, len(s.recs))
			for _, r := range s.recs {
				if len(subs) > 1 && !sub.kg.Contains(keyGroupOf(r.k)) {
					continue
				}
				var v any = r.v
				if r.null {
					v = nil
				}
				b.AppendRow(r.k, v, fmt.Sprintf("r%d", r.seq))
				b.Times = append(b.Times, r.ts)
			}
			if err := sub.h.Op.ProcessBatch(0, b, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sub := range subs {
		late += sub.op().LateRecordsDropped()
	}
	slices.Sort(c.rows)
	return c.rows, subs, late
}

// oracle computes the top n per key and window by brute force, and the
// number of records dropped as late (all their windows had fired).
func oracle(steps []step, size, slide int64, n int, asc, ties, keyed bool) ([]string, int64) {
	type kw struct{ k, end int64 }
	groups := map[kw][]rec{}
	wm := stream.MinWatermark
	var late int64
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
			if last+size-1 <= wm {
				late++
				continue
			}
			if r.null {
				continue
			}
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
	return out, late
}

var backends = []string{stream.StateBackendHeap, stream.StateBackendPebble}

// stateKeys counts the keys with panes in the keyed state of s.
func stateKeys(t *testing.T, s *subtask) int {
	t.Helper()
	b, err := statebackend.KeyedBackend(s.octx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for kg := s.kg.Start; kg <= s.kg.End; kg++ {
		b.Keys("panes", kg, func([]byte) bool { n++; return true })
	}
	return n
}

// TestTopNMatchesBruteForce runs random inputs through window_topn on both
// state backends, uninterrupted, restored from a snapshot in the middle,
// and restored into two subtasks splitting the key groups, against a
// brute-force computation; once the watermark has passed every window, no
// state is left.
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
	for _, backend := range backends {
		for _, tc := range cases {
			name := fmt.Sprintf("%s/size%d_slide%d_n%d_asc%v_ties%v_keyed%v", backend, tc.size, tc.slide, tc.n, tc.asc, tc.ties, tc.keyed)
			t.Run(name, func(t *testing.T) {
				order := "desc"
				if tc.asc {
					order = "asc"
				}
				cfg := fmt.Sprintf(`{"size": "%dms", "slide": "%dms", "field": "v", "n": %d, "order": %q, "withTies": %v, "rankAs": "rank"}`,
					tc.size, tc.slide, tc.n, order, tc.ties)
				seeds := 12
				if backend == stream.StateBackendPebble {
					seeds = 4
				}
				for seed := range seeds {
					r := rand.New(rand.NewPCG(uint64(seed), 3))
					steps := genSteps(r, 50, 0)
					// The last watermark passes every window, but is not the
					// maximum.
					var maxTS int64
					for _, s := range steps {
						for _, rc := range s.recs {
							maxTS = max(maxTS, rc.ts)
						}
					}
					steps[len(steps)-1].wm = maxTS + tc.size + tc.slide
					want, wantLate := oracle(steps, tc.size, tc.slide, tc.n, tc.asc, tc.ties, tc.keyed)
					type variant struct {
						cut   int
						split bool
					}
					variants := []variant{{-1, false}, {len(steps) / 2, false}}
					if tc.keyed {
						variants = append(variants, variant{len(steps) / 2, true}, variant{len(steps) / 3, true})
					}
					for _, v := range variants {
						got, subs, late := run(t, backend, topn.TypeTopN, cfg, tc.keyed, steps, v.cut, v.split)
						if strings.Join(got, "\n") != strings.Join(want, "\n") {
							t.Fatalf("seed %d cut %d split %v: got %d rows, want %d\ngot  %v\nwant %v", seed, v.cut, v.split, len(got), len(want), got, want)
						}
						if late != wantLate {
							t.Fatalf("seed %d cut %d split %v: %d records dropped as late, want %d", seed, v.cut, v.split, late, wantLate)
						}
						if !tc.keyed {
							st, err := subs[0].h.Snapshot(9)
							if err != nil {
								t.Fatal(err)
							}
							if n := len(st.List["global"]); n != 0 {
								t.Fatalf("seed %d cut %d: %d items of panes after the watermark passed every window, want none", seed, v.cut, n)
							}
							continue
						}
						for _, s := range subs {
							if n := stateKeys(t, s); n != 0 {
								t.Fatalf("seed %d cut %d split %v: %d keys of subtask %v still have panes after the watermark passed every window", seed, v.cut, v.split, n, s.kg)
							}
							if backend != stream.StateBackendHeap {
								continue
							}
							st, err := s.h.Snapshot(9)
							if err != nil {
								t.Fatal(err)
							}
							if len(st.Keyed) != 0 {
								t.Fatalf("seed %d cut %d split %v: the keyed snapshot of subtask %v has %d key groups of state or timers, want none", seed, v.cut, v.split, s.kg, len(st.Keyed))
							}
						}
					}
				}
			})
		}
	}
}

// TestStateHeldUntilWindowsFire checks that the keyed state holds the
// panes of open windows (so that the emptiness check above can fail) and
// that a subtask holds only its own key groups' panes after a split
// restore.
func TestStateHeldUntilWindowsFire(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			cfg := `{"size": "100ms", "slide": "50ms", "field": "v", "n": 2}`
			all := stream.KeyGroupRange{Start: 0, End: maxPar - 1}
			s, err := openSubtask(t, backend, topn.TypeTopN, cfg, true, all, 0, 1, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			b := stream.NewBatch(schema, 8)
			for k := range int64(8) {
				b.AppendRow(k, float64(k), "x")
				b.Times = append(b.Times, 10)
			}
			c := &collector{}
			if err := s.h.Op.ProcessBatch(0, b, c); err != nil {
				t.Fatal(err)
			}
			if n := stateKeys(t, s); n != 8 {
				t.Fatalf("%d keys with panes, want 8", n)
			}
			// The first window [-50, 50) fires; the pane stays for [0, 100).
			if err := s.h.Op.ProcessWatermark(49, c); err != nil {
				t.Fatal(err)
			}
			if n := stateKeys(t, s); n != 8 || len(c.rows) != 8 {
				t.Fatalf("after the first window: %d keys with panes, %d rows; want 8 and 8", n, len(c.rows))
			}
			st, err := s.h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			ranges := []stream.KeyGroupRange{{Start: 0, End: 6}, {Start: 7, End: maxPar - 1}}
			total := 0
			for sub, r := range ranges {
				rs, err := openSubtask(t, backend, topn.TypeTopN, cfg, true, r, sub, 2, 1, st)
				if err != nil {
					t.Fatal(err)
				}
				want := 0
				for k := range int64(8) {
					if r.Contains(keyGroupOf(k)) {
						want++
					}
				}
				if n := stateKeys(t, rs); n != want {
					t.Fatalf("subtask %v: %d keys with panes, want %d", r, n, want)
				}
				total += want
				rc := &collector{}
				if err := rs.h.Op.ProcessWatermark(99, rc); err != nil {
					t.Fatal(err)
				}
				if len(rc.rows) != want || stateKeys(t, rs) != 0 {
					t.Fatalf("subtask %v: second window: %d rows, %d keys left; want %d and 0", r, len(rc.rows), stateKeys(t, rs), want)
				}
			}
			if total != 8 {
				t.Fatalf("the split subtasks hold %d keys, want 8", total)
			}
		})
	}
}

// TestWindowMax runs window_max (top 1 with ties) with and without key on
// both backends against the brute force.
func TestWindowMax(t *testing.T) {
	for _, backend := range backends {
		for _, keyed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/keyed%v", backend, keyed), func(t *testing.T) {
				steps := genSteps(rand.New(rand.NewPCG(9, 9)), 80, stream.MaxWatermark)
				want, _ := oracle(steps, 200, 100, 1, false, true, keyed)
				for i := range want { // window_max has no rank
					at := strings.LastIndexByte(want[i], '@')
					sp := strings.LastIndexByte(want[i][:at], ' ')
					want[i] = want[i][:sp] + want[i][at:]
				}
				got, _, _ := run(t, backend, topn.TypeMax, `{"size": "200ms", "slide": "100ms", "field": "v"}`, keyed, steps, len(steps)/2, keyed)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("got %d rows, want %d\ngot  %v\nwant %v", len(got), len(want), got, want)
				}
			})
		}
	}
}

// TestGlobalRestoreMerges restores the panes of two subtasks of a top-n
// without keyBy into one (scale-in): equal panes merge into one top n.
// With ties the result does not depend on how the subtasks' arrival
// numbers compare, so it is the brute force over all rows.
func TestGlobalRestoreMerges(t *testing.T) {
	cfg := `{"size": "100ms", "slide": "25ms", "field": "v", "n": 2, "withTies": true, "rankAs": "rank"}`
	all := stream.KeyGroupRange{Start: 0, End: maxPar - 1}
	for seed := range uint64(5) {
		steps := genSteps(rand.New(rand.NewPCG(seed, 5)), 60, stream.MaxWatermark)
		cut := len(steps) / 2
		var kept []step // no watermark before the cut: no window fires in the two subtasks
		for i, s := range steps {
			if i >= cut || s.recs != nil {
				kept = append(kept, s)
			}
		}
		steps, cut = kept, cut-(len(steps)-len(kept))
		want, _ := oracle(steps, 100, 25, 2, false, true, false)
		c := &collector{}
		merged := &stream.OperatorSnapshot{List: map[string][][]byte{}, Union: map[string][][]byte{}}
		for sub := range 2 {
			s, err := openSubtask(t, stream.StateBackendHeap, topn.TypeTopN, cfg, false, all, sub, 2, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range steps[:cut] {
				b := stream.NewBatch(schema, len(st.recs))
				for _, r := range st.recs {
					if r.seq%2 != sub {
						continue
					}
					var v any = r.v
					if r.null {
						v = nil
					}
					b.AppendRow(r.k, v, fmt.Sprintf("r%d", r.seq))
					b.Times = append(b.Times, r.ts)
				}
				if err := s.h.Op.ProcessBatch(0, b, c); err != nil {
					t.Fatal(err)
				}
			}
			st, err := s.h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			for name, items := range st.List {
				merged.List[name] = append(merged.List[name], items...)
			}
			for name, items := range st.Union {
				merged.Union[name] = append(merged.Union[name], items...)
			}
		}
		if len(merged.List["global"]) != 2 {
			t.Fatalf("%d items of global state, want 2", len(merged.List["global"]))
		}
		s, err := openSubtask(t, stream.StateBackendHeap, topn.TypeTopN, cfg, false, all, 0, 1, 1, merged)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps[cut:] {
			if st.recs == nil {
				if err := s.h.Op.ProcessWatermark(st.wm, c); err != nil {
					t.Fatal(err)
				}
				continue
			}
			b := stream.NewBatch(schema, len(st.recs))
			for _, r := range st.recs {
				var v any = r.v
				if r.null {
					v = nil
				}
				b.AppendRow(r.k, v, fmt.Sprintf("r%d", r.seq))
				b.Times = append(b.Times, r.ts)
			}
			if err := s.h.Op.ProcessBatch(0, b, c); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(c.rows)
		if strings.Join(c.rows, "\n") != strings.Join(want, "\n") {
			t.Fatalf("seed %d: got %d rows, want %d\ngot  %v\nwant %v", seed, len(c.rows), len(want), c.rows, want)
		}
	}
}

func TestRestoreErrors(t *testing.T) {
	all := stream.KeyGroupRange{Start: 0, End: maxPar - 1}
	cfg := `{"size": "100ms", "field": "v", "n": 2}`
	steps := genSteps(rand.New(rand.NewPCG(1, 1)), 20, 0)
	snapOf := func(keyed bool) *stream.OperatorSnapshot {
		s, err := openSubtask(t, stream.StateBackendHeap, topn.TypeTopN, cfg, keyed, all, 0, 1, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps[:len(steps)-1] {
			if st.recs == nil {
				continue
			}
			b := stream.NewBatch(schema, len(st.recs))
			for _, r := range st.recs {
				b.AppendRow(r.k, r.v, "x")
				b.Times = append(b.Times, r.ts)
			}
			if err := s.h.Op.ProcessBatch(0, b, &collector{}); err != nil {
				t.Fatal(err)
			}
		}
		st, err := s.h.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	keyed, global := snapOf(true), snapOf(false)
	if len(keyed.Keyed) == 0 || len(keyed.List) != 0 || len(global.Keyed) != 0 || len(global.List["global"]) != 1 {
		t.Fatalf("keyed snapshot: %d key groups, %d list states; global: %d key groups, %d list items; want keyed state only for the keyed one",
			len(keyed.Keyed), len(keyed.List), len(global.Keyed), len(global.List["global"]))
	}
	tests := []struct {
		name   string
		cfg    string
		keyed  bool
		st     *stream.OperatorSnapshot
		want   string
		global bool
	}{
		{"order", `{"size": "100ms", "field": "v", "n": 2, "order": "asc"}`, true, keyed, "written for another key, input, ranking or slide", false},
		{"slide", `{"size": "100ms", "slide": "50ms", "field": "v", "n": 2}`, true, keyed, "panes of 100ms", false},
		{"keyed into global", cfg, false, keyed, "written for another key", false},
		{"global into keyed", cfg, true, global, "written for another key", false},
		{"truncated global", cfg, false, &stream.OperatorSnapshot{List: map[string][][]byte{"global": {global.List["global"][0][:len(global.List["global"][0])-3]}}}, "global state", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := openSubtask(t, stream.StateBackendHeap, topn.TypeTopN, tc.cfg, tc.keyed, all, 0, 1, 1, tc.st)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// A chunk whose rows are of other types fails in the codec.
	other := stream.MustSchema(
		stream.Field{Name: "k", Type: stream.TypeInt64},
		stream.Field{Name: "v", Type: stream.TypeFloat64},
		stream.Field{Name: "s", Type: stream.TypeInt64})
	o, err := topn.New(topn.TypeTopN, []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	octx := &stream.OperatorContext{OperatorUID: "t", Parallelism: 1, MaxParallelism: maxPar, KeyGroups: all,
		InputSchemas: []*stream.Schema{other}, InputKeys: [][]string{{"k"}}, LocalStateDir: t.TempDir()}
	if h, err := dataflowtest.Open(t.Context(), o, octx, 1, keyed); err == nil || !strings.Contains(err.Error(), "topn.panes") {
		if err == nil {
			h.Close(true)
		}
		t.Fatalf("restore into other column types = %v, want a codec error", err)
	}
}

func TestMisrouted(t *testing.T) {
	s, err := openSubtask(t, stream.StateBackendHeap, topn.TypeTopN, `{"size": "1s", "field": "v"}`, true, stream.KeyGroupRange{Start: 0, End: 0}, 0, maxPar, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := stream.NewBatch(schema, 20)
	for k := range int64(20) {
		b.AppendRow(k, 1.0, "")
		b.Times = append(b.Times, 5)
	}
	if err := s.h.Op.ProcessBatch(0, b, &collector{}); err == nil || !strings.Contains(err.Error(), "routed to the wrong subtask") {
		t.Fatalf("foreign keys = %v", err)
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
