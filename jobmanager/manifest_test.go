package jobmanager

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// The scheduler's states convert to the protobuf enums by value.
func TestStatesMirrorProto(t *testing.T) {
	for s := scheduler.JobCreated; s <= scheduler.JobFailed; s++ {
		if got, want := weirpb.JobState(s).String(), "JOB_STATE_"+s.String(); got != want {
			t.Errorf("job state %d: proto %s, core %s", s, got, want)
		}
	}
	for s := scheduler.TaskCreated; s <= scheduler.TaskFailed; s++ {
		if got, want := weirpb.TaskState(s).String(), "TASK_STATE_"+s.String(); got != want {
			t.Errorf("task state %d: proto %s, core %s", s, got, want)
		}
	}
}

// restoreHandles with a changed parallelism gives every handle of the
// operator to each subtask (the loader filters them).
func TestRestoreHandlesRescaled(t *testing.T) {
	g := planned(t, pipeline(t, 2, 4), testRegistry(t))
	tasks, err := scheduler.BuildTasks(g)
	if err != nil {
		t.Fatal(err)
	}
	m := &weirpb.Manifest{Operators: []*weirpb.OperatorState{
		{OperatorUid: "window", Parallelism: 2, Handles: []*weirpb.StateHandle{{OperatorUid: "window", Subtask: 0, Key: "w0"}, {OperatorUid: "window", Subtask: 1, Key: "w1"}}},
		{OperatorUid: "sink", Parallelism: 4, Handles: []*weirpb.StateHandle{{OperatorUid: "sink", Subtask: 2, Key: "s2"}}},
		{OperatorUid: "src", Parallelism: 2, Handles: []*weirpb.StateHandle{{OperatorUid: "src", Subtask: 1, Key: "x1"}}},
	}}
	keys := func(hs []*weirpb.StateHandle) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Key)
		}
		return out
	}
	for _, tc := range []struct {
		task, subtask int
		want          []string
	}{
		{1, 0, []string{"w0", "w1"}},
		{1, 2, []string{"w0", "w1", "s2"}},
		{0, 0, nil},
		{0, 1, []string{"x1"}},
	} {
		if got := keys(restoreHandles(m, g, tasks[tc.task], tc.subtask)); !slices.Equal(got, tc.want) {
			t.Errorf("task %s subtask %d restores %v, want %v", tasks[tc.task].Name, tc.subtask, got, tc.want)
		}
	}
}

func TestBuildDeployment(t *testing.T) {
	reg := testRegistry(t)
	g := planned(t, pipeline(t, 2, 4), reg)
	tasks, err := scheduler.BuildTasks(g)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 {
		t.Fatalf("tasks %v", tasks)
	}
	// Shared slot i hosts every task's subtask i.
	slotAddrs := []string{"127.0.0.1:2", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"}
	kv := weirpb.FromSchema(g.Vertices[0].OutSchema)
	kn := weirpb.FromSchema(g.Vertices[2].OutSchema)
	vertex := func(id int) *weirpb.Vertex { return weirpb.FromVertex(g.Vertices[id]) }

	gotSrc := buildDeployment(&scheduler.DeployAction{JobID: "job1", Graph: g, Task: tasks[0], Subtask: 1, Attempt: 3, SlotAddrs: slotAddrs})
	wantSrc := &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: "job1", VertexId: 0, Subtask: 1, Attempt: 3},
		TaskName: "src -> map (2/2)", Parallelism: 2, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{
			{Vertex: vertex(0)},
			{Vertex: vertex(1), InputSchemas: []*weirpb.Schema{kv}, InputKeys: []*weirpb.KeyFields{{}}},
		},
		Outputs: []*weirpb.OutputSpec{{DownstreamVertex: 2, DownstreamInput: 0, DownstreamParallelism: 4,
			Partitioning: weirpb.Partitioning_PARTITIONING_HASH, KeyFields: []string{"k"}, Targets: slotAddrs}},
	}
	if !proto.Equal(gotSrc, wantSrc) {
		t.Errorf("source deployment:\n got %v\nwant %v", gotSrc, wantSrc)
	}

	gotWin := buildDeployment(&scheduler.DeployAction{JobID: "job1", Graph: g, Task: tasks[1], Subtask: 3, Attempt: 3, SlotAddrs: slotAddrs})
	wantWin := &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: "job1", VertexId: 2, Subtask: 3, Attempt: 3},
		TaskName: "window -> sink (4/4)", Parallelism: 4, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{
			{Vertex: vertex(2), InputSchemas: []*weirpb.Schema{kv}, InputKeys: []*weirpb.KeyFields{{Fields: []string{"k"}}}},
			{Vertex: vertex(3), InputSchemas: []*weirpb.Schema{kn}, InputKeys: []*weirpb.KeyFields{{}}},
		},
		Inputs: []*weirpb.InputGate{{Input: 0, UpstreamVertex: 1, UpstreamParallelism: 2, Partitioning: weirpb.Partitioning_PARTITIONING_HASH}},
	}
	if !proto.Equal(gotWin, wantWin) {
		t.Errorf("window deployment:\n got %v\nwant %v", gotWin, wantWin)
	}

	// Every key group is owned by a downstream subtask that has a target,
	// and the window subtask on each target owns exactly its key groups.
	out := gotSrc.Outputs[0]
	owned := make([]int, out.DownstreamParallelism)
	for kg := range int(gotSrc.MaxParallelism) {
		st := stream.SubtaskForKeyGroup(int(gotSrc.MaxParallelism), int(out.DownstreamParallelism), kg)
		if st >= len(out.Targets) {
			t.Fatalf("key group %d goes to subtask %d; only %d targets", kg, st, len(out.Targets))
		}
		if !stream.KeyGroupRangeFor(int(gotWin.MaxParallelism), int(gotWin.Parallelism), st).Contains(kg) {
			t.Errorf("key group %d routed to subtask %d, which does not own it", kg, st)
		}
		owned[st]++
	}
	for st, n := range owned {
		if n != 32 {
			t.Errorf("subtask %d owns %d key groups, want 32", st, n)
		}
	}
}

// buildManifest lists every operator of the graph in vertex order with
// its acknowledged handles sorted by subtask, and marks the finished tasks.
func TestBuildManifest(t *testing.T) {
	g := planned(t, pipeline(t, 2, 2), testRegistry(t))
	handle := func(uid string, subtask int) *weirpb.StateHandle {
		return &weirpb.StateHandle{OperatorUid: uid, Subtask: int32(subtask), Parallelism: 2, Key: fmt.Sprintf("%s-%d", uid, subtask)}
	}
	a := scheduler.WriteManifestAction{JobID: "j", Graph: g, Mode: stream.ExactlyOnce, ID: 4,
		Triggered: time.UnixMilli(1000), Completed: time.UnixMilli(1500),
		// Out of task order, as no coordinator gives them: the handles
		// are sorted all the same.
		Acks: []coordinator.Ack{
			{Task: coordinator.TaskID{Vertex: 2, Subtask: 1}, Payload: []*weirpb.StateHandle{handle("window", 1), handle("sink", 1)}},
			{Task: coordinator.TaskID{Vertex: 2, Subtask: 0}, Payload: []*weirpb.StateHandle{handle("window", 0), handle("sink", 0)}},
			{Task: coordinator.TaskID{Vertex: 0, Subtask: 1}, Payload: []*weirpb.StateHandle{handle("src", 1)}},
			{Task: coordinator.TaskID{Vertex: 0, Subtask: 0}, Payload: []*weirpb.StateHandle{handle("src", 0)}},
		},
		Finished: []coordinator.TaskID{{Vertex: 0, Subtask: 1}}}
	m := buildManifest(a)
	if m.JobId != "j" || m.CheckpointId != 4 || m.TriggerTimeMs != 1000 || m.CompleteTimeMs != 1500 || m.Mode != weirpb.CheckpointMode(stream.ExactlyOnce) {
		t.Fatalf("manifest header %v", m)
	}
	var got []string
	for _, op := range m.Operators {
		keys := []string{op.OperatorUid + ":"}
		for _, h := range op.Handles {
			keys = append(keys, h.Key)
		}
		got = append(got, strings.Join(keys, " "))
	}
	want := []string{"src: src-0 src-1", "map:", "window: window-0 window-1", "sink: sink-0 sink-1"}
	if !slices.Equal(got, want) {
		t.Errorf("operators %q, want %q", got, want)
	}
	if cp := (completed{m: m}); cp.CheckpointID() != 4 || !cp.Finished("src", 1, 2) || cp.Finished("src", 0, 2) || cp.Finished("window", 1, 2) {
		t.Errorf("finished subtasks %v", m.Operators[0].FinishedSubtasks)
	}
	if manifestOf(completed{m: m}) != m || manifestOf(nil) != nil {
		t.Error("manifestOf does not give back the manifest")
	}
}

// TestFinishedAfterRescale: at another parallelism than the checkpoint's a
// subtask counts as finished only when every old subtask had finished,
// since it may receive any old subtask's state.
func TestFinishedAfterRescale(t *testing.T) {
	m := &weirpb.Manifest{Operators: []*weirpb.OperatorState{
		{OperatorUid: "some", Parallelism: 3, FinishedSubtasks: []int32{0, 2}},
		{OperatorUid: "all", Parallelism: 2, FinishedSubtasks: []int32{0, 1}},
	}}
	for _, tc := range []struct {
		uid          string
		subtask, par int
		want         bool
	}{
		{"some", 0, 3, true}, {"some", 1, 3, false}, // same parallelism: as recorded
		{"some", 0, 2, false}, {"some", 0, 4, false}, // rescaled: not all old finished
		{"all", 0, 3, true}, {"all", 2, 3, true}, {"all", 0, 1, true},
		{"gone", 0, 1, false},
	} {
		if got := finishedIn(m, tc.uid, tc.subtask, tc.par); got != tc.want {
			t.Errorf("finishedIn(%s, %d of %d) = %v, want %v", tc.uid, tc.subtask, tc.par, got, tc.want)
		}
	}
}
