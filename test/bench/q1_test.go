// Package bench holds Weir's end-to-end benchmarks. Each prints name=value
// lines (run them with `make bench`); speed is never asserted.
package bench

import (
	"bytes"
	"context"
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
	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
)

const q1Seed = 42

// q1Graph loads examples/nexmark-q1.yaml (datagen bids → map price_eur →
// filter price_eur >= 100 → discard) with rows bids, parallelism par.
func q1Graph(tb testing.TB, rows int64, par int) *stream.JobGraph {
	tb.Helper()
	reg := builtin.Registry()
	g, err := jobspec.Load(filepath.Join("..", "..", "examples", "nexmark-q1.yaml"), reg)
	if err != nil {
		tb.Fatal(err)
	}
	src := g.Vertices[0]
	var cfg map[string]any
	if err := json.Unmarshal(src.Config, &cfg); err != nil {
		tb.Fatal(err)
	}
	cfg["rows"], cfg["seed"] = rows, q1Seed
	src.Config, _ = json.Marshal(cfg)
	g.Parallelism = par
	for _, v := range g.Vertices {
		v.Parallelism = par
	}
	if err := stream.Plan(g, reg); err != nil {
		tb.Fatal(err)
	}
	return g
}

// baselineQ1 is the same work as a hand-written single-goroutine loop:
// generate each bid, convert its price, keep those at or above 100 EUR.
// It returns events/s and the number kept.
func baselineQ1(events int64) (float64, int64) {
	gen := connectors.NewBidGenerator(q1Seed)
	start := time.Now()
	var kept int64
	var sum float64
	for seq := int64(0); seq < events; seq++ {
		b := gen.At(seq)
		eur := float64(b.Price) * 0.908
		if eur >= 100.0 {
			kept++
			sum += eur + float64(len(b.Channel)+len(b.URL)+len(b.Extra)) + float64(b.Auction^b.Bidder^b.DateTime)
		}
	}
	el := time.Since(start)
	if sum == 0 {
		panic("baseline: nothing kept")
	}
	return float64(events) / el.Seconds(), kept
}

// pipelineQ1 runs the q1 graph as one chained task in this process (the
// taskmanager's task runtime, without the process around it) and returns
// events/s and the number of rows that reached the sink.
func pipelineQ1(tb testing.TB, events int64) (float64, int64) {
	g := q1Graph(tb, events, 1)
	spec := &dataflow.TaskSpec{JobID: "bench", Attempt: 1, VertexID: 0, Subtask: 0, Parallelism: 1,
		MaxParallelism: g.MaxParallelism, TaskName: "q1 (1/1)"}
	for _, v := range g.Vertices {
		co := dataflow.ChainedOperator{Vertex: v}
		for _, e := range g.Inputs(v.ID) {
			co.InputSchemas = append(co.InputSchemas, g.Vertices[e.From].OutSchema)
			co.InputKeys = append(co.InputKeys, nil)
		}
		spec.Chain = append(spec.Chain, co)
	}
	x := dataflow.NewExchange(dataflow.DefaultExchangeConfig("local"))
	defer x.Close()
	task, err := dataflow.NewTask(spec, builtin.Registry(), x, nil)
	if err != nil {
		tb.Fatal(err)
	}
	sink := g.Vertices[len(g.Vertices)-1].UID
	connectors.ResetDiscardedRows(sink)
	start := time.Now()
	if err := task.Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
	el := time.Since(start)
	return float64(events) / el.Seconds(), connectors.DiscardedRows(sink)
}

// BenchmarkQ1PipelineVsBaseline compares the engine running Nexmark-q1-like
// work in one task with a tight single-goroutine loop doing the same work.
// Both run three times, alternating; the best of each is compared.
func BenchmarkQ1PipelineVsBaseline(b *testing.B) {
	events := envInt("WEIR_BENCH_Q1_EVENTS", 20_000_000)
	var base, eng float64
	for i := 0; i < b.N; i++ {
		for round := 0; round < 3; round++ {
			runtime.GC()
			bs, bk := baselineQ1(events)
			runtime.GC()
			es, ek := pipelineQ1(b, events)
			if bk != ek {
				b.Fatalf("pipeline kept %d rows, baseline %d: they do not do the same work", ek, bk)
			}
			base, eng = max(base, bs), max(eng, es)
		}
	}
	fmt.Printf("q1_events=%d\n", events)
	fmt.Printf("q1_baseline_events_per_sec=%.0f\n", base)
	fmt.Printf("q1_pipeline_events_per_sec=%.0f\n", eng)
	fmt.Printf("q1_pipeline_vs_baseline=%.2f\n", eng/base)
}

// BenchmarkQ1Parallelism2TwoTaskManagers runs the q1 job at parallelism 2
// on a real cluster of two taskmanager processes with one slot each, with a
// rebalance between the source and the map so that half of the bids cross
// the gRPC exchange. It reports events/s from the job's start and end times.
// The same job runs on a second, identical cluster with mutual TLS on every
// connection, the rounds of the two interleaved so that both see the same
// machine; tls_throughput_ratio is the best TLS round over the best
// plaintext one. Beside it go two diagnostics: the size of the source's
// batches in the exchange's encoding per event, and the least CPU time the
// taskmanagers spent per event in a round of each cluster (on a busy
// machine the throughput of a round also depends on what other processes
// take; the CPU time less so).
func BenchmarkQ1Parallelism2TwoTaskManagers(b *testing.B) {
	events := envInt("WEIR_BENCH_Q1_CLUSTER_EVENTS", 40_000_000)
	plain := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 1})
	secured := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 1, TLS: true})
	// cpu is the least CPU time the taskmanagers spent per event in a
	// round, by cluster: with TLS, what the encryption costs, apart from
	// what the other processes of a busy machine take from the rounds.
	cpu := map[*clustertest.Cluster]float64{}
	run := func(c *clustertest.Cluster) float64 {
		g := q1Graph(b, events, 2)
		g.Edges[0].Partitioning = stream.Rebalance
		cpu0 := taskManagersCPU(c)
		defer func() {
			if cpu0 < 0 {
				return
			}
			ns := float64(taskManagersCPU(c)-cpu0) / float64(events)
			if old, ok := cpu[c]; !ok || ns < old {
				cpu[c] = ns
			}
		}()
		id := c.Submit(g)
		job := c.WaitJob(id, 10*time.Minute)
		if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
			b.Fatalf("job %s: %v %s", id, job.GetJob().GetState(), job.GetJob().GetError())
		}
		tms := map[string]bool{}
		for _, t := range job.GetTasks() {
			tms[t.GetTaskmanagerId()] = true
		}
		if len(tms) != 2 {
			b.Fatalf("job ran on %d taskmanagers, want 2", len(tms))
		}
		el := time.Duration(job.GetJob().GetEndTimeMs()-job.GetJob().GetStartTimeMs()) * time.Millisecond
		return float64(events) / el.Seconds()
	}
	best, bestTLS := 0.0, 0.0
	for i := 0; i < b.N; i++ {
		for round := 0; round < 2; round++ {
			best = max(best, run(plain))
			bestTLS = max(bestTLS, run(secured))
		}
	}
	fmt.Printf("q1_p2_two_taskmanagers_events=%d\n", events)
	alone, channel := q1BatchBytesPerEvent(b)
	fmt.Printf("q1_exchange_batch_bytes_per_event=%.1f\n", alone)
	fmt.Printf("q1_exchange_channel_bytes_per_event=%.1f\n", channel)
	fmt.Printf("q1_p2_two_taskmanagers_events_per_sec=%.0f\n", best)
	fmt.Printf("q1_p2_two_taskmanagers_tls_events_per_sec=%.0f\n", bestTLS)
	if cpu[plain] > 0 && cpu[secured] > 0 {
		fmt.Printf("q1_p2_two_taskmanagers_cpu_ns_per_event=%.0f\n", cpu[plain])
		fmt.Printf("q1_p2_two_taskmanagers_tls_cpu_ns_per_event=%.0f\n", cpu[secured])
	}
	fmt.Printf("tls_throughput_ratio=%.2f\n", bestTLS/best)
}

// taskManagersCPU is the CPU time (user and system, ns) the cluster's
// taskmanager processes used so far, from /proc; -1 where that cannot be
// read.
func taskManagersCPU(c *clustertest.Cluster) int64 {
	var total int64
	for _, p := range c.TMs {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
		if err != nil {
			return -1
		}
		// The fields after the command (in parentheses, which may hold
		// spaces): state is field 3, utime and stime fields 14 and 15,
		// in clock ticks (USER_HZ, 100 on Linux).
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(f) < 13 {
			return -1
		}
		for _, v := range f[11:13] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			total += n * int64(10*time.Millisecond)
		}
	}
	return total
}

// q1BatchBytesPerEvent is the size of the network encoding (batchcodec,
// what crosses the exchange in a frame, before gRPC's and TLS's framing)
// of the q1 source's batches, per event: the source subtask 0 of 2, as in
// BenchmarkQ1Parallelism2TwoTaskManagers, over its first 64 batches, each
// encoded on its own (alone) and in turn with one channel dictionary of
// the default size (channel), as one channel sends them.
func q1BatchBytesPerEvent(tb testing.TB) (alone, channel float64) {
	g := q1Graph(tb, 1<<30, 2)
	src := g.Vertices[0]
	var cfg connectors.DatagenConfig
	if err := json.Unmarshal(src.Config, &cfg); err != nil {
		tb.Fatal(err)
	}
	d, err := connectors.NewDatagen(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := d.Open(context.Background(), &stream.OperatorContext{Subtask: 0, Parallelism: 2, OutputSchema: src.OutSchema}); err != nil {
		tb.Fatal(err)
	}
	defer d.Close()
	c := &encodedSize{enc: batchcodec.NewEncoder(dataflow.DefaultDictionaryBytes)}
	for range 64 {
		if _, err := d.Poll(context.Background(), c); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(c.bytes) / float64(c.rows), float64(c.channelBytes) / float64(c.rows)
}

// encodedSize is a collector that adds up the encoded size of the
// batches: each on its own, and with the channel dictionary enc.
type encodedSize struct {
	buf                       []byte
	enc                       *batchcodec.Encoder
	bytes, channelBytes, rows int64
}

func (c *encodedSize) Collect(b *stream.Batch) {
	c.buf = batchcodec.Append(c.buf[:0], b)
	c.bytes += int64(len(c.buf))
	c.buf = c.enc.AppendBatches(c.buf[:0], []*stream.Batch{b}, true)
	c.channelBytes += int64(len(c.buf))
	c.rows += int64(b.Len())
	b.Release()
}

func (c *encodedSize) EmitWatermark(int64) {}

func envInt(name string, def int64) int64 {
	if v := os.Getenv(name); v != "" {
		var n int64
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			return n
		}
	}
	return def
}
