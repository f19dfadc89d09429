package dataflow

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/stream"
)

// TestCoalesceRemoteChannel sends 200 batches of 100 rows from a source to
// a sink on another exchange: coalescing gathers them into batches of up to
// CoalesceRows, and every row arrives once, in order.
func TestCoalesceRemoteChannel(t *testing.T) {
	const rows, batch = 20000, 100
	for _, tc := range []struct {
		name         string
		coalesceRows int
		wantBatches  int64
	}{
		{"off", -1, rows / batch},
		{"1000 rows", 1000, rows / 1000},
		{"350 rows", 350, (rows + 399) / 400}, // 4 batches of 100 make 400
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A timeout longer than the test: only the row bound and the
			// end of the input send what a channel holds.
			cfg := ExchangeConfig{CreditsPerChannel: 2, CoalesceRows: tc.coalesceRows, CoalesceTimeout: time.Hour}
			nodes := []*testNode{startNodeWith(t, cfg), startNodeWith(t, cfg)}
			st := newTestState()
			reg := newTestRegistry(st)
			b := stream.NewBuilder("coalesce").Parallelism(1)
			b.Source("src", "gen", genConfig{Rows: rows, Batch: batch, Keys: 13, NoWatermarks: true}).Rebalance().Then("sink", "collect", nil)
			g := plan(t, b, reg)
			specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, _ int) string { return nodes[v].addr })
			tasks, errs := runTasks(t.Context(), t, specs, reg, func(s *TaskSpec) *Exchange { return nodes[s.VertexID].x })
			for i, err := range errs {
				if err != nil {
					t.Fatalf("task %s: %v", tasks[i].Name(), err)
				}
			}
			got := st.rows["sink"]
			if len(got) != rows {
				t.Fatalf("the sink received %d rows, want %d", len(got), rows)
			}
			for i, r := range got {
				if want := (sinkRow{id: int64(i), key: int64(i) % 13, name: "n" + itoa(int64(i)%13)}); r != want {
					t.Fatalf("row %d is %+v, want %+v (lost, duplicated or out of order)", i, r, want)
				}
			}
			if n := nodes[1].x.Stats().ReceivedBatches; n != tc.wantBatches {
				t.Fatalf("the sink's exchange received %d batches, want %d", n, tc.wantBatches)
			}
		})
	}
}

// TestCoalesceSendsBeforeWaiting checks that what a channel holds to
// coalesce it goes out as soon as its task waits: a source emits one small
// batch and then stays idle, and a transform on another exchange passes it
// back; the sink must get the rows while the source is still idle and long
// before the coalescing timeout.
func TestCoalesceSendsBeforeWaiting(t *testing.T) {
	// With exactly-once checkpointing the source's channel is deferred and
	// the transform's gated (outputWriter).
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once=%v", exactlyOnce), func(t *testing.T) {
			cfg := ExchangeConfig{CreditsPerChannel: 2, CoalesceRows: 4096, CoalesceTimeout: time.Hour}
			nodes := []*testNode{startNodeWith(t, cfg), startNodeWith(t, cfg)}
			st := newTestState()
			reg := newTestRegistry(st)
			release := make(chan struct{})
			var polls atomic.Int64
			reg.Register(stream.OperatorType{
				Name: "hold", Kind: stream.KindSource,
				Plan: func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
				NewSource: func([]byte) (stream.Source, error) {
					return &holdSource{rows: 10, release: release, polls: &polls}, nil
				},
			})
			b := stream.NewBuilder("coalesce-idle").Parallelism(1)
			b.Source("src", "hold", nil).Rebalance().Then("add", "addOne", nil).Rebalance().Then("sink", "collect", nil)
			g := plan(t, b, reg)
			place := []int{0, 1, 0}
			specs := buildSpecs(t, g, [][]int{{0}, {1}, {2}}, func(v, _ int) string { return nodes[place[v]].addr })
			for _, s := range specs {
				if exactlyOnce {
					s.Checkpointing, s.Hooks = true, newFakeHooks()
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan []error, 1)
			go func() {
				_, errs := runTasks(ctx, t, specs, reg, func(s *TaskSpec) *Exchange { return nodes[place[s.VertexID]].x })
				done <- errs
			}()
			waitFor(t, "the sink to receive the rows the idle source emitted", func() bool { return st.consumed.Load() == 10 })
			if polls.Load() < 2 {
				t.Fatalf("the source was polled %d times; the test needs it idle", polls.Load())
			}
			if exactlyOnce {
				// No coordinator here completes the final checkpoint the
				// tasks would wait for: stop them.
				cancel()
				<-done
			} else {
				close(release)
				for _, err := range <-done {
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, r := range st.rows["sink"] {
				if r.id != int64(i)+1000000 {
					t.Fatalf("row %d has id %d, want %d", i, r.id, int64(i)+1000000)
				}
			}
		})
	}
}

// holdSource emits rows rows in one batch, then is idle until release is
// closed, then ends.
type holdSource struct {
	rows    int
	release chan struct{}
	polls   *atomic.Int64
	sent    bool
}

func (h *holdSource) Open(context.Context, *stream.OperatorContext) error { return nil }
func (h *holdSource) Close() error                                        { return nil }

func (h *holdSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	h.polls.Add(1)
	if !h.sent {
		h.sent = true
		b := stream.NewBatch(genSchema, h.rows)
		for i := 0; i < h.rows; i++ {
			b.AppendRow(int64(i), int64(i%3), "n"+itoa(int64(i%3)))
		}
		out.Collect(b)
		return stream.PollEmitted, nil
	}
	select {
	case <-h.release:
		return stream.PollEnd, nil
	default:
		return stream.PollIdle, nil
	}
}

// TestUnalignedCheckpointKeepsCoalescedRows: an unaligned checkpoint taken
// at a busy source, whose channel to a peer holds batches to coalesce them,
// records them as channel state: the channel state is the last rows the
// snapshotted source position says it emitted, and the consumer gets every
// row once, in order, with the barrier no later than the channel state.
func TestUnalignedCheckpointKeepsCoalescedRows(t *testing.T) {
	h := startCoalescingSource(t)
	r, mu, got := h.r, &h.mu, &h.seen
	// A checkpoint finds the channel holding rows unless it comes just as
	// a full batch of 1000 went: try a few.
	for id := int64(1); ; id++ {
		if id > 30 {
			t.Fatal("30 unaligned checkpoints found the source's channel holding no rows")
		}
		snaps, emitted := h.checkpoint(t, id, r.tasks[0].TriggerUnalignedCheckpoint)
		var state []int64
		for _, data := range snaps["src"].List[channelStatePrefix+"p1/out0/sub0"] {
			b, err := batchcodec.Decode(data, genSchema)
			if err != nil {
				t.Fatal(err)
			}
			state = append(state, b.Cols[0].Ints[:b.Len()]...)
			b.Release()
		}
		r.tasks[0].NotifyCheckpointComplete(id)
		// The channel sends batches of exactly 1000 rows: the rows past
		// the last whole thousand are what it held when the barrier came.
		if held := emitted % 1000; int64(len(state)) < held {
			t.Fatalf("checkpoint %d: the source had emitted %d rows, so its channel held the last %d, and the channel state has %d rows", id, emitted, held, len(state))
		}
		if len(state) == 0 {
			continue // a batch of 1000 had just gone: try again
		}
		if want := idRange(emitted-int64(len(state)), int64(len(state))); !slices.Equal(state, want) {
			t.Fatalf("checkpoint %d: the channel state holds %d rows (%d..%d), not the last rows the source emitted (up to %d)", id, len(state), state[0], state[len(state)-1], emitted-1)
		}
		waitFor(t, "the barrier and the rows the checkpoint covers to reach the consumer", func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := got.barriers[id]
			return ok && int64(len(got.rows)) >= emitted
		})
		// The barrier overtook what waited in the consumer's buffer (the
		// consumer's channel state): before it came a prefix of the rows
		// emitted, and no more than those the source's channel state does
		// not hold. Every row came once, in order.
		mu.Lock()
		pre := got.barriers[id]
		rows := slices.Clone(got.rows[:emitted])
		mu.Unlock()
		if int64(pre)+int64(len(state)) > emitted {
			t.Fatalf("checkpoint %d: %d rows came before the barrier and %d are in the channel state, of %d emitted", id, pre, len(state), emitted)
		}
		if !slices.Equal(rows, idRange(0, emitted)) {
			t.Fatalf("checkpoint %d: the consumer's first %d rows are not ids 0..%d once each, in order", id, emitted, emitted-1)
		}
		t.Logf("checkpoint %d: %d rows before the barrier, %d in the channel state", id, pre, len(state))
		return
	}
}

// TestAlignedBarrierAfterCoalescedRows: the barrier of an aligned checkpoint
// taken at a busy source, whose channel to a peer holds batches to coalesce
// them, reaches the consumer after every row the snapshotted source
// position says the source emitted, and before any later row: what the
// channel holds goes out before the barrier, which travels by cell
// (wmcell.go).
func TestAlignedBarrierAfterCoalescedRows(t *testing.T) {
	h := startCoalescingSource(t)
	r, mu, got := h.r, &h.mu, &h.seen
	// A checkpoint finds the channel holding rows unless it comes just as
	// a full batch of 1000 went: take several, and count those that did.
	held := 0
	for id := int64(1); id <= 30 && held < 3; id++ {
		snaps, emitted := h.checkpoint(t, id, r.tasks[0].TriggerCheckpoint)
		if n := len(snaps["src"].List[channelStatePrefix+"p1/out0/sub0"]); n > 0 {
			t.Fatalf("aligned checkpoint %d kept %d batches of channel state", id, n)
		}
		r.tasks[0].NotifyCheckpointComplete(id)
		if emitted%1000 != 0 {
			held++ // the channel held the rows past the last whole thousand
		}
		waitFor(t, "the barrier to reach the consumer", func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := got.barriers[id]
			return ok
		})
		mu.Lock()
		pre := int64(got.barriers[id])
		mu.Unlock()
		if pre != emitted {
			t.Fatalf("checkpoint %d: %d rows came before the barrier; the snapshotted source had emitted %d", id, pre, emitted)
		}
	}
	if held == 0 {
		t.Fatal("30 checkpoints found the source's channel holding no rows")
	}
	mu.Lock()
	defer mu.Unlock()
	if n := int64(len(got.rows)); !slices.Equal(got.rows, idRange(0, n)) {
		t.Fatalf("the consumer's %d rows are not ids 0..%d once each, in order", n, n-1)
	}
}

// coalescingSource is a busy source task whose channel to a peer holds
// batches to coalesce them (up to 1000 rows), read by a probe on the peer
// that takes everything, so that the source is not backpressured: what its
// channel holds is batches gathered, not batches waiting for credit.
type coalescingSource struct {
	r    *ckRun
	mu   sync.Mutex
	seen struct {
		rows     []int64       // ids read, in order
		barriers map[int64]int // checkpoint id -> rows read before its barrier
	}
}

func startCoalescingSource(t *testing.T) *coalescingSource {
	t.Helper()
	st := newCkState()
	reg := newCkRegistry(st)
	g := unalignedGraphOf(t, reg, 1, ckgenConfig{Rows: -1, Batch: 10, Keys: 7, NoWatermarks: true})
	cfg := ExchangeConfig{CreditsPerChannel: 4, CoalesceRows: 1000, CoalesceTimeout: time.Hour}
	src, dst := startNodeWith(t, cfg), startNodeWith(t, cfg)
	spec := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, _ int) string {
		if v == 0 {
			return src.addr
		}
		return dst.addr
	})[0]
	key := channelKey{JobID: "job-1", Attempt: spec.Attempt, UpstreamVertex: 0, UpstreamSubtask: 0, DownstreamVertex: 1, DownstreamInput: 0, DownstreamSub: 0}
	p := openProbe(t, dst.x, key)
	h := &coalescingSource{r: startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return src.x })}
	h.seen.barriers = map[int64]int{}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		h.r.stop()
	})
	wg.Go(func() {
		for {
			kind, v, ids, err := p.tryReadCtx(ctx)
			if err != nil {
				return
			}
			h.mu.Lock()
			if kind == eventBarrier {
				h.seen.barriers[v] = len(h.seen.rows)
			}
			h.seen.rows = append(h.seen.rows, ids...)
			h.mu.Unlock()
		}
	})
	return h
}

// checkpoint waits for the probe to read 2000 more rows, triggers
// checkpoint id, and returns the source's snapshot and how many rows its
// snapshotted position says it emitted.
func (h *coalescingSource) checkpoint(t *testing.T, id int64, trigger func(id, ts int64) error) (map[string]*stream.OperatorSnapshot, int64) {
	t.Helper()
	before := h.readRows()
	waitFor(t, "the consumer to read more rows", func() bool { return h.readRows() > before+2000 })
	if err := trigger(id, 1000+id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the checkpoint to be taken", func() bool { _, ok := h.r.hooks[0].snaps(id); return ok })
	snaps, _ := h.r.hooks[0].snaps(id)
	return snaps, int64(binary.LittleEndian.Uint64(snaps["src"].List["pos"][0]))
}

// readRows is how many rows the probe read so far.
func (h *coalescingSource) readRows() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen.rows)
}
