package jobmanager

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/stream"
)

// BenchmarkCheckpointStatsDocuments measures what the checkpoint
// statistics cost the REST API for a job of 10,000 subtasks (two tasks of
// 5,000): one checkpoint's per-subtask document and its explanation, and
// the summary over a full history (coordinator.HistorySize checkpoints,
// from the per-checkpoint maxima the coordinator keeps). It prints the milliseconds per document and
// checks that every subtask is in the document and the summary counts
// every checkpoint.
//
//	go test -run '^$' -bench CheckpointStatsDocuments -benchtime 1x ./jobmanager/
func BenchmarkCheckpointStatsDocuments(b *testing.B) {
	const p = 5_000
	bld := stream.NewBuilder("stats").MaxParallelism(8192)
	bld.Source("src", "gen", nil).SetParallelism(p).
		KeyBy("k").
		Then("sink", "discard", nil).SetParallelism(p)
	g, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	jv := scheduler.JobView{Graph: g, TaskOf: map[int]int{0: 0, 1: 1}}
	tasks := jobTasks(&jv)
	t0 := time.Unix(1_700_000_000, 0)
	history := make([]coordinator.Stats, coordinator.HistorySize)
	subs := make(map[int64][]coordinator.SubtaskStats, len(history))
	for i := range history {
		id := int64(len(history) - i)
		trigger := t0.Add(time.Duration(id) * time.Second)
		history[i] = coordinator.Stats{ID: id, Status: coordinator.Completed, TriggerTime: trigger, EndTime: trigger.Add(300 * time.Millisecond)}
		acks := make([]coordinator.SubtaskStats, 0, 2*p)
		for v := range 2 {
			for s := range p {
				d := time.Duration(s%97) * time.Millisecond
				acks = append(acks, coordinator.SubtaskStats{Task: coordinator.TaskID{Vertex: v, Subtask: s}, AckTime: trigger.Add(100*time.Millisecond + d),
					AckStats: coordinator.AckStats{SyncDuration: d / 4, AsyncDuration: d / 2, Bytes: int64(s), BarrierReceived: trigger.Add(d / 8)}})
			}
		}
		subs[id] = acks
	}
	names := map[coordinator.TaskID]string{}
	var doc, explain, summary time.Duration
	for range b.N {
		start := time.Now()
		cs := checkpointStats(&history[0], subs[history[0].ID], tasks, names, t0)
		doc = time.Since(start)
		start = time.Now()
		ex := explainCheckpoint(&cs, upstreamOf(tasks), map[int]float64{0: 0.5})
		explain = time.Since(start)
		start = time.Now()
		sum := summarize(history)
		summary = time.Since(start)
		if len(cs.Tasks) != 2 || len(cs.Tasks[0].Subtasks) != p || cs.Tasks[1].Acknowledged != p || ex.SlowestTask == "" ||
			sum.EndToEndMs.Count != len(history) {
			b.Fatalf("document %d tasks, %d acknowledged; explain %q; summary over %d", len(cs.Tasks), cs.Tasks[1].Acknowledged, ex.SlowestTask, sum.EndToEndMs.Count)
		}
	}
	fmt.Printf("checkpoint_stats_document_ms_10k_subtasks=%.2f\n", ms(doc))
	fmt.Printf("checkpoint_explain_ms_10k_subtasks=%.2f\n", ms(explain))
	fmt.Printf("checkpoint_summary_ms_50_checkpoints=%.2f\n", ms(summary))
}
