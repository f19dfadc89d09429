package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name       string
		floor      int64
		live, scan uint64
		base       int
		want       int64
	}{
		{"no floor", 0, 10 * mib, 10 * mib, 100, 100},
		{"live far below the floor", 64 * mib, 8 * mib, 8 * mib, 100, 700},
		{"stacks and globals count", 64 * mib, 8 * mib, 16 * mib, 100, 350},
		{"live at half the floor", 64 * mib, 32 * mib, 32 * mib, 100, 100},
		{"live above the floor", 64 * mib, 100 * mib, 100 * mib, 100, 100},
		{"a higher base stays", 64 * mib, 8 * mib, 8 * mib, 1000, 1000},
		{"tiny heap: the runtime's minimum heap reaches the floor", 64 * mib, 1, 1, 100, 1600},
		{"empty heap", 64 * mib, 0, 0, 100, 1600},
		{"huge floor is capped", 1 << 50, 1, 1, 100, maxPercent},
	} {
		if got := percentFor(c.floor, c.live, c.scan, c.base); got != c.want {
			t.Errorf("%s: percentFor(%d, %d, %d, %d) = %d, want %d", c.name, c.floor, c.live, c.scan, c.base, got, c.want)
		}
	}
}

// reset turns the tuning off for the rest of the process, or until the
// next SetFloor: the tuner keeps running after each collection, and with
// no floor it sets the percentage the process had.
func reset(t *testing.T) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	floor.Store(0)
	if started {
		debug.SetGCPercent(base)
		percent.Store(int64(base))
	}
}

// sink keeps allocations from being optimised away.
var sink []byte

// cycles returns the number of collections the process has completed.
func cycles() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// churn allocates n bytes of garbage in 64 KiB pieces.
func churn(n int) {
	for i := 0; i < n; i += 64 << 10 {
		sink = make([]byte, 64<<10)
	}
}

// TestFloorCutsCollections allocates the same garbage over a small live
// heap before and after setting a floor, and counts the collections: with
// the runtime's default each takes a few MiB, with a 64 MiB floor each
// takes about 64 MiB.
func TestFloorCutsCollections(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set in the environment: the tuner stays off by design")
	}
	reset(t)
	t.Cleanup(func() { reset(t) })
	const garbage = 512 << 20
	runtime.GC()
	c0 := cycles()
	churn(garbage)
	before := cycles() - c0

	if !SetFloor(64 << 20) {
		t.Fatal("SetFloor(64 MiB) = false, want the tuning on")
	}
	if Floor() != 64<<20 {
		t.Fatalf("Floor() = %d, want %d", Floor(), 64<<20)
	}
	// The percentage is set after a collection; wait for one.
	deadline := time.Now().Add(time.Minute)
	for Percent() <= 100 {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute the collector's percentage is %d, want above 100 for a small live heap", Percent())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the finalizer goroutine runs the tuner
	}
	if cur := debug.SetGCPercent(Percent()); int64(cur) != int64(Percent()) {
		t.Errorf("the runtime's percentage is %d, the tuner says it set %d", cur, Percent())
	}
	runtime.GC()
	c1 := cycles()
	churn(garbage)
	after := cycles() - c1
	t.Logf("collections for %d MiB of garbage: %d with the default, %d with a 64 MiB floor (percentage %d)", garbage>>20, before, after, Percent())
	// 512 MiB over a 64 MiB floor is about 8 collections; the default
	// takes one every few MiB. The runtime counts what is allocated while
	// a collection marks as live, so a cycle now and then sees a bigger
	// heap and sets a lower percentage: a few more or fewer. Fewer than 3
	// would mean the heap grew well past the floor.
	if after < 3 || after > 24 || after >= before {
		t.Errorf("with a 64 MiB floor %d collections, with the default %d: want 3 to 24 and fewer than the default", after, before)
	}

	// A smaller floor does not lower it; a larger one raises it.
	SetFloor(1 << 20)
	if Floor() != 64<<20 {
		t.Errorf("after SetFloor(1 MiB) Floor() = %d, want it to stay %d", Floor(), 64<<20)
	}
}
