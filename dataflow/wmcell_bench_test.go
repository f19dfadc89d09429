package dataflow

import (
	"context"
	"fmt"
	"testing"

	"github.com/weirstream/weir/stream"
)

// wmRoundSource emits, on each of rounds polls, a batch of one row and a
// watermark one above the last, then ends: a wide job that does little
// work, where watermarks outnumber batches on an all-to-all edge.
type wmRoundSource struct {
	rounds int
	sub    int64
	n      int64
}

func (s *wmRoundSource) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.sub = int64(octx.Subtask)
	return nil
}

func (s *wmRoundSource) Close() error { return nil }

func (s *wmRoundSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.n == int64(s.rounds) {
		return stream.PollEnd, nil
	}
	b := stream.NewBatch(wmOrderSchema, 1)
	b.AppendRow(s.n, s.n*7919+s.sub)
	s.n++
	out.Collect(b)
	out.EmitWatermark(s.n)
	return stream.PollEmitted, nil
}

// BenchmarkWatermarkFanout runs sources into a keyBy at parallelism 64 (4096
// channels) on two exchanges over loopback gRPC, each source emitting a
// one-row batch and a watermark per round, with watermarks by cell and, for
// comparison, on every channel. It prints
// watermark_fanout_<mode>_cpu_ns_per_channel_watermark= (the process's CPU
// time over rounds × channels) and _ns_per_round= (wall time per round).
func BenchmarkWatermarkFanout(b *testing.B) {
	const par, rounds = 64, 200
	for _, mode := range []string{"channels", "cells"} {
		b.Run(mode, func(b *testing.B) {
			var cpu int64
			for range b.N {
				nodes := []*testNode{startNodeWith(b, ExchangeConfig{}), startNodeWith(b, ExchangeConfig{})}
				for _, n := range nodes {
					n.x.noCells = mode == "channels"
				}
				reg := stream.NewRegistry()
				reg.Register(stream.OperatorType{
					Name: "rounds", Kind: stream.KindSource,
					Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return wmOrderSchema, nil },
					NewSource: func([]byte) (stream.Source, error) { return &wmRoundSource{rounds: rounds}, nil },
				})
				reg.Register(stream.OperatorType{
					Name: "discard", Kind: stream.KindSink,
					Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
					NewOperator: func([]byte) (stream.Operator, error) { return discardSink{}, nil },
				})
				sb := stream.NewBuilder("fanout").Parallelism(par).MaxParallelism(128)
				sb.Source("src", "rounds", nil).KeyBy("key").Then("sink", "discard", nil)
				g := plan(b, sb, reg)
				place := func(v, s int) int { return (v + s) % 2 }
				specs := buildSpecs(b, g, [][]int{{0}, {1}}, func(v, s int) string { return nodes[place(v, s)].addr })
				cpu0 := processCPU()
				tasks, errs := runTasks(b.Context(), b, specs, reg, func(s *TaskSpec) *Exchange { return nodes[place(s.VertexID, s.Subtask)].x })
				cpu += processCPU() - cpu0
				for i, err := range errs {
					if err != nil {
						b.Fatalf("task %s: %v", tasks[i].Name(), err)
					}
				}
			}
			perWM := float64(cpu) / float64(b.N*rounds*par*par)
			perRound := float64(b.Elapsed().Nanoseconds()) / float64(b.N*rounds)
			b.ReportMetric(perWM, "cpu-ns/channel-watermark")
			fmt.Printf("watermark_fanout_%s_cpu_ns_per_channel_watermark=%.0f\n", mode, perWM)
			fmt.Printf("watermark_fanout_%s_ns_per_round=%.0f\n", mode, perRound)
		})
	}
}
