package dataflow

import (
	"math/rand/v2"
	"testing"
)

// TestRemoteSinkDefersCredits drives one network channel's credits with a
// model of its peer: the peer sends a batch whenever it has a credit and
// wants to, batches arrive after a while, and the consumer takes them in
// its own time, all in a seeded random order. The peer must never wait
// for a credit that the receiving side holds back (every batch it wants
// to send goes, once what is in flight is taken); a batch taken must not
// leave credits held back while the peer has less than half its window
// (credits and batches in flight); the peer must never send beyond its
// credits; and fewer grants must go than batches.
func TestRemoteSinkDefersCredits(t *testing.T) {
	for _, window := range []int{1, 2, 3, 4, 8} {
		for seed := uint64(1); seed <= 20; seed++ {
			rng := rand.New(rand.NewPCG(seed, uint64(window)))
			x := NewExchange(ExchangeConfig{})
			s := &inboundStream{x: x, wake: make(chan struct{}, 1)}
			s.mu.grants = make(map[uint32]uint32)
			r := &remoteSink{s: s, id: 7}
			r.connect(nil, window)

			const batches = 2000
			credits, inFlight, buffered, sent, grants := 0, 0, 0, 0, 0
			collect := func() { // the peer reads the grants written out
				s.mu.Lock()
				if g := s.mu.grants[r.id]; g > 0 {
					credits += int(g)
					grants++
					delete(s.mu.grants, r.id)
				}
				s.mu.Unlock()
			}
			collect()
			if credits != window {
				t.Fatalf("window %d: connect granted %d credits", window, credits)
			}
			for taken := 0; taken < batches; {
				collect()
				switch rng.IntN(3) {
				case 0: // the peer sends, if it has a credit and rows
					if credits > 0 && sent < batches {
						credits--
						inFlight++
						sent++
					}
				case 1: // a batch arrives
					if inFlight > 0 {
						if r.received.Load() >= r.granted.Load() {
							t.Fatalf("window %d seed %d: batch %d arrived beyond the %d credits granted", window, seed, r.received.Load()+1, r.granted.Load())
						}
						inFlight--
						buffered++
						r.received.Add(1)
					}
				case 2: // the consumer takes one
					if buffered > 0 {
						buffered--
						taken++
						r.grant(1)
						collect()
						if r.deferred > 0 && credits+inFlight < window/2 {
							t.Fatalf("window %d seed %d: a batch taken left %d credits held back while the peer has %d credits and %d batches in flight", window, seed, r.deferred, credits, inFlight)
						}
					}
				}
				collect()
				if sent < batches && credits == 0 && inFlight == 0 && buffered == 0 {
					t.Fatalf("window %d seed %d: the peer waits for a credit after %d batches with nothing in flight (%d credits held back)", window, seed, sent, r.deferred)
				}
			}
			if window >= 4 && grants > batches*2/3 {
				t.Errorf("window %d seed %d: %d grants for %d batches, want at most two thirds", window, seed, grants, batches)
			}
		}
	}
}
