// Package gctune gives the Go garbage collector a heap floor: below it the
// heap may grow to the floor before a collection runs; above it the
// collector paces as GOGC says.
//
// The runtime's default (GOGC=100) starts a collection when the heap has
// grown by as much as was live after the last one, and never waits for
// less than 4 MiB. A taskmanager streaming batches through small state has
// a live heap of a few tens of MiB and allocates hundreds of MiB a second,
// so it collects dozens of times a second: each cycle scans the live heap
// again, and while a cycle marks, every pointer written (a string into a
// column) pays the write barrier. With a floor of F bytes and a live heap
// well below F, the collector's percentage is set so that the next
// collection starts when the heap reaches F (about (F/L − 1) × 100 for a
// live heap L). The cost is memory: a busy process holds up to F of heap
// even when little of it is live. A live heap of about F/2 or more keeps
// the percentage it had.
//
// The floor is re-applied after every collection from the live heap that
// collection measured (runtime/metrics /gc/heap/live:bytes). An explicit
// GOGC in the environment turns the tuning off: whoever set it has
// decided. GOMEMLIMIT, when set, still bounds the heap as usual.
package gctune

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
)

// runtimeMinHeap is the runtime's minimum heap goal at GOGC=100; it scales
// with the percentage.
const runtimeMinHeap = 4 << 20

// maxPercent bounds the percentage the tuner sets, so that a nearly empty
// heap does not ask for a number the runtime would overflow on.
const maxPercent = 100_000

// The runtime metrics the percentage is computed from: the heap marked
// live by the last collection, and the stacks and globals the collector
// scans, which the runtime's pacing counts with the live heap.
var samples = []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

var (
	mu      sync.Mutex
	started bool
	// base is the percentage the process had before tuning (GOGC unset:
	// 100).
	base  int
	floor atomic.Int64
	// percent is the percentage last set (the finalizer goroutine only,
	// and SetFloor under mu before the first collection).
	percent atomic.Int64
)

// SetFloor sets the heap floor to bytes if that is more than the floor
// already set, and starts the tuning if it has not started. It does
// nothing for bytes ≤ 0 or when GOGC is set in the environment, and
// reports whether the tuning is on. Safe for concurrent use: the floor is
// process-wide, and the largest asked for applies.
func SetFloor(bytes int64) bool {
	if bytes <= 0 || os.Getenv("GOGC") != "" {
		return Floor() > 0
	}
	mu.Lock()
	defer mu.Unlock()
	if bytes > floor.Load() {
		floor.Store(bytes)
	}
	if !started {
		started = true
		base = debug.SetGCPercent(100)
		debug.SetGCPercent(base)
		if base <= 0 {
			// GC off (set by code, not the environment): leave it so.
			floor.Store(0)
			return false
		}
		percent.Store(int64(base))
		tune()
		arm()
	}
	return true
}

// Floor returns the heap floor in effect, 0 when there is none.
func Floor() int64 { return floor.Load() }

// Percent returns the collector percentage the tuner last set, 0 before
// it started.
func Percent() int { return int(percent.Load()) }

// sentinel is an object that lives from one collection to the next: its
// finalizer runs after each collection and re-arms the tuner. It is larger
// than the runtime's tiny-allocation size, so that its finalizer is
// reliable.
type sentinel struct{ _ [32]byte }

// arm allocates a sentinel whose finalizer tunes and arms the next.
func arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		tune()
		arm()
	})
}

// tune sets the collector percentage from the live heap of the last
// collection.
func tune() {
	s := make([]rtmetrics.Sample, len(samples))
	for i, name := range samples {
		s[i].Name = name
	}
	rtmetrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() != rtmetrics.KindUint64 {
			return
		}
		v[i] = s[i].Value.Uint64()
	}
	p := percentFor(floor.Load(), v[0], v[0]+v[1]+v[2], base)
	// A change under a tenth is not worth the pacer's recomputation.
	if cur := percent.Load(); p == cur || (cur > 0 && math.Abs(float64(p-cur)) < float64(cur)/10) {
		return
	}
	debug.SetGCPercent(int(p))
	percent.Store(p)
}

// percentFor returns the collector percentage that lets a heap with live
// bytes live grow to floor before the next collection, and at least base.
// The runtime's goal is live + scan × percent / 100, where scan is the
// live heap with the stacks and globals, but never below its minimum heap,
// 4 MiB × percent / 100: the percentage is capped where that minimum
// reaches the floor.
func percentFor(floor int64, live, scan uint64, base int) int64 {
	if floor <= 0 {
		return int64(base)
	}
	p := float64(floor) / runtimeMinHeap * 100
	if scan > 0 {
		p = min(p, (float64(floor)-float64(live))/float64(scan)*100)
	}
	if p <= float64(base) {
		return int64(base)
	}
	return int64(min(p, maxPercent))
}
