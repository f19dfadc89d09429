package jobmanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// The bytes the scheduler expects a subtask to restore (completed's
// RestoreBytes) are what the taskmanager, given the deployment
// buildDeployment makes, restores and reports: checkpoint.RestoreSize of
// the deployment's handles over its key groups; nothing for a subtask
// that had finished. Parallelism changes, incremental files and union
// state included.
func TestRestoreBytesMatchDeployment(t *testing.T) {
	g := planned(t, pipeline(t, 2, 4), testRegistry(t))
	tasks, err := scheduler.BuildTasks(g)
	if err != nil {
		t.Fatal(err)
	}
	files := func(key string, n int) []*weirpb.StateFile {
		var out []*weirpb.StateFile
		for i := range n {
			out = append(out, &weirpb.StateFile{Name: fmt.Sprintf("%06d.sst", i), Key: fmt.Sprintf("%s.files/%d", key, i), Size: int64(100 * (i + 1))})
		}
		return out
	}
	m := &weirpb.Manifest{JobId: "old", CheckpointId: 4, MaxParallelism: int32(g.MaxParallelism), Operators: []*weirpb.OperatorState{
		{OperatorUid: "window", Parallelism: 2, Handles: []*weirpb.StateHandle{
			{OperatorUid: "window", Subtask: 0, Parallelism: 2, Key: "w0", Size: 10, KeyGroupStart: 0, KeyGroupEnd: int32(g.MaxParallelism/2 - 1), Files: files("w0", 3)},
			{OperatorUid: "window", Subtask: 1, Parallelism: 2, Key: "w1", Size: 20, KeyGroupStart: int32(g.MaxParallelism / 2), KeyGroupEnd: int32(g.MaxParallelism - 1), Files: files("w1", 2)},
		}},
		{OperatorUid: "sink", Parallelism: 4, Handles: []*weirpb.StateHandle{{OperatorUid: "sink", Subtask: 2, Parallelism: 4, Key: "s2", Size: 7, UnionOnly: true}}},
		{OperatorUid: "src", Parallelism: 2, FinishedSubtasks: []int32{0}, Handles: []*weirpb.StateHandle{
			{OperatorUid: "src", Subtask: 0, Parallelism: 2, Key: "x0", Size: 3},
			{OperatorUid: "src", Subtask: 1, Parallelism: 2, Key: "x1", Size: 5},
		}},
	}}
	cp := completed{m: m}
	var total int64
	for _, task := range tasks {
		for sub := range task.Parallelism {
			d := buildDeployment(&scheduler.DeployAction{JobID: "new", Graph: g, Task: task, Subtask: sub, Attempt: 1,
				SlotAddrs: []string{"a:1", "a:1", "a:1", "a:1"}, Restore: cp})
			var want int64
			if !d.GetRestoreFinished() {
				want = checkpoint.RestoreSize(d.GetRestore(), stream.KeyGroupRangeFor(int(d.GetMaxParallelism()), int(d.GetParallelism()), sub))
			}
			got := cp.RestoreBytes(g, task, sub)
			if got != want {
				t.Errorf("%s: RestoreBytes %d, the deployment restores %d", task.SubtaskName(sub), got, want)
			}
			total += got
		}
	}
	// src 0 finished: nothing; src 1: 5. Every window subtask at
	// parallelism 4 reads both handles (30) and the files of the one
	// whose key groups it overlaps (600 or 300); the union handle goes
	// to every one of them (7).
	if want := int64(5 + 4*(30+7) + 2*600 + 2*300); total != want {
		t.Fatalf("the job restores %d bytes in all, want %d", total, want)
	}
}

// Savepoint requests named by a client: ids are checked, one in use is
// refused (AlreadyExists), the progress and outcome read back as
// GetSavepointProgress reports them, and only the newest
// maxSavepointRequests are kept.
func TestSavepointRequests(t *testing.T) {
	jm := &JobManager{}
	for _, bad := range []string{"a b", strings.Repeat("x", 65), "../x", "é"} {
		if _, err := jm.newSavepointRequest(bad, "j", false, false); status.Code(toGRPCError(err)) != codes.InvalidArgument {
			t.Errorf("request id %q: %v, want InvalidArgument", bad, err)
		}
	}
	req, err := jm.newSavepointRequest("cli-1", "j", true, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jm.newSavepointRequest("cli-1", "k", false, false); status.Code(toGRPCError(err)) != codes.AlreadyExists {
		t.Fatalf("a second request cli-1: %v, want AlreadyExists", err)
	}
	if _, err := jm.savepointProgress("nope"); status.Code(toGRPCError(err)) != codes.NotFound {
		t.Fatalf("progress of an unknown request: %v, want NotFound", err)
	}
	jm.updateSavepointRequest(req, func(r *restSavepointRequest) { r.CheckpointID = 9 })
	p, err := jm.savepointProgress("cli-1")
	if err != nil {
		t.Fatal(err)
	}
	if p.GetStatus() != "IN_PROGRESS" || p.GetCopying() || p.GetCheckpointId() != 9 || !p.GetStop() || !p.GetDrain() || p.GetResult() != nil {
		t.Fatalf("before the copy: %v", p)
	}
	jm.updateSavepointRequest(req, func(r *restSavepointRequest) { r.Copying, r.BytesCopied, r.BytesTotal = true, 40, 100 })
	if p, _ = jm.savepointProgress("cli-1"); !p.GetCopying() || p.GetBytesCopied() != 40 || p.GetBytesTotal() != 100 {
		t.Fatalf("copying: %v", p)
	}
	jm.updateSavepointRequest(req, func(r *restSavepointRequest) {
		r.Copying, r.BytesCopied, r.Status, r.Location, r.SizeBytes = false, 100, "COMPLETED", "file:///sp/savepoint-j-9", 120
	})
	if p, _ = jm.savepointProgress("cli-1"); p.GetResult().GetLocation() != "file:///sp/savepoint-j-9" || p.GetResult().GetCheckpointId() != 9 {
		t.Fatalf("completed: %v", p)
	}
	// An unnamed request is not kept, but can be updated.
	anon, err := jm.newSavepointRequest("", "j", false, false)
	if err != nil {
		t.Fatal(err)
	}
	jm.updateSavepointRequest(anon, func(r *restSavepointRequest) { r.BytesCopied = 1 })
	for i := range maxSavepointRequests {
		if _, err := jm.newSavepointRequest(fmt.Sprintf("r%d", i), "j", false, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jm.savepointProgress("cli-1"); !errors.Is(err, ErrSavepointRequestNotFound) {
		t.Fatalf("the oldest request is still kept after %d newer ones: %v", maxSavepointRequests, err)
	}
	if _, err := jm.newSavepointRequest("cli-1", "j", false, false); err != nil {
		t.Fatalf("a forgotten id cannot be used again: %v", err)
	}
}

// A stop with --drain over REST: the body's drain reaches the sources'
// triggers (a savepoint's, draining), the request says so, no task is
// cancelled when the checkpoint completes (they finish by themselves, here
// when the fake taskmanager finishes them), and the job ends FINISHED,
// stopped at that checkpoint. (The copy then fails: the fake's state
// objects do not exist.)
func TestStopWithDrainOverREST(t *testing.T) {
	c, tm, dir := startCheckpointCluster(t)
	id := c.submit(checkpointedPipeline(t), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	c.waitCompleted(id, 0)
	base := "http://" + c.jm.RESTAddr()
	body := fmt.Sprintf(`{"savepointDir": "file://%s/sp", "drain": true}`, dir)
	resp, err := http.Post(base+"/v1/jobs/"+id+"/stop", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var started struct{ RequestID string }
	err = json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST stop: %d %v", resp.StatusCode, err)
	}
	var stopAt int64
	eventually(t, waitTimeout, "the job to stop at its drained checkpoint", func() bool {
		v := c.getJob(id).GetJob()
		r, _ := c.jm.savepointRequest(started.RequestID)
		stopAt = r.CheckpointID
		return v.GetState() == weirpb.JobState_JOB_STATE_CANCELING
	})
	var drained int
	for _, tr := range tm.Triggers() {
		if tr.GetDrain() {
			drained++
			if !tr.GetSavepoint() || tr.GetCheckpointId() != stopAt {
				t.Fatalf("drained trigger %v; want a savepoint's, of checkpoint %d", tr, stopAt)
			}
		}
	}
	if drained != 2 { // the two source subtasks
		t.Fatalf("%d drained triggers, want 2", drained)
	}
	if n := tm.Cancels(); n != 0 {
		t.Fatalf("%d tasks cancelled after the drained checkpoint; they finish by themselves", n)
	}
	tm.FinishAll()
	if v := c.waitState(id, weirpb.JobState_JOB_STATE_FINISHED); v.GetJob().GetError() != "" {
		t.Fatalf("job finished with %q", v.GetJob().GetError())
	}
	var r restSavepointRequest
	eventually(t, waitTimeout, "the request to end", func() bool {
		code, b := httpDo(t, http.MethodGet, base+"/v1/savepoint-requests/"+started.RequestID)
		return code == http.StatusOK && json.Unmarshal(b, &r) == nil && r.Status != "IN_PROGRESS"
	})
	if !r.Stop || !r.Drain || r.CheckpointID != stopAt {
		t.Fatalf("request %+v; want a drained stop at checkpoint %d", r, stopAt)
	}
}
