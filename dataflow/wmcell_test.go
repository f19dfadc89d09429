package dataflow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// openCellChannel adds a channel of key to g, registers it with x and
// acquires its cell, undone in reverse order when the test ends.
func openCellChannel(t *testing.T, x *Exchange, g *inputGate, key channelKey) (*inputChannel, *wmCell) {
	t.Helper()
	ch := g.add(key, 0, genSchema)
	if err := x.registerInput(ch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.unregisterInput(ch) })
	cell := x.acquireCell(cellKeyOf(key))
	t.Cleanup(func() { x.releaseCell(cell) })
	return ch, cell
}

// cellChannelSteps returns the steps the cell step tests take on ch: queue
// checks what ch buffers ("b" a batch, "w<n>" a watermark, "x<n>" an
// aligned and "u<n>" an unaligned barrier), pop takes the next event and
// batch pushes an empty batch.
func cellChannelSteps(t *testing.T, g *inputGate, ch *inputChannel) (queue func(want ...string), pop, batch func()) {
	queue = func(want ...string) {
		t.Helper()
		g.mu.Lock()
		var got []string
		for i := 0; i < ch.q.len(); i++ {
			switch e := ch.q.at(i); {
			case e.kind == eventBatch:
				got = append(got, "b")
			case e.kind == eventWatermark:
				got = append(got, fmt.Sprintf("w%d", e.value))
			case e.kind == eventBarrier && e.unaligned:
				got = append(got, fmt.Sprintf("u%d", e.value))
			case e.kind == eventBarrier:
				got = append(got, fmt.Sprintf("x%d", e.value))
			}
		}
		g.mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("channel buffers %v, want %v", got, want)
		}
	}
	pop = func() {
		t.Helper()
		e, c, err := g.next(t.Context(), nil)
		if err != nil || c != ch {
			t.Fatalf("next: %v, %v", c, err)
		}
		e.release()
	}
	batch = func() { g.push(ch, event{kind: eventBatch, batch: stream.NewBatch(genSchema, 0)}) }
	return queue, pop, batch
}

// newCellChannel opens a gate of one channel on a new exchange, and the
// cell of the channel's upstream subtask.
func newCellChannel(t *testing.T) (*inputGate, *inputChannel, *wmCell) {
	x := NewExchange(ExchangeConfig{SelfAddress: "self"})
	t.Cleanup(func() { x.Close() })
	g := newInputGate()
	ch, cell := openCellChannel(t, x, g, channelKey{JobID: "j", UpstreamVertex: 0, UpstreamSubtask: 2, DownstreamVertex: 1})
	return g, ch, cell
}

// TestWatermarkCellSteps drives one input channel with a watermark cell
// through the rules of wmcell.go, step by step: a cell's watermark applies
// to a channel that buffers nothing, goes as an event ahead of what is
// pushed after it, waits for what the channel buffers, and waits while the
// channel is blocked.
func TestWatermarkCellSteps(t *testing.T) {
	g, ch, cell := newCellChannel(t)
	if ch.cell != cell {
		t.Fatal("the channel does not read the cell of its upstream subtask")
	}

	take := func(want ...int64) {
		t.Helper()
		g.markAllCells()
		var got []int64
		for _, c := range g.takeCells(nil) {
			got = append(got, c.wm)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("takeCells = %v, want %v", got, want)
		}
	}
	queue, pop, batch := cellChannelSteps(t, g, ch)

	take()
	cell.publish(10)
	take(10)
	take() // taken once
	cell.publish(20)
	batch()
	queue("w20", "b") // ahead of the batch
	take()
	cell.publish(30)
	take() // buffered: the batch, sent before 30, goes first
	pop()
	pop()
	take(30)
	g.push(ch, event{kind: eventWatermark, value: 25})
	queue("w25")
	take() // buffered: the event goes first
	pop()
	cell.publish(35)
	take(35)
	g.block(ch)
	cell.publish(40)
	take()
	g.unblock([]int{ch.idx})
	take(40)
	cell.publish(50)
	g.push(ch, event{kind: eventBarrier, value: 7})
	queue("w50", "x7")
	pop()
	pop()
	take()
	cell.publish(45) // not above the cell's
	take()
}

// TestBarrierCellSteps drives one input channel through the barrier rules
// of wmcell.go, step by step: a barrier a cell holds is taken directly, with
// the watermark published before it, where the channel buffers nothing and
// is not blocked, one barrier per look; it goes as an event, in publish
// order among the watermarks, ahead of what is pushed after it; it waits
// behind what the channel buffers and while the channel is blocked; and
// promoting its checkpoint buffers it behind what the channel holds.
func TestBarrierCellSteps(t *testing.T) {
	g, ch, cell := newCellChannel(t)

	// look describes what takeCells returns: "w<n>" a watermark, "x<n>" a
	// barrier; take looks at every channel first, as after a wake-up.
	look := func(want ...string) {
		t.Helper()
		var got []string
		for _, m := range g.takeCells(nil) {
			if m.wm != stream.MinWatermark {
				got = append(got, fmt.Sprintf("w%d", m.wm))
			}
			if m.barrier != nil {
				got = append(got, fmt.Sprintf("x%d", m.barrier.id))
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("takeCells = %v, want %v", got, want)
		}
	}
	take := func(want ...string) {
		t.Helper()
		g.markAllCells()
		look(want...)
	}
	queue, pop, batch := cellChannelSteps(t, g, ch)
	barrier := func(id int64) { cell.publishBarrier(barrierMark{id: id, ts: 1000 + id}) }

	cell.publish(10)
	barrier(1)
	cell.publish(20)
	take("w10", "x1") // one barrier per look, with the watermark before it
	look("w20")       // marked to be looked at again: what followed the barrier
	look()

	barrier(1) // not above the cell's latest: ignored
	take()
	barrier(2)
	cell.publish(30)
	barrier(3)
	batch()
	queue("x2", "w30", "x3", "b") // in publish order, ahead of the batch
	take()
	pop()
	pop()
	pop()
	pop()
	take()

	batch()
	barrier(4)
	take() // buffered: the batch, sent before barrier 4, goes first
	pop()
	take("x4")
	g.block(ch) // the task blocks the channel for alignment
	barrier(5)
	take()
	g.unblock([]int{ch.idx})
	take("x5")

	// Promoting checkpoint 6 (alignment timed out) buffers its barrier
	// behind the batches the channel holds and moves it ahead of them.
	batch()
	batch()
	barrier(6)
	queue("b", "b")
	g.promote(ch, 6)
	queue("u6", "b", "b")
	take()
}

// wmOrder is what the tasks of TestWatermarkCellsAgreeWithChannels report.
type wmOrder struct {
	mu sync.Mutex
	// sentAfter is, by row id, the watermark its source had emitted last
	// before it (stream.MinWatermark: none).
	sentAfter map[int64]int64
	// latest is each source subtask's latest watermark; final those of
	// the sources that emitted their last one.
	latest, final map[int]int64
	// seen is each consumer subtask's latest watermark; rows the rows
	// each took.
	seen       map[int]int64
	rows       map[int][]int64
	violations []string
}

func (o *wmOrder) violate(format string, args ...any) {
	o.violations = append(o.violations, fmt.Sprintf(format, args...))
}

var wmOrderSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "key", Type: stream.TypeInt64},
)

// wmOrderSource emits Rows rows in random batches, a random watermark
// after some of them, then a last watermark, and then idles until
// cancelled (no end of input, whose maximum watermark would hide a
// watermark that went wrong).
type wmOrderSource struct {
	o                *wmOrder
	seed             int64
	rows             int
	sub, par         int
	rng              *rand.Rand
	next             int64
	wm               int64
	emitted, stopped bool
}

func (s *wmOrderSource) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.sub, s.par = octx.Subtask, octx.Parallelism
	s.rng = rand.New(rand.NewPCG(uint64(s.seed), uint64(s.sub)))
	s.wm = s.rng.Int64N(100)
	return nil
}

func (s *wmOrderSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.stopped || s.rng.IntN(6) == 0 {
		return stream.PollIdle, nil
	}
	if s.next >= int64(s.rows) {
		s.emit(out, s.wm+1)
		s.o.mu.Lock()
		s.o.final[s.sub] = s.wm
		s.o.mu.Unlock()
		s.stopped = true
		return stream.PollIdle, nil
	}
	n := min(1+s.rng.IntN(4), s.rows-int(s.next))
	b := stream.NewBatch(wmOrderSchema, n)
	after := stream.MinWatermark
	if s.emitted {
		after = s.wm
	}
	s.o.mu.Lock()
	for range n {
		id := int64(s.sub) + s.next*int64(s.par)
		s.next++
		b.AppendRow(id, s.rng.Int64N(64))
		s.o.sentAfter[id] = after
	}
	s.o.mu.Unlock()
	out.Collect(b)
	if s.rng.IntN(3) == 0 {
		s.emit(out, s.wm+1+s.rng.Int64N(10))
	}
	return stream.PollEmitted, nil
}

// emit emits watermark wm, recorded first.
func (s *wmOrderSource) emit(out stream.Collector, wm int64) {
	s.wm, s.emitted = wm, true
	s.o.mu.Lock()
	s.o.latest[s.sub] = wm
	s.o.mu.Unlock()
	out.EmitWatermark(wm)
}

func (s *wmOrderSource) Close() error { return nil }

// wmOrderSink checks, for every row it takes, that its watermark has not
// passed the watermark the row's source emitted after it (which a
// watermark travelling with the channel's data never does), and for every
// watermark that it grows and that every source has emitted at least as
// much.
type wmOrderSink struct {
	stream.BaseOperator
	o        *wmOrder
	sub, par int
	cur      int64
}

func (k *wmOrderSink) Open(_ context.Context, octx *stream.OperatorContext) error {
	k.sub, k.par, k.cur = octx.Subtask, octx.Parallelism, stream.MinWatermark
	return nil
}

func (k *wmOrderSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	k.o.mu.Lock()
	defer k.o.mu.Unlock()
	for _, id := range b.Cols[0].Ints[:b.Len()] {
		if after := k.o.sentAfter[id]; k.cur > after {
			k.o.violate("consumer %d took row %d at watermark %d; its source emitted watermark %d before it and nothing more", k.sub, id, k.cur, after)
		}
		k.o.rows[k.sub] = append(k.o.rows[k.sub], id)
	}
	b.Release()
	return nil
}

func (k *wmOrderSink) ProcessWatermark(wm int64, _ stream.Collector) error {
	k.o.mu.Lock()
	defer k.o.mu.Unlock()
	if wm <= k.cur {
		k.o.violate("consumer %d: watermark %d after %d", k.sub, wm, k.cur)
	}
	if len(k.o.latest) < k.par { // the sources have the consumers' parallelism
		k.o.violate("consumer %d: watermark %d before every source emitted one", k.sub, wm)
	}
	for u, v := range k.o.latest {
		if wm > v {
			k.o.violate("consumer %d: watermark %d, but source %d has emitted only %d", k.sub, wm, u, v)
		}
	}
	k.cur = wm
	k.o.seen[k.sub] = wm
	return nil
}

// TestWatermarkCellsAgreeWithChannels runs seeded random jobs — sources
// emitting random batches and watermarks into a keyBy, over two exchanges
// so that channels are both in memory and over the network — once with
// watermarks by cell and once with every watermark sent on every channel,
// and checks that both keep the order of watermarks and data on every
// channel (no consumer takes a row after a watermark that its source
// emitted only after the row), never invent a watermark, take the same
// rows, and end at the same watermark: the minimum of the sources' last.
// It runs with and without checkpointing (with it, sources queue their
// output while short of credit, which sends watermarks on every channel
// for a while) and with one credit per channel (a lot of waiting).
func TestWatermarkCellsAgreeWithChannels(t *testing.T) {
	const par, rows = 4, 400
	for _, tc := range []struct {
		name          string
		credits       int
		checkpointing bool
	}{
		{"credits 4", 4, false},
		{"credits 1", 1, false},
		{"checkpointing credits 1", 1, true},
	} {
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s seed %d", tc.name, seed), func(t *testing.T) {
				var final [2]int64
				var got [2]map[int][]int64
				for i, cells := range []bool{true, false} {
					o := runWatermarkOrderJob(t, seed, par, rows, tc.credits, tc.checkpointing, cells)
					if len(o.violations) > 0 {
						t.Fatalf("cells %v: %d violations, the first: %s", cells, len(o.violations), o.violations[0])
					}
					final[i], got[i] = o.seen[0], o.rows
					for d := range par {
						if o.seen[d] != final[i] {
							t.Fatalf("cells %v: consumer %d ended at watermark %d, consumer 0 at %d", cells, d, o.seen[d], final[i])
						}
						slices.Sort(o.rows[d])
					}
				}
				if final[0] != final[1] {
					t.Fatalf("consumers ended at watermark %d with cells, %d without", final[0], final[1])
				}
				for d := range par {
					if !slices.Equal(got[0][d], got[1][d]) {
						t.Fatalf("consumer %d took %d rows with cells, %d without (or other rows)", d, len(got[0][d]), len(got[1][d]))
					}
				}
			})
		}
	}
}

// runWatermarkOrderJob runs the job of TestWatermarkCellsAgreeWithChannels
// until every consumer's watermark is the minimum of the sources' last
// ones, and returns what it reported.
func runWatermarkOrderJob(t *testing.T, seed int64, par, rows, credits int, checkpointing, cells bool) *wmOrder {
	t.Helper()
	o := &wmOrder{sentAfter: map[int64]int64{}, latest: map[int]int64{}, final: map[int]int64{}, seen: map[int]int64{}, rows: map[int][]int64{}}
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{
		Name: "wmsrc", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return wmOrderSchema, nil },
		NewSource: func([]byte) (stream.Source, error) { return &wmOrderSource{o: o, seed: seed, rows: rows}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "wmsink", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &wmOrderSink{o: o}, nil },
	})
	cfg := ExchangeConfig{CreditsPerChannel: credits}
	nodes := []*testNode{startNodeWith(t, cfg), startNodeWith(t, cfg)}
	for _, n := range nodes {
		n.x.noCells = !cells
	}
	b := stream.NewBuilder("wm-order").Parallelism(par).MaxParallelism(32)
	b.Source("src", "wmsrc", nil).KeyBy("key").Then("sink", "wmsink", nil)
	g := plan(t, b, reg)
	place := func(v, s int) int { return (v + s) % 2 }
	specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, s int) string { return nodes[place(v, s)].addr })
	if checkpointing {
		for _, s := range specs {
			s.Checkpointing, s.Mode, s.Hooks = true, stream.ExactlyOnce, newFakeHooks()
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan []error, 1)
	go func() {
		_, errs := runTasks(ctx, t, specs, reg, func(s *TaskSpec) *Exchange { return nodes[place(s.VertexID, s.Subtask)].x })
		done <- errs
	}()
	waitFor(t, "every row to arrive and every consumer to reach the sources' last watermark", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.final) < par || len(o.sentAfter) < par*rows {
			return false
		}
		taken := 0
		for _, r := range o.rows {
			taken += len(r)
		}
		if taken < par*rows {
			return false
		}
		want := stream.MaxWatermark
		for _, v := range o.final {
			want = min(want, v)
		}
		for d := range par {
			if o.seen[d] != want {
				return false
			}
		}
		return true
	})
	cancel()
	for _, err := range <-done {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		waitFor(t, "channels and cells to be released", func() bool { return n.x.numEndpoints() == 0 && n.x.numCells() == 0 })
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	total := 0
	for _, r := range o.rows {
		total += len(r)
	}
	if total != par*rows {
		t.Fatalf("consumers took %d rows, sources emitted %d", total, par*rows)
	}
	if len(o.rows) != par {
		t.Fatalf("%d of %d consumers took rows", len(o.rows), par)
	}
	return o
}

// TestCellWatermarkMergeQueuesChannel: a watermark event pushed into an
// empty channel whose cell moved on merges into the cell's watermark that
// the push puts ahead of it, and the channel is readable at once (it was
// left out of the channels to read, so the watermark waited for the
// channel's next event).
func TestCellWatermarkMergeQueuesChannel(t *testing.T) {
	x := NewExchange(ExchangeConfig{SelfAddress: "self"})
	t.Cleanup(func() { x.Close() })
	g := newInputGate()
	t.Cleanup(g.close)
	ch, cell := openCellChannel(t, x, g, channelKey{JobID: "j", DownstreamVertex: 1})
	cell.publish(10)
	g.push(ch, event{kind: eventWatermark, value: 7})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	e, c, err := g.next(ctx, nil)
	if err != nil || c != ch || e.kind != eventWatermark || e.value != 10 {
		t.Fatalf("next = %v %d on %v, %v; want watermark 10 on the channel", e.kind, e.value, c, err)
	}
}

// TestCellKeepsLatestBarriers: a cell keeps its latest maxCellBarriers
// barriers, so a channel that lags further takes the oldest it kept (the
// task abandons the checkpoints it skipped, as when a later barrier
// overtakes), and barriersAfter finds the barriers above an id.
func TestCellKeepsLatestBarriers(t *testing.T) {
	g, ch, cell := newCellChannel(t)
	const n = maxCellBarriers + 4
	for id := int64(1); id <= n; id++ {
		cell.publishBarrier(barrierMark{id: id})
	}
	log := *cell.barriers.Load()
	if len(log) != maxCellBarriers || log[0].id != n-maxCellBarriers+1 || log[len(log)-1].id != n {
		t.Fatalf("the cell keeps barriers %d..%d (%d), want %d..%d", log[0].id, log[len(log)-1].id, len(log), n-maxCellBarriers+1, n)
	}
	for _, tc := range []struct{ after, first int64 }{{0, n - maxCellBarriers + 1}, {7, 8}, {n - 1, n}, {n, 0}} {
		got := barriersAfter(log, tc.after)
		if tc.first == 0 && len(got) != 0 || tc.first != 0 && (len(got) == 0 || got[0].id != tc.first || got[len(got)-1].id != n) {
			t.Fatalf("barriersAfter(%d) = %d barriers, want from %d", tc.after, len(got), tc.first)
		}
	}
	g.markAllCells()
	if m := g.takeCells(nil); len(m) != 1 || m[0].ch != ch.idx || m[0].barrier == nil || m[0].barrier.id != n-maxCellBarriers+1 {
		t.Fatalf("a channel that took no barrier takes %+v, want the oldest kept, %d", m, n-maxCellBarriers+1)
	}
}
