package dataflow

import (
	"testing"
	"time"
)

// TestChannelByteBudget runs an unbounded source of 1000-row batches into
// a slow sink with a 16 KiB byte budget per channel: the source's batches
// go in pieces and at most the budget is in flight, far less than the
// channel's credits alone allow, and the sink still gets every row once,
// in order.
func TestChannelByteBudget(t *testing.T) {
	const credits, batch, budget = 4, 1000, 16 << 10
	// A gen row is 8+8 bytes of numbers and a 2-byte string (16 + 2):
	// pieces of half the budget (8 KiB, the least) hold 240 rows, and two
	// fit in the budget.
	const rowBytes = 34
	const pieceRows = 8 << 10 / rowBytes
	for _, tc := range []struct {
		name   string
		remote bool
	}{{"network", true}, {"in-memory", false}} {
		t.Run(tc.name, func(t *testing.T) {
			// Ahead of the sink: the pieces in flight (two fit in the
			// budget), the one the sink works on, and the rest of the
			// source's current batch.
			const bound = 3*pieceRows + batch
			const want = 100 * batch
			st, worst := slowSinkRun(t, ExchangeConfig{CreditsPerChannel: credits, ChannelBytes: budget}, tc.remote, batch, want)
			st.mu.Lock()
			rows := st.rows["sink"]
			st.mu.Unlock()
			if len(rows) < want {
				t.Fatalf("sink consumed only %d rows", len(rows))
			}
			for i, r := range rows {
				if r.id != int64(i) {
					t.Fatalf("row %d has id %d: rows lost, repeated or out of order", i, r.id)
				}
			}
			if worst > bound {
				t.Fatalf("source ran %d rows ahead of the sink; a %d-byte budget allows at most %d (credits alone: %d)", worst, budget, bound, (credits+2)*batch)
			}
			t.Logf("source ran at most %d rows ahead of the sink (bound %d, credits alone %d)", worst, bound, (credits+2)*batch)
		})
	}
}

// TestDebloatSizesBudget: with a debloat target the budget follows the
// rate the consumer returns credits at, within its bounds.
func TestDebloatSizesBudget(t *testing.T) {
	b := &flowBudget{fixed: 1 << 20, target: 100 * time.Millisecond}
	var f flowState
	f.limit = b.fixed
	t0 := time.Unix(1000, 0)
	send := func(n int, size int64) {
		for range n {
			f.sizes.push(size)
			f.inflight += size
		}
	}
	f.returned(4, b, t0) // the initial grant: nothing in flight
	if f.limit != 1<<20 || f.inflight != 0 {
		t.Fatalf("after the initial grant: limit %d, in flight %d", f.limit, f.inflight)
	}
	// 40 KB taken in 200 ms: 200 KB/s, so 20 KB in 100 ms.
	send(4, 10_000)
	f.returned(4, b, t0.Add(200*time.Millisecond))
	if f.limit != 20_000 || f.inflight != 0 {
		t.Fatalf("at 200 KB/s: limit %d, in flight %d; want 20000 and 0", f.limit, f.inflight)
	}
	// The consumer slows to 20 KB/s: the smoothed rate is 110 KB/s.
	send(1, 4_000)
	f.returned(1, b, t0.Add(400*time.Millisecond))
	if f.limit != 11_000 {
		t.Fatalf("after slowing: limit %d, want 11000", f.limit)
	}
	// A consumer that takes next to nothing: the budget floors.
	for i := range 10 {
		send(1, 10)
		f.returned(1, b, t0.Add(time.Duration(600+200*i)*time.Millisecond))
	}
	if f.limit != minBudgetBytes {
		t.Fatalf("stalled: limit %d, want the floor %d", f.limit, minBudgetBytes)
	}
	// Fast again, far past the fixed bound: the fixed bound holds.
	send(100, 1<<20)
	f.returned(100, b, t0.Add(2800*time.Millisecond))
	f.returned(0, b, t0.Add(3000*time.Millisecond))
	if f.limit != 1<<20 {
		t.Fatalf("fast: limit %d, want the fixed bound %d", f.limit, 1<<20)
	}
}
