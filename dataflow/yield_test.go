package dataflow

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
)

// TestYieldIfOthersWait checks that a source's yield lets a goroutine that
// waits for the only processor run: with GOMAXPROCS 1, a goroutine this
// one readies can run before this one blocks only if it yields (or is
// preempted, 10ms later, which would let a broken yield pass, never fail
// a working one). A yield is a hint: one scheduling round in 61 takes
// the yielding goroutine back first, for fairness, so the goroutine must
// have run after at most two.
func TestYieldIfOthersWait(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := []metrics.Sample{{Name: runnableMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("the runtime has no metric %s", runnableMetric)
	}
	for range 500 {
		var ran atomic.Bool
		ready := make(chan struct{})
		done := make(chan struct{})
		go func() {
			<-ready
			ran.Store(true)
			close(done)
		}()
		runtime.Gosched() // let it block on ready
		close(ready)
		for range 2 {
			if !ran.Load() {
				yieldIfOthersWait(s)
			}
		}
		if !ran.Load() {
			t.Fatal("a goroutine waiting for the processor did not run when the source yielded")
		}
		<-done
	}
}
