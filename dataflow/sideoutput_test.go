package dataflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weirstream/weir/stream"
)

// oddSchema is the schema of oddsplit's side output "odd": a schema other
// than its input's, so that a reader decoding with the wrong one notices.
var oddSchema = stream.MustSchema(
	stream.Field{Name: "odd_id", Type: stream.TypeInt64},
	stream.Field{Name: "key", Type: stream.TypeInt64},
)

// sideState is what the side-output test operators of one run report to.
type sideState struct {
	// Side outputs emitted by oddsplit, by whether CollectSide reported a
	// reader, keyed "<output>/<true|false>".
	mu      sync.Mutex
	collect map[string]int
	ids     map[string][]int64 // idset contents at Finish, by "uid/subtask"
	// badRoute counts rows an idset subtask got for a key it does not own
	// (hash edges only).
	badRoute atomic.Int64
}

func newSideState() *sideState {
	return &sideState{collect: map[string]int{}, ids: map[string][]int64{}}
}

func (s *sideState) collected(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.collect[key]
}

// oddsplitConfig configures "oddsplit": rows with an even id go to the main
// output (the input's schema), rows with an odd id to side output "odd"
// (oddSchema). With Unread, every input batch is also copied to side output
// "unread", which the tests never read. EmitTo names a side output to emit
// one row to per batch instead, to test undeclared names.
type oddsplitConfig struct {
	Unread bool   `json:"unread"`
	EmitTo string `json:"emitTo"`
}

type oddsplit struct {
	stream.BaseOperator
	st  *sideState
	cfg oddsplitConfig
}

func (o *oddsplit) Open(context.Context, *stream.OperatorContext) error { return nil }

func (o *oddsplit) note(name string, read bool) {
	o.st.mu.Lock()
	o.st.collect[fmt.Sprintf("%s/%t", name, read)]++
	o.st.mu.Unlock()
}

func (o *oddsplit) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	if o.cfg.EmitTo != "" {
		s := stream.NewBatch(oddSchema, 1)
		s.AppendRow(int64(1), int64(1))
		o.note(o.cfg.EmitTo, stream.CollectSide(out, o.cfg.EmitTo, s))
	}
	if o.cfg.Unread {
		o.note("unread", stream.CollectSide(out, "unread", cloneBatch(b)))
	}
	n := b.Len()
	even := stream.NewBatch(b.Schema, n)
	odd := stream.NewBatch(oddSchema, n)
	for i, id := range b.Cols[0].Ints[:n] {
		if id%2 == 0 {
			even.AppendRow(id, b.Cols[1].Ints[i], b.Cols[2].Strs[i])
		} else {
			odd.AppendRow(id, b.Cols[1].Ints[i])
		}
	}
	b.Release()
	out.Collect(even)
	o.note("odd", stream.CollectSide(out, "odd", odd))
	return nil
}

// idset is a sink that keeps the ids it got (column 0) as operator state,
// so that a restored run continues the set. On a hash edge it checks that
// every row's key (column "key") belongs to its key groups. At Finish it
// records its ids in the sideState.
type idset struct {
	stream.BaseOperator
	st     *sideState
	who    string
	ids    []int64
	keyCol []int // nil unless the input is hash-partitioned
	maxPar int
	kgs    stream.KeyGroupRange
	hashes []uint64
}

var _ stream.Checkpointed = (*idset)(nil)

func (s *idset) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.who = fmt.Sprintf("%s/%d", octx.OperatorUID, octx.Subtask)
	s.maxPar, s.kgs = octx.MaxParallelism, octx.KeyGroups
	if octx.InputKeys[0] != nil {
		idx, err := octx.InputSchemas[0].Lookup("key")
		if err != nil {
			return err
		}
		s.keyCol = idx
	}
	return nil
}

func (s *idset) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if s.keyCol != nil {
		s.hashes = slices.Grow(s.hashes[:0], n)[:n]
		stream.HashKeys(b, s.keyCol, s.hashes)
		for _, h := range s.hashes {
			if !s.kgs.Contains(stream.KeyGroupForHash(h, s.maxPar)) {
				s.st.badRoute.Add(1)
			}
		}
	}
	s.ids = append(s.ids, b.Cols[0].Ints[:n]...)
	return nil
}

func (s *idset) ProcessWatermark(int64, stream.Collector) error { return nil }

func (s *idset) Finish(stream.Collector) error {
	s.st.mu.Lock()
	s.st.ids[s.who] = append([]int64(nil), s.ids...)
	s.st.mu.Unlock()
	return nil
}

func (s *idset) SnapshotState(c *stream.SnapshotContext) error {
	buf := make([]byte, 0, 8*len(s.ids))
	for _, id := range s.ids {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(id))
	}
	c.AddListState("ids", buf)
	return nil
}

func (s *idset) RestoreState(c *stream.RestoreContext) error {
	s.ids = nil
	for _, item := range c.State.List["ids"] {
		if len(item)%8 != 0 {
			return fmt.Errorf("ids item of %d bytes", len(item))
		}
		for ; len(item) > 0; item = item[8:] {
			s.ids = append(s.ids, int64(binary.LittleEndian.Uint64(item)))
		}
	}
	return nil
}

func decodeIDs(t *testing.T, snap *stream.OperatorSnapshot) []int64 {
	t.Helper()
	s := &idset{}
	if err := s.RestoreState(&stream.RestoreContext{State: snap}); err != nil {
		t.Fatal(err)
	}
	return s.ids
}

// addSideTypes registers oddsplit and idset in reg.
func addSideTypes(reg *stream.Registry, st *sideState) *stream.Registry {
	reg.Register(stream.OperatorType{
		Name: "oddsplit", Kind: stream.KindTransform,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			p.DeclareSideOutput("odd", oddSchema)
			p.DeclareSideOutput("unread", p.Inputs[0].Schema)
			return p.Inputs[0].Schema, nil
		},
		NewOperator: func(config []byte) (stream.Operator, error) {
			o := &oddsplit{st: st}
			return o, stream.DecodeConfig(config, &o.cfg)
		},
	})
	reg.Register(stream.OperatorType{
		Name: "idset", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &idset{st: st}, nil },
	})
	return reg
}

// checkExactlyOnce compares the ids got with the ids wanted, counting
// lost and duplicated ones, and fails the test naming a few of each.
func checkExactlyOnce(t *testing.T, what string, got []int64, want func(id int64) bool, below int64) {
	t.Helper()
	seen := map[int64]int{}
	var unexpected []int64
	for _, id := range got {
		if id < 0 || id >= below || !want(id) {
			unexpected = append(unexpected, id)
			continue
		}
		seen[id]++
	}
	var lost, dup []int64
	for id := range below {
		if !want(id) {
			continue
		}
		switch n := seen[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			dup = append(dup, id)
		}
	}
	if len(lost)+len(dup)+len(unexpected) > 0 {
		first := func(ids []int64) []int64 {
			slices.Sort(ids)
			return ids[:min(len(ids), 8)]
		}
		t.Errorf("%s: %d rows, %d lost (first %v), %d duplicated (first %v), %d not belonging here (first %v)",
			what, len(got), len(lost), first(lost), len(dup), first(dup), len(unexpected), first(unexpected))
	}
}

func isEven(id int64) bool { return id%2 == 0 }
func isOdd(id int64) bool  { return id%2 == 1 }

// sideGraph is ckgen (parallelism 2) → oddsplit (chained) with its main
// output keyed by key into "even" (parallelism 2), and its side output
// "odd" read twice: round-robin by "odd" (parallelism 3) and broadcast to
// "oddAll" (parallelism 2). Its chains are [src split] [even] [odd] [oddAll].
func sideGraph(t *testing.T, reg *stream.Registry, rows int64, split oddsplitConfig) *stream.JobGraph {
	t.Helper()
	b := stream.NewBuilder("side").MaxParallelism(16)
	s := b.Source("src", "ckgen", ckgenConfig{Rows: rows, Batch: 16, Keys: 23}).SetParallelism(2).
		Then("split", "oddsplit", split).SetParallelism(2)
	s.KeyBy("key").Then("even", "idset", nil).SetParallelism(2)
	s.SideOutput("odd").Rebalance().Then("odd", "idset", nil).SetParallelism(3)
	s.SideOutput("odd").Broadcast().Then("oddAll", "idset", nil).SetParallelism(2)
	return plan(t, b, reg)
}

var sideChains = [][]int{{0, 1}, {2}, {3}, {4}}

// TestSideOutputsExactlyOnceAcrossRestore runs oddsplit with both outputs
// read (one side-output edge round-robin, one broadcast, the main output
// hash-partitioned), takes a checkpoint while rows flow, lets the doomed run
// go on, kills it and restarts from the checkpoint with the sources rewound.
// The sources wait at the first hold until the checkpoint is triggered and
// then go on to the second, so the barriers fall among side-output batches.
// Every row must reach every reader of its output exactly once, the
// checkpoint must be a consistent cut on the side-output edges as on the
// main one (so barriers travel in order with side-output batches), and the
// unread side output must report no reader.
func TestSideOutputsExactlyOnceAcrossRestore(t *testing.T) {
	const rows, hold1, hold2 = 6000, 1500, 4000
	for _, network := range []bool{false, true} {
		t.Run(fmt.Sprintf("network=%t", network), func(t *testing.T) {
			g := sideGraph(t, addSideTypes(newCkRegistry(newCkState()), newSideState()), rows, oddsplitConfig{Unread: true})
			place := func(int, int) string { return "local" }
			var exchangeOf func(*TaskSpec) *Exchange
			if network {
				nodes := []*testNode{startNode(t, 3), startNode(t, 3)}
				nodeOf := func(v, s int) int { return (v + s) % 2 }
				place = func(v, s int) string { return nodes[nodeOf(v, s)].addr }
				exchangeOf = func(s *TaskSpec) *Exchange { return nodes[nodeOf(s.VertexID, s.Subtask)].x }
			} else {
				x := localExchange(t, "local")
				exchangeOf = func(*TaskSpec) *Exchange { return x }
			}
			inOf := func(r *ckRun, vertex int) int64 {
				var n int64
				for _, task := range r.tasks {
					if task.spec.VertexID == vertex {
						n += task.Metrics().RecordsIn.Load()
					}
				}
				return n
			}

			// The doomed run: checkpoint 1 while rows flow, then every row
			// below the hold delivered.
			ck1, side1 := newCkState(), newSideState()
			ck1.holdAt.Store(hold1)
			r1 := startCk(t, buildSpecs(t, g, sideChains, place), addSideTypes(newCkRegistry(ck1), side1), stream.ExactlyOnce, 0, nil, exchangeOf)
			waitFor(t, "the sources to reach the first hold", func() bool { return ck1.emitted.Load() == hold1 })
			if !r1.checkpointThen(t, 1, func() { ck1.holdAt.Store(hold2) }) {
				t.Fatal("checkpoint 1 failed")
			}
			waitFor(t, "every row below the second hold to reach every reader", func() bool {
				return inOf(r1, 2) == hold2/2 && inOf(r1, 3) == hold2/2 && inOf(r1, 4) == 2*hold2/2
			})
			r1.stop()
			for i, err := range r1.errs {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("task %s of the killed run: %v", r1.tasks[i].Name(), err)
				}
			}

			// Checkpoint 1 is a consistent cut: each reader holds exactly
			// the rows of its output below the sources' positions.
			var pos [2]int64
			cut := map[string][]int64{}
			for i, task := range r1.tasks {
				snaps, ok := r1.hooks[i].snaps(1)
				if !ok {
					t.Fatalf("task %s did not take checkpoint 1", task.Name())
				}
				head := task.chain[0].uid
				if head == "src" {
					pos[task.spec.Subtask] = int64(binary.LittleEndian.Uint64(snaps["src"].List["pos"][0]))
					continue
				}
				cut[head] = append(cut[head], decodeIDs(t, snaps[head])...)
				if head == "oddAll" {
					cut[fmt.Sprintf("oddAll/%d", task.spec.Subtask)] = decodeIDs(t, snaps[head])
				}
			}
			atCut := func(parity func(int64) bool) func(int64) bool {
				return func(id int64) bool { return parity(id) && id < pos[id%2] }
			}
			checkExactlyOnce(t, "checkpoint 1, even", cut["even"], atCut(isEven), rows)
			checkExactlyOnce(t, "checkpoint 1, odd", cut["odd"], atCut(isOdd), rows)
			for s := range 2 {
				who := fmt.Sprintf("oddAll/%d", s)
				checkExactlyOnce(t, "checkpoint 1, "+who, cut[who], atCut(isOdd), rows)
			}
			t.Logf("checkpoint 1 at source positions %v", pos)

			// The restarted run, from checkpoint 1 to the end of input.
			ck2, side2 := newCkState(), newSideState()
			specs2 := buildSpecs(t, g, sideChains, place)
			for _, s := range specs2 {
				s.Attempt = 4
			}
			restore := func(i int) map[string]*stream.OperatorSnapshot {
				s, _ := r1.hooks[i].snaps(1)
				return s
			}
			r2 := startCk(t, specs2, addSideTypes(newCkRegistry(ck2), side2), stream.ExactlyOnce, 1, restore, exchangeOf)
			r2.checkpointUntilDone(t, 2)
			for i, err := range r2.wait(t) {
				if err != nil {
					t.Fatalf("task %s: %v", r2.tasks[i].Name(), err)
				}
			}
			final := map[string][]int64{}
			for who, ids := range side2.ids {
				uid, _, _ := strings.Cut(who, "/")
				final[uid] = append(final[uid], ids...)
				if uid == "oddAll" {
					final[who] = ids
				}
			}
			checkExactlyOnce(t, "even (main output, hash)", final["even"], isEven, rows)
			checkExactlyOnce(t, "odd (side output, rebalance)", final["odd"], isOdd, rows)
			for s := range 2 {
				who := fmt.Sprintf("oddAll/%d", s)
				checkExactlyOnce(t, who+" (side output, broadcast)", final[who], isOdd, rows)
			}
			for _, st := range []*sideState{side1, side2} {
				if n := st.badRoute.Load(); n != 0 {
					t.Errorf("%d rows of the hash edge reached a subtask that does not own their key", n)
				}
				if n := st.collected("odd/false"); n != 0 {
					t.Errorf("CollectSide reported no reader of side output odd %d times", n)
				}
				if n := st.collected("unread/true"); n != 0 {
					t.Errorf("CollectSide reported a reader of the unread side output %d times", n)
				}
			}
			if side2.collected("odd/true") == 0 || side2.collected("unread/false") == 0 {
				t.Errorf("oddsplit emitted nothing to its side outputs: %v", side2.collect)
			}
		})
	}
}

// TestSideOutputOfChainedOperator: an operator in the middle of a chain has
// no side-output readers (the scheduler never chains a side-output edge), so
// CollectSide drops its batches and says so, while its main output flows on.
func TestSideOutputOfChainedOperator(t *testing.T) {
	ck, side := newCkState(), newSideState()
	reg := addSideTypes(newCkRegistry(ck), side)
	b := stream.NewBuilder("chained").MaxParallelism(8)
	b.Source("src", "ckgen", ckgenConfig{Rows: 200, Batch: 10}).SetParallelism(1).
		Then("split", "oddsplit", nil).Then("even", "idset", nil)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0, 1, 2}}, func(int, int) string { return "local" })
	_, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	checkExactlyOnce(t, "even", side.ids["even/0"], isEven, 200)
	if got, want := side.collected("odd/false"), 20; got != want || side.collected("odd/true") != 0 {
		t.Fatalf("CollectSide on a chained operator: %d batches without reader, %d with; want %d without", got, side.collected("odd/true"), want)
	}
}

// TestUndeclaredSideOutputFailsTask: emitting to a side output the type did
// not declare fails the task, naming the operator and the declared outputs,
// whether the operator ends its chain or not.
func TestUndeclaredSideOutputFailsTask(t *testing.T) {
	for _, chained := range []bool{false, true} {
		t.Run(fmt.Sprintf("chained=%t", chained), func(t *testing.T) {
			ck, side := newCkState(), newSideState()
			reg := addSideTypes(newCkRegistry(ck), side)
			b := stream.NewBuilder("bogus").MaxParallelism(8)
			s := b.Source("src", "ckgen", ckgenConfig{Rows: 100, Batch: 10}).SetParallelism(1).
				Then("split", "oddsplit", oddsplitConfig{EmitTo: "late"})
			s.Then("even", "idset", nil)
			chains := [][]int{{0, 1, 2}}
			if !chained {
				s.SideOutput("odd").Then("odd", "idset", nil)
				chains = [][]int{{0, 1}, {2}, {3}}
			}
			g := plan(t, b, reg)
			x := localExchange(t, "local")
			// Only the failing task: it fails on its first batch, before it
			// sends anything, and a consumer whose producer is gone before
			// the consumer registered would wait for a cancellation that
			// only a jobmanager (or RunGraph) sends.
			specs := buildSpecs(t, g, chains, func(int, int) string { return "local" })[:1]
			_, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
			if errs[0] == nil {
				t.Fatal("the task did not fail")
			}
			// The operator, the output, the type, its declared outputs and
			// the fix.
			for _, want := range []string{`operator "split"`, `"late"`, `"oddsplit"`, `"odd", "unread"`, "DeclareSideOutput"} {
				if !strings.Contains(errs[0].Error(), want) {
					t.Errorf("task error %v does not name %s", errs[0], want)
				}
			}
		})
	}
}

// TestNewTaskValidatesSideOutputs: an output reading a side output the tail
// does not have, or keyed by a field its schema lacks, is refused.
func TestNewTaskValidatesSideOutputs(t *testing.T) {
	reg := addSideTypes(newCkRegistry(newCkState()), newSideState())
	g := sideGraph(t, reg, 10, oddsplitConfig{})
	x := localExchange(t, "local")
	for _, tc := range []struct {
		name   string
		mutate func(o *Output)
		want   []string // what the error names
	}{
		{"undeclared", func(o *Output) { o.SideOutput = "late" }, []string{`"late"`, `operator "split"`, `"odd", "unread"`}},
		{"key of the main schema", func(o *Output) { o.SideOutput, o.Partitioning, o.KeyFields = "odd", stream.Hash, []string{"name"} }, []string{`"name"`, "odd_id, key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := buildSpecs(t, g, sideChains, func(int, int) string { return "local" })[0]
			tc.mutate(&s.Outputs[1])
			_, err := NewTask(s, reg, x, nil)
			if err == nil {
				t.Fatal("NewTask accepted the spec")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewTask: %v, want an error naming %s", err, w)
				}
			}
		})
	}
}
