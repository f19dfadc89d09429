package topn_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/stream"
)

// BenchmarkQ5 runs Nexmark q5 (examples/nexmark/q5.yaml: sliding-window
// bid counts, then window_max keyed by window_end) in this process on the
// task runtime, every vertex at parallelism 1, over WEIR_Q5_EVENTS events
// (default 10 million, as test/bench) at test/bench's event-time rate (100,000 events/s),
// on the heap and on the Pebble state backend. It reports events/s,
// events/s/core (events ÷ this process's CPU seconds) per backend and
// pebble_vs_heap (per core). The backend applies to every operator of the
// query that keeps keyed state in the runtime.
func BenchmarkQ5(b *testing.B) {
	events := int64(10_000_000)
	if v := os.Getenv("WEIR_Q5_EVENTS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("WEIR_Q5_EVENTS=%q: %v", v, err)
		}
		events = n
	}
	backends := []string{stream.StateBackendHeap, stream.StateBackendPebble}
	if v := os.Getenv("WEIR_Q5_BACKEND"); v != "" { // one backend, to profile it
		backends = []string{v}
	}
	wall, cpu := map[string]float64{}, map[string]float64{}
	for b.Loop() {
		for _, backend := range backends {
			w, c := runQ5(b, events, backend)
			wall[backend] += w
			cpu[backend] += c
		}
	}
	n := float64(events) * float64(b.N)
	for _, backend := range backends {
		b.ReportMetric(n/wall[backend], backend+"_events/s")
		b.ReportMetric(n/cpu[backend], backend+"_events/s/core")
		fmt.Printf("q5_%s_events_per_sec_per_core=%.0f\n", backend, n/cpu[backend])
	}
	if len(backends) == 2 {
		ratio := cpu[stream.StateBackendHeap] / cpu[stream.StateBackendPebble]
		b.ReportMetric(ratio, "pebble_vs_heap")
		fmt.Printf("q5_pebble_vs_heap=%.3f\n", ratio)
	}
}

// runQ5 runs q5 once and returns its wall and CPU seconds.
func runQ5(b *testing.B, events int64, backend string) (wall, cpu float64) {
	reg := builtin.Registry()
	g, err := jobspec.Load(filepath.Join("..", "..", "examples", "nexmark", "q5.yaml"), reg)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range g.Vertices {
		v.Parallelism = 1
		if v.Type == nexmark.TypeBid {
			v.Config, _ = json.Marshal(nexmark.Config{Events: events, Seed: nexmark.BaselineSeed, EventsPerSecond: 100_000})
		}
	}
	g.Parallelism = 1
	if err := stream.Plan(g, reg); err != nil {
		b.Fatal(err)
	}
	specs, err := dataflowtest.TaskSpecs(g)
	if err != nil {
		b.Fatal(err)
	}
	x := dataflow.NewExchange(dataflow.DefaultExchangeConfig("local"))
	defer x.Close()
	dir := b.TempDir()
	tasks := make([]*dataflow.Task, len(specs))
	for i, s := range specs {
		s.StateBackend, s.LocalStateDir = backend, filepath.Join(dir, strconv.Itoa(i))
		if tasks[i], err = dataflow.NewTask(s, reg, x, nil); err != nil {
			b.Fatal(err)
		}
	}
	cpu0, start := cpuSeconds(), time.Now()
	eg, ctx := errgroup.WithContext(b.Context())
	for _, t := range tasks {
		eg.Go(func() error { return t.Run(ctx) })
	}
	if err := eg.Wait(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Seconds(), cpuSeconds() - cpu0
}

// cpuSeconds is the user and system CPU time of this process.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
