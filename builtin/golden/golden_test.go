package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/stream"
)

var update = flag.Bool("update", false, "rewrite the golden checkpoint fixtures (testdata/<type>.snap) of the tests that run")

// checkpointID is the id of the checkpoint every fixture was taken at.
const checkpointID = 7

// maxPar is the max parallelism (number of key groups) of every fixture.
const maxPar = stream.DefaultMaxParallelism

// A fixture is one stateful operator type, an input for it and what its
// output must be. Its state after the first cut steps is
// testdata/<typ>.snap. Adding an operator type is adding an entry and
// running the test with -update for it; changing the input or config of an
// entry makes its fixture wrong, so add a new entry (with its own fixture
// name) instead.
type fixture struct {
	typ    string // the registered operator type
	name   string // the fixture's name if not typ
	config string // the operator's JSON config
	inputs []*stream.Schema
	keys   [][]string // the keyBy fields of each input
	input  func() []step
	cut    int // steps before the checkpoint
	// oracle computes the output of the whole input (the final watermark
	// included) without the operator, formatted by formatRow.
	oracle func(steps []step) []string
}

func (f *fixture) file() string {
	name := f.name
	if name == "" {
		name = f.typ
	}
	return filepath.Join("testdata", name+".snap")
}

// The stateful built-in operator types.
var fixtures = []fixture{
	{typ: "running_count", inputs: []*stream.Schema{events}, keys: [][]string{{"k"}},
		input: func() []step { return genEvents(1, 40) }, cut: 25, oracle: runningCount},
	{typ: "sequence_check", config: `{"field": "seq"}`, inputs: []*stream.Schema{events}, keys: [][]string{{"k"}},
		input: func() []step { return genEvents(2, 40) }, cut: 25, oracle: passThrough},
	{typ: "stream_join", inputs: []*stream.Schema{left, right}, keys: [][]string{{"k"}, {"k"}},
		input: func() []step { return genJoin(3, 40) }, cut: 25, oracle: streamJoin},
	{typ: "window_join", config: `{"size": "300ms"}`, inputs: []*stream.Schema{left, right}, keys: [][]string{{"k"}, {"k"}},
		input: func() []step { return genJoin(4, 40) }, cut: 25, oracle: windowJoin(300)},
	{typ: "window_topn", config: `{"size": "200ms", "slide": "50ms", "field": "v", "n": 2, "rankAs": "rank"}`,
		inputs: []*stream.Schema{events}, keys: [][]string{{"k"}},
		input: func() []step { return genEvents(5, 40) }, cut: 25, oracle: topN(200, 50, 2, false, true)},
	{typ: "window_max", config: `{"size": "300ms", "field": "v"}`, inputs: []*stream.Schema{events}, keys: [][]string{{"k"}},
		input: func() []step { return genEvents(6, 40) }, cut: 25, oracle: topN(300, 300, 1, true, false)},
	{typ: "tumbling_window", config: `{"size": "200ms", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "v", "as": "total"}, {"fn": "max", "field": "v", "as": "top"}]}`,
		inputs: []*stream.Schema{events}, keys: [][]string{{"k"}},
		input: func() []step { return genEvents(7, 40) }, cut: 25, oracle: windowAgg(200, 200)},
	{typ: "sliding_window", config: `{"size": "300ms", "slide": "100ms", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "v", "as": "total"}, {"fn": "max", "field": "v", "as": "top"}]}`,
		inputs: []*stream.Schema{events}, keys: [][]string{{"k"}},
		input: func() []step { return genEvents(8, 40) }, cut: 25, oracle: windowAgg(300, 100)},
	{typ: "session_window", config: `{"gap": "50ms", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "v", "as": "total"}, {"fn": "max", "field": "v", "as": "top"}]}`,
		inputs: []*stream.Schema{events}, keys: [][]string{{"k"}},
		input: func() []step { return genEvents(1168, 40) }, cut: 22, oracle: sessionAgg(50)},
}

// A step is what the test feeds an operator: rows (in the input's schema
// order, nil for null) with their event times on one input, or, when rows
// is nil, a watermark.
type step struct {
	input int
	rows  [][]any
	times []int64
	wm    int64
}

// placement is where a restored operator runs.
type placement struct {
	name    string
	backend string
	par     int // subtasks, splitting the key groups
}

var placements = []placement{
	{"heap", stream.StateBackendHeap, 1},
	{"pebble", stream.StateBackendPebble, 1},
	{"heap_2_subtasks", stream.StateBackendHeap, 2},
}

// TestGolden restores each fixture wherever an operator may run, feeds the
// rest of the input and checks that the output of the run before the
// checkpoint and of the restored run is that of an uninterrupted run, and
// that this is the oracle's.
func TestGolden(t *testing.T) {
	for i := range fixtures {
		fx := &fixtures[i]
		t.Run(strings.TrimSuffix(filepath.Base(fx.file()), ".snap"), func(t *testing.T) {
			steps := fx.input()
			if fx.cut <= 0 || fx.cut >= len(steps) {
				t.Fatalf("cut %d outside the %d steps", fx.cut, len(steps))
			}
			whole := runWhole(t, fx, steps)
			if want := fx.oracle(steps); !slices.Equal(whole, want) {
				t.Fatalf("an uninterrupted run differs from the oracle:\n%s", diff(whole, want))
			}
			if *update {
				writeFixture(t, fx, steps[:fx.cut])
			}
			data, err := os.ReadFile(fx.file())
			if err != nil {
				t.Fatalf("%v; write the fixture with go test ./builtin/golden -update -run 'TestGolden/%s'", err, fx.typ)
			}
			before := run(t, fx, openAll(t, fx, stream.StateBackendHeap, 1, nil), steps[:fx.cut], false)
			for _, p := range placements {
				t.Run(p.name, func(t *testing.T) {
					subs := openAll(t, fx, p.backend, p.par, data)
					after := run(t, fx, subs, steps[fx.cut:], true)
					got := slices.Concat(before, after)
					slices.Sort(got)
					if !slices.Equal(got, whole) {
						t.Fatalf("output of the run restored from %s differs from an uninterrupted run's:\n%s", fx.file(), diff(got, whole))
					}
				})
			}
		})
	}
}

// runWhole returns the sorted output of one subtask over all of steps.
func runWhole(t *testing.T, fx *fixture, steps []step) []string {
	out := run(t, fx, openAll(t, fx, stream.StateBackendHeap, 1, nil), steps, true)
	slices.Sort(out)
	return out
}

// writeFixture runs steps on one subtask and writes its snapshot, taken as
// the runtime takes it, as the fixture. It uses the Pebble backend with
// full snapshots, which writes each key group's chunk in key order, so that
// writing a fixture again gives the same bytes.
func writeFixture(t *testing.T, fx *fixture, steps []step) {
	h, err := open(t, fx, stream.StateBackendPebble, true, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, fx, []*subtask{h}, steps, false)
	snap, err := h.h.Snapshot(checkpointID)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Keyed) == 0 || len(snap.Files) != 0 {
		t.Fatalf("snapshot has %d key groups of chunks and %d files; want chunks only", len(snap.Keyed), len(snap.Files))
	}
	data, err := checkpoint.EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fx.file(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: %d bytes, %d key groups", fx.file(), len(data), len(snap.Keyed))
}

// subtask is one operator instance on the harness.
type subtask struct {
	h  *dataflowtest.Harness
	kg stream.KeyGroupRange
}

// openAll opens par subtasks of fx on backend, restoring the fixture data
// (nil: none) as the runtime does: each subtask decodes the keyed state of
// its key groups, list state is dealt round-robin, union state is whole.
func openAll(t *testing.T, fx *fixture, backend string, par int, data []byte) []*subtask {
	t.Helper()
	subs := make([]*subtask, par)
	for i := range par {
		snap, err := restoreSnapshot(data, i, par)
		if err != nil {
			t.Fatal(err)
		}
		if subs[i], err = open(t, fx, backend, false, i, par, snap); err != nil {
			t.Fatal(err)
		}
	}
	return subs
}

// restoreSnapshot is subtask sub of par's share of the fixture data (nil:
// none).
func restoreSnapshot(data []byte, sub, par int) (*stream.OperatorSnapshot, error) {
	if data == nil {
		return nil, nil
	}
	snap, err := checkpoint.DecodeSnapshot(data, stream.KeyGroupRangeFor(maxPar, par, sub))
	if err != nil {
		return nil, err
	}
	for name, items := range snap.List {
		var mine [][]byte
		for j, it := range items {
			if j%par == sub {
				mine = append(mine, it)
			}
		}
		snap.List[name] = mine
	}
	return snap, nil
}

// open opens subtask sub of par of fx on backend (with full snapshots if
// full), restoring snap, the state of checkpoint checkpointID, if not nil.
// It closes the subtask when the test ends.
func open(t *testing.T, fx *fixture, backend string, full bool, sub, par int, snap *stream.OperatorSnapshot) (*subtask, error) {
	t.Helper()
	typ, ok := builtin.Registry().Lookup(fx.typ, false)
	if !ok {
		t.Fatalf("operator type %q is not registered", fx.typ)
	}
	pc := &stream.PlanContext{UID: fx.typ, Config: []byte(fx.config), Parallelism: par}
	for i, s := range fx.inputs {
		pc.Inputs = append(pc.Inputs, stream.PlanInput{Schema: s, KeyFields: fx.keys[i]})
	}
	outSchema, err := typ.Plan(pc)
	if err != nil {
		t.Fatal(err)
	}
	op, err := typ.NewOperator([]byte(fx.config))
	if err != nil {
		t.Fatal(err)
	}
	kg := stream.KeyGroupRangeFor(maxPar, par, sub)
	octx := &stream.OperatorContext{JobID: "golden", TaskName: fmt.Sprintf("%s (%d/%d)", fx.typ, sub+1, par), OperatorUID: fx.typ,
		Subtask: sub, Parallelism: par, MaxParallelism: maxPar, KeyGroups: kg,
		InputSchemas: fx.inputs, InputKeys: fx.keys, OutputSchema: outSchema, Config: []byte(fx.config),
		Attempt: 1, Checkpointing: true, CheckpointMode: stream.ExactlyOnce,
		StateBackend: backend, FullSnapshots: full, LocalStateDir: t.TempDir()}
	var id int64
	if snap != nil {
		id = checkpointID
	}
	h, err := dataflowtest.Open(t.Context(), op, octx, id, snap)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := h.Close(true); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &subtask{h: h, kg: kg}, nil
}

// run feeds steps to subs, each row to the subtask owning its key group and
// each watermark to all, and, with finish, the final watermark and Finish.
// It returns the output, unsorted.
func run(t *testing.T, fx *fixture, subs []*subtask, steps []step, finish bool) []string {
	t.Helper()
	out := &collector{}
	for _, s := range steps {
		if s.rows == nil {
			for _, sub := range subs {
				if err := sub.h.Op.ProcessWatermark(s.wm, out); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		for _, sub := range subs {
			b := route(t, fx, s, sub.kg)
			if b.Len() == 0 {
				b.Release()
				continue
			}
			if err := sub.h.Op.ProcessBatch(s.input, b, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	if finish {
		for _, sub := range subs {
			if err := sub.h.Op.ProcessWatermark(stream.MaxWatermark, out); err != nil {
				t.Fatal(err)
			}
			if err := sub.h.Op.Finish(out); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out.rows
}

// route returns the batch of the rows of s whose key is in key groups kg.
func route(t *testing.T, fx *fixture, s step, kg stream.KeyGroupRange) *stream.Batch {
	schema := fx.inputs[s.input]
	all := stream.NewBatch(schema, len(s.rows))
	for _, r := range s.rows {
		all.AppendRow(r...)
	}
	cols, err := schema.Lookup(fx.keys[s.input]...)
	if err != nil {
		t.Fatal(err)
	}
	hashes := make([]uint64, len(s.rows))
	stream.HashKeys(all, cols, hashes)
	all.Release()
	b := stream.NewBatch(schema, len(s.rows))
	for i, r := range s.rows {
		if kg.Contains(stream.KeyGroupForHash(hashes[i], maxPar)) {
			b.AppendRow(r...)
			b.Times = append(b.Times, s.times[i])
		}
	}
	return b
}

// collector keeps the rows it is given, formatted by formatRow.
type collector struct{ rows []string }

func (c *collector) Collect(b *stream.Batch) {
	if err := b.Validate(); err != nil {
		panic(err)
	}
	for i := range b.Len() {
		ts, timed := int64(0), len(b.Times) > 0
		if timed {
			ts = b.Times[i]
		}
		c.rows = append(c.rows, formatRow(b.Row(i), ts, timed))
	}
	b.Release()
}

func (c *collector) EmitWatermark(int64) {}

// formatRow formats an output row and its event time for comparisons.
func formatRow(vals []any, ts int64, timed bool) string {
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch v := v.(type) {
		case nil:
			b.WriteString("null")
		case float64:
			b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		default:
			fmt.Fprint(&b, v)
		}
	}
	if timed {
		fmt.Fprintf(&b, " @%d", ts)
	}
	return b.String()
}

// diff describes how sorted got and want differ.
func diff(got, want []string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d rows, want %d\n", len(got), len(want))
	n := 0
	for i, j := 0, 0; (i < len(got) || j < len(want)) && n < 10; n++ {
		switch {
		case j == len(want) || i < len(got) && got[i] < want[j]:
			fmt.Fprintf(&b, "  extra:   %s\n", got[i])
			i++
		case i == len(got) || want[j] < got[i]:
			fmt.Fprintf(&b, "  missing: %s\n", want[j])
			j++
		default:
			i, j, n = i+1, j+1, n-1
		}
	}
	return b.String()
}
