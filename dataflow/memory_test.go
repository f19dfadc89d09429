package dataflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/weirstream/weir/stream"
)

// outstandingCredits adds up the credits that peers hold for channels into
// x and have not used: 0 when every sender waits for credit.
func outstandingCredits(x *Exchange) int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	var n int64
	for _, e := range x.mu.endpoints {
		if r, ok := e.sink.(*remoteSink); ok {
			n += r.granted.Load() - r.received.Load()
		}
	}
	return n
}

// TestNetworkMemoryBudget: eight source subtasks on one exchange flood one
// sink subtask on another that takes a batch only when every sender waits
// for credit (a consumer as slow as can be). With network memory for four
// batches, once the buffers filled up the consumer's buffer holds no more
// than the budget and two batches per channel (its one credit, at the peer
// or arrived); with the default memory it holds what the credits allow, the
// channels times CreditsPerChannel batches. Rows arrive in order per
// channel either way.
func TestNetworkMemoryBudget(t *testing.T) {
	const credits, sources, batchRows = 4, 8, 64
	const takes = 200 // batches the sink takes in a run
	run := func(t *testing.T, memory int64) (steady, peak int64, batch int) {
		send, recv := startNode(t, credits), startNodeWith(t, ExchangeConfig{CreditsPerChannel: credits, MemoryBytes: memory})
		st := newTestState()
		reg := newTestRegistry(st)
		b := stream.NewBuilder("flood").Parallelism(sources)
		gen, _ := json.Marshal(genConfig{Rows: -1, Batch: batchRows, Keys: 1000})
		b.Source("src", "gen", gen).Rebalance().Then("sink", "collect", nil).SetParallelism(1)
		g := plan(t, b, reg)
		specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(v, _ int) string {
			if v == 0 {
				return send.addr
			}
			return recv.addr
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		taken := 0
		st.slowSink = func() {
			waitFor(t, "every sender to wait for credit", func() bool { return ctx.Err() != nil || outstandingCredits(recv.x) == 0 })
			taken++
			if s := recv.x.Stats(); taken > 2*sources*credits {
				steady = max(steady, s.BufferedBytes)
			}
			if taken == takes {
				cancel()
			}
		}
		tasks, errs := runTasks(ctx, t, specs, reg, func(s *TaskSpec) *Exchange {
			if s.VertexID == 0 {
				return send.x
			}
			return recv.x
		})
		for _, err := range errs {
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		}
		if taken < takes {
			t.Fatalf("the sink took %d batches, want %d", taken, takes)
		}
		// Every byte accounted to the network memory, of the exchange and
		// of the consuming task, was given back.
		if b, held := recv.x.Stats().BufferedBytes, tasks[len(tasks)-1].Metrics().NetworkBufferedBytes.Load(); b != 0 || held != 0 {
			t.Errorf("after the run the exchange accounts %d bytes of network memory and the sink task %d, want 0", b, held)
		}
		st.mu.Lock()
		rows := st.rows["sink"]
		st.mu.Unlock()
		checkInOrder(t, rows, sources)
		s := recv.x.Stats()
		return steady, s.PeakBufferedBytes, int(s.ReceivedBytes / s.ReceivedBatches)
	}
	steadyFree, peakFree, batch := run(t, 0)
	budget := int64(4 * batch)
	steadyTight, peakTight, _ := run(t, budget)
	fmt.Printf("network_memory batch_bytes=%d channels=%d credits=%d default: steady_max=%d peak=%d budget=%d: steady_max=%d peak=%d\n",
		batch, sources, credits, steadyFree, peakFree, budget, steadyTight, peakTight)
	slack := int64(2 * sources * batch * 11 / 10) // batch sizes vary a little
	if steadyTight > budget+slack {
		t.Errorf("with a budget of %d bytes the buffer held %d bytes once full, more than the budget and two batches per channel (%d)", budget, steadyTight, budget+slack)
	}
	if hard := int64(sources * credits * batch * 11 / 10); peakTight > hard || peakFree > hard {
		t.Errorf("peaks %d and %d bytes exceed what the credits allow, %d", peakTight, peakFree, hard)
	}
	if steadyFree <= budget+slack {
		t.Errorf("without a tight budget the buffer held at most %d bytes once full, no more than the tight budget allows (%d): the test does not test the budget", steadyFree, budget+slack)
	}
}

// checkInOrder checks that each source subtask's ids reached the sink in
// ascending order.
func checkInOrder(t *testing.T, rows []sinkRow, sources int) {
	t.Helper()
	last := make([]int64, sources)
	for i := range last {
		last[i] = -1
	}
	for _, r := range rows {
		s := int(r.id % int64(sources))
		if r.id <= last[s] {
			t.Fatalf("id %d after %d from source subtask %d", r.id, last[s], s)
		}
		last[s] = r.id
	}
}
