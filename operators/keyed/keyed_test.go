package keyed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/stream"
)

var inSchema = stream.MustSchema(
	stream.Field{Name: "k", Type: stream.TypeString},
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "seq", Type: stream.TypeInt64},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
)

// recorder keeps the rows and event times it is given.
type recorder struct {
	rows  [][]any
	times []int64
	wms   []int64
}

func (r *recorder) Collect(b *stream.Batch) {
	if err := b.Validate(); err != nil {
		panic(err)
	}
	for i := range b.Len() {
		r.rows = append(r.rows, b.Row(i))
	}
	r.times = append(r.times, b.Times...)
	b.Release()
}
func (r *recorder) EmitWatermark(wm int64) { r.wms = append(r.wms, wm) }

var full = stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1}

type opType struct {
	plan func(*stream.PlanContext) (*stream.Schema, error)
	make func([]byte) (stream.Operator, error)
}

var (
	runningCountType = opType{planRunningCount, func(c []byte) (stream.Operator, error) { return NewRunningCount(c) }}
	seqCheckType     = opType{planSequenceCheck, func(c []byte) (stream.Operator, error) { return NewSequenceCheck(c) }}
)

// open plans and opens an operator of typ as subtask sub of par owning
// key groups r, on the heap backend.
func open(t *testing.T, typ opType, config string, keys []string, r stream.KeyGroupRange, sub, par int) *dataflowtest.Harness {
	t.Helper()
	h, err := reopen(t, typ, config, keys, r, sub, par, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// reopen is open restoring st, the state of checkpoint id.
func reopen(t *testing.T, typ opType, config string, keys []string, r stream.KeyGroupRange, sub, par int, id int64, st *stream.OperatorSnapshot) (*dataflowtest.Harness, error) {
	t.Helper()
	out, err := typ.plan(&stream.PlanContext{UID: "op", Config: []byte(config), Parallelism: par, Inputs: []stream.PlanInput{{Schema: inSchema, KeyFields: keys}}})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	op, err := typ.make([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	octx := &stream.OperatorContext{OperatorUID: "op", Subtask: sub, Parallelism: par, MaxParallelism: stream.DefaultMaxParallelism,
		KeyGroups: r, InputSchemas: []*stream.Schema{inSchema}, InputKeys: [][]string{keys}, OutputSchema: out, Attempt: 1,
		LocalStateDir: t.TempDir()}
	h, err := dataflowtest.Open(t.Context(), op, octx, id, st)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { h.Close(true) })
	return h, nil
}

// gen returns n rows in batches of 100: keys from small pools (some null k),
// seq counting 1, 2, ... per (k, id) key, and event times.
func gen(seed uint64, n int) []*stream.Batch {
	rng := rand.New(rand.NewPCG(seed, 2))
	seqs := map[string]int64{}
	var out []*stream.Batch
	for i := 0; i < n; {
		b := stream.NewBatch(inSchema, 100)
		for j := 0; j < 100 && i < n; j, i = j+1, i+1 {
			var k any = fmt.Sprintf("k%d", rng.IntN(6))
			if rng.IntN(20) == 0 {
				k = nil
			}
			id := rng.Int64N(40)
			key := fmt.Sprint(k, id)
			seqs[key]++
			b.AppendRow(k, id, seqs[key], int64(1000+i))
			b.Times = append(b.Times, int64(1000+i))
		}
		out = append(out, b)
	}
	return out
}

func clone(b *stream.Batch) *stream.Batch {
	c := stream.NewBatch(b.Schema, b.Len())
	for i := range b.Len() {
		c.AppendRow(b.Row(i)...)
	}
	c.Times = append(c.Times, b.Times...)
	return c
}

func keyCols(keys []string) []int {
	cols, _ := inSchema.Lookup(keys...)
	return cols
}

// keyGroups returns the key group of every row of b under keys.
func keyGroups(b *stream.Batch, keys []string) []int {
	h := make([]uint64, b.Len())
	stream.HashKeys(b, keyCols(keys), h)
	out := make([]int, len(h))
	for i := range h {
		out[i] = stream.KeyGroupForHash(h[i], stream.DefaultMaxParallelism)
	}
	return out
}

// split returns the rows of b whose key group is in r.
func split(b *stream.Batch, keys []string, r stream.KeyGroupRange) *stream.Batch {
	out := stream.NewBatch(b.Schema, 0)
	for i, kg := range keyGroups(b, keys) {
		if r.Contains(kg) {
			out.AppendRow(b.Row(i)...)
			out.Times = append(out.Times, b.Times[i])
		}
	}
	return out
}

// expectedCounts computes running_count's output independently: per row,
// the key values and how many rows of that key came so far.
func expectedCounts(batches []*stream.Batch, keys []string) [][]any {
	seen := map[string]int64{}
	var out [][]any
	for _, b := range batches {
		for i := range b.Len() {
			row := b.Row(i)
			var kv []any
			for _, c := range keyCols(keys) {
				kv = append(kv, row[c])
			}
			seen[fmt.Sprint(kv...)]++
			out = append(out, append(kv, seen[fmt.Sprint(kv...)]))
		}
	}
	return out
}

func feed(t *testing.T, h *dataflowtest.Harness, out stream.Collector, batches []*stream.Batch, r stream.KeyGroupRange, keys []string) {
	t.Helper()
	for _, b := range batches {
		in := clone(b)
		if r != full {
			in.Release()
			in = split(b, keys, r)
		}
		if err := h.Op.ProcessBatch(0, in, out); err != nil {
			t.Fatal(err)
		}
	}
}

func snap(t *testing.T, h *dataflowtest.Harness, id int64) *stream.OperatorSnapshot {
	t.Helper()
	st, err := h.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRunningCount(t *testing.T) {
	for _, keys := range [][]string{{"k", "id"}, {"id"}} {
		t.Run(strings.Join(keys, ","), func(t *testing.T) {
			data := gen(uint64(len(keys)), 5000)
			want := expectedCounts(data, keys)

			// Uninterrupted.
			var rec recorder
			feed(t, open(t, runningCountType, "", keys, full, 0, 1), &rec, data, full, keys)
			if !reflect.DeepEqual(rec.rows, want) {
				t.Fatalf("counts differ from the independent computation: %s", firstDiff(rec.rows, want))
			}
			for i, ts := range rec.times {
				if ts != int64(1000+i) {
					t.Fatalf("row %d carries event time %d, want %d", i, ts, 1000+i)
				}
			}

			// Snapshot after half, crash, restore into a fresh instance.
			half := len(data) / 2
			var a recorder
			opA := open(t, runningCountType, `{"emit": "every"}`, keys, full, 0, 1)
			feed(t, opA, &a, data[:half], full, keys)
			st := snap(t, opA, 3)
			feed(t, opA, &recorder{}, data[half:half+3], full, keys) // lost
			opB, err := reopen(t, runningCountType, `{"emit": "every"}`, keys, full, 0, 1, 3, st)
			if err != nil {
				t.Fatal(err)
			}
			feed(t, opB, &a, data[half:], full, keys)
			if !reflect.DeepEqual(a.rows, want) {
				t.Fatalf("restored run: %s", firstDiff(a.rows, want))
			}

			// Restore the same snapshot into two subtasks splitting the key
			// groups; each gets the full snapshot and keeps only its groups.
			ranges := []stream.KeyGroupRange{{Start: 0, End: 40}, {Start: 41, End: 127}}
			wantRest := expectedCounts(data, keys)[half*100:]
			var restGroups []int
			for _, b := range data[half:] {
				restGroups = append(restGroups, keyGroups(b, keys)...)
			}
			for s, r := range ranges {
				op, err := reopen(t, runningCountType, "", keys, r, s, 2, 3, st)
				if err != nil {
					t.Fatal(err)
				}
				var out recorder
				feed(t, op, &out, data[half:], r, keys)
				var w [][]any
				for i, row := range wantRest {
					if r.Contains(restGroups[i]) {
						w = append(w, row)
					}
				}
				if len(w) == 0 || !reflect.DeepEqual(out.rows, w) {
					t.Fatalf("subtask %d (%v): %s", s, r, firstDiff(out.rows, w))
				}
				// Its own snapshot holds only its key groups.
				for kg := range snap(t, op, 4).Keyed {
					if !r.Contains(kg) {
						t.Fatalf("subtask %d snapshot holds key group %d", s, kg)
					}
				}
			}
		})
	}
}

func firstDiff(got, want [][]any) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("row %d: got %v, want %v", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("got %d rows, want %d", len(got), len(want))
}

func TestSequenceCheck(t *testing.T) {
	keys := []string{"k", "id"}
	data := gen(7, 3000)
	var rec recorder
	op := open(t, seqCheckType, `{"field": "seq"}`, keys, full, 0, 1)
	feed(t, op, &rec, data, full, keys)
	var want [][]any
	for _, b := range data {
		for i := range b.Len() {
			want = append(want, b.Row(i))
		}
	}
	if !reflect.DeepEqual(rec.rows, want) {
		t.Fatalf("output is not the input: %s", firstDiff(rec.rows, want))
	}

	// Restore after half continues each key's sequence.
	half := len(data) / 2
	a := open(t, seqCheckType, `{"field": "seq"}`, keys, full, 0, 1)
	feed(t, a, &recorder{}, data[:half], full, keys)
	st := snap(t, a, 1)
	b, err := reopen(t, seqCheckType, `{"field": "seq"}`, keys, full, 0, 1, 1, st)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, b, &recorder{}, data[half:], full, keys)

	// Without the restore, the second half fails at once.
	c := open(t, seqCheckType, `{"field": "seq"}`, keys, full, 0, 1)
	if err := c.Op.ProcessBatch(0, clone(data[half]), &recorder{}); err == nil || !strings.Contains(err.Error(), "expected seq 1") {
		t.Fatalf("unrestored check = %v", err)
	}

	// A subtask restored with half the key groups has only their state.
	r := stream.KeyGroupRange{Start: 0, End: 63}
	d, err := reopen(t, seqCheckType, `{"field": "seq"}`, keys, r, 0, 2, 1, st)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, d, &recorder{}, data[half:], r, keys)
}

func TestSequenceCheckErrors(t *testing.T) {
	row := func(k any, id, seq int64) []any { return []any{k, id, seq, int64(0)} }
	tests := []struct {
		name string
		rows [][]any
		want string
	}{
		{"gap", [][]any{row("a", 1, 1), row("b", 1, 1), row("a", 1, 2), row("a", 1, 4)},
			`sequence_check "op": key (k=a, id=1): expected seq 3, got 4 (a gap: 1 records were lost)`},
		{"repeat", [][]any{row("a", 1, 1), row("a", 1, 2), row(nil, 2, 1), row(nil, 2, 1)},
			`key (k=<nil>, id=2): expected seq 2, got 1 (a repeat: records were duplicated)`},
		{"start", [][]any{row("a", 1, 2)}, "expected seq 1, got 2"},
		{"null", [][]any{row("a", 1, 1), {"a", int64(1), nil, int64(0)}}, "expected seq 2, got null"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op := open(t, seqCheckType, `{"field": "seq"}`, []string{"k", "id"}, full, 0, 1)
			b := stream.NewBatch(inSchema, len(tc.rows))
			for _, r := range tc.rows {
				b.AppendRow(r...)
			}
			err := op.Op.ProcessBatch(0, b, &recorder{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestKeyedRestoreErrors(t *testing.T) {
	a := open(t, runningCountType, "", []string{"k", "id"}, full, 0, 1)
	feed(t, a, &recorder{}, gen(1, 200), full, []string{"k", "id"})
	st := snap(t, a, 1)
	_, err := reopen(t, runningCountType, "", []string{"id"}, full, 0, 1, 1, st)
	if err == nil || !strings.Contains(err.Error(), "written for another key") {
		t.Fatalf("restore with another key = %v", err)
	}
	for kg, chunks := range st.Keyed {
		bad := &stream.OperatorSnapshot{Keyed: map[int][][]byte{kg: {chunks[0][:len(chunks[0])-2]}}}
		if _, err := reopen(t, runningCountType, "", []string{"k", "id"}, full, 0, 1, 1, bad); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("restore of a truncated chunk = %v", err)
		}
		moved := &stream.OperatorSnapshot{Keyed: map[int][][]byte{(kg + 1) % 128: chunks}}
		if _, err := reopen(t, runningCountType, "", []string{"k", "id"}, full, 0, 1, 1, moved); err == nil || !strings.Contains(err.Error(), "holds key group") {
			t.Fatalf("restore of a chunk under another key group = %v", err)
		}
		break
	}
	// Keys outside the subtask's range are an error, not a panic: the
	// state backend owns only the subtask's key groups.
	for _, tc := range []struct {
		typ    opType
		config string
	}{{runningCountType, ""}, {seqCheckType, `{"field": "seq"}`}} {
		e := open(t, tc.typ, tc.config, []string{"k", "id"}, stream.KeyGroupRange{Start: 0, End: 0}, 0, 128)
		var err error
		for _, b := range gen(2, 100) {
			if err = e.Op.ProcessBatch(0, b, &recorder{}); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), "routed to the wrong subtask") {
			t.Fatalf("%s with foreign keys = %v", tc.config, err)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	r := stream.NewRegistry()
	Register(r)
	RegisterFailureInjection(r)
	tests := []struct {
		typ, config string
		keys        []string
		want        string
	}{
		{TypeRunningCount, "", nil, "needs a keyed input"},
		{TypeRunningCount, `{"emit": "final"}`, []string{"k"}, `unknown emit "final"`},
		{TypeRunningCount, `{"as": "k"}`, []string{"k"}, `count field "k" is also a key field`},
		{TypeRunningCount, `{"emitt": "every"}`, []string{"k"}, `unknown field "emitt"`},
		{TypeRunningCount, "", []string{"nope"}, `no field "nope"`},
		{TypeSequenceCheck, `{"field": "seq"}`, nil, "needs a keyed input"},
		{TypeSequenceCheck, `{}`, []string{"k"}, "field is required"},
		{TypeSequenceCheck, `{"field": "x"}`, []string{"k"}, `field "x" is not in the input`},
		{TypeSequenceCheck, `{"field": "ts"}`, []string{"k"}, `field "ts" is timestamp; it must be int64`},
		{TypeFail, `{"failures": [{"attempt": 1, "at": "later"}]}`, nil, `unknown at "later"`},
		{TypeFail, `{"failures": [{"attempt": 1}]}`, nil, "at is required"},
		{TypeFail, `{"failures": [{"attempt": 0, "at": "records"}]}`, nil, "attempt 0: must be at least 1"},
		{TypeFail, `{"failures": [{"attempt": 1, "at": "snapshot", "after": 3}]}`, nil, `after applies only to at "records"`},
		{TypeFail, `{"failures": [{"attempt": 1, "at": "records", "after": -1}]}`, nil, "must not be negative"},
		{TypeFail, `{"failures": [{"attempt": 1, "at": "notify", "subtask": 4}]}`, nil, "subtask 4: must be in [0, 4)"},
	}
	for _, tc := range tests {
		t.Run(tc.typ+" "+tc.config, func(t *testing.T) {
			typ, ok := r.Lookup(tc.typ, false)
			if !ok {
				t.Fatalf("%s not registered", tc.typ)
			}
			_, err := typ.Plan(&stream.PlanContext{UID: "op", Config: []byte(tc.config), Parallelism: 4, Inputs: []stream.PlanInput{{Schema: inSchema, KeyFields: tc.keys}}})
			if err == nil || !errors.Is(err, stream.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Plan = %v, want a config error containing %q", err, tc.want)
			}
		})
	}
	typ, _ := r.Lookup(TypeRunningCount, false)
	out, err := typ.Plan(&stream.PlanContext{Config: []byte(`{"as": "n"}`), Inputs: []stream.PlanInput{{Schema: inSchema, KeyFields: []string{"id", "k"}}}})
	if err != nil || out.String() != "(id int64, k string, n int64)" {
		t.Fatalf("running_count output %v, %v", out, err)
	}
}

func TestFail(t *testing.T) {
	const cfg = `{"failures": [
		{"attempt": 1, "at": "records", "after": 5},
		{"attempt": 2, "subtask": 1, "at": "snapshot"},
		{"attempt": 3, "at": "restore"},
		{"attempt": 4, "at": "notify"},
		{"attempt": 5, "at": "records"}]}`
	batch := func(f *Fail) error {
		b := stream.NewBatch(inSchema, 3)
		for i := range 3 {
			b.AppendRow("a", int64(i), int64(i), int64(i))
		}
		var rec recorder
		err := f.ProcessBatch(0, b, &rec)
		if err == nil && len(rec.rows) != 3 {
			return fmt.Errorf("forwarded %d rows, want 3", len(rec.rows))
		}
		return err
	}
	snapshot := func(f *Fail) error {
		c := &stream.SnapshotContext{CheckpointID: 1}
		err := f.SnapshotState(c)
		if err == nil && len(c.State.List[failStateName]) != 1 {
			return fmt.Errorf("snapshot wrote %v, want one list item", c.State.List)
		}
		return err
	}
	restore := func(f *Fail) error {
		return f.RestoreState(&stream.RestoreContext{CheckpointID: 1, State: &stream.OperatorSnapshot{}})
	}
	notify := func(f *Fail) error {
		if err := f.NotifyCheckpointAborted(1); err != nil {
			return err
		}
		return f.NotifyCheckpointComplete(1)
	}
	all := []func(*Fail) error{restore, batch, snapshot, notify}
	tests := []struct {
		attempt int64
		subtask int
		failAt  int // index into the sequence restore, batch, batch, snapshot, notify; -1 none
		want    string
	}{
		{1, 0, 2, "injected failure (attempt 1, at records)"}, // 3 records pass, the next batch holds record 6
		{1, 1, -1, ""},
		{2, 0, -1, ""},
		{2, 1, 3, "injected failure (attempt 2, at snapshot)"},
		{3, 0, 0, "injected failure (attempt 3, at restore)"},
		{4, 0, 4, "injected failure (attempt 4, at notify)"},
		{5, 0, 1, "injected failure (attempt 5, at records)"},
		{6, 0, -1, ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("attempt %d subtask %d", tc.attempt, tc.subtask), func(t *testing.T) {
			f, err := NewFail([]byte(cfg))
			if err != nil {
				t.Fatal(err)
			}
			f.Open(t.Context(), &stream.OperatorContext{Subtask: tc.subtask, Parallelism: 2, Attempt: tc.attempt, InputSchemas: []*stream.Schema{inSchema}})
			seq := []func(*Fail) error{all[0], all[1], all[1], all[2], all[3]}
			failedAt := -1
			for i, do := range seq {
				if err := do(f); err != nil {
					if !errors.Is(err, ErrInjected) || err.Error() != tc.want {
						t.Fatalf("step %d: error %q, want %q", i, err, tc.want)
					}
					failedAt = i
					break
				}
			}
			if failedAt != tc.failAt {
				t.Fatalf("failed at step %d, want %d", failedAt, tc.failAt)
			}
		})
	}
}
