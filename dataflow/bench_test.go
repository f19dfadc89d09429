package dataflow

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

var benchSchema = stream.MustSchema(
	stream.Field{Name: "auction", Type: stream.TypeInt64},
	stream.Field{Name: "price", Type: stream.TypeFloat64},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
)

// benchSource emits Batches batches of 1024 rows, filled column-wise.
type benchSource struct {
	batches int
	n       int64
}

func (s *benchSource) Open(context.Context, *stream.OperatorContext) error { return nil }
func (s *benchSource) Close() error                                        { return nil }
func (s *benchSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.batches == 0 {
		return stream.PollEnd, nil
	}
	s.batches--
	const rows = stream.DefaultBatchSize
	b := stream.NewBatch(benchSchema, rows)
	a, p, ts := b.Cols[0].Ints[:rows], b.Cols[1].Floats[:rows], b.Cols[2].Ints[:rows]
	for i := range a {
		v := s.n + int64(i)
		a[i] = v % 1000
		p[i] = float64(v)
		ts[i] = v
	}
	b.Cols[0].Ints, b.Cols[1].Floats, b.Cols[2].Ints = a, p, ts
	b.SetLen(rows)
	s.n += rows
	out.Collect(b)
	return stream.PollEmitted, nil
}

type passThrough struct{ stream.BaseOperator }

func (passThrough) Open(context.Context, *stream.OperatorContext) error { return nil }
func (passThrough) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	out.Collect(b)
	return nil
}

func benchRegistry(batches int) *stream.Registry {
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{
		Name: "bench", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return benchSchema, nil },
		NewSource: func([]byte) (stream.Source, error) { return &benchSource{batches: batches}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "pass", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func([]byte) (stream.Operator, error) { return passThrough{}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "discard", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return discardSink{}, nil },
	})
	return reg
}

// BenchmarkLocalChain: source of 1024-row batches → pass-through → discard,
// chained in one task. One iteration is one batch.
func BenchmarkLocalChain(b *testing.B) {
	reg := benchRegistry(b.N)
	bld := stream.NewBuilder("bench").Parallelism(1)
	bld.Source("src", "bench", nil).Then("pass", "pass", nil).Then("sink", "discard", nil)
	g := plan(b, bld, reg)
	x := localExchange(b, "local")
	specs := buildSpecs(b, g, [][]int{{0, 1, 2}}, func(int, int) string { return "local" })
	task, err := NewTask(specs[0], reg, x, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := task.Run(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(task.Metrics().RecordsIn.Load())/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkNetworkExchange: a source task on one exchange sends 1024-row
// batches to a discarding sink task on another, over gRPC on loopback. One
// iteration is one batch.
func BenchmarkNetworkExchange(b *testing.B) {
	for _, tc := range []struct {
		name    string
		credits int
	}{{"credits=4", 4}, {"credits=16", 16}} {
		b.Run(tc.name, func(b *testing.B) {
			nodes := []*testNode{startNode(b, tc.credits), startNode(b, tc.credits)}
			reg := benchRegistry(b.N)
			bld := stream.NewBuilder("bench").Parallelism(1)
			bld.Source("src", "bench", nil).Rebalance().Then("sink", "discard", nil)
			g := plan(b, bld, reg)
			specs := buildSpecs(b, g, [][]int{{0}, {1}}, func(v, _ int) string { return nodes[v].addr })
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			tasks, errs := runTasks(b.Context(), b, specs, reg, func(s *TaskSpec) *Exchange { return nodes[s.VertexID].x })
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(tasks[1].Metrics().RecordsIn.Load())/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkLocalHashExchange: 1024-row batches hash-partitioned from one
// source task to two sink tasks through in-memory channels.
func BenchmarkLocalHashExchange(b *testing.B) {
	reg := benchRegistry(b.N)
	bld := stream.NewBuilder("bench").Parallelism(1)
	bld.Source("src", "bench", nil).KeyBy("auction").Then("sink", "discard", nil).SetParallelism(2)
	g := plan(b, bld, reg)
	x := localExchange(b, "local")
	specs := buildSpecs(b, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })
	b.ReportAllocs()
	b.ResetTimer()
	tasks, errs := runTasks(b.Context(), b, specs, reg, func(*TaskSpec) *Exchange { return x })
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tasks[0].Metrics().RecordsOut.Load())/b.Elapsed().Seconds(), "rows/s")
}

// ckBenchSource is benchSource with its position as checkpointed state.
type ckBenchSource struct{ benchSource }

func (s *ckBenchSource) SnapshotState(c *stream.SnapshotContext) error {
	c.AddListState("pos", binary.LittleEndian.AppendUint64(nil, uint64(s.n)))
	return nil
}

func (s *ckBenchSource) RestoreState(*stream.RestoreContext) error { return nil }

// BenchmarkLocalChainWithCheckpoints is BenchmarkLocalChain with
// checkpointing on: a checkpoint of the source's position is triggered about
// every 1000 batches and completed at once, and the task ends with its final
// checkpoint. One iteration is one batch.
func BenchmarkLocalChainWithCheckpoints(b *testing.B) {
	reg := benchRegistry(b.N)
	reg.Register(stream.OperatorType{
		Name: "ckbench", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return benchSchema, nil },
		NewSource: func([]byte) (stream.Source, error) { return &ckBenchSource{benchSource{batches: b.N}}, nil },
	})
	bld := stream.NewBuilder("bench").Parallelism(1)
	bld.Source("src", "ckbench", nil).Then("pass", "pass", nil).Then("sink", "discard", nil)
	g := plan(b, bld, reg)
	x := localExchange(b, "local")
	spec := buildSpecs(b, g, [][]int{{0, 1, 2}}, func(int, int) string { return "local" })[0]
	hooks := newFakeHooks()
	spec.Checkpointing, spec.Hooks = true, hooks
	task, err := NewTask(spec, reg, x, nil)
	if err != nil {
		b.Fatal(err)
	}
	var taken atomic.Int64
	hooks.onTaken = func(id int64) {
		taken.Add(1)
		task.NotifyCheckpointComplete(id)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the checkpoint coordinator
		const every = 1000 * stream.DefaultBatchSize
		total := int64(b.N) * stream.DefaultBatchSize
		next, id := int64(every), int64(1)
		for {
			select {
			case <-done:
				return
			default:
			}
			if in := task.Metrics().RecordsIn.Load(); in >= next || in == total {
				if task.TriggerCheckpoint(id, 0) == nil {
					id++
				}
				next = in + every
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	b.ReportAllocs()
	b.ResetTimer()
	err = task.Run(b.Context())
	b.StopTimer()
	close(done)
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(task.Metrics().RecordsIn.Load())/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(taken.Load()), "checkpoints")
}

// processCPU is the CPU time (user and system) the process used so far, in
// nanoseconds: on a busy machine a steadier measure of work than wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// bidBenchSchema is the shape of Nexmark bids: three integer columns, three
// string columns whose values come from small pools, and a timestamp.
var bidBenchSchema = stream.MustSchema(
	stream.Field{Name: "auction", Type: stream.TypeInt64},
	stream.Field{Name: "bidder", Type: stream.TypeInt64},
	stream.Field{Name: "price", Type: stream.TypeInt64},
	stream.Field{Name: "channel", Type: stream.TypeString},
	stream.Field{Name: "url", Type: stream.TypeString},
	stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
	stream.Field{Name: "extra", Type: stream.TypeString},
)

// bidPools are the string values of bidBenchSource: 8 channels, 1024 URLs
// of about 60 bytes, 256 extras of 8 to 24 bytes.
var bidPools = func() (p struct{ channels, urls, extras []string }) {
	p.channels = []string{"Google", "Facebook", "Baidu", "Apple", "Bing", "DuckDuckGo", "Twitter", "Reddit"}
	for i := range 1024 {
		p.urls = append(p.urls, fmt.Sprintf("https://www.nexmark.com/%s/item.htm?query=1&channel_id=%d", strings.Repeat("abcdefgh"[i%8:i%8+1], 5+i%4), i*7919%10000))
	}
	for i := range 256 {
		p.extras = append(p.extras, strings.Repeat("xyz"[i%3:i%3+1], 8+i%17))
	}
	return p
}()

// bidBenchSource emits batches batches of 1024 bid-like rows.
type bidBenchSource struct {
	batches int
	n       uint64
}

func (s *bidBenchSource) Open(context.Context, *stream.OperatorContext) error { return nil }
func (s *bidBenchSource) Close() error                                        { return nil }
func (s *bidBenchSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.batches == 0 {
		return stream.PollEnd, nil
	}
	s.batches--
	const rows = stream.DefaultBatchSize
	b := stream.NewBatch(bidBenchSchema, rows)
	c := b.Cols
	c[0].Ints, c[1].Ints, c[2].Ints, c[5].Ints = c[0].Ints[:rows], c[1].Ints[:rows], c[2].Ints[:rows], c[5].Ints[:rows]
	c[3].Strs, c[4].Strs, c[6].Strs = c[3].Strs[:rows], c[4].Strs[:rows], c[6].Strs[:rows]
	for i := range rows {
		h := stream.Mix64(s.n)
		c[0].Ints[i] = 1000 + int64(h%10000)
		c[1].Ints[i] = 2000 + int64(h>>16%100000)
		c[2].Ints[i] = 100 + int64(h>>32%10000000)
		c[3].Strs[i] = bidPools.channels[h>>8%8]
		c[4].Strs[i] = bidPools.urls[h>>20%1024]
		c[5].Ints[i] = 1767225600000 + int64(s.n)
		c[6].Strs[i] = bidPools.extras[h>>40%256]
		s.n++
	}
	b.SetLen(rows)
	out.Collect(b)
	return stream.PollEmitted, nil
}

// BenchmarkNetworkExchangeBids: a source task on one exchange sends
// 1024-row bid-like batches (the shape and string pools of the Nexmark
// bids test/bench's exchange benchmark sends; about 31 encoded bytes a row
// once the channel gathers them by 4096) to a discarding sink task on
// another, over gRPC on loopback. One iteration is
// one batch; cpu-ns/row is the CPU of both ends (and of the source's
// generation, about 15 ns a row) per row. Run it with a fixed count, such
// as -benchtime 20000x. Its heap is far smaller than a taskmanager's, so
// garbage collection weighs more here than there: check a change that
// trades allocation for CPU with test/bench's BenchmarkExchangeRemoteVsLocal.
func BenchmarkNetworkExchangeBids(b *testing.B) {
	nodes := []*testNode{startNode(b, 4), startNode(b, 4)}
	reg := benchRegistry(0)
	reg.Register(stream.OperatorType{
		Name: "bids", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return bidBenchSchema, nil },
		NewSource: func([]byte) (stream.Source, error) { return &bidBenchSource{batches: b.N}, nil },
	})
	bld := stream.NewBuilder("bench").Parallelism(1)
	bld.Source("src", "bids", nil).Rebalance().Then("sink", "discard", nil)
	g := plan(b, bld, reg)
	specs := buildSpecs(b, g, [][]int{{0}, {1}}, func(v, _ int) string { return nodes[v].addr })
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	tasks, errs := runTasks(b.Context(), b, specs, reg, func(s *TaskSpec) *Exchange { return nodes[s.VertexID].x })
	cpu := processCPU() - cpu0
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	rows := tasks[1].Metrics().RecordsIn.Load()
	if rows != int64(b.N)*stream.DefaultBatchSize {
		b.Fatalf("the sink received %d rows, want %d", rows, int64(b.N)*stream.DefaultBatchSize)
	}
	st := nodes[0].x.Stats()
	b.ReportMetric(float64(cpu)/float64(rows), "cpu-ns/row")
	b.ReportMetric(float64(st.SentBytes)/float64(rows), "bytes/row")
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	if b.N > 1 { // not the probing run of one iteration
		// The first line starts a line of its own: the benchmark name was
		// printed without its end.
		fmt.Printf("\nnetwork_exchange_bids_rows=%d\n", rows)
		fmt.Printf("network_exchange_bids_cpu_ns_per_row=%.0f\n", float64(cpu)/float64(rows))
		fmt.Printf("network_exchange_bids_bytes_per_row=%.1f\n", float64(st.SentBytes)/float64(rows))
	}
}
