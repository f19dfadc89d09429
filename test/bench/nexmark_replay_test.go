package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/stream"
)

// Replay mode: the events are generated first, untimed, into the columnar
// batches the sources would emit; then each query runs in this process
// (the same task runtime, one task per vertex and subtask, no
// checkpoints) from those batches. Its events/s per CPU-second is the
// engine's cost without the generator's; the cluster figure includes both.

// processCPU is this process's user+system CPU time in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// runInProcess runs a planned graph on the task runtime in this process
// and measures it (no checkpoints: the in-process runner has no
// coordinator).
func runInProcess(tb testing.TB, g *stream.JobGraph) nexmarkRun {
	tb.Helper()
	return runGraphWith(tb, g, benchRegistry())
}

func runGraphWith(tb testing.TB, g *stream.JobGraph, reg *stream.Registry) nexmarkRun {
	tb.Helper()
	cpu0, start := processCPU(), time.Now()
	if err := dataflowtest.RunGraph(context.Background(), g, reg); err != nil {
		tb.Fatalf("%s: %v", g.Name, err)
	}
	return nexmarkRun{wall: time.Since(start).Seconds(), cpu: processCPU() - cpu0}
}

// replayType is the test-only source that emits pre-generated batches.
const replayType = "nexmark_replay"

type replayConfig struct {
	Token string `json:"token"`
	Kind  int    `json:"kind"`
}

// replayStore holds the pre-generated batches by token and kind.
var replayStore = struct {
	sync.Mutex
	m map[string]map[nexmark.Kind][]*stream.Batch
}{m: map[string]map[nexmark.Kind][]*stream.Batch{}}

// replaySource is one subtask: it emits copies of batches subtask,
// subtask+p, ... (each subtask's batches are in event-time order).
type replaySource struct {
	batches []*stream.Batch
	next    int
	step    int
}

func (s *replaySource) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.next, s.step = octx.Subtask, max(1, octx.Parallelism)
	return nil
}

func (s *replaySource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.next >= len(s.batches) {
		return stream.PollEnd, nil
	}
	src := s.batches[s.next]
	s.next += s.step
	out.Collect(copyBatch(src))
	return stream.PollEmitted, nil
}

func (s *replaySource) Close() error { return nil }

// copyBatch copies the columns of src into a new batch (string bytes are
// shared: strings are immutable).
func copyBatch(src *stream.Batch) *stream.Batch {
	n := src.Len()
	b := stream.NewBatch(src.Schema, n)
	for c := range src.Cols {
		s, d := &src.Cols[c], &b.Cols[c]
		d.Ints = append(d.Ints[:0], s.Ints...)
		d.Floats = append(d.Floats[:0], s.Floats...)
		d.Strs = append(d.Strs[:0], s.Strs...)
		d.Bools = append(d.Bools[:0], s.Bools...)
	}
	b.SetLen(n)
	return b
}

func replayRegistry() *stream.Registry {
	r := benchRegistry()
	r.Register(stream.OperatorType{
		Name: replayType,
		Kind: stream.KindSource,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var c replayConfig
			if err := json.Unmarshal(p.Config, &c); err != nil {
				return nil, err
			}
			return nexmark.SchemaOf(nexmark.Kind(c.Kind)), nil
		},
		NewSource: func(config []byte) (stream.Source, error) {
			var c replayConfig
			if err := json.Unmarshal(config, &c); err != nil {
				return nil, err
			}
			replayStore.Lock()
			defer replayStore.Unlock()
			bs, ok := replayStore.m[c.Token][nexmark.Kind(c.Kind)]
			if !ok {
				return nil, fmt.Errorf("%s: no batches for %s", replayType, c.Token)
			}
			return &replaySource{batches: bs}, nil
		},
		Doc: "benchmark source: pre-generated Nexmark batches",
	})
	return r
}

// pregenerate builds the batches of kind k over events events, as a
// source at parallelism 1 emits them.
func pregenerate(tb testing.TB, cfg nexmark.Config, k nexmark.Kind) []*stream.Batch {
	tb.Helper()
	src := nexmark.NewSource(k, cfg)
	if err := src.Open(context.Background(), &stream.OperatorContext{Parallelism: 1}); err != nil {
		tb.Fatal(err)
	}
	c := &batchKeeper{}
	for {
		st, err := src.Poll(context.Background(), c)
		if err != nil {
			tb.Fatal(err)
		}
		if st == stream.PollEnd {
			return c.batches
		}
	}
}

type batchKeeper struct{ batches []*stream.Batch }

func (c *batchKeeper) Collect(b *stream.Batch) { c.batches = append(c.batches, b) }
func (c *batchKeeper) EmitWatermark(int64)     {}

// replayQuery pre-generates the events of query q, runs it from memory at
// parallelism 2 and returns its events/s per CPU-second and whether its
// output matched the oracle.
func replayQuery(tb testing.TB, q string, s nexmarkSettings) (float64, bool) {
	tb.Helper()
	cfg := nexmark.Config{Events: s.replayEvents, EventsPerSecond: s.rate, Seed: nexmark.BaselineSeed, Generator: s.generator}
	token := fmt.Sprintf("%s-%d", q, time.Now().UnixNano())
	reg := replayRegistry()
	spec, err := nexmark.QuerySpec(q)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := jobspec.Parse(q+".yaml", spec, reg)
	if err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(tb.TempDir(), "digest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	kinds := map[string]nexmark.Kind{nexmark.TypePerson: nexmark.KindPerson, nexmark.TypeAuction: nexmark.KindAuction, nexmark.TypeBid: nexmark.KindBid}
	store := map[nexmark.Kind][]*stream.Batch{}
	for _, v := range g.Vertices {
		v.Parallelism = 2
		switch {
		case strings.HasPrefix(v.Type, "nexmark_"):
			k := kinds[v.Type]
			if store[k] == nil {
				store[k] = pregenerate(tb, cfg, k)
			}
			v.Type = replayType
			v.Config, _ = json.Marshal(replayConfig{Token: token, Kind: int(k)})
		case v.Type == "discard":
			v.Type = nexmark.TypeDigest
			v.Config, _ = json.Marshal(nexmark.DigestConfigFor(q, dir))
		}
	}
	g.Parallelism = 2
	replayStore.Lock()
	replayStore.m[token] = store
	replayStore.Unlock()
	defer func() {
		replayStore.Lock()
		delete(replayStore.m, token)
		replayStore.Unlock()
	}()
	if err := stream.Plan(g, reg); err != nil {
		tb.Fatal(err)
	}
	r := runGraphWith(tb, g, reg)
	got, _, err := nexmark.ReadDigests(dir)
	if err != nil {
		tb.Fatal(err)
	}
	want, err := nexmark.Oracle(q, cfg, cfg.Events)
	if err != nil {
		tb.Fatal(err)
	}
	if got != want {
		tb.Errorf("%s replay: output %v, oracle %v", q, got, want)
	}
	return float64(cfg.Events) / r.cpu, got == want
}
