package window

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

var sessionBackends = []string{stream.StateBackendHeap, stream.StateBackendPebble}

func TestSessionPlanErrors(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		keys    []string
		wantErr []string // nil means the plan must succeed
	}{
		{"ok keyed", `{"gap": "30s", "aggregates": [{"fn": "count"}]}`, []string{"id"}, nil},
		{"ok global with lateness", `{"gap": "500ms", "allowedLateness": "1m", "aggregates": [{"fn": "avg", "field": "price"}]}`, nil, nil},
		{"missing gap", `{"aggregates": [{"fn": "count"}]}`, nil, []string{"session_window", "gap is required", `"30s"`}},
		{"empty gap", `{"gap": "", "aggregates": [{"fn": "count"}]}`, nil, []string{"gap is required"}},
		{"negative gap", `{"gap": "-5s", "aggregates": [{"fn": "count"}]}`, nil, []string{`gap "-5s" must be positive`, `"30s"`}},
		{"zero gap", `{"gap": "0s", "aggregates": [{"fn": "count"}]}`, nil, []string{`gap "0s" must be positive`}},
		{"gap not a duration", `{"gap": "soon", "aggregates": [{"fn": "count"}]}`, nil, []string{`gap "soon" is not a duration`, `"10s"`}},
		{"sub-millisecond gap", `{"gap": "1500us", "aggregates": [{"fn": "count"}]}`, nil, []string{"gap", "whole number of milliseconds"}},
		{"negative lateness", `{"gap": "1s", "allowedLateness": "-1s", "aggregates": [{"fn": "count"}]}`, nil, []string{`allowedLateness "-1s" is negative`, `"0s"`}},
		{"no aggregates", `{"gap": "1s"}`, nil, []string{"aggregates is empty"}},
		{"size is not an option", `{"gap": "1s", "size": "1s", "aggregates": [{"fn": "count"}]}`, nil, []string{`unknown field "size"`}},
		{"bad aggregate", `{"gap": "1s", "aggregates": [{"fn": "sum", "field": "name"}]}`, nil, []string{"session_window: aggregates[0]", "sum needs an int64 or float64 field"}},
		{"missing key field", `{"gap": "1s", "aggregates": [{"fn": "count"}]}`, []string{"user"}, []string{`key field "user" is not in the input`}},
		{"name clash with bound", `{"gap": "1s", "aggregates": [{"fn": "count", "as": "window_start"}]}`, nil, []string{`"window_start" is both a window bound`}},
	}
	reg := stream.NewRegistry()
	Register(reg)
	typ, ok := reg.Lookup(TypeSessionWindow, false)
	if !ok {
		t.Fatalf("%s is not registered", TypeSessionWindow)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := typ.Plan(&stream.PlanContext{UID: "s", Config: []byte(tt.config), Inputs: []stream.PlanInput{{Schema: genSchema, KeyFields: tt.keys}}, Parallelism: 1})
			if tt.wantErr == nil {
				if err != nil || out == nil {
					t.Fatalf("Plan: %v", err)
				}
				if _, err := typ.NewOperator([]byte(tt.config)); err != nil {
					t.Fatalf("NewOperator: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Plan succeeded with %s, want an error", out)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Plan error %q does not say %q", err, want)
				}
			}
			if !errors.Is(err, stream.ErrConfig) {
				t.Errorf("Plan error %v is not stream.ErrConfig", err)
			}
		})
	}
	out, err := typ.Plan(&stream.PlanContext{Config: []byte(`{"gap": "1s", "aggregates": [{"fn": "count"}, {"fn": "max", "field": "price"}]}`),
		Inputs: []stream.PlanInput{{Schema: genSchema, KeyFields: []string{"name", "id"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "(name string, id int64, window_start timestamp, window_end timestamp, count int64, max_price float64)"; got != want {
		t.Fatalf("output schema %s, want %s", got, want)
	}
}

// sessionSub is one session_window subtask on the runtime's keyed state.
type sessionSub struct {
	h    *dataflowtest.Harness
	octx *stream.OperatorContext
	kg   stream.KeyGroupRange
}

func (s *sessionSub) op() *SessionWindow { return s.h.Op.(*SessionWindow) }

// openSession opens a session_window of config cfg on backend, keyed by
// keys (nil: global), as subtask sub of par owning kg, restoring snap
// (checkpoint id) if not nil.
func openSession(t *testing.T, backend string, cfg []byte, keys []string, kg stream.KeyGroupRange, sub, par int, id int64, snap *stream.OperatorSnapshot) (*sessionSub, error) {
	t.Helper()
	out, err := planSessionWindow(&stream.PlanContext{UID: "s", Config: cfg, Inputs: []stream.PlanInput{{Schema: genSchema, KeyFields: keys}}, Parallelism: par})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	op, err := NewSessionWindow(cfg)
	if err != nil {
		t.Fatal(err)
	}
	octx := &stream.OperatorContext{
		JobID: "job", OperatorUID: "s", Subtask: sub, Parallelism: par,
		MaxParallelism: stream.DefaultMaxParallelism, KeyGroups: kg,
		InputSchemas: []*stream.Schema{genSchema}, InputKeys: [][]string{keys}, OutputSchema: out, Config: cfg,
		StateBackend: backend, LocalStateDir: t.TempDir(),
	}
	h, err := dataflowtest.Open(t.Context(), op, octx, id, snap)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := h.Close(true); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &sessionSub{h: h, octx: octx, kg: kg}, nil
}

// stateKeys counts the keys with sessions in s's backend.
func (s *sessionSub) stateKeys(t *testing.T) int {
	t.Helper()
	b, err := statebackend.KeyedBackend(s.octx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	r := b.KeyGroups()
	for kg := r.Start; kg <= r.End; kg++ {
		b.Keys(sessionsTable, kg, func([]byte) bool { n++; return true })
	}
	return n
}

// sstep is one step of a session test: a batch of rows (their Times are
// their ts), or a watermark when rows is nil.
type sstep struct {
	rows []genRow
	wm   int64
}

// entry is one thing an operator emitted: a watermark, or a row with its
// event time.
type entry struct {
	isWM bool
	wm   int64
	row  []any
	time int64
}

func (e entry) String() string {
	if e.isWM {
		return fmt.Sprintf("watermark %d", e.wm)
	}
	return fmt.Sprintf("%v @%d", e.row, e.time)
}

func entries(r *recorder) []entry {
	var out []entry
	for _, e := range r.events {
		if e.isWM {
			out = append(out, entry{isWM: true, wm: e.wm})
			continue
		}
		for i, row := range e.rows {
			out = append(out, entry{row: row, time: e.times[i]})
		}
	}
	return out
}

type sessionParams struct {
	gap, lateness int64
	key           string // a key of keyFns
}

// sessionOracle replays steps the way the operator documents, one record
// at a time with plain slices: each key's sessions, each with the records
// in it. It returns what the operator must emit, in order, and how many
// records it must drop as late.
func sessionOracle(steps []sstep, p sessionParams) (want []entry, dropped int64) {
	type osess struct {
		start, end int64
		rows       []genRow
		touched    bool
	}
	type okey struct {
		vals []any
		ss   []osess
	}
	keyFn := keyFns[p.key]
	keys := map[string]*okey{}
	wm := stream.MinWatermark
	// emit appends, ordered by end and then key, the sessions pick selects.
	emit := func(pick func(s *osess) bool) {
		var rows [][]any
		for _, k := range keys {
			for i := range k.ss {
				s := &k.ss[i]
				if pick(s) {
					row := append(append(slices.Clone(k.vals), s.start, s.end), bruteAggs(s.rows)...)
					rows = append(rows, row)
				}
			}
		}
		sortRows(rows, len(keyFn(genRow{})))
		for _, r := range rows {
			end := r[len(r)-len(allAggs)-1].(int64)
			want = append(want, entry{row: r, time: end - 1})
		}
	}
	for _, st := range steps {
		if st.rows == nil {
			if st.wm <= wm {
				continue
			}
			prev := wm
			emit(func(s *osess) bool { return s.end-1 > prev && s.end-1 <= st.wm })
			for _, k := range keys {
				k.ss = slices.DeleteFunc(k.ss, func(s osess) bool { return s.end-1+p.lateness <= st.wm })
			}
			wm = st.wm
			want = append(want, entry{isWM: true, wm: wm})
			continue
		}
		for _, r := range st.rows {
			kv := keyFn(r)
			id := fmt.Sprint(kv)
			k := keys[id]
			if k == nil {
				k = &okey{vals: kv}
				keys[id] = k
			}
			m := osess{start: r.ts, end: r.ts + p.gap, rows: []genRow{r}, touched: true}
			var rest []osess
			merged := false
			for _, s := range k.ss {
				if s.start <= m.end && s.end >= m.start { // each starts at or before the other's end
					m.start, m.end = min(m.start, s.start), max(m.end, s.end)
					m.rows = append(m.rows, s.rows...)
					merged = true
				} else {
					rest = append(rest, s)
				}
			}
			if !merged && wm != stream.MinWatermark && m.end-1+p.lateness <= wm {
				dropped++
				continue
			}
			rest = append(rest, m)
			slices.SortFunc(rest, func(a, b osess) int { return cmp.Compare(a.start, b.start) })
			k.ss = rest
		}
		if p.lateness > 0 && wm != stream.MinWatermark {
			emit(func(s *osess) bool { return s.touched && s.end-1 <= wm })
		}
		for _, k := range keys {
			for i := range k.ss {
				k.ss[i].touched = false
			}
		}
	}
	return want, dropped
}

// genSessionSteps returns n generated records of keys ids, fed in batches
// of random size with a bounded-out-of-orderness watermark (ooo) after most
// batches, then MaxWatermark. Timestamps rise by a random step so that a
// key's records are about gap apart, with pauses longer than gap now and
// then; records arrive up to jitter late, and one in 25 much later (up to
// jitter + 5*gap + 2*lateness), so that some are behind the watermark.
func genSessionSteps(seed uint64, n, keys int, gap, lateness, ooo, jitter int64) []sstep {
	rows := generate(seed, n, keys, 0, 0, 0)
	rng := rand.New(rand.NewPCG(seed, 11))
	maxStep := max(1, 2*gap/int64(keys))
	ts := int64(1_700_000_000_000) - int64(seed)*7919
	arrive := make([]int64, n)
	for i := range rows {
		ts += rng.Int64N(maxStep + 1)
		if rng.IntN(40) == 0 {
			ts += 2 * gap
		}
		rows[i].ts = ts
		delay := rng.Int64N(jitter + 1)
		if rng.IntN(25) == 0 {
			delay = jitter + gap + rng.Int64N(4*gap+2*lateness+1)
		}
		arrive[i] = ts + delay
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(arrive[a], arrive[b]) })
	var steps []sstep
	maxTs, wm := int64(-1<<63), stream.MinWatermark
	for i := 0; i < n; {
		m := min(n-i, 1+rng.IntN(60))
		var batch []genRow
		for _, j := range order[i : i+m] {
			batch = append(batch, rows[j])
			maxTs = max(maxTs, rows[j].ts)
		}
		steps = append(steps, sstep{rows: batch})
		i += m
		if w := maxTs - ooo - 1; w > wm && rng.IntN(4) > 0 {
			wm = w
			steps = append(steps, sstep{wm: wm})
		}
	}
	return append(steps, sstep{wm: stream.MaxWatermark})
}

// keyGroupOfRow returns the key group of r's key (keys: the key fields).
func keyGroupOfRow(r genRow, keys []string) int {
	if len(keys) == 0 {
		return 0
	}
	b := batchOf(genSchema, r.values())
	defer b.Release()
	cols := make([]int, len(keys))
	for i, k := range keys {
		cols[i] = genSchema.Index(k)
	}
	h := make([]uint64, 1)
	stream.HashKeys(b, cols, h)
	return stream.KeyGroupForHash(h[0], stream.DefaultMaxParallelism)
}

// runSessionSteps feeds steps to a session window on backend: at step cut
// it snapshots and goes on with restored instances, one owning every key
// group or (split) two halves. It returns what each instance that ran last
// emitted after the cut (one recorder for everything when not split), the
// late records dropped by all, and the last instances.
func runSessionSteps(t *testing.T, backend string, cfg []byte, keys []string, steps []sstep, cut int, split bool) ([]*recorder, int64, []*sessionSub) {
	t.Helper()
	all := stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1}
	first, err := openSession(t, backend, cfg, keys, all, 0, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	subs := []*sessionSub{first}
	recs := []*recorder{newRecorder(t)}
	var late int64
	for i, st := range steps {
		if i == cut {
			snap, err := subs[0].h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			late += subs[0].op().LateRecordsDropped()
			ranges := []stream.KeyGroupRange{all}
			if split {
				ranges = []stream.KeyGroupRange{{Start: 0, End: 50}, {Start: 51, End: all.End}}
			}
			subs = nil
			for sub, r := range ranges {
				s, err := openSession(t, backend, cfg, keys, r, sub, len(ranges), 1, snap)
				if err != nil {
					t.Fatal(err)
				}
				subs = append(subs, s)
				if sub > 0 {
					recs = append(recs, newRecorder(t))
				}
			}
		}
		for si, sub := range subs {
			rec := recs[si]
			if st.rows == nil {
				if err := sub.h.Op.ProcessWatermark(st.wm, rec); err != nil {
					t.Fatal(err)
				}
				continue
			}
			b := stream.NewBatch(genSchema, len(st.rows))
			for _, r := range st.rows {
				if len(subs) > 1 && !sub.kg.Contains(keyGroupOfRow(r, keys)) {
					continue
				}
				b.AppendRow(r.values()...)
				b.Times = append(b.Times, r.ts)
			}
			if err := sub.h.Op.ProcessBatch(0, b, rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sub := range subs {
		if err := sub.h.Op.Finish(recs[0]); err != nil {
			t.Fatal(err)
		}
		late += sub.op().LateRecordsDropped()
	}
	return recs, late, subs
}

// TestSessionMatchesOracle runs random keyed and global inputs, in order
// and out of order, through session windows on both state backends with a
// checkpoint and restore half way, and compares everything they emit
// (rows, event times, order, where the watermarks fall) and the late
// records dropped with sessionOracle's.
func TestSessionMatchesOracle(t *testing.T) {
	tests := []struct {
		name        string
		p           sessionParams
		n, keys     int
		ooo, jitter int64
	}{
		{name: "by id", p: sessionParams{gap: 1000, key: "id"}, n: 3000, keys: 13, ooo: 300, jitter: 500},
		{name: "by name with nulls", p: sessionParams{gap: 700, key: "name"}, n: 2500, keys: 7, ooo: 200, jitter: 400},
		{name: "composite key", p: sessionParams{gap: 2000, key: "name,id"}, n: 2500, keys: 3, ooo: 0, jitter: 300},
		{name: "global", p: sessionParams{gap: 50, key: ""}, n: 2000, keys: 1, ooo: 30, jitter: 60},
		{name: "gap 1ms", p: sessionParams{gap: 1, key: "id"}, n: 1500, keys: 2, ooo: 2, jitter: 3},
		{name: "lateness by id", p: sessionParams{gap: 1000, lateness: 1500, key: "id"}, n: 3000, keys: 11, ooo: 300, jitter: 600},
		{name: "lateness global", p: sessionParams{gap: 80, lateness: 100, key: ""}, n: 2000, keys: 1, ooo: 20, jitter: 50},
		{name: "lateness composite", p: sessionParams{gap: 500, lateness: 300, key: "name,id"}, n: 2500, keys: 4, ooo: 100, jitter: 200},
	}
	for seed, tt := range tests {
		p := tt.p
		steps := genSessionSteps(uint64(seed+1), tt.n, tt.keys, p.gap, p.lateness, tt.ooo, tt.jitter)
		want, wantDropped := sessionOracle(steps, p)
		var keys []string
		if p.key != "" {
			keys = strings.Split(p.key, ",")
		}
		cfg, _ := json.Marshal(SessionWindowConfig{Gap: dur(p.gap), AllowedLateness: dur(p.lateness), Aggregates: allAggs})
		t.Run(tt.name, func(t *testing.T) {
			// The data must exercise what the test is about.
			rows := 0
			for _, e := range want {
				if !e.isWM {
					rows++
				}
			}
			refired := countRefired(want, p.key)
			if rows < 20 || wantDropped == 0 || (p.lateness > 0) != (refired > 0) {
				t.Fatalf("test data: %d rows, %d dropped, %d re-fired; change the generator's parameters", rows, wantDropped, refired)
			}
			t.Logf("%d steps, %d rows (%d re-fired), %d dropped", len(steps), rows, refired, wantDropped)
			for _, backend := range sessionBackends {
				t.Run(backend, func(t *testing.T) {
					cut := len(steps) / 2
					recs, dropped, subs := runSessionSteps(t, backend, cfg, keys, steps, cut, false)
					got := entries(recs[0])
					// recs[0] saw the instance before the cut, then the
					// restored one.
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("output differs from the oracle's (%d entries, want %d)\n%s", len(got), len(want), diffEntries(got, want))
					}
					if dropped != wantDropped {
						t.Errorf("LateRecordsDropped = %d, want %d", dropped, wantDropped)
					}
					if side := sideRows(recs); side != wantDropped {
						t.Errorf("late side output: %d rows, want %d", side, wantDropped)
					}
					checkSessionStateEmpty(t, subs)
					if keys == nil {
						return
					}
					// Restored into two subtasks splitting the key groups,
					// the same rows come out (ordered per subtask).
					recs, dropped, subs = runSessionSteps(t, backend, cfg, keys, steps, cut, true)
					var gotRows, wantRows []string
					for _, r := range recs {
						for _, e := range entries(r) {
							if !e.isWM {
								gotRows = append(gotRows, e.String())
							}
						}
					}
					for _, e := range want {
						if !e.isWM {
							wantRows = append(wantRows, e.String())
						}
					}
					slices.Sort(gotRows)
					slices.Sort(wantRows)
					if !slices.Equal(gotRows, wantRows) {
						t.Fatalf("split restore: rows differ from the oracle's (%d, want %d)", len(gotRows), len(wantRows))
					}
					if dropped != wantDropped {
						t.Errorf("split restore: LateRecordsDropped = %d, want %d", dropped, wantDropped)
					}
					checkSessionStateEmpty(t, subs)
				})
			}
		})
	}
}

// countRefired counts the rows of want emitted for a session of a key that
// was emitted before with the same start or end: re-firings by late
// records, and firings of a session a later record extended.
func countRefired(want []entry, key string) int {
	nk := len(keyFns[key](genRow{}))
	seen := map[string]bool{}
	n := 0
	for _, e := range want {
		if e.isWM {
			continue
		}
		k := fmt.Sprint(e.row[:nk])
		s, end := fmt.Sprint(k, "s", e.row[nk]), fmt.Sprint(k, "e", e.row[nk+1])
		if seen[s] || seen[end] {
			n++
		}
		seen[s], seen[end] = true, true
	}
	return n
}

// checkSessionStateEmpty checks that subtasks that saw MaxWatermark hold no
// sessions and no timers: their backends have no keys and snapshot no keyed
// state.
func checkSessionStateEmpty(t *testing.T, subs []*sessionSub) {
	t.Helper()
	for i, s := range subs {
		if n := s.stateKeys(t); n != 0 {
			t.Errorf("subtask %d: %d keys hold sessions after the final watermark", i, n)
		}
		snap, err := s.h.Snapshot(9)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Keyed) != 0 {
			t.Errorf("subtask %d: keyed state of %d key groups (sessions or timers) left after the final watermark", i, len(snap.Keyed))
		}
	}
}

func diffEntries(got, want []entry) string {
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(got), len(want)) && shown < 8; i++ {
		var g, w string
		if i < len(got) {
			g = got[i].String()
		}
		if i < len(want) {
			w = want[i].String()
		}
		if g != w || i < len(got) && i < len(want) && !reflect.DeepEqual(got[i], want[i]) {
			fmt.Fprintf(&b, "entry %d:\n  got  %s\n  want %s\n", i, g, w)
			shown++
		}
	}
	return b.String()
}

// TestSessionScenarios pins the merge rule, the firing times, lateness and
// the output order on small inputs; gap 10ms, count and sum(value).
func TestSessionScenarios(t *testing.T) {
	type rec struct {
		id, ts, v int64
	}
	type step struct {
		recs []rec // nil: watermark wm
		wm   int64
	}
	tests := []struct {
		name     string
		lateness int64
		steps    []step
		want     []string // rows "id [start,end) n=… sum=… @time", and "wm N"
		dropped  int64
	}{
		{
			name:  "touching windows merge, a longer pause does not",
			steps: []step{{recs: []rec{{1, 0, 1}, {1, 10, 2}, {1, 21, 4}}}, {wm: 100}},
			want:  []string{"1 [0,20) n=2 sum=3 @19", "1 [21,31) n=1 sum=4 @30", "wm 100"},
		},
		{
			name: "a late record bridges two sessions",
			steps: []step{{recs: []rec{{1, 0, 1}, {1, 20, 2}}}, {wm: 5},
				{recs: []rec{{1, 10, 4}}}, {wm: 100}},
			want: []string{"wm 5", "1 [0,30) n=3 sum=7 @29", "wm 100"},
		},
		{
			name: "fire at end-1, ordered by end then key",
			steps: []step{{recs: []rec{{2, 0, 1}, {1, 3, 1}, {3, 0, 1}}}, {wm: 8},
				{wm: 9}, {wm: 12}, {wm: 13}},
			want: []string{"wm 8", "2 [0,10) n=1 sum=1 @9", "3 [0,10) n=1 sum=1 @9", "wm 9", "1 [3,13) n=1 sum=1 @12", "wm 12", "wm 13"},
		},
		{
			name: "late records are dropped unless they reach a held session",
			steps: []step{{recs: []rec{{1, 100, 1}}}, {wm: 95},
				// [80,90) ends before the watermark: dropped. [86,96)
				// touches [100,110)? no: 96 < 100. [90,100) touches it.
				{recs: []rec{{1, 80, 2}, {1, 86, 4}, {1, 90, 8}}}, {wm: 200}},
			want:    []string{"wm 95", "1 [90,110) n=2 sum=9 @109", "wm 200"},
			dropped: 2,
		},
		{
			name:     "allowed lateness re-fires the merged session",
			lateness: 20,
			steps: []step{{recs: []rec{{1, 0, 1}}}, {wm: 20},
				// [2,12) merges into [0,10), which fired: [0,12) fires
				// again at once.
				{recs: []rec{{1, 2, 2}}},
				// [15,25) is a new session; [12,22) bridges it and
				// [0,12) into [0,25), which has not fired.
				{recs: []rec{{1, 15, 4}, {1, 12, 8}}},
				{wm: 24},
				{recs: []rec{{1, 40, 16}}},
				// [0,25) is gone at 24+20: [1,11) reaches no session and
				// its cleanup time 10+20 has passed: dropped. [30,40)
				// merges into [40,50).
				{wm: 44},
				{recs: []rec{{1, 1, 32}, {1, 30, 64}}},
				{wm: 100}},
			want: []string{"1 [0,10) n=1 sum=1 @9", "wm 20", "1 [0,12) n=2 sum=3 @11", "1 [0,25) n=4 sum=15 @24", "wm 24", "wm 44",
				"1 [30,50) n=2 sum=80 @49", "wm 100"},
			dropped: 1,
		},
	}
	schema := genSchema
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := json.Marshal(SessionWindowConfig{Gap: "10ms", AllowedLateness: dur(tt.lateness),
				Aggregates: []AggregateConfig{{Fn: "count", As: "n"}, {Fn: "sum", Field: "value", As: "sum"}}})
			for _, backend := range sessionBackends {
				t.Run(backend, func(t *testing.T) {
					all := stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1}
					s, err := openSession(t, backend, cfg, []string{"id"}, all, 0, 1, 0, nil)
					if err != nil {
						t.Fatal(err)
					}
					rec := newRecorder(t)
					for _, st := range tt.steps {
						if st.recs == nil {
							if err := s.h.Op.ProcessWatermark(st.wm, rec); err != nil {
								t.Fatal(err)
							}
							continue
						}
						b := stream.NewBatch(schema, len(st.recs))
						for _, r := range st.recs {
							b.AppendRow(r.id, "x", r.ts, r.v, 1.0)
							b.Times = append(b.Times, r.ts)
						}
						if err := s.h.Op.ProcessBatch(0, b, rec); err != nil {
							t.Fatal(err)
						}
					}
					var got []string
					for _, e := range entries(rec) {
						if e.isWM {
							got = append(got, fmt.Sprintf("wm %d", e.wm))
							continue
						}
						got = append(got, fmt.Sprintf("%d [%d,%d) n=%d sum=%d @%d", e.row[0], e.row[1], e.row[2], e.row[3], e.row[4], e.time))
					}
					if !slices.Equal(got, tt.want) {
						t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
					}
					if d := s.op().LateRecordsDropped(); d != tt.dropped {
						t.Errorf("LateRecordsDropped = %d, want %d", d, tt.dropped)
					}
				})
			}
		})
	}
}

// TestSessionGlobalRescale restores the sessions of two global (not keyed)
// subtasks into one: the sessions that a restore puts into a key group
// other than the subtask's own are merged into its own, timers included.
func TestSessionGlobalRescale(t *testing.T) {
	cfg := []byte(`{"gap": "10ms", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "value"}]}`)
	halves := []stream.KeyGroupRange{{Start: 0, End: 63}, {Start: 64, End: stream.DefaultMaxParallelism - 1}}
	input := [][]genRow{
		{{ts: 0, value: int64(1)}, {ts: 5, value: int64(2)}, {ts: 40, value: int64(4)}},
		{{ts: 12, value: int64(8)}, {ts: 70, value: int64(16)}},
	}
	merged := &stream.OperatorSnapshot{Keyed: map[int][][]byte{}, Union: map[string][][]byte{}}
	for i, kg := range halves {
		s, err := openSession(t, stream.StateBackendHeap, cfg, nil, kg, i, 2, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := stream.NewBatch(genSchema, len(input[i]))
		for _, r := range input[i] {
			b.AppendRow(r.values()...)
			b.Times = append(b.Times, r.ts)
		}
		if err := s.h.Op.ProcessBatch(0, b, newRecorder(t)); err != nil {
			t.Fatal(err)
		}
		snap, err := s.h.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		for kg, chunks := range snap.Keyed {
			merged.Keyed[kg] = append(merged.Keyed[kg], chunks...)
		}
		for name, items := range snap.Union {
			merged.Union[name] = append(merged.Union[name], items...)
		}
	}
	all := stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1}
	s, err := openSession(t, stream.StateBackendHeap, cfg, nil, all, 0, 1, 1, merged)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := statebackend.KeyedBackend(s.octx)
	for kg := 1; kg <= all.End; kg++ {
		b.Keys(sessionsTable, kg, func([]byte) bool {
			t.Errorf("key group %d still holds sessions after the restore", kg)
			return false
		})
	}
	rec := newRecorder(t)
	if err := s.h.Op.ProcessWatermark(stream.MaxWatermark, rec); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries(rec) {
		if !e.isWM {
			got = append(got, fmt.Sprint(e.row))
		}
	}
	want := []string{"[0 22 3 11]", "[40 50 1 4]", "[70 80 1 16]"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	checkSessionStateEmpty(t, []*sessionSub{s})
}

// TestSessionRestoreIntoChangedJob restores sessions into a session window
// with other aggregates and with another key: both fail with an error that
// says what the state was written for and what to do.
func TestSessionRestoreIntoChangedJob(t *testing.T) {
	cfg := []byte(`{"gap": "10ms", "aggregates": [{"fn": "count"}, {"fn": "min", "field": "value"}]}`)
	all := stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1}
	for _, backend := range sessionBackends {
		t.Run(backend, func(t *testing.T) {
			s, err := openSession(t, backend, cfg, []string{"id"}, all, 0, 1, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			b := batchOf(genSchema, []any{int64(1), "a", int64(5), int64(3), 1.5})
			b.Times = append(b.Times, 5)
			if err := s.h.Op.ProcessBatch(0, b, newRecorder(t)); err != nil {
				t.Fatal(err)
			}
			snap, err := s.h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name string
				cfg  string
				keys []string
				want []string
			}{
				{"other aggregates", `{"gap": "10ms", "aggregates": [{"fn": "count"}, {"fn": "max", "field": "value"}]}`, []string{"id"},
					[]string{"window.sessions.v1(count, max_int)", "written for aggregates (count, min_int)", "start without the checkpoint"}},
				{"other key", string(cfg), []string{"name"},
					[]string{"key (int64)", "this operator has key (string)", "start without the checkpoint"}},
			} {
				_, err := openSession(t, backend, []byte(tc.cfg), tc.keys, all, 0, 1, 1, snap)
				if err == nil {
					t.Fatalf("%s: restore succeeded", tc.name)
				}
				for _, want := range tc.want {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: restore error %q does not say %q", tc.name, err, want)
					}
				}
			}
		})
	}
}

func TestSessionMisrouted(t *testing.T) {
	cfg := []byte(`{"gap": "1s", "aggregates": [{"fn": "count"}]}`)
	s, err := openSession(t, stream.StateBackendHeap, cfg, []string{"id"}, stream.KeyGroupRange{Start: 0, End: 0}, 0, stream.DefaultMaxParallelism, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := stream.NewBatch(genSchema, 20)
	for k := range int64(20) {
		b.AppendRow(k, nil, int64(0), nil, nil)
		b.Times = append(b.Times, 0)
	}
	err = s.h.Op.ProcessBatch(0, b, newRecorder(t))
	if err == nil || !strings.Contains(err.Error(), "routed to the wrong subtask") {
		t.Fatalf("ProcessBatch = %v, want a routing error", err)
	}
}

// BenchmarkSessionCountSum feeds a session window (gap 1s, count and sum)
// keyed by one of 10,000 keys 1024-row batches, 10 rows per millisecond (so
// a key's records are about 1s apart and its sessions often merge), with a
// watermark 100ms behind after every batch, on each state backend.
func BenchmarkSessionCountSum(b *testing.B) {
	schema := stream.MustSchema(
		stream.Field{Name: "key", Type: stream.TypeInt64},
		stream.Field{Name: "value", Type: stream.TypeInt64},
	)
	const (
		batchRows = stream.DefaultBatchSize
		keys      = 10_000
		nBatches  = 256
	)
	rng := rand.New(rand.NewPCG(1, 2))
	keyCol := make([]int64, batchRows*nBatches)
	valCol := make([]int64, batchRows*nBatches)
	for i := range keyCol {
		keyCol[i] = rng.Int64N(keys)
		valCol[i] = rng.Int64N(1000)
	}
	cfg := []byte(`{"gap": "1s", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "value", "as": "total"}]}`)
	for _, backend := range sessionBackends {
		b.Run(backend, func(b *testing.B) {
			out, err := planSessionWindow(&stream.PlanContext{Config: cfg, Inputs: []stream.PlanInput{{Schema: schema, KeyFields: []string{"key"}}}})
			if err != nil {
				b.Fatal(err)
			}
			op, err := NewSessionWindow(cfg)
			if err != nil {
				b.Fatal(err)
			}
			octx := &stream.OperatorContext{OperatorUID: "s", Parallelism: 1, MaxParallelism: stream.DefaultMaxParallelism,
				KeyGroups:    stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1},
				InputSchemas: []*stream.Schema{schema}, InputKeys: [][]string{{"key"}}, OutputSchema: out,
				StateBackend: backend, LocalStateDir: b.TempDir()}
			h, err := dataflowtest.Open(b.Context(), op, octx, 0, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close(true)
			var sink discard
			row := int64(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := (i % nBatches) * batchRows
				bt := stream.NewBatch(schema, batchRows)
				bt.Cols[0].Ints = append(bt.Cols[0].Ints, keyCol[off:off+batchRows]...)
				bt.Cols[1].Ints = append(bt.Cols[1].Ints, valCol[off:off+batchRows]...)
				for j := range int64(batchRows) {
					bt.Times = append(bt.Times, (row+j)/10)
				}
				bt.SetLen(batchRows)
				row += batchRows
				if err := op.ProcessBatch(0, bt, sink); err != nil {
					b.Fatal(err)
				}
				if err := op.ProcessWatermark(row/10-100, sink); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchRows), "ns/row")
		})
	}
}

// sideRows counts the rows the recorders got on the late side output.
func sideRows(recs []*recorder) int64 {
	n := 0
	for _, r := range recs {
		n += len(r.side)
	}
	return int64(n)
}
