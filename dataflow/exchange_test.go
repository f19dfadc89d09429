package dataflow

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// TestNetworkExchange runs sources of parallelism 2 and sinks of
// parallelism 2 on two exchanges, each with its own gRPC server on
// loopback; source s runs on node s and sink d on node 1-d, so every sink
// reads one channel in memory and one over the network.
func TestNetworkExchange(t *testing.T) {
	const rows = 20000
	sent := map[string]int64{} // bytes sent over the network, by case
	for _, tc := range []struct {
		name         string
		edge         func(*stream.Stream) *stream.Stream
		everySubtask bool   // every sink subtask receives every row
		compression  string // ExchangeConfig.Compression of the nodes
	}{
		{"hash", func(s *stream.Stream) *stream.Stream { return s.KeyBy("key") }, false, ""},
		{"rebalance", func(s *stream.Stream) *stream.Stream { return s.Rebalance() }, false, ""},
		{"broadcast", func(s *stream.Stream) *stream.Stream { return s.Broadcast() }, true, ""},
		{"hash zstd", func(s *stream.Stream) *stream.Stream { return s.KeyBy("key") }, false, CompressionZstd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ExchangeConfig{CreditsPerChannel: 3, Compression: tc.compression}
			nodes := []*testNode{startNodeWith(t, cfg), startNodeWith(t, cfg)}
			defer func() { sent[tc.name] = nodes[0].x.Stats().SentBytes + nodes[1].x.Stats().SentBytes }()
			st := newTestState()
			reg := newTestRegistry(st)
			b := stream.NewBuilder("net").Parallelism(2).MaxParallelism(32)
			tc.edge(b.Source("src", "gen", genConfig{Rows: rows, Batch: 128, Keys: 101})).Then("sink", "collect", nil)
			g := plan(t, b, reg)
			placeOf := func(v, s int) int {
				if v == 0 {
					return s
				}
				return 1 - s
			}
			specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, s int) string { return nodes[placeOf(v, s)].addr })
			tasks, errs := runTasks(t.Context(), t, specs, reg, func(s *TaskSpec) *Exchange { return nodes[placeOf(s.VertexID, s.Subtask)].x })
			for i, err := range errs {
				if err != nil {
					t.Fatalf("task %s: %v", tasks[i].Name(), err)
				}
			}
			var want []sinkRow
			for id := int64(0); id < rows; id++ {
				r := sinkRow{id: id, key: id % 101, name: "n" + itoa(id%101)}
				want = append(want, r)
				if tc.everySubtask {
					r.subtask = 1
					want = append(want, r)
				}
			}
			got := st.rows["sink"]
			perSubtask := map[int]int{}
			for i := range got {
				perSubtask[got[i].subtask]++
				if tc.name == "hash" {
					if owner := keyOwner(t, got[i].key, 32, 2); owner != got[i].subtask {
						t.Fatalf("key %d at subtask %d, owner %d", got[i].key, got[i].subtask, owner)
					}
				}
				if !tc.everySubtask {
					got[i].subtask = 0 // compare as one multiset
				}
			}
			sortRows(got)
			sortRows(want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("sinks received %d rows, want %d (or contents differ)", len(got), len(want))
			}
			if plain, ok := sent["hash"]; tc.compression == CompressionZstd && ok {
				if zstd := nodes[0].x.Stats().SentBytes + nodes[1].x.Stats().SentBytes; zstd >= plain {
					t.Fatalf("with zstd the exchanges sent %d bytes, without %d", zstd, plain)
				}
			}
			if perSubtask[0] == 0 || perSubtask[1] == 0 {
				t.Fatalf("rows per sink subtask %v: want both used", perSubtask)
			}
			for _, n := range nodes {
				waitFor(t, "channels to be unregistered", func() bool { return n.x.numEndpoints() == 0 })
			}
		})
	}
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return string(buf[i:])
}

// TestBackpressure runs an unbounded fast source into a slow sink across
// the network and checks that the source is held to the sink's pace: the
// rows emitted but not yet consumed never exceed what the channel's credits
// allow in flight.
func TestBackpressure(t *testing.T) {
	const credits, batch = 4, 100
	for _, tc := range []struct {
		name   string
		remote bool
	}{{"network", true}, {"in-memory", false}} {
		t.Run(tc.name, func(t *testing.T) {
			// In flight: at most `credits` batches between the source's
			// channel and the sink task's buffer, plus the batch the sink is
			// processing and the one the source emitted and waits to send.
			const bound = (credits + 2) * batch
			st, worst := slowSinkRun(t, ExchangeConfig{CreditsPerChannel: credits}, tc.remote, batch, 200*batch)
			if c := st.consumed.Load(); c < 200*batch {
				t.Fatalf("sink consumed only %d rows", c)
			}
			if worst > bound {
				t.Fatalf("source ran %d rows ahead of the sink; credits allow at most %d", worst, bound)
			}
			t.Logf("source ran at most %d rows ahead of the sink (bound %d); emitted %d, consumed %d", worst, bound, st.emitted.Load(), st.consumed.Load())
		})
	}
}

// slowSinkRun runs an unbounded gen source (batches of batch rows) into a
// collect sink that takes 500 µs a batch, on exchanges configured by cfg
// (the two tasks on different ones when remote), until the sink consumed
// want rows. It returns the run's state and the most rows the source was
// ahead of the sink at any sample, and checks that every channel is
// unregistered afterwards.
func slowSinkRun(t *testing.T, cfg ExchangeConfig, remote bool, batch int, want int64) (*testState, int64) {
	t.Helper()
	nodes := []*testNode{startNodeWith(t, cfg), startNodeWith(t, cfg)}
	nodeOf := func(v int) *testNode {
		if remote {
			return nodes[v]
		}
		return nodes[0]
	}
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("bp").Parallelism(1)
	b.Source("src", "gen", genConfig{Rows: -1, Batch: batch}).Rebalance().Then("sink", "collect", nil)
	g := plan(t, b, reg)
	specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, _ int) string { return nodeOf(v).addr })
	var worst atomic.Int64
	sample := func() {
		if d := st.emitted.Load() - st.consumed.Load(); d > worst.Load() {
			worst.Store(d)
		}
	}
	st.slowSink = func() {
		sample()
		time.Sleep(500 * time.Microsecond)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// Stop once the sink consumed want rows, sampling meanwhile.
		for st.consumed.Load() < want && ctx.Err() == nil {
			sample()
			time.Sleep(100 * time.Microsecond)
		}
		cancel()
	}()
	_, errs := runTasks(ctx, t, specs, reg, func(s *TaskSpec) *Exchange { return nodeOf(s.VertexID).x })
	for _, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("task ended with %v, want context.Canceled", err)
		}
	}
	for _, n := range nodes {
		waitFor(t, "channels to be unregistered", func() bool { return n.x.numEndpoints() == 0 })
	}
	return st, worst.Load()
}

func TestCancelBlockedNetworkTasks(t *testing.T) {
	nodes := []*testNode{startNode(t, 2), startNode(t, 2)}
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("cancel").Parallelism(1)
	b.Source("src", "gen", genConfig{Rows: -1, Batch: 10}).Rebalance().Then("sink", "collect", nil)
	g := plan(t, b, reg)
	specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, _ int) string { return nodes[v].addr })
	for i, spec := range specs { // each alone: the other end never appears
		task, err := NewTask(spec, reg, nodes[spec.VertexID].x, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- task.Run(ctx) }()
		if i == 0 {
			waitFor(t, "the source to emit", func() bool { return task.Metrics().RecordsIn.Load() > 0 })
			waitFor(t, "the channel announcement to reach the peer", func() bool { return nodes[1].x.numEndpoints() == 1 })
		} else {
			waitFor(t, "the sink to register", func() bool { return nodes[1].x.numEndpoints() == 1 })
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("task %s: Run returned %v, want context.Canceled", task.Name(), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("task %s: Run did not return after cancellation", task.Name())
		}
		for _, n := range nodes {
			waitFor(t, "channels to be unregistered", func() bool { return n.x.numEndpoints() == 0 })
		}
	}
}

// TestBrokenStreamFailsTasks stops the receiving taskmanager's gRPC server
// mid-run: the sending task fails with an error naming the receiver's
// address, and the receiving task one naming the sender's. With exactly-once
// checkpointing the source's output channels are deferred (they queue what
// cannot go yet instead of blocking): they must fail the same way rather
// than wait for credit that never comes.
func TestBrokenStreamFailsTasks(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		t.Run(fmt.Sprintf("deferred=%v", deferred), func(t *testing.T) { testBrokenStream(t, deferred) })
	}
}

func testBrokenStream(t *testing.T, deferred bool) {
	nodes := []*testNode{startNode(t, 2), startNode(t, 2)}
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("broken").Parallelism(1)
	b.Source("src", "gen", genConfig{Rows: -1, Batch: 10}).Rebalance().Then("sink", "collect", nil)
	g := plan(t, b, reg)
	specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, _ int) string { return nodes[v].addr })
	if deferred {
		for _, s := range specs {
			s.Checkpointing, s.Mode, s.Hooks = true, stream.ExactlyOnce, newFakeHooks()
		}
	}
	go func() {
		for st.consumed.Load() < 1000 {
			time.Sleep(time.Millisecond)
		}
		nodes[1].srv.Stop()
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, errs := runTasks(ctx, t, specs, reg, func(s *TaskSpec) *Exchange { return nodes[s.VertexID].x })
	for i, want := range []struct{ role, peer string }{{"sender", nodes[1].addr}, {"receiver", nodes[0].addr}} {
		var pe *PeerError
		if !errors.As(errs[i], &pe) || pe.Addr != want.peer || !strings.Contains(errs[i].Error(), want.peer) {
			t.Fatalf("%s: %v; want a *PeerError naming its peer %s", want.role, errs[i], want.peer)
		}
	}
}
