package client_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/client"
	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/stream"
)

// startJobManager runs a jobmanager in this process on a free port, for the
// example; a program would give its cluster's jobmanager address (or, for
// a cluster on etcd, etcd's endpoints).
func startJobManager(ctx context.Context) (addr string, stop func()) {
	cfg := jobmanager.DefaultConfig()
	cfg.RPCAddress, cfg.RESTAddress = "127.0.0.1:0", ""
	cfg.Logger = slog.New(slog.DiscardHandler)
	jm, err := jobmanager.New(cfg, builtin.Registry())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- jm.Run(ctx) }()
	<-jm.Ready()
	return jm.RPCAddr(), func() { cancel(); <-done }
}

func Example() {
	ctx := context.Background()
	addr, stop := startJobManager(ctx)
	defer stop()

	cl, err := client.New(client.Config{JobManagers: []string{addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	// Bids from the built-in generator, counted per auction.
	b := stream.NewBuilder("bid-counts").Parallelism(2)
	b.Source("bids", "datagen", map[string]any{"preset": "bid", "rows": 1000}).
		KeyBy("auction").
		Then("counts", "running_count", nil).
		Then("out", "discard", nil)
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := cl.Submit(cctx, g)
	if err != nil {
		log.Fatal(err)
	}
	// No taskmanager has offered slots yet: the job waits for them.
	job, err := cl.Job(cctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.GetJob().GetName(), job.GetJob().GetState(), len(job.GetTasks()), "tasks")
	if err := cl.Cancel(cctx, id); err != nil {
		log.Fatal(err)
	}
	job, err = cl.WaitJob(cctx, id, 10*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.GetJob().GetState())
	// Output:
	// bid-counts JOB_STATE_SCHEDULED 4 tasks
	// JOB_STATE_CANCELED
}
