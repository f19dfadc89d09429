package pebblestate_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// benchKeys returns n 8-byte keys and their key groups (as the heap
// backend's benchmark does).
func benchKeys(n int) ([][]byte, []int) {
	keys := make([][]byte, n)
	kgs := make([]int, n)
	for i := range keys {
		keys[i] = binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15)
		kgs[i] = i % stream.DefaultMaxParallelism
	}
	return keys, kgs
}

// BenchmarkValueStateGetUpdate is a keyed count: per op, select a key, read
// its value and write it back incremented, visiting the keys in a scrambled
// order.
func BenchmarkValueStateGetUpdate(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, backend := range []string{"heap", "pebble"} {
			b.Run(fmt.Sprintf("keys=%d/%s", n, backend), func(b *testing.B) {
				keys, kgs := benchKeys(n)
				var be statebackend.Backend
				if backend == "heap" {
					be = heap.New(full)
				} else {
					p, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(b.TempDir(), "db"), DeleteOnClose: true}, full)
					if err != nil {
						b.Fatal(err)
					}
					be = p
				}
				defer be.Close()
				s, err := statebackend.GetValueState(be, "count", statebackend.Int64Codec)
				if err != nil {
					b.Fatal(err)
				}
				for i := range keys {
					be.SetCurrentKey(keys[i], kgs[i])
					s.Update(1 << 20)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					k := (i * 7919) % n
					be.SetCurrentKey(keys[k], kgs[k])
					v, _ := s.Value()
					s.Update(v + 1)
				}
			})
		}
	}
}

// BenchmarkTimers drives event-time timers on the Pebble backend as a
// windowed operator does: every key has a timer at the end of its window
// (one of 4 window ends), registered for the key's first record and again
// for every later one, and all fire when the watermark passes the windows.
// With n keys in 128 key groups, visited in a scrambled order, it times
//
//   - pebble_timer_register_ns: a registration of a timer the key already
//     has (rounds × n of them, after the first registration of each key),
//   - pebble_timer_register_new_ns: the first registration of each key's
//     timer,
//   - pebble_timer_fire_ns: firing one timer (one watermark fires all n),
//
// in ns per timer, for 100,000 keys and, with the suffix _1m_keys, for
// 1,000,000 keys (whose timers exceed the default timer cache).
func BenchmarkTimers(b *testing.B) {
	for _, c := range []struct {
		n, rounds int
		suffix    string
	}{{100_000, 4, ""}, {1_000_000, 1, "_1m_keys"}} {
		b.Run(fmt.Sprintf("keys=%d", c.n), func(b *testing.B) {
			keys, kgs := benchKeys(c.n)
			var newNs, regNs, fireNs float64
			for b.Loop() {
				p, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(b.TempDir(), "db"), DeleteOnClose: true}, full)
				if err != nil {
					b.Fatal(err)
				}
				ts := p.Timers()
				register := func() {
					for i := range c.n {
						k := (i * 7919) % c.n
						p.SetCurrentKey(keys[k], kgs[k])
						ts.RegisterEventTimeTimer(int64(60_000 * (1 + k%4)))
					}
				}
				start := time.Now()
				register()
				newNs = float64(time.Since(start).Nanoseconds()) / float64(c.n)
				start = time.Now()
				for range c.rounds {
					register()
				}
				regNs = float64(time.Since(start).Nanoseconds()) / float64(c.n*c.rounds)
				fired := 0
				start = time.Now()
				err = ts.AdvanceWatermark(1<<40, func([]byte, int, int64) error { fired++; return nil })
				fireNs = float64(time.Since(start).Nanoseconds()) / float64(c.n)
				if err != nil || fired != c.n {
					b.Fatalf("fired %d timers of %d: %v", fired, c.n, err)
				}
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(regNs, "register_ns/timer")
			b.ReportMetric(newNs, "register_new_ns/timer")
			b.ReportMetric(fireNs, "fire_ns/timer")
			fmt.Printf("pebble_timer_register%s_ns=%.0f\n", c.suffix, regNs)
			fmt.Printf("pebble_timer_register_new%s_ns=%.0f\n", c.suffix, newNs)
			fmt.Printf("pebble_timer_fire%s_ns=%.0f\n", c.suffix, fireNs)
		})
	}
}
