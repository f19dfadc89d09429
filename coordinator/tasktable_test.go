package coordinator

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A task table finds exactly its tasks, at their index in sorted order,
// whether it is dense (rows) or sparse (a map).
func TestTaskTableIndexOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for round := range 200 {
		// Small numbers make dense tables, large or negative ones sparse.
		spread := []int{4, 50, 1 << 20}[round%3]
		var tasks []TaskID
		want := make(map[TaskID]bool)
		for range rng.IntN(60) {
			task := TaskID{Vertex: rng.IntN(spread) - spread/8*(round%2), Subtask: rng.IntN(spread)}
			tasks = append(tasks, task, task) // duplicates count once
			want[task] = true
		}
		tb := newTaskTable(tasks)
		if len(tb.tasks) != len(want) {
			t.Fatalf("round %d: %d tasks, want %d", round, len(tb.tasks), len(want))
		}
		for i, task := range tb.tasks {
			if i > 0 && compareTasks(tb.tasks[i-1], task) >= 0 {
				t.Fatalf("round %d: tasks not sorted: %v", round, tb.tasks)
			}
			if j, ok := tb.indexOf(task); !ok || int(j) != i {
				t.Fatalf("round %d: indexOf(%v) = %d, %v; want %d", round, task, j, ok, i)
			}
		}
		for range 200 {
			probe := TaskID{Vertex: rng.IntN(spread+2) - 1, Subtask: rng.IntN(spread+2) - 1}
			if _, ok := tb.indexOf(probe); ok != want[probe] {
				t.Fatalf("round %d: indexOf(%v) found %v, want %v", round, probe, ok, want[probe])
			}
		}
	}
}

// Sparse task numbers (a table that is a map) checkpoint like dense ones.
func TestSparseTasksCheckpoint(t *testing.T) {
	now := time.Unix(1000, 0)
	tasks := []TaskID{{Vertex: 0, Subtask: 1 << 30}, {Vertex: 1 << 30, Subtask: 0}, {Vertex: -1, Subtask: -1}}
	c := New(Config{}, tasks, tasks[:1], 1, now)
	if c.table.index == nil {
		t.Fatal("the table of sparse tasks has no map; the test no longer covers it")
	}
	id, err := c.TriggerNow(now)
	if err != nil {
		t.Fatal(err)
	}
	c.Ready()
	c.Ack(now, TaskID{Vertex: 0, Subtask: 0}, id, "stranger", AckStats{}) // not a task: ignored
	for i, task := range tasks {
		c.Ack(now, task, id, i, AckStats{})
	}
	acts := c.Ready()
	w, ok := acts[len(acts)-1].(WriteManifestAction)
	if !ok || len(w.Acks) != 3 || c.Ignored() != 1 {
		t.Fatalf("actions %v, ignored %d; want a manifest write with 3 acks and 1 ignored", acts, c.Ignored())
	}
	for _, a := range w.Acks {
		if tasks[a.Payload.(int)] != a.Task {
			t.Errorf("ack %v carries the payload of %v", a.Task, tasks[a.Payload.(int)])
		}
	}
}
