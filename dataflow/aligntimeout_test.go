package dataflow

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/stream"
)

// timeoutSpecs returns the specs of src (2) -> count (1) -> after (1): the
// count task under test reads two channels and forwards barriers to after.
// The count task is a kcount that is not a sink (it emits nothing).
func timeoutSpecs(t *testing.T, st *ckState, reg *stream.Registry) (count *TaskSpec, out channelKey) {
	if _, ok := reg.Lookup("kcountfwd", false); !ok {
		reg.Register(stream.OperatorType{
			Name: "kcountfwd", Kind: stream.KindTransform,
			Plan: func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
			NewOperator: func(config []byte) (stream.Operator, error) {
				c := &kcount{st: st}
				return c, stream.DecodeConfig(config, &c.cfg)
			},
		})
	}
	b := stream.NewBuilder("align").MaxParallelism(8)
	b.Source("src", "ckgen", nil).SetParallelism(2).KeyBy("key").Then("count", "kcountfwd", kcountConfig{}).SetParallelism(1).
		Rebalance().Then("after", "kcount", kcountConfig{}).SetParallelism(1)
	g := plan(t, b, reg)
	specs := buildSpecs(t, g, [][]int{{0}, {1}, {2}}, func(int, int) string { return "local" })
	count = specs[2]
	out = channelKey{JobID: count.JobID, Attempt: count.Attempt, UpstreamVertex: count.VertexID, UpstreamSubtask: 0,
		DownstreamVertex: specs[3].VertexID, DownstreamInput: 0, DownstreamSub: 0}
	return count, out
}

// channelStateIDs decodes the channel state in snap by name (without the
// prefix).
func channelStateIDs(t *testing.T, snap *stream.OperatorSnapshot) (map[string][]int64, int64) {
	t.Helper()
	ids := map[string][]int64{}
	var size int64
	for name, items := range snap.List {
		if !strings.HasPrefix(name, channelStatePrefix) {
			continue
		}
		n := strings.TrimPrefix(name, channelStatePrefix)
		for _, data := range items {
			size += int64(len(data))
			b, err := batchcodec.Decode(data, genSchema)
			if err != nil {
				t.Fatal(err)
			}
			ids[n] = append(ids[n], b.Cols[0].Ints[:b.Len()]...)
		}
	}
	return ids, size
}

// TestAlignedCheckpointTimeout: a task with two input channels A and B and
// an aligned checkpoint timeout. Barrier 1 arrives on A (A blocks); B's
// barrier is held back behind b2 while the task is stalled, past the
// timeout. The task then switches checkpoint 1 to unaligned: it snapshots
// with what it processed (a1, b1), forwards an unaligned barrier, unblocks
// A, and B's barrier overtakes b2, which becomes the checkpoint's channel
// state; a2 and b3, behind the barriers, are not in it. Restored from that
// checkpoint and fed what came after the barriers (a2, b3), the task counts
// every row exactly once. In the fast case B's barrier arrives well within
// the timeout: the checkpoint stays aligned, with no channel state, and the
// forwarded barrier is aligned.
func TestAlignedCheckpointTimeout(t *testing.T) {
	a1, a2 := idRange(0, 10), idRange(100, 11)
	b1, b2, b3 := idRange(200, 12), idRange(300, 13), idRange(400, 14)
	for _, slow := range []bool{true, false} {
		t.Run(fmt.Sprintf("switch=%v", slow), func(t *testing.T) {
			timeout := 300 * time.Millisecond
			if !slow {
				timeout = time.Hour
			}
			st := newCkState()
			st.slow = make(chan struct{})
			r, p, A, B := startTimeoutTask(t, st, timeout)
			A.rows(a1...)
			waitFor(t, "a1 taken", func() bool { return r.tasks[0].Metrics().RecordsIn.Load() == int64(len(a1)) })
			st.slow <- struct{}{}
			A.barrier(1)
			waitFor(t, "A blocked by barrier 1", func() bool { b, _ := A.blocked(); return b })
			aligning := time.Now() // after the first barrier arrived
			B.rows(b1...)
			waitFor(t, "b1 taken", func() bool { return r.tasks[0].Metrics().RecordsIn.Load() == int64(len(a1)+len(b1)) })
			// The task is stalled in b1; behind it B buffers b2, the
			// barrier and b3, and A buffers a2 behind its barrier.
			B.rows(b2...)
			B.barrier(1)
			B.rows(b3...)
			A.rows(a2...)
			waitFor(t, "B's barrier buffered behind b2", func() bool { _, n := B.blocked(); return n == 3 })
			if slow {
				waitFor(t, "the alignment to outlast the timeout", func() bool { return time.Since(aligning) > timeout })
			}
			close(st.slow)
			waitFor(t, "checkpoint 1", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
			if err := r.hooks[0].failure(1); err != nil {
				t.Fatalf("checkpoint 1 reported failed: %v", err)
			}
			snaps, _ := r.hooks[0].snaps(1)
			stats := r.hooks[0].statsOf(1)
			state, size := channelStateIDs(t, snaps["count"])
			wantCounts, wantState := countOf(a1, b1, b2), map[string][]int64{}
			if slow {
				wantCounts, wantState = countOf(a1, b1), map[string][]int64{"p1/in0/up1": b2}
				if stats.Alignment < timeout {
					t.Fatalf("alignment %v reported, want at least the timeout %v", stats.Alignment, timeout)
				}
			}
			if got := decodeCounts(t, snaps["count"]); !maps.Equal(got, wantCounts) {
				t.Fatalf("snapshot counts %v, want %v", got, wantCounts)
			}
			if !maps.EqualFunc(state, wantState, slices.Equal[[]int64]) {
				t.Fatalf("channel state %v, want %v", state, wantState)
			}
			if stats.ChannelStateBytes != size {
				t.Fatalf("stats say %d bytes of channel state, the snapshot holds %d", stats.ChannelStateBytes, size)
			}
			// The barrier went downstream, unaligned after the switch.
			var forwarded *event
			waitFor(t, "barrier 1 downstream", func() bool {
				p.gate.pullCell(p.ch)
				p.gate.mu.Lock()
				defer p.gate.mu.Unlock()
				for i := 0; i < p.ch.q.len(); i++ {
					if e := p.ch.q.at(i); e.kind == eventBarrier && e.value == 1 {
						c := *e
						forwarded = &c
						return true
					}
				}
				return false
			})
			if forwarded.unaligned != slow {
				t.Fatalf("forwarded barrier unaligned=%v, want %v", forwarded.unaligned, slow)
			}
			r.stop()

			// Restore from checkpoint 1; upstream resends what came after
			// its barriers.
			st2 := newCkState()
			reg2 := newCkRegistry(st2)
			x2 := localExchange(t, "local")
			spec2, outKey2 := timeoutSpecs(t, st2, reg2)
			spec2.AlignedCheckpointTimeout = timeout
			openProbe(t, x2, outKey2)
			r2 := startCk(t, []*TaskSpec{spec2}, reg2, stream.ExactlyOnce, 1, func(int) map[string]*stream.OperatorSnapshot { return snaps }, func(*TaskSpec) *Exchange { return x2 })
			fs2 := openFeeds(t, x2, spec2)
			fs2[0].rows(a2...)
			fs2[1].rows(b3...)
			fs2[0].end()
			fs2[1].end()
			if errs := r2.wait(t); errs[0] != nil {
				t.Fatal(errs[0])
			}
			got, want := mergeCounts(st2, "count"), countOf(a1, a2, b1, b2, b3)
			var lost, dup int64
			for k, n := range want {
				if d := n - got[k]; d > 0 {
					lost += d
				} else {
					dup -= d
				}
			}
			fmt.Printf("aligned_timeout_restore switched=%v channel_state_bytes=%d alignment_ms=%d lost=%d duplicated=%d\n",
				slow, size, stats.Alignment.Milliseconds(), lost, dup)
			if !maps.Equal(got, want) {
				t.Fatalf("final counts %v, want %v", got, want)
			}
		})
	}
}

// startTimeoutTask runs the count task of timeoutSpecs on st with the
// aligned checkpoint timeout, and returns it with a probe on its output
// and feeds A and B of its two input channels.
func startTimeoutTask(t *testing.T, st *ckState, timeout time.Duration) (*ckRun, *probe, *feed, *feed) {
	t.Helper()
	reg := newCkRegistry(st)
	x := localExchange(t, "local")
	spec, outKey := timeoutSpecs(t, st, reg)
	spec.AlignedCheckpointTimeout = timeout
	p := openProbe(t, x, outKey)
	r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
	fs := openFeeds(t, x, spec)
	return r, p, fs[0], fs[1]
}

// TestGatePromote: promoting the aligned barrier of checkpoint 1 moves it
// ahead of the batches before it, marked overtaken by 1, and leaves the
// batches behind it unmarked, in order.
func TestGatePromote(t *testing.T) {
	g := newInputGate()
	ch := g.add(channelKey{}, 0, genSchema)
	batch := func(id int64) event {
		b := stream.NewBatch(genSchema, 1)
		b.AppendRow(id, id, "")
		return event{kind: eventBatch, batch: b}
	}
	g.push(ch, batch(1))
	g.push(ch, batch(2))
	g.push(ch, event{kind: eventBarrier, value: 1})
	g.push(ch, batch(3))
	g.promote(ch, 2) // no barrier 2 buffered: nothing moves
	g.promote(ch, 1)
	var order []string
	marks := map[int64]int64{}
	g.mu.Lock()
	for i := 0; i < ch.q.len(); i++ {
		e := ch.q.at(i)
		switch e.kind {
		case eventBarrier:
			order = append(order, fmt.Sprintf("barrier %d unaligned=%v", e.value, e.unaligned))
		case eventBatch:
			id := e.batch.Cols[0].Ints[0]
			order = append(order, fmt.Sprintf("batch %d", id))
			marks[id] = e.before
		}
	}
	g.mu.Unlock()
	if want := []string{"barrier 1 unaligned=true", "batch 1", "batch 2", "batch 3"}; !slices.Equal(order, want) {
		t.Fatalf("buffer order %v, want %v", order, want)
	}
	if want := map[int64]int64{1: 1, 2: 1, 3: 0}; !maps.Equal(marks, want) {
		t.Fatalf("overtaken marks %v, want %v", marks, want)
	}
	g.close()
}

// TestAlignedCheckpointTimeoutIdle: with nothing arriving on B, the task
// switches checkpoint 1 to unaligned on its own once the timeout passes
// (its timer wakes it): the barrier goes downstream before B delivers
// anything, and the rows B then delivers ahead of its barrier are channel
// state.
func TestAlignedCheckpointTimeoutIdle(t *testing.T) {
	a1, b1 := idRange(0, 10), idRange(100, 11)
	const timeout = 200 * time.Millisecond
	r, p, A, B := startTimeoutTask(t, newCkState(), timeout)
	A.rows(a1...)
	A.barrier(1)
	kind, v, _ := p.read() // the task waits on B alone until it switches
	if kind != eventBarrier || v != 1 {
		t.Fatalf("downstream got a %v (%d), want barrier 1", kind, v)
	}
	if _, taken := r.hooks[0].snaps(1); taken {
		t.Fatal("checkpoint 1 reported before B delivered its barrier")
	}
	B.rows(b1...)
	B.barrier(1)
	waitFor(t, "checkpoint 1", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
	snaps, _ := r.hooks[0].snaps(1)
	if got, want := decodeCounts(t, snaps["count"]), countOf(a1); !maps.Equal(got, want) {
		t.Fatalf("snapshot counts %v, want %v", got, want)
	}
	state, _ := channelStateIDs(t, snaps["count"])
	if want := map[string][]int64{"p1/in0/up1": b1}; !maps.EqualFunc(state, want, slices.Equal[[]int64]) {
		t.Fatalf("channel state %v, want %v", state, want)
	}
	if a := r.hooks[0].statsOf(1).Alignment; a < timeout {
		t.Fatalf("alignment %v reported, want at least the timeout %v", a, timeout)
	}
}

// TestAlignedCheckpointTimeoutSavepoint: the checkpoint of a savepoint
// never switches: it stays aligned past the timeout, with no channel state,
// and its barrier goes downstream aligned once B delivers its own.
func TestAlignedCheckpointTimeoutSavepoint(t *testing.T) {
	// A savepoint, and an aligned checkpoint whose barriers a source sent
	// after its input ended (final: maybe the job's last checkpoint, which
	// two-phase-commit sinks must see all data before), stay aligned.
	for _, kind := range []string{"savepoint", "final"} {
		t.Run(kind, func(t *testing.T) {
			barrier := event{kind: eventBarrier, value: 1, ts: 1001, full: kind == "savepoint", final: kind == "final"}
			testTimeoutStaysAligned(t, barrier)
		})
	}
}

func testTimeoutStaysAligned(t *testing.T, barrier event) {
	a1, b1 := idRange(0, 10), idRange(100, 11)
	const timeout = 100 * time.Millisecond
	r, p, A, B := startTimeoutTask(t, newCkState(), timeout)
	A.rows(a1...)
	A.send(barrier)
	waitFor(t, "A blocked by barrier 1", func() bool { b, _ := A.blocked(); return b })
	aligning := time.Now()
	waitFor(t, "the alignment to outlast the timeout", func() bool { return time.Since(aligning) > 3*timeout })
	if _, taken := r.hooks[0].snaps(1); taken {
		t.Fatal("checkpoint 1 taken before B delivered its barrier")
	}
	B.rows(b1...)
	B.send(barrier)
	kind, v, _ := p.read()
	if kind != eventBarrier || v != 1 {
		t.Fatalf("downstream got a %v (%d), want barrier 1", kind, v)
	}
	waitFor(t, "checkpoint 1", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
	snaps, _ := r.hooks[0].snaps(1)
	if got, want := decodeCounts(t, snaps["count"]), countOf(a1, b1); !maps.Equal(got, want) {
		t.Fatalf("snapshot counts %v, want %v", got, want)
	}
	if state, _ := channelStateIDs(t, snaps["count"]); len(state) > 0 {
		t.Fatalf("checkpoint 1 has channel state %v: it switched to unaligned", state)
	}
}
