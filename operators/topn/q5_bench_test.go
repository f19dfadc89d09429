package topn_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
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

// BenchmarkQ5 runs Nexmark q5 (connectors/nexmark/queries/q5.yaml: sliding-window
// bid counts, then window_max keyed by window_end) in this process on the
// task runtime, every vertex at parallelism 1, over WEIR_Q5_EVENTS events
// (default 10 million, as test/bench) at test/bench's event-time rate (100,000 events/s),
// on the heap and on the Pebble state backend. It reports events/s,
// events/s/core (events ÷ this process's CPU seconds) per backend and
// pebble_vs_heap (per core). The backend applies to every operator of the
// query that keeps keyed state in the runtime.
//
// Checkpoints are taken as in a job: every q5CheckpointEvents source
// events (10 s of event time, the interval of test/bench's Nexmark jobs)
// and at the end, so that both backends take the same ones. Their state
// is read as an upload would read it (the chunks, and every new file once)
// but not stored; the lines give their count and bytes.
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
	cks := map[string]*q5Checkpoints{}
	for b.Loop() {
		for _, backend := range backends {
			ck := &q5Checkpoints{seen: map[string]bool{}}
			w, c := runQ5(b, events, backend, ck)
			wall[backend] += w
			cpu[backend] += c
			cks[backend] = ck
		}
	}
	n := float64(events) * float64(b.N)
	for _, backend := range backends {
		b.ReportMetric(n/wall[backend], backend+"_events/s")
		b.ReportMetric(n/cpu[backend], backend+"_events/s/core")
		fmt.Printf("q5_%s_events_per_sec_per_core=%.0f\n", backend, n/cpu[backend])
		ck := cks[backend]
		fmt.Printf("q5_%s_checkpoints=%d\nq5_%s_checkpoint_bytes=%d\n", backend, ck.completed.Load(), backend, ck.bytes.Load())
	}
	if len(backends) == 2 {
		ratio := cpu[stream.StateBackendHeap] / cpu[stream.StateBackendPebble]
		b.ReportMetric(ratio, "pebble_vs_heap")
		fmt.Printf("q5_pebble_vs_heap=%.3f\n", ratio)
	}
}

// q5CheckpointEvents is how many source events apart runQ5 checkpoints.
const q5CheckpointEvents = 1_000_000

// runQ5 runs q5 once, checkpointing into ck, and returns its wall and CPU
// seconds.
func runQ5(b *testing.B, events int64, backend string, ck *q5Checkpoints) (wall, cpu float64) {
	reg := builtin.Registry()
	spec, err := nexmark.QuerySpec("q5")
	if err != nil {
		b.Fatal(err)
	}
	g, err := jobspec.Parse("q5.yaml", spec, reg)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range g.Vertices {
		v.Parallelism = 1
		if v.Type == nexmark.TypeBid {
			v.Config, _ = json.Marshal(nexmark.Config{Events: events, Seed: nexmark.BaselineSeed, EventsPerSecond: 100_000,
				// The pooled generator: this benchmark compares state
				// backends, so generation should cost little beside them.
				Generator: nexmark.GeneratorFast})
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
		s.Checkpointing, s.Hooks = true, ck
		if tasks[i], err = dataflow.NewTask(s, reg, x, nil); err != nil {
			b.Fatal(err)
		}
	}
	ck.tasks, ck.src = tasks, tasks[0] // the source task comes first
	ck.ended = make(chan struct{})
	cpu0, start := cpuSeconds(), time.Now()
	eg, ctx := errgroup.WithContext(b.Context())
	for _, t := range tasks {
		eg.Go(func() error { return t.Run(ctx) })
	}
	eg.Go(func() error { return ck.trigger(ctx) })
	if err := eg.Wait(); err != nil {
		b.Fatal(err)
	}
	if err := ck.err(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Seconds(), cpuSeconds() - cpu0
}

// q5Checkpoints triggers runQ5's checkpoints and takes their snapshots
// (dataflow.CheckpointHooks).
type q5Checkpoints struct {
	tasks []*dataflow.Task
	src   *dataflow.Task
	ended chan struct{} // closed when the source's input ends

	mu        sync.Mutex
	acks      map[int64]int
	seen      map[string]bool // shared files read
	failure   error
	completed atomic.Int64
	bytes     atomic.Int64
}

// trigger checkpoints every q5CheckpointEvents source events, and once
// more when the source's input has ended (its task waits for that one).
func (c *q5Checkpoints) trigger(ctx context.Context) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	id, next := int64(0), int64(q5CheckpointEvents)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.ended:
			id++
			return c.src.TriggerCheckpoint(id, time.Now().UnixMilli())
		case <-tick.C:
			if c.src.Metrics().RecordsIn.Load() >= next {
				id++
				next += q5CheckpointEvents
				if err := c.src.TriggerCheckpoint(id, time.Now().UnixMilli()); err != nil {
					return err
				}
			}
		}
	}
}

func (c *q5Checkpoints) SourceInputEnded() { close(c.ended) }

func (c *q5Checkpoints) SnapshotTaken(id, _ int64, snaps map[string]*stream.OperatorSnapshot, _ dataflow.SnapshotStats) {
	go func() {
		var n int64
		var err error
		for _, s := range snaps {
			c.mu.Lock() // seen is shared by the tasks' snapshots
			m, rerr := dataflowtest.ReadForUpload(s, c.seen)
			c.mu.Unlock()
			n, err = n+m, cmp.Or(err, rerr)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.failure = cmp.Or(c.failure, err)
			return
		}
		c.bytes.Add(n)
		if c.acks == nil {
			c.acks = map[int64]int{}
		}
		if c.acks[id]++; c.acks[id] == len(c.tasks) {
			delete(c.acks, id)
			c.completed.Add(1)
			for _, t := range c.tasks {
				t.NotifyCheckpointComplete(id)
			}
		}
	}()
}

func (c *q5Checkpoints) SnapshotFailed(id int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failure = cmp.Or(c.failure, fmt.Errorf("checkpoint %d: %w", id, err))
}

func (c *q5Checkpoints) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure
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
