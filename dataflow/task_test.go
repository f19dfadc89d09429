package dataflow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

func localExchange(t testing.TB, addr string) *Exchange {
	x := NewExchange(ExchangeConfig{SelfAddress: addr, CreditsPerChannel: 2})
	t.Cleanup(func() { _ = x.Close() })
	return x
}

func TestChainInOneTask(t *testing.T) {
	for _, tc := range []struct {
		name      string
		idleEvery int
	}{{"busy source", 0}, {"idle source", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			st := newTestState()
			reg := newTestRegistry(st)
			b := stream.NewBuilder("chain").Parallelism(1)
			b.Source("src", "gen", genConfig{Rows: 1000, Batch: 64, Keys: 7, IdleEvery: tc.idleEvery}).
				Then("add", "addOne", nil).Then("sink", "collect", nil)
			g := plan(t, b, reg)
			x := localExchange(t, "local")
			specs := buildSpecs(t, g, [][]int{{0, 1, 2}}, func(int, int) string { return "local" })
			// StateRestored comes once, with every operator opened and
			// before any record.
			var restored []string
			specs[0].StateRestored = func() {
				restored = append(restored, fmt.Sprintf("opened=%d rows=%d", st.opened.Load(), st.consumed.Load()))
			}
			tasks, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
			if want := []string{"opened=3 rows=0"}; !slices.Equal(restored, want) {
				t.Fatalf("StateRestored calls %v, want %v", restored, want)
			}
			rows := st.rows["sink"]
			if len(rows) != 1000 {
				t.Fatalf("sink got %d rows, want 1000", len(rows))
			}
			for i, r := range rows { // one task: order is preserved
				want := sinkRow{id: int64(i) + 1000000, key: int64(i) % 7, name: fmt.Sprintf("n%d", i%7)}
				if r != want {
					t.Fatalf("row %d = %+v, want %+v", i, r, want)
				}
			}
			if got := st.wms["sink/0"]; len(got) == 0 || got[len(got)-1] != stream.MaxWatermark {
				t.Fatalf("sink watermarks %v do not end with MaxWatermark", got)
			}
			if st.finished["sink/0"] != 1 {
				t.Fatalf("sink finished %d times, want 1", st.finished["sink/0"])
			}
			if o, c := st.opened.Load(), st.closed.Load(); o != 3 || c != 3 {
				t.Fatalf("opened %d, closed %d operators; want 3 and 3", o, c)
			}
			m := tasks[0].Metrics()
			// The sink is the last operator and emits nothing.
			if m.RecordsIn.Load() != 1000 || m.RecordsOut.Load() != 0 {
				t.Fatalf("metrics in=%d out=%d, want 1000 and 0", m.RecordsIn.Load(), m.RecordsOut.Load())
			}
			if n := x.numEndpoints(); n != 0 {
				t.Fatalf("%d channel endpoints left registered", n)
			}
		})
	}
}

// keyOwner computes, independently of the partitioner, which of par
// subtasks owns key k: the subtask whose key-group range holds k's group.
func keyOwner(t *testing.T, k int64, maxPar, par int) int {
	b := stream.NewBatch(genSchema, 1)
	b.AppendRow(int64(0), k, "")
	h := make([]uint64, 1)
	stream.HashKeys(b, []int{1}, h)
	b.Release()
	kg := int(h[0] % uint64(maxPar))
	for s := 0; s < par; s++ {
		if stream.KeyGroupRangeFor(maxPar, par, s).Contains(kg) {
			return s
		}
	}
	t.Fatalf("no subtask of %d owns key group %d", par, kg)
	return -1
}

func TestLocalHashExchange(t *testing.T) {
	const rows, keys, maxPar, sinkPar = 5000, 37, 16, 3
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("hash").Parallelism(2).MaxParallelism(maxPar)
	b.Source("src", "gen", genConfig{Rows: rows, Batch: 50, Keys: keys}).
		KeyBy("key").Then("sink", "collect", nil).SetParallelism(sinkPar)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })
	tasks, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("task %s: %v", tasks[i].Name(), err)
		}
	}
	wantCount := map[int64]int{}
	for id := int64(0); id < rows; id++ {
		wantCount[id%keys]++
	}
	gotCount := map[int64]int{}
	where := map[int64]int{}
	for _, r := range st.rows["sink"] {
		gotCount[r.key]++
		if s, seen := where[r.key]; seen && s != r.subtask {
			t.Fatalf("key %d arrived at subtasks %d and %d", r.key, s, r.subtask)
		}
		where[r.key] = r.subtask
		if owner := keyOwner(t, r.key, maxPar, sinkPar); owner != r.subtask {
			t.Fatalf("key %d arrived at subtask %d, but its key group belongs to subtask %d", r.key, r.subtask, owner)
		}
		if r.name != fmt.Sprintf("n%d", r.key) {
			t.Fatalf("row %+v: name does not match key", r)
		}
	}
	if !reflect.DeepEqual(gotCount, wantCount) {
		t.Fatalf("per-key counts differ\n got %v\nwant %v", gotCount, wantCount)
	}
	var in, out int64
	for _, task := range tasks {
		if task.spec.VertexID == 0 {
			out += task.Metrics().RecordsOut.Load()
		} else {
			in += task.Metrics().RecordsIn.Load()
		}
	}
	if in != rows || out != rows {
		t.Fatalf("metrics: sources emitted %d, sinks took %d; want %d", out, in, rows)
	}
	for s := 0; s < sinkPar; s++ {
		if n := st.finished[fmt.Sprintf("sink/%d", s)]; n != 1 {
			t.Fatalf("sink %d finished %d times", s, n)
		}
	}
	if n := x.numEndpoints(); n != 0 {
		t.Fatalf("%d channel endpoints left registered", n)
	}
}

// TestEndOfInputPropagates runs source → counter → sink as three tasks
// joined by rebalance edges of different parallelism: every task must
// finish, and the counter's Finish output must reach the sink before its end.
func TestEndOfInputPropagates(t *testing.T) {
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("eoi")
	b.Source("src", "gen", genConfig{Rows: 999, Batch: 10}).SetParallelism(3).
		Rebalance().Then("count", "counter", nil).SetParallelism(2).
		Rebalance().Then("sink", "collect", nil).SetParallelism(1)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0}, {1}, {2}}, func(int, int) string { return "local" })
	_, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var data, counted int64
	counts := 0
	for _, r := range st.rows["sink"] {
		if r.name == "count" {
			counts++
			counted += -r.id
		} else {
			data++
		}
	}
	if data != 999 || counts != 2 || counted != 999 {
		t.Fatalf("sink saw %d data rows and %d count rows summing to %d; want 999, 2, 999", data, counts, counted)
	}
	if st.finished["sink/0"] != 1 {
		t.Fatal("sink not finished")
	}
}

func TestWatermarkCombiner(t *testing.T) {
	type step struct {
		ch       int
		wm       int64
		want     int64
		advanced bool
	}
	max := stream.MaxWatermark
	for _, tc := range []struct {
		name    string
		inputOf []int
		inputs  int
		steps   []step
	}{
		{"one channel", []int{0}, 1, []step{{0, 5, 5, true}, {0, 5, 5, false}, {0, 3, 5, false}, {0, 9, 9, true}}},
		{"min over channels", []int{0, 0, 0}, 1, []step{
			{0, 10, stream.MinWatermark, false}, {1, 20, stream.MinWatermark, false}, {2, 5, 5, true},
			{2, 30, 10, true}, {0, 40, 20, true}, {1, 25, 25, true}, {1, max, 30, true}, {2, max, 40, true}, {0, max, max, true},
		}},
		{"min over inputs", []int{0, 1, 1}, 2, []step{
			{1, 7, stream.MinWatermark, false}, {2, 8, stream.MinWatermark, false}, {0, 100, 7, true},
			{1, 50, 8, true}, {2, 60, 50, true}, {0, 55, 50, false}, {0, 101, 50, false}, {1, 200, 60, true},
		}},
		{"input without channels", []int{0, 0}, 2, []step{{0, 4, stream.MinWatermark, false}, {1, 6, 4, true}, {0, 9, 6, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWatermarkCombiner(tc.inputOf, tc.inputs)
			for i, s := range tc.steps {
				got, adv := w.update(s.ch, s.wm)
				if got != s.want || adv != s.advanced {
					t.Fatalf("step %d (channel %d wm %d): got %d/%v, want %d/%v", i, s.ch, s.wm, got, adv, s.want, s.advanced)
				}
			}
		})
	}
}

// TestWatermarksAcrossTasks checks the sink of three sources sees only
// strictly increasing watermarks that never pass the slowest source, ending
// with MaxWatermark.
func TestWatermarksAcrossTasks(t *testing.T) {
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("wm")
	b.Source("src", "gen", genConfig{Rows: 3000, Batch: 7}).SetParallelism(3).
		Rebalance().Then("sink", "collect", nil).SetParallelism(1)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })
	_, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	wms := st.wms["sink/0"]
	if len(wms) < 2 || wms[len(wms)-1] != stream.MaxWatermark {
		t.Fatalf("watermarks %v: want several ending in MaxWatermark", wms)
	}
	// Source s emits ids ≡ s (mod 3). A watermark w was forwarded only if
	// every source had emitted a watermark ≥ w, so the sink must already have
	// received, from every source, rows up to w (watermarks follow the data
	// of their channel).
	for i, w := range wms[:len(wms)-1] {
		if i > 0 && w <= wms[i-1] {
			t.Fatalf("watermarks not strictly increasing: %v", wms)
		}
	}
	// The combined watermark is a minimum over three channels, so it is at
	// most the largest id of the slowest source: with ids below 3000 every
	// finite watermark is below 3000.
	for _, w := range wms[:len(wms)-1] {
		if w >= 3000 {
			t.Fatalf("watermark %d exceeds every id emitted", w)
		}
	}
}

func TestOperatorFailureNamesTaskAndOperator(t *testing.T) {
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("fail").Parallelism(1)
	b.Source("src", "gen", genConfig{Rows: -1, Batch: 10}).
		Then("adder", "addOne", map[string]int{"failAt": 3}).Then("sink", "collect", nil)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0, 1, 2}}, func(int, int) string { return "local" })
	_, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
	err := errs[0]
	if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), `"adder"`) || !strings.Contains(err.Error(), "src (1/1)") {
		t.Fatalf("error %v: want one naming task src (1/1), operator \"adder\" and the cause", err)
	}
	if o, c := st.opened.Load(), st.closed.Load(); o != 3 || c != 3 {
		t.Fatalf("opened %d, closed %d operators; want 3 and 3", o, c)
	}
	if len(st.rows["sink"]) != 20 {
		t.Fatalf("sink got %d rows before the failure, want 20", len(st.rows["sink"]))
	}
}

// TestDownstreamFailsWhenUpstreamFails: a failed producer does not leave
// its consumer waiting for an end that never comes.
func TestDownstreamFailsWhenUpstreamFails(t *testing.T) {
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("fail2").Parallelism(1)
	b.Source("src", "gen", genConfig{Rows: -1, Batch: 10}).
		Then("adder", "addOne", map[string]int{"failAt": 5}).Rebalance().Then("sink", "collect", nil)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0, 1}, {2}}, func(int, int) string { return "local" })
	_, errs := runTasks(t.Context(), t, specs, reg, func(*TaskSpec) *Exchange { return x })
	if !errors.Is(errs[0], errBoom) {
		t.Fatalf("upstream: %v", errs[0])
	}
	if !errors.Is(errs[1], errUpstreamStopped) {
		t.Fatalf("downstream: %v, want an error saying the upstream stopped", errs[1])
	}
}

func TestCancelBlockedTasks(t *testing.T) {
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("cancel").Parallelism(1)
	b.Source("src", "gen", genConfig{Rows: -1, Batch: 10}).Rebalance().Then("sink", "collect", nil)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })
	for _, tc := range []struct {
		name string
		spec *TaskSpec
	}{
		{"consumer waiting for input", specs[1]},
		{"producer waiting for credit", specs[0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := NewTask(tc.spec, reg, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- task.Run(ctx) }()
			// Let the task block: the producer fills nothing (no consumer
			// registered, so no credit); the consumer has no producer.
			waitFor(t, "the task to register", func() bool { return x.numEndpoints() > 0 })
			if tc.spec.VertexID == 0 {
				waitFor(t, "the source to block", func() bool { return task.Metrics().RecordsIn.Load() > 0 })
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Run returned %v, want context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after cancellation")
			}
			if n := x.numEndpoints(); n != 0 {
				t.Fatalf("%d channel endpoints left registered", n)
			}
		})
	}
}

func TestNewTaskValidates(t *testing.T) {
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("v").Parallelism(2)
	b.Source("src", "gen", nil).KeyBy("key").Then("sink", "collect", nil)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	good := func() *TaskSpec {
		return buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })[0]
	}
	for _, tc := range []struct {
		name   string
		mutate func(s *TaskSpec)
		want   string
	}{
		{"wrong head id", func(s *TaskSpec) { s.VertexID = 5 }, "not the id"},
		{"subtask out of range", func(s *TaskSpec) { s.Subtask = 2 }, "out of range"},
		{"missing targets", func(s *TaskSpec) { s.Outputs[0].Targets = s.Outputs[0].Targets[:1] }, "targets"},
		{"bad key", func(s *TaskSpec) { s.Outputs[0].KeyFields = []string{"nope"} }, `no field "nope"`},
		{"unknown type", func(s *TaskSpec) {
			v := *s.Chain[0].Vertex
			v.Type = "nosuch"
			s.Chain[0].Vertex = &v
		}, `no source type "nosuch"`},
		{"empty chain", func(s *TaskSpec) { s.Chain = nil }, "no operators"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.mutate(s)
			_, err := NewTask(s, reg, x, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewTask: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := NewTask(good(), reg, x, nil); err != nil {
		t.Fatalf("valid spec rejected: %v", err)
	}
}

func TestGateBlockedChannel(t *testing.T) {
	g := newInputGate()
	a := g.add(channelKey{UpstreamSubtask: 0}, 0, genSchema)
	b := g.add(channelKey{UpstreamSubtask: 1}, 0, genSchema)
	g.push(a, event{kind: eventWatermark, value: 1})
	g.push(a, event{kind: eventWatermark, value: 2}) // merged with the first
	g.push(b, event{kind: eventWatermark, value: 10})
	g.block(a)
	e, ch, err := g.next(t.Context(), nil)
	if err != nil || ch != b || e.value != 10 {
		t.Fatalf("next = %v %v %v; want b's watermark 10", e, ch, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := g.next(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next on a gate whose only data is blocked: %v, want a timeout", err)
	}
	g.unblock([]int{a.idx})
	e, ch, err = g.next(t.Context(), nil)
	if err != nil || ch != a || e.value != 2 {
		t.Fatalf("next after unblock = %v %v %v; want a's merged watermark 2", e, ch, err)
	}
	g.close()
}

// TestWatermarkCombinerMatchesScan checks the heap-based combiner against
// the definition (minimum over each input's channels, then over inputs)
// on random updates of random channel layouts.
func TestWatermarkCombinerMatchesScan(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		inputs := 1 + rng.IntN(3)
		chans := inputs + rng.IntN(40)
		inputOf := make([]int, chans)
		for i := range inputOf {
			inputOf[i] = i % inputs
		}
		rng.Shuffle(len(inputOf), func(i, j int) { inputOf[i], inputOf[j] = inputOf[j], inputOf[i] })
		w := newWatermarkCombiner(inputOf, inputs)
		model := make([]int64, chans)
		for i := range model {
			model[i] = stream.MinWatermark
		}
		combined := stream.MinWatermark
		for step := 0; step < 2000; step++ {
			ch := rng.IntN(chans)
			wm := int64(rng.IntN(3000))
			if rng.IntN(50) == 0 {
				wm = stream.MaxWatermark
			}
			model[ch] = max(model[ch], wm)
			want := stream.MaxWatermark
			for in := 0; in < inputs; in++ {
				m := stream.MaxWatermark
				for c, i := range inputOf {
					if i == in {
						m = min(m, model[c])
					}
				}
				want = min(want, m)
			}
			advanced := want > combined
			combined = max(combined, want)
			got, adv := w.update(ch, wm)
			if got != combined || adv != advanced {
				t.Fatalf("seed %d step %d (channel %d wm %d): got %d/%v, want %d/%v", seed, step, ch, wm, got, adv, combined, advanced)
			}
		}
	}
}
