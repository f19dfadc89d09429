// Package dataflowtest runs a planned stream.JobGraph inside one process on
// the real task runtime (package dataflow), for tests of operators,
// connectors and whole queries that must not depend on a cluster.
//
// It owns only the wiring: one dataflow.Task per vertex and subtask (no
// operator chaining), every channel in memory through one dataflow.Exchange,
// checkpointing off. The task specs are built the way the jobmanager and
// taskmanager build them, so operators see the same OperatorContext as in a
// deployed job.
//
// dataflowtest imports dataflow, stream, golang.org/x/sync/errgroup and the
// standard library.
package dataflowtest

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/stream"
)

// localAddress is the exchange's own address: every output target is it, so
// every channel is in memory.
const localAddress = "local"

// JobID is the job id the tasks run under.
const JobID = "dataflowtest"

// RunGraph runs g, which must have been planned (stream.Plan) against reg,
// until every task has finished: it returns nil once all sources ended and
// everything downstream drained, the first task error otherwise (the other
// tasks are then cancelled), or ctx.Err() when ctx is cancelled. It returns
// only after every task goroutine has exited. Sinks see their input as in a
// deployed job; to observe results, register a sink type in reg that
// records what it receives.
func RunGraph(ctx context.Context, g *stream.JobGraph, reg *stream.Registry) error {
	specs, err := TaskSpecs(g)
	if err != nil {
		return err
	}
	x := dataflow.NewExchange(dataflow.DefaultExchangeConfig(localAddress))
	defer x.Close()
	tasks := make([]*dataflow.Task, len(specs))
	for i, s := range specs {
		t, err := dataflow.NewTask(s, reg, x, nil)
		if err != nil {
			return fmt.Errorf("dataflowtest: job %q: %w", g.Name, err)
		}
		tasks[i] = t
	}
	eg, ctx := errgroup.WithContext(ctx)
	for _, t := range tasks {
		eg.Go(func() error { return t.Run(ctx) })
	}
	return eg.Wait()
}

// TaskSpecs returns the spec of every subtask of g, one task per vertex and
// subtask, vertex by vertex: what RunGraph runs.
func TaskSpecs(g *stream.JobGraph) ([]*dataflow.TaskSpec, error) {
	if g == nil {
		return nil, errors.New("dataflowtest: RunGraph needs a graph")
	}
	for _, v := range g.Vertices {
		if v.Parallelism < 1 {
			return nil, fmt.Errorf("dataflowtest: job %q: operator %q has parallelism %d: the graph is not planned; call stream.Plan before RunGraph", g.Name, v.UID, v.Parallelism)
		}
	}
	if g.MaxParallelism < 1 {
		return nil, fmt.Errorf("dataflowtest: job %q: maxParallelism %d: the graph is not planned; call stream.Plan before RunGraph", g.Name, g.MaxParallelism)
	}
	var specs []*dataflow.TaskSpec
	for _, v := range g.Vertices {
		co := dataflow.ChainedOperator{Vertex: v}
		var gates []dataflow.InputGate
		for _, e := range g.Inputs(v.ID) {
			up := g.Vertices[e.From]
			co.InputSchemas = append(co.InputSchemas, g.EdgeSchema(e))
			var keys []string
			if e.Partitioning == stream.Hash {
				keys = e.KeyFields
			}
			co.InputKeys = append(co.InputKeys, keys)
			gates = append(gates, dataflow.InputGate{
				Input:               e.Input,
				UpstreamVertex:      e.From,
				UpstreamParallelism: up.Parallelism,
				Partitioning:        e.Partitioning,
			})
		}
		var outs []dataflow.Output
		for _, e := range g.Outputs(v.ID) {
			down := g.Vertices[e.To].Parallelism
			o := dataflow.Output{
				SideOutput:            e.SideOutput,
				DownstreamVertex:      e.To,
				DownstreamInput:       e.Input,
				DownstreamParallelism: down,
				Partitioning:          e.Partitioning,
				Targets:               make([]string, down),
			}
			for i := range o.Targets {
				o.Targets[i] = localAddress
			}
			if e.Partitioning == stream.Hash {
				o.KeyFields = e.KeyFields
			}
			outs = append(outs, o)
		}
		for sub := range v.Parallelism {
			specs = append(specs, &dataflow.TaskSpec{
				JobID:          JobID,
				Attempt:        1,
				VertexID:       v.ID,
				Subtask:        sub,
				Parallelism:    v.Parallelism,
				MaxParallelism: g.MaxParallelism,
				Chain:          []dataflow.ChainedOperator{co},
				Inputs:         gates,
				Outputs:        outs,
			})
		}
	}
	return specs, nil
}
