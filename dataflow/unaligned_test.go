package dataflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/stream"
)

// probe is a consumer of one channel with no task behind it: the test reads
// it when it wants, so that until then the producer is fully backpressured.
type probe struct {
	t    *testing.T
	gate *inputGate
	ch   *inputChannel
}

func openProbe(t *testing.T, x *Exchange, key channelKey) *probe {
	t.Helper()
	g := newInputGate()
	ch := g.add(key, 0, genSchema)
	if err := x.registerInput(ch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		x.unregisterInput(ch)
		g.close()
	})
	return &probe{t: t, gate: g, ch: ch}
}

// pullCell buffers what ch's cell holds for it (watermarks and aligned
// barriers, wmcell.go) as events at the end of its buffer, where a task
// would take them, for a probe that reads the channel without a task.
func (g *inputGate) pullCell(ch *inputChannel) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch.cell != nil {
		g.cellEventsLocked(ch)
	}
	g.setHold(ch)
	if !ch.queued && !ch.blocked && ch.q.len() > 0 {
		ch.queued = true
		g.mu.avail.push(ch.idx)
	}
}

// queued returns the kinds of the events waiting in the channel.
func (p *probe) queued() []eventKind {
	p.gate.pullCell(p.ch)
	p.gate.mu.Lock()
	defer p.gate.mu.Unlock()
	kinds := make([]eventKind, p.ch.q.len())
	for i := range kinds {
		kinds[i] = p.ch.q.at(i).kind
	}
	return kinds
}

// batches returns how many batches are buffered in the channel.
func (p *probe) batches() int {
	n := 0
	for _, k := range p.queued() {
		if k == eventBatch {
			n++
		}
	}
	return n
}

// overtaken returns the ids of the rows buffered in the channel that the
// barrier of unaligned checkpoint id overtook, in order.
func (p *probe) overtaken(id int64) []int64 {
	p.t.Helper()
	var ids []int64
	dec := p.ch.dictionary().Clone()
	p.gate.overtaken(p.ch, id, func(e *event, mark bool) {
		data, err := selfContained(e, dec, genSchema)
		if err != nil {
			p.t.Fatal(err)
		}
		if !mark {
			return
		}
		b, err := batchcodec.Decode(data, genSchema)
		if err == nil {
			err = checkGenNames(b)
		}
		if err != nil {
			p.t.Fatal(err)
		}
		ids = append(ids, b.Cols[0].Ints[:b.Len()]...)
	})
	return ids
}

// checkGenNames checks the string column of a batch of the ckgen source,
// which the network exchange sends with its channel dictionary: each row's
// name is "n" and its key.
func checkGenNames(b *stream.Batch) error {
	for i := range b.Len() {
		if want := "n" + strconv.FormatInt(b.Cols[1].Ints[i], 10); b.Cols[2].Strs[i] != want {
			return fmt.Errorf("row %d (id %d) has name %q, want %q", i, b.Cols[0].Ints[i], b.Cols[2].Strs[i], want)
		}
	}
	return nil
}

// read takes the next event; a batch comes back as its ids.
func (p *probe) read() (eventKind, int64, []int64) {
	p.t.Helper()
	kind, v, ids, err := p.tryRead()
	if err != nil {
		p.t.Fatal(err)
	}
	return kind, v, ids
}

// tryRead is read for any goroutine.
func (p *probe) tryRead() (eventKind, int64, []int64, error) {
	return p.tryReadCtx(p.t.Context())
}

// tryReadCtx is tryRead that gives up when ctx is done.
func (p *probe) tryReadCtx(ctx context.Context) (eventKind, int64, []int64, error) {
	var e event
	for {
		p.gate.cellsDirty.Store(false)
		p.gate.pullCell(p.ch)
		var ch *inputChannel
		var err error
		e, ch, err = p.gate.next(ctx, nil)
		if err != nil {
			return 0, 0, nil, err
		}
		if ch != nil {
			break
		}
		// Woken by the channel's cell.
	}
	var err error
	switch e.kind {
	case eventBatch:
	case eventError:
		return 0, 0, nil, e.err
	default:
		return e.kind, e.value, nil, nil
	}
	b := e.batch
	if b == nil {
		b, err = decodePayload(&e, genSchema, p.ch.dictionary())
		e.release()
		if err != nil {
			return 0, 0, nil, err
		}
	}
	if err := checkGenNames(b); err != nil {
		return 0, 0, nil, err
	}
	ids := slices.Clone(b.Cols[0].Ints[:b.Len()])
	b.Release()
	return eventBatch, 0, ids, nil
}

func unalignedGraph(t *testing.T, reg *stream.Registry, par int) *stream.JobGraph {
	return unalignedGraphOf(t, reg, par, ckgenConfig{Rows: 3000, Batch: 10, Keys: 7})
}

func unalignedGraphOf(t *testing.T, reg *stream.Registry, par int, src ckgenConfig) *stream.JobGraph {
	b := stream.NewBuilder("unaligned").MaxParallelism(8)
	b.Source("src", "ckgen", src).SetParallelism(par).Rebalance().Then("count", "kcount", nil).SetParallelism(1)
	return plan(t, b, reg)
}

// TestSourceTriggerUnderBackpressure: a source whose only output channel
// is full (its consumer reads nothing) takes a checkpoint anyway.
// Unaligned, the barrier lands in the consumer's buffer ahead of the
// batches already there (marked as overtaken: the consumer's channel
// state), the batches the source could not send are the snapshot's channel
// state, and they come next. Aligned, the barrier queues behind them all.
// Either way the rows before the barrier (aligned) or overtaken by it
// (unaligned), plus the source's channel state, are exactly the rows the
// snapshotted source position says it emitted, in order. Restored from that checkpoint, the
// source sends the channel state first, then the rest: every row reaches
// the consumer exactly once, checked row by row, over the network exchange
// and in memory. Without a watermark after each batch, the channel to the
// peer gathers the source's 10-row batches by 50 (coalescing): what it
// holds when the barrier comes is channel state too.
func TestSourceTriggerUnderBackpressure(t *testing.T) {
	const rows, credits = 3000, 2
	for _, tc := range []struct {
		remote, unaligned, noWatermarks bool
		dictBytes                       int
	}{
		{true, true, false, 0}, {false, true, false, 0}, {true, false, false, 0}, {false, false, false, 0},
		{true, true, true, 0}, {true, false, true, 0},
		// A channel dictionary with room for 3 of the 7 names: it forgets
		// its entries and keeps the column out while batches wait.
		{true, true, false, 200}, {true, true, true, 200},
	} {
		remote := tc.remote
		dict := "default"
		if tc.dictBytes > 0 {
			dict = strconv.Itoa(tc.dictBytes)
		}
		t.Run(fmt.Sprintf("remote=%v/unaligned=%v/watermarks=%v/dict=%s", remote, tc.unaligned, !tc.noWatermarks, dict), func(t *testing.T) {
			st := newCkState()
			reg := newCkRegistry(st)
			g := unalignedGraphOf(t, reg, 1, ckgenConfig{Rows: rows, Batch: 10, Keys: 7, NoWatermarks: tc.noWatermarks})
			cfg := ExchangeConfig{CreditsPerChannel: credits, CoalesceRows: 50, CoalesceTimeout: time.Hour, DictionaryBytes: tc.dictBytes}
			src, dst := startNodeWith(t, cfg), startNodeWith(t, cfg)
			if !remote {
				dst = src
			}
			specFor := func(attempt int64) *TaskSpec {
				s := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, _ int) string {
					if v == 0 {
						return src.addr
					}
					return dst.addr
				})[0]
				s.Attempt = attempt
				return s
			}
			keyFor := func(attempt int64) channelKey {
				return channelKey{JobID: "job-1", Attempt: attempt, UpstreamVertex: 0, UpstreamSubtask: 0, DownstreamVertex: 1, DownstreamInput: 0, DownstreamSub: 0}
			}

			p := openProbe(t, dst.x, keyFor(3))
			r := startCk(t, []*TaskSpec{specFor(3)}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return src.x })
			// The consumer holds all the batches the credits allow, and
			// the source holds more, waiting for credit (backpressure
			// from before the channel connected does not count).
			waitFor(t, "the source to be backpressured with the channel full", func() bool {
				return p.batches() >= credits && r.tasks[0].Metrics().backpressured()
			})
			trigger := r.tasks[0].TriggerCheckpoint
			if tc.unaligned {
				trigger = r.tasks[0].TriggerUnalignedCheckpoint
			}
			if err := trigger(1, 1001); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "checkpoint 1 to be taken", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
			// inFlight are the rows the consumer's buffer held when the
			// unaligned barrier overtook them there (its channel state).
			var inFlight []int64
			if tc.unaligned {
				waitFor(t, "barrier 1 in the full channel", func() bool { return slices.Contains(p.queued(), eventBarrier) })
				q := p.queued()
				if q[0] != eventBarrier || slices.ContainsFunc(q[1:], func(k eventKind) bool { return k != eventBatch && k != eventWatermark }) {
					t.Fatalf("channel holds %v: want the barrier ahead of the batches the credits allowed", q)
				}
				inFlight = p.overtaken(1)
				if len(inFlight) == 0 {
					t.Fatalf("channel holds %v, no batch marked as overtaken by barrier 1", q)
				}
			} else if q := p.queued(); slices.Contains(q, eventBarrier) {
				t.Fatalf("aligned barrier overtook the batches waiting in the source: channel holds %v", q)
			}
			stats := r.hooks[0].statsOf(1)
			if tc.unaligned != (stats.ChannelStateBytes > 0) {
				t.Fatalf("checkpoint 1 (unaligned %v) reports %d bytes of channel state", tc.unaligned, stats.ChannelStateBytes)
			}
			snaps, _ := r.hooks[0].snaps(1)
			pos := snaps["src"].List["pos"]
			if len(pos) != 1 || len(pos[0]) != 8 {
				t.Fatalf("snapshot of the source has position %v", pos)
			}
			emitted := int64(binary.LittleEndian.Uint64(pos[0]))
			var overtaken []int64
			var stateBytes int64
			for name, items := range snaps["src"].List {
				if !strings.HasPrefix(name, channelStatePrefix) {
					continue
				}
				if name != channelStatePrefix+"p1/out0/sub0" {
					t.Fatalf("channel state under %q, want the source's only channel", name)
				}
				for _, data := range items {
					stateBytes += int64(len(data))
					b, err := batchcodec.Decode(data, genSchema)
					if err == nil {
						err = checkGenNames(b)
					}
					if err != nil {
						t.Fatal(err)
					}
					overtaken = append(overtaken, b.Cols[0].Ints[:b.Len()]...)
				}
			}
			if tc.unaligned == (len(overtaken) == 0) || stateBytes != stats.ChannelStateBytes {
				t.Fatalf("channel state: %d rows in %d bytes, stats say %d bytes", len(overtaken), stateBytes, stats.ChannelStateBytes)
			}
			r.tasks[0].NotifyCheckpointComplete(1)

			// Before the barrier: what the checkpoint's downstream state holds.
			var before, after []int64
			for {
				kind, v, ids := p.read()
				if kind == eventBarrier && v == 1 {
					break
				}
				before = append(before, ids...)
			}
			if tc.unaligned && len(before) > 0 {
				t.Fatalf("%d rows came before the unaligned barrier", len(before))
			}
			// In channel order: what the barrier overtook in the buffer,
			// then the source's channel state.
			if tc.unaligned {
				before = inFlight
			}
			for len(after) < len(inFlight)+len(overtaken) {
				_, _, ids := p.read()
				after = append(after, ids...)
			}
			if want := append(slices.Clone(inFlight), overtaken...); !slices.Equal(after[:len(want)], want) {
				t.Fatalf("after the barrier came %v, want the overtaken rows %v first", after[:len(want)], want)
			}
			if got := append(slices.Clone(before), overtaken...); !slices.Equal(got, idRange(0, emitted)) {
				t.Fatalf("rows before the barrier and in the channel state: %d rows, want ids 0..%d in order", len(got), emitted-1)
			}
			r.stop()

			// Restore from checkpoint 1 (a new attempt) and read to the end.
			p2 := openProbe(t, dst.x, keyFor(4))
			var restored []int64
			var readErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					kind, _, ids, err := p2.tryRead()
					if err != nil {
						readErr = err
						return
					}
					if kind == eventEndOfPartition {
						return
					}
					restored = append(restored, ids...)
				}
			})
			r2 := startCk(t, []*TaskSpec{specFor(4)}, reg, stream.ExactlyOnce, 1, func(int) map[string]*stream.OperatorSnapshot { return snaps }, func(*TaskSpec) *Exchange { return src.x })
			r2.checkpointUntilDone(t, 2)
			if errs := r2.wait(t); errs[0] != nil {
				t.Fatal(errs[0])
			}
			wg.Wait()
			if readErr != nil {
				t.Fatal(readErr)
			}
			if len(restored) < len(overtaken) || !slices.Equal(restored[:len(overtaken)], overtaken) {
				t.Fatalf("restored source sent %v first, want the channel state %v", restored[:min(len(restored), len(overtaken))], overtaken)
			}
			seen := make(map[int64]int, rows)
			for _, id := range append(before, restored...) {
				seen[id]++
			}
			lost, dup := 0, 0
			for id := range int64(rows) {
				switch n := seen[id]; {
				case n == 0:
					lost++
				case n > 1:
					dup += n - 1
				}
			}
			fmt.Printf("source_trigger_restore unaligned=%v remote=%v rows=%d channel_state_rows=%d channel_state_bytes=%d lost=%d duplicated=%d\n",
				tc.unaligned, remote, rows, len(overtaken), stateBytes, lost, dup)
			if lost != 0 || dup != 0 || len(seen) != rows {
				t.Fatalf("lost %d, duplicated %d, distinct %d of %d rows", lost, dup, len(seen), rows)
			}
		})
	}
}

// TestUnalignedRescaleRefused: the channel state of an unaligned checkpoint
// taken at parallelism 1 does not restore at parallelism 2; the task fails
// saying to take a savepoint.
func TestUnalignedRescaleRefused(t *testing.T) {
	st := newCkState()
	reg := newCkRegistry(st)
	g := unalignedGraph(t, reg, 2)
	x := localExchange(t, "local")
	spec := buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })[0]
	pos := make([]byte, 8)
	b := stream.NewBatch(genSchema, 1)
	b.AppendRow(int64(5), int64(5), "")
	snap := map[string]*stream.OperatorSnapshot{"src": {List: map[string][][]byte{
		"pos":                               {pos},
		channelStatePrefix + "p1/out0/sub0": {batchcodec.Append(nil, b)},
	}}}
	r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 1, func(int) map[string]*stream.OperatorSnapshot { return snap }, func(*TaskSpec) *Exchange { return x })
	err := r.wait(t)[0]
	if !errors.Is(err, ErrUnalignedRescale) || !strings.Contains(err.Error(), "savepoint") {
		t.Fatalf("Run: %v, want ErrUnalignedRescale saying to take a savepoint", err)
	}
}

// TestUnalignedInputOvertakes: at a task with two input channels A and B,
// the barrier of an unaligned checkpoint arriving on A overtakes the
// batches buffered there; the task snapshots at once (its state holds only
// what it had processed), and the batches the barrier overtook on A, plus
// those it takes from B before B's barrier, are the checkpoint's channel
// state. Restored from that checkpoint, the task processes the channel
// state first and then the new input: its final counts are exactly those
// of every row, each once: over the network exchange and in memory.
func TestUnalignedInputOvertakes(t *testing.T) {
	for _, remote := range []bool{true, false} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) { testUnalignedInputOvertakes(t, remote) })
	}
}

func testUnalignedInputOvertakes(t *testing.T, remote bool) {
	a1, a2, a3 := idRange(0, 10), idRange(100, 11), idRange(200, 12)
	b1, b2 := idRange(300, 13), idRange(400, 14)
	c1, c2 := idRange(500, 15), idRange(600, 16)
	const credits = 8
	// exchanges returns the exchange of the task and that of its feeds.
	exchanges := func() (*Exchange, *Exchange) {
		if remote {
			return startNode(t, credits).x, startNode(t, credits).x
		}
		x := NewExchange(ExchangeConfig{SelfAddress: "local", CreditsPerChannel: credits})
		t.Cleanup(func() { _ = x.Close() })
		return x, x
	}
	// feeds opens the producing ends of spec's channels on from, for the
	// task on x.
	feeds := func(x, from *Exchange, spec *TaskSpec) []*feed {
		if x == from {
			return openFeeds(t, x, spec)
		}
		var fs []*feed
		for u := range 2 {
			key := channelKey{JobID: spec.JobID, Attempt: spec.Attempt, UpstreamVertex: spec.Inputs[0].UpstreamVertex, UpstreamSubtask: u,
				DownstreamVertex: spec.VertexID, DownstreamInput: 0, DownstreamSub: spec.Subtask}
			o, err := from.openOutput(key, x.cfg.SelfAddress)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { from.closeOutput(o) })
			fs = append(fs, &feed{t: t, x: x, o: o, key: key})
		}
		return fs
	}

	st := newCkState()
	st.slow = make(chan struct{})
	reg := newCkRegistry(st)
	x, from := exchanges()
	spec := countSpec(t, reg, kcountConfig{})
	r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
	fs := feeds(x, from, spec)
	A, B := fs[0], fs[1]
	A.rows(a1...)
	waitFor(t, "a1 taken", func() bool { return r.tasks[0].Metrics().RecordsIn.Load() == int64(len(a1)) })
	A.rows(a2...)
	A.rows(a3...)
	B.rows(b1...)
	A.send(event{kind: eventBarrier, value: 1, ts: 1001, unaligned: true})
	waitFor(t, "everything buffered", func() bool {
		_, na := A.blocked()
		_, nb := B.blocked()
		return na == 3 && nb == 1
	})
	// The barrier went ahead of a2 and a3.
	A.x.mu.Lock()
	in := A.x.mu.endpoints[A.key].in.Load()
	A.x.mu.Unlock()
	in.gate.mu.Lock()
	first, queued := in.q.at(0).kind, in.q.len()
	in.gate.mu.Unlock()
	if first != eventBarrier || queued != 3 {
		t.Fatalf("channel A holds %d events, the first a %v; want the barrier ahead of 2 batches", queued, first)
	}
	close(st.slow)
	waitFor(t, "the snapshot to wait for B's barrier", func() bool { _, n := A.blocked(); return n == 0 })
	if _, taken := r.hooks[0].snaps(1); taken {
		t.Fatal("checkpoint 1 reported before channel B delivered its barrier")
	}
	B.rows(b2...)
	B.send(event{kind: eventBarrier, value: 1, ts: 1001, unaligned: true})
	waitFor(t, "checkpoint 1", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
	snaps, _ := r.hooks[0].snaps(1)
	if got, want := decodeCounts(t, snaps["count"]), countOf(a1); !maps.Equal(got, want) {
		t.Fatalf("snapshot counts %v, want those of a1 only %v", got, want)
	}
	inState := map[string][]int64{}
	var stateBytes int64
	for name, items := range snaps["count"].List {
		for _, data := range items {
			stateBytes += int64(len(data))
			b, err := batchcodec.Decode(data, genSchema)
			if err != nil {
				t.Fatal(err)
			}
			inState[strings.TrimPrefix(name, channelStatePrefix)] = append(inState[strings.TrimPrefix(name, channelStatePrefix)], b.Cols[0].Ints[:b.Len()]...)
		}
	}
	wantState := map[string][]int64{"p1/in0/up0": append(slices.Clone(a2), a3...), "p1/in0/up1": append(slices.Clone(b1), b2...)}
	if !maps.EqualFunc(inState, wantState, slices.Equal[[]int64]) {
		t.Fatalf("channel state %v, want %v", inState, wantState)
	}
	if got := r.hooks[0].statsOf(1).ChannelStateBytes; got != stateBytes {
		t.Fatalf("stats say %d bytes of channel state, the snapshot holds %d", got, stateBytes)
	}
	r.stop()

	// Restore from checkpoint 1 and feed the rest.
	st2 := newCkState()
	reg2 := newCkRegistry(st2)
	x2, from2 := exchanges()
	spec2 := countSpec(t, reg2, kcountConfig{})
	r2 := startCk(t, []*TaskSpec{spec2}, reg2, stream.ExactlyOnce, 1, func(int) map[string]*stream.OperatorSnapshot { return snaps }, func(*TaskSpec) *Exchange { return x2 })
	fs2 := feeds(x2, from2, spec2)
	fs2[0].rows(c1...)
	fs2[1].rows(c2...)
	fs2[0].end()
	fs2[1].end()
	if errs := r2.wait(t); errs[0] != nil {
		t.Fatal(errs[0])
	}
	got := mergeCounts(st2, "count")
	want := countOf(a1, a2, a3, b1, b2, c1, c2)
	var lost, dup int64
	for k, n := range want {
		if d := n - got[k]; d > 0 {
			lost += d
		} else {
			dup -= d
		}
	}
	fmt.Printf("unaligned_input_restore remote=%v rows=%d channel_state_bytes=%d lost=%d duplicated=%d\n", remote, 10+11+12+13+14+15+16, stateBytes, lost, dup)
	if !maps.Equal(got, want) {
		t.Fatalf("final counts %v, want %v", got, want)
	}
}

// TestGateUnalignedBarrierOrder: an unaligned barrier goes ahead of what
// its channel buffers and marks the batches it overtook; a later one goes
// ahead of the earlier and marks them again (they are in flight for it
// too), while batches pushed after a barrier stay behind it unmarked.
func TestGateUnalignedBarrierOrder(t *testing.T) {
	g := newInputGate()
	ch := g.add(channelKey{}, 0, genSchema)
	batch := func(id int64) event {
		b := stream.NewBatch(genSchema, 1)
		b.AppendRow(id, id, "")
		return event{kind: eventBatch, batch: b}
	}
	g.push(ch, batch(1))
	g.push(ch, event{kind: eventBarrier, value: 1, unaligned: true})
	g.push(ch, batch(2))
	g.push(ch, event{kind: eventBarrier, value: 2, unaligned: true})
	g.push(ch, batch(3))
	var order []string
	marks := map[int64]int64{}
	g.mu.Lock()
	for i := 0; i < ch.q.len(); i++ {
		e := ch.q.at(i)
		switch e.kind {
		case eventBarrier:
			order = append(order, fmt.Sprintf("barrier %d", e.value))
		case eventBatch:
			id := e.batch.Cols[0].Ints[0]
			order = append(order, fmt.Sprintf("batch %d", id))
			marks[id] = e.before
		}
	}
	g.mu.Unlock()
	want := []string{"barrier 2", "barrier 1", "batch 1", "batch 2", "batch 3"}
	if !slices.Equal(order, want) {
		t.Fatalf("buffer order %v, want %v", order, want)
	}
	if want := map[int64]int64{1: 2, 2: 2, 3: 0}; !maps.Equal(marks, want) {
		t.Fatalf("overtaken marks %v, want %v", marks, want)
	}
	var got []int64
	g.overtaken(ch, 2, func(e *event, mark bool) {
		if mark {
			got = append(got, e.batch.Cols[0].Ints[0])
		}
	})
	if !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("overtaken by barrier 2: %v, want [1 2]", got)
	}
	g.close()
}

// TestUnalignedMixedBarriers: a source whose input ended sends aligned
// barriers while the others send unaligned ones (the final checkpoint is
// aligned), so a task may see both for one checkpoint. Either order
// completes the checkpoint unaligned, without reporting it failed: rows a
// channel delivers before its aligned barrier, processed after the
// snapshot, are channel state; rows behind a barrier are not.
func TestUnalignedMixedBarriers(t *testing.T) {
	a1, b1, b2 := idRange(0, 10), idRange(100, 11), idRange(200, 12)
	for _, alignedFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("alignedFirst=%v", alignedFirst), func(t *testing.T) {
			st := newCkState()
			reg := newCkRegistry(st)
			x := localExchange(t, "local")
			spec := countSpec(t, reg, kcountConfig{})
			r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
			fs := openFeeds(t, x, spec)
			A, B := fs[0], fs[1]
			wantCounts, wantState := map[int64]int64{}, map[string][]int64{}
			if alignedFirst {
				B.rows(b1...)
				B.barrier(1)
				waitFor(t, "B blocked by its aligned barrier", func() bool { b, _ := B.blocked(); return b })
				B.rows(b2...)
				A.send(event{kind: eventBarrier, value: 1, ts: 1001, unaligned: true})
				A.rows(a1...)
				wantCounts = countOf(b1)
			} else {
				A.send(event{kind: eventBarrier, value: 1, ts: 1001, unaligned: true})
				B.rows(b1...)
				B.barrier(1)
				B.rows(b2...)
				A.rows(a1...)
				wantState["p1/in0/up1"] = b1
			}
			waitFor(t, "checkpoint 1", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
			if err := r.hooks[0].failure(1); err != nil {
				t.Fatalf("checkpoint 1 reported failed: %v", err)
			}
			snaps, _ := r.hooks[0].snaps(1)
			if got := decodeCounts(t, snaps["count"]); !maps.Equal(got, wantCounts) {
				t.Fatalf("snapshot counts %v, want %v", got, wantCounts)
			}
			gotState := map[string][]int64{}
			for name, items := range snaps["count"].List {
				for _, data := range items {
					b, err := batchcodec.Decode(data, genSchema)
					if err != nil {
						t.Fatal(err)
					}
					n := strings.TrimPrefix(name, channelStatePrefix)
					gotState[n] = append(gotState[n], b.Cols[0].Ints[:b.Len()]...)
				}
			}
			if !maps.EqualFunc(gotState, wantState, slices.Equal[[]int64]) {
				t.Fatalf("channel state %v, want %v", gotState, wantState)
			}
			r.tasks[0].NotifyCheckpointComplete(1)
			A.end()
			B.end()
			if errs := r.wait(t); errs[0] != nil {
				t.Fatal(errs[0])
			}
			if got, want := mergeCounts(st, "count"), countOf(a1, b1, b2); !maps.Equal(got, want) {
				t.Fatalf("final counts %v, want %v", got, want)
			}
		})
	}
}
