package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
)

// nexmarkEventsPerSecond is the event-time rate of the generated streams:
// 10 million events then span 100 s of event time, enough windows for q5
// and q7 to do their real work.
const nexmarkEventsPerSecond = 100_000

// Flink 1.13's published per-core throughput (nexmark/nexmark README,
// 8-core workers), events/s/core.
var flinkPerCore = map[string]float64{"q0": 155e3, "q1": 158e3, "q2": 175e3, "q3": 152e3, "q4": 34e3,
	"q5": 22.1e3, "q7": 12.3e3, "q8": 146e3}

// cpuSeconds is the user+system CPU time of process pid.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

func clusterCPU(c *clustertest.Cluster) float64 {
	total := cpuSeconds(c.JM.Pid())
	for _, tm := range c.TMs {
		total += cpuSeconds(tm.Pid())
	}
	return total
}

// nexmarkGraph loads examples/nexmark/<q>.yaml with events events at
// parallelism par and exactly-once checkpoints every 10 s.
func nexmarkGraph(tb testing.TB, q string, events int64, par int, storage string) *stream.JobGraph {
	reg := builtin.Registry()
	g, err := jobspec.Load(filepath.Join("..", "..", "examples", "nexmark", q+".yaml"), reg)
	if err != nil {
		tb.Fatal(err)
	}
	for _, v := range g.Vertices {
		v.Parallelism = par
		if strings.HasPrefix(v.Type, "nexmark_") {
			var cfg map[string]any
			if err := json.Unmarshal(v.Config, &cfg); err != nil {
				tb.Fatal(err)
			}
			cfg["events"], cfg["eventsPerSecond"], cfg["seed"] = events, nexmarkEventsPerSecond, nexmark.BaselineSeed
			v.Config, _ = json.Marshal(cfg)
		}
	}
	g.Parallelism = par
	g.Checkpoint = stream.CheckpointConfig{Interval: 10 * time.Second, Mode: stream.ExactlyOnce, Storage: storage}
	if err := stream.Plan(g, reg); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	return g
}

type nexmarkResult struct {
	query             string
	eventsPerSec      float64
	eventsPerCoreSec  float64
	baselinePerSec    float64
	perCoreVsBaseline float64
}

// BenchmarkNexmark runs q0-q5, q7 and q8 for WEIR_NEXMARK_EVENTS events
// (default 10 million) on a local cluster (one taskmanager with two slots,
// parallelism 2, exactly-once checkpoints every 10 s), and compares q1 and
// q5 with single-goroutine programs doing the same work. It writes
// docs/benchmarks.md.
func BenchmarkNexmark(b *testing.B) {
	events := envInt("WEIR_NEXMARK_EVENTS", 10_000_000)
	c := clustertest.Start(b, clustertest.Options{TaskManagers: 1, Slots: 2, LogLevel: "warn"})
	storage := "file://" + filepath.Join(b.TempDir(), "ckpt")
	var results []nexmarkResult
	for _, q := range []string{"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8"} {
		g := nexmarkGraph(b, q, events, 2, storage)
		cpu0 := clusterCPU(c)
		id := c.Submit(g)
		job := c.WaitJob(id, 30*time.Minute)
		if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
			b.Fatalf("%s: %v %s", q, job.GetJob().GetState(), job.GetJob().GetError())
		}
		cpu := clusterCPU(c) - cpu0
		el := time.Duration(job.GetJob().GetEndTimeMs()-job.GetJob().GetStartTimeMs()) * time.Millisecond
		r := nexmarkResult{query: q, eventsPerSec: float64(events) / el.Seconds(), eventsPerCoreSec: float64(events) / cpu}
		switch q {
		case "q1":
			runtime.GC()
			_, bel := nexmark.BaselineQ1(events)
			r.baselinePerSec = float64(events) / bel.Seconds()
		case "q5":
			runtime.GC()
			start := time.Now()
			nexmark.RunQ5(nexmark.Config{Seed: nexmark.BaselineSeed, EventsPerSecond: nexmarkEventsPerSecond}, events, nil)
			r.baselinePerSec = float64(events) / time.Since(start).Seconds()
		}
		if r.baselinePerSec > 0 {
			r.perCoreVsBaseline = r.eventsPerCoreSec / r.baselinePerSec
		}
		fmt.Printf("nexmark_%s_events_per_sec=%.0f\n", q, r.eventsPerSec)
		fmt.Printf("nexmark_%s_events_per_core_sec=%.0f\n", q, r.eventsPerCoreSec)
		if r.baselinePerSec > 0 {
			fmt.Printf("nexmark_%s_baseline_events_per_sec=%.0f\n", q, r.baselinePerSec)
			fmt.Printf("nexmark_%s_per_core_vs_baseline=%.2f\n", q, r.perCoreVsBaseline)
		}
		results = append(results, r)
	}
	if err := writeBenchmarksDoc(events, results); err != nil {
		b.Fatal(err)
	}
}

func writeBenchmarksDoc(events int64, results []nexmarkResult) error {
	host, _ := os.Hostname()
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Benchmarks\n\nWritten by `make bench-nexmark` on %s.\n\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&sb, "Machine: %s, %d cores (%s), %s.\n\n", host, runtime.NumCPU(), cpu, runtime.Version())
	fmt.Fprintf(&sb, "Nexmark, %d events per query, event-time rate %d events/s, on a local cluster: one jobmanager and one "+
		"taskmanager process with two slots, parallelism 2, exactly-once checkpoints every 10 s to local files. "+
		"events/s is events ÷ the job's wall time; events/s/core is events ÷ the CPU seconds of all Weir processes. "+
		"The baselines are single-goroutine Go programs doing the same work (plain structs, a Go map, no channels, "+
		"no serialization); their ratio is Weir's events/s/core ÷ the baseline's events/s.\n\n", events, nexmarkEventsPerSecond)
	sb.WriteString("| query | Weir events/s | Weir events/s/core | baseline events/s (1 core) | Weir per core ÷ baseline | Flink 1.13 events/s/core |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		base, ratio := "", ""
		if r.baselinePerSec > 0 {
			base, ratio = fmt.Sprintf("%.0f", r.baselinePerSec), fmt.Sprintf("%.2f", r.perCoreVsBaseline)
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %.0f | %s | %s | %.0f |\n", r.query, r.eventsPerSec, r.eventsPerCoreSec, base, ratio, flinkPerCore[r.query])
	}
	sb.WriteString("\nFlink's figures are from the nexmark/nexmark README (Flink 1.13, 8-core workers), quoted for scale: " +
		"different machines, a different generator implementation and, for q4, a different formulation " +
		"(see examples/nexmark/README.md), so compare orders of magnitude, not digits.\n")
	if err := os.MkdirAll(filepath.Join("..", "..", "docs"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join("..", "..", "docs", "benchmarks.md"), []byte(sb.String()), 0o644)
}
