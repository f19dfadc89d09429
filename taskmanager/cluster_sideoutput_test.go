package taskmanager_test

// An end-to-end test of side outputs on an in-process cluster: a real
// jobmanager and two taskmanagers. It lives in an external test package of
// taskmanager because it needs both servers; the packages themselves never
// import each other.

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/client"
	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager"
)

var (
	idSchema  = stream.MustSchema(stream.Field{Name: "id", Type: stream.TypeInt64}, stream.Field{Name: "k", Type: stream.TypeInt64})
	oddSchema = stream.MustSchema(stream.Field{Name: "odd_id", Type: stream.TypeInt64})
)

// idsSource: subtask s of p emits ids s, s+p, s+2p, ... below rows, with
// k = id % 7. Its position is operator state, so a restored source goes on
// where the checkpoint left it.
type idsSource struct {
	rows, next, step int64
}

func (g *idsSource) Open(_ context.Context, octx *stream.OperatorContext) error {
	g.next, g.step = int64(octx.Subtask), int64(octx.Parallelism)
	return nil
}

func (g *idsSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if g.next >= g.rows {
		return stream.PollEnd, nil
	}
	b := stream.NewBatch(idSchema, 64)
	for ; g.next < g.rows && b.Len() < 64; g.next += g.step {
		b.AppendRow(g.next, g.next%7)
	}
	out.Collect(b)
	return stream.PollEmitted, nil
}

func (g *idsSource) Close() error { return nil }

// splitOdd passes rows with an even id on and sends odd ids to side output
// "odd".
type splitOdd struct{ stream.BaseOperator }

func (splitOdd) Open(context.Context, *stream.OperatorContext) error { return nil }

func (splitOdd) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	odd := stream.NewBatch(oddSchema, b.Len())
	var keep []int
	for i, id := range b.Cols[0].Ints[:b.Len()] {
		if id%2 == 0 {
			keep = append(keep, i)
		} else {
			odd.AppendRow(id)
		}
	}
	if !stream.CollectSide(out, "odd", odd) {
		return fmt.Errorf("side output odd has no reader")
	}
	b.Filter(keep)
	out.Collect(b)
	return nil
}

// idCounts records how often each sink uid got each id.
type idCounts struct {
	mu   sync.Mutex
	seen map[string]map[int64]int
}

type countIDs struct {
	stream.BaseOperator
	c   *idCounts
	uid string
}

func (s *countIDs) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.uid = octx.OperatorUID
	return nil
}

func (s *countIDs) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	m := s.c.seen[s.uid]
	if m == nil {
		m = map[int64]int{}
		s.c.seen[s.uid] = m
	}
	for _, id := range b.Cols[0].Ints[:b.Len()] {
		m[id]++
	}
	return nil
}

func clusterRegistry(c *idCounts) *stream.Registry {
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{
		Name: "ids", Kind: stream.KindSource,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return idSchema, nil },
		NewSource: func(config []byte) (stream.Source, error) {
			var cfg struct {
				Rows int64 `json:"rows"`
			}
			err := stream.DecodeConfig(config, &cfg)
			return &idsSource{rows: cfg.Rows}, err
		},
	})
	reg.Register(stream.OperatorType{
		Name: "splitodd", Kind: stream.KindTransform,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			p.DeclareSideOutput("odd", oddSchema)
			return p.Inputs[0].Schema, nil
		},
		NewOperator: func([]byte) (stream.Operator, error) { return splitOdd{}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "countids", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &countIDs{c: c}, nil },
	})
	return reg
}

// run starts a component's Run and stops it at cleanup.
func run(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// TestClusterSideOutputs submits a job whose operator's main output is read
// over a hash edge and whose side output over a rebalance edge to a
// jobmanager with two taskmanagers, with checkpointing on: the job must
// finish (the final checkpoint's barriers cross the side-output edge) with
// every row delivered exactly once to the reader of its output.
func TestClusterSideOutputs(t *testing.T) {
	counts := &idCounts{seen: map[string]map[int64]int{}}
	reg := clusterRegistry(counts)
	store := (&url.URL{Scheme: "file", Path: t.TempDir()}).String()

	jcfg := jobmanager.DefaultConfig()
	jcfg.RPCAddress, jcfg.RESTAddress = "127.0.0.1:0", ""
	jcfg.HeartbeatInterval = 100 * time.Millisecond
	jcfg.CheckpointStorage = store
	jcfg.Logger = slog.New(slog.DiscardHandler)
	jm, err := jobmanager.New(jcfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, "jobmanager", jm.Run)
	<-jm.Ready()
	for _, id := range []string{"tm-a", "tm-b"} {
		cfg := taskmanager.DefaultConfig()
		cfg.ID, cfg.JobManagerAddress, cfg.RPCAddress = id, jm.RPCAddr(), "127.0.0.1:0"
		cfg.Slots, cfg.RegisterRetry, cfg.StateDir = 2, 50*time.Millisecond, t.TempDir()
		cfg.Logger = slog.New(slog.DiscardHandler)
		tm, err := taskmanager.New(cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		run(t, id, tm.Run)
	}
	cl, err := client.New(client.Config{JobManagers: []string{jm.RPCAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const rows = 20_000
	b := stream.NewBuilder("side").Parallelism(2).MaxParallelism(16)
	split := b.Source("ids", "ids", map[string]int64{"rows": rows}).Then("split", "splitodd", nil)
	split.KeyBy("k").Then("even", "countids", nil)
	split.SideOutput("odd").Rebalance().Then("odd", "countids", nil).SetParallelism(3)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g.Checkpoint = stream.CheckpointConfig{Interval: 20 * time.Millisecond, Storage: store}
	g.Restart = stream.RestartConfig{Type: "none"} // a failure ends the test at once
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	id, err := cl.Submit(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	job, err := cl.WaitJob(ctx, id, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st := job.GetJob().GetState(); st != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", st, job.GetJob().GetError())
	}
	cks, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoints: %d", len(cks.GetCheckpoints()))

	counts.mu.Lock()
	defer counts.mu.Unlock()
	for _, out := range []struct {
		uid    string
		parity int64
	}{{"even", 0}, {"odd", 1}} {
		seen := counts.seen[out.uid]
		var lost, dup, foreign int
		for id, n := range seen {
			if id%2 != out.parity || id < 0 || id >= rows {
				foreign++
			} else if n > 1 {
				dup++
			}
		}
		for id := out.parity; id < rows; id += 2 {
			if seen[id] == 0 {
				lost++
			}
		}
		if lost+dup+foreign > 0 {
			t.Errorf("%s: %d distinct ids, %d lost, %d duplicated, %d of the other output", out.uid, len(seen), lost, dup, foreign)
		}
	}
}
