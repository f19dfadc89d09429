package jobmanager

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager/taskmanagertest"
)

// Region failover through the real JobManager and fake taskmanagers.

// restJobOf reads a job's REST view.
func restJobOf(t *testing.T, c *testCluster, id string) (restJob, []restTask) {
	t.Helper()
	var d struct {
		Job   restJob    `json:"job"`
		Tasks []restTask `json:"tasks"`
	}
	getJSON(t, "http://"+c.jm.RESTAddr()+"/v1/jobs/"+id, 200, &d)
	return d.Job, d.Tasks
}

func TestRegionFailover(t *testing.T) {
	c, tm, _ := startCheckpointCluster(t)
	g := fanOut(t, 2)
	g.Checkpoint = stream.CheckpointConfig{Interval: 30 * time.Millisecond}
	g.Restart = stream.RestartConfig{Type: "fixed-delay", Attempts: 1, Delay: 3 * time.Second}
	id := c.submit(g, 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	if rj, _ := restJobOf(t, c, id); rj.Regions != 2 || len(rj.RestartingRegions) != 0 {
		t.Fatalf("REST job %+v: want 2 regions, none restarting", rj)
	}
	c.waitCompleted(id, 0)

	tm.FailTask(1, 0, "boom")
	const cause = "after: task b -> bsink (1/2) on taskmanager tm-a failed: boom"
	eventually(t, waitTimeout, "region 1 to be restarting while the job runs", func() bool {
		j := c.getJob(id).Job
		return j.State == weirpb.JobState_JOB_STATE_RUNNING &&
			strings.HasPrefix(j.Error, "region 1 of 2 (3 tasks) restarting (attempt 2) in ") && strings.HasSuffix(j.Error, cause)
	})
	rj, _ := restJobOf(t, c, id)
	if rj.State != "RUNNING" || len(rj.RestartingRegions) != 1 {
		t.Fatalf("REST job while region 1 restarts: %+v", rj)
	}
	if r := rj.RestartingRegions[0]; r.ID != 1 || r.Attempt != 2 || r.RestartDueMs == 0 || !strings.HasSuffix(cause, r.Cause) ||
		!slices.Equal(r.Tasks, []string{"src (1/2)", "b -> bsink (1/2)", "d (1/2)"}) {
		t.Errorf("restarting region %+v", r)
	}
	for _, want := range []string{id + "/0/0/1", id + "/3/0/1"} {
		eventually(t, waitTimeout, "cancellation of "+want, func() bool { return slices.Contains(tm.Cancelled(), want) })
	}
	c.clock.Advance(3 * time.Second)
	eventually(t, waitTimeout, "region 1 to run again", func() bool {
		rj, _ := restJobOf(t, c, id)
		return rj.State == "RUNNING" && len(rj.RestartingRegions) == 0 && rj.Restarts == 1
	})

	// Region 1 was redeployed with attempt 2, restoring its own subtask's
	// state; region 2 was deployed once and never cancelled.
	restored := c.listCheckpoints(id).RestoredFrom
	if restored < 1 {
		t.Fatalf("restored from %d", restored)
	}
	second := tm.DeploymentsOf(2)
	if len(second) != 3 {
		t.Fatalf("%d deployments of attempt 2, want 3", len(second))
	}
	for _, d := range second {
		if d.Id.Subtask != 0 || d.RestoreCheckpointId != restored || len(d.Restore) != len(d.Chain) {
			t.Fatalf("%s: subtask %d, restore %d with %d handles", d.TaskName, d.Id.Subtask, d.RestoreCheckpointId, len(d.Restore))
		}
		for i, h := range d.Restore {
			if want := taskmanagertest.HandleKey(id, restored, d.Chain[i].Vertex.Uid, 0, 1); h.Key != want {
				t.Errorf("%s restores %s, want %s", d.TaskName, h.Key, want)
			}
		}
	}
	if n := len(tm.Deployments()); n != 9 {
		t.Errorf("%d deployments, want 6 + 3", n)
	}
	for _, k := range tm.Cancelled() {
		if strings.HasSuffix(k, "/1/1") {
			t.Errorf("region 2 execution %s was cancelled", k)
		}
	}
	_, tasks := restJobOf(t, c, id)
	for _, tk := range tasks {
		if want := int64(2 - tk.Subtask); tk.Attempt != want || tk.State != "RUNNING" {
			t.Errorf("task %s: attempt %d state %s, want attempt %d RUNNING", tk.Name, tk.Attempt, tk.State, want)
		}
	}

	// Checkpoints resumed: one after the restart holds region 1's attempt 2
	// and region 2's attempt 1.
	// With one checkpoint retained, a newer one would discard it while
	// it is inspected: hold the acknowledgements meanwhile.
	after := c.latestSettled(tm, id, restored)
	insp, err := c.jobs.InspectCheckpoint(t.Context(), &weirpb.InspectCheckpointRequest{JobId: id, CheckpointId: after.CheckpointId})
	tm.SetAckCheckpoints(true)
	tm.AckHeld()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range insp.Manifest.Operators {
		if len(op.Handles) != 2 {
			t.Fatalf("operator %s: %d handles", op.OperatorUid, len(op.Handles))
		}
		for i, h := range op.Handles {
			if want := taskmanagertest.HandleKey(id, after.CheckpointId, op.OperatorUid, int32(i), int64(2-i)); h.Key != want {
				t.Errorf("checkpoint %d: handle %s, want %s", after.CheckpointId, h.Key, want)
			}
		}
	}

	// Stale messages are dropped, counted and exported.
	old := &weirpb.ExecutionID{JobId: id, VertexId: 0, Subtask: 0, Attempt: 1}
	if _, err := tm.Cluster().AcknowledgeCheckpoint(t.Context(), &weirpb.AcknowledgeCheckpointRequest{TaskmanagerId: "tm-a", Id: old,
		CheckpointId: after.CheckpointId + 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Cluster().UpdateTaskState(t.Context(), &weirpb.UpdateTaskStateRequest{TaskmanagerId: "tm-a",
		Status: &weirpb.TaskStatus{Id: old, State: weirpb.TaskState_TASK_STATE_FAILED, Error: "late"}}); err != nil {
		t.Fatal(err)
	}
	code, body := httpDo(t, http.MethodGet, "http://"+c.jm.RESTAddr()+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	metrics := string(body)
	if n := metricValue(t, metrics, `weir_stale_messages_total{kind="checkpoint_ack"}`); n < 1 {
		t.Errorf("stale checkpoint acks %v", n)
	}
	if n := metricValue(t, metrics, `weir_stale_messages_total{kind="task_report"}`); n < 1 {
		t.Errorf("stale task reports %v", n)
	}
	if n := metricValue(t, metrics, fmt.Sprintf(`weir_job_restarting_regions{job=%q}`, id)); n != 0 {
		t.Errorf("restarting regions %v", n)
	}
	if s := c.getJob(id).Job; s.State != weirpb.JobState_JOB_STATE_RUNNING || s.Error != "" {
		t.Errorf("job after the stale messages: %v %q", s.State, s.Error)
	}
}

// A lost taskmanager's region waits for slots and resumes when the
// taskmanager comes back (same id, new address); the other region runs on.
func TestTaskManagerLossRegionWaitsForSlots(t *testing.T) {
	c := startJobManager(t, nil) // HeartbeatTimeout 10s
	a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 1)
	b := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-b", 1)
	g := fanOut(t, 2)
	g.Restart = stream.RestartConfig{Type: "fixed-delay", Attempts: 1, Delay: time.Second}
	id := c.submit(g, 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	if n := len(b.Deployments()); n != 3 {
		t.Fatalf("tm-b runs %d tasks, want region 2's 3", n)
	}
	// tm-b goes silent: move the clock past the heartbeat timeout and the
	// restart delay in small steps while tm-a keeps heartbeating.
	b.StopHeartbeats()
	for range 24 {
		c.clock.Advance(500 * time.Millisecond)
		n := a.Heartbeats()
		eventually(t, waitTimeout, "a heartbeat of tm-a", func() bool { return a.Heartbeats() >= n+2 })
	}
	eventually(t, waitTimeout, "region 2 to wait for slots", func() bool {
		rj, _ := restJobOf(t, c, id)
		return rj.State == "RUNNING" && len(rj.RestartingRegions) == 1 && rj.RestartingRegions[0].ID == 2 &&
			rj.RestartingRegions[0].Phase == "WAITING_FOR_SLOTS"
	})
	if j := c.getJob(id).Job; j.State != weirpb.JobState_JOB_STATE_RUNNING ||
		!strings.HasPrefix(j.Error, "region 2 of 2 (3 tasks) waiting for slots (attempt 2)") ||
		!strings.Contains(j.Error, "taskmanager tm-b at "+b.Addr()+" lost: no heartbeat for 10s") {
		t.Errorf("job while waiting: %v %q", j.State, j.Error)
	}

	// tm-b restarts at another address.
	b2 := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-b", 1)
	eventually(t, waitTimeout, "region 2 to run on the restarted tm-b", func() bool {
		rj, _ := restJobOf(t, c, id)
		return rj.State == "RUNNING" && len(rj.RestartingRegions) == 0
	})
	ds := b2.Deployments()
	if len(ds) != 3 {
		t.Fatalf("restarted tm-b got %d deployments, want 3", len(ds))
	}
	for _, d := range ds {
		if d.Id.Subtask != 1 || d.Id.Attempt != 2 {
			t.Errorf("%s: subtask %d attempt %d", d.TaskName, d.Id.Subtask, d.Id.Attempt)
		}
		if d.Id.VertexId == 0 {
			for _, o := range d.Outputs {
				if o.Targets[1] != b2.Addr() {
					t.Errorf("source output targets %v, want subtask 1 at %s", o.Targets, b2.Addr())
				}
			}
		}
	}
	if n, cancels := len(a.Deployments()), a.Cancels(); n != 3 || cancels != 0 {
		t.Errorf("tm-a: %d deployments, %d cancels; want 3 and 0 (region 1 untouched)", n, cancels)
	}
	tms := c.taskManagers()
	if tb := tms["tm-b"]; !tb.Live || tb.Address != b2.Addr() || tb.SlotsFree != 0 {
		t.Errorf("tm-b %v", tb)
	}
}

// A taskmanager killed and restarted at once on the same address: the
// jobmanager finds the death through the broken connection (long before
// the heartbeat timeout) and deploys to the new process over a fresh
// connection, without a single failed deployment.
func TestSameAddressRestartDeploysAtOnce(t *testing.T) {
	c := startJobManager(t, nil) // HeartbeatTimeout 10s
	a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 1)
	b := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-b", 1)
	g := fanOut(t, 2)
	g.Restart = stream.RestartConfig{Type: "fixed-delay", Attempts: 1000, Delay: 50 * time.Millisecond}
	id := c.submit(g, 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	if n := len(b.Deployments()); n != 3 {
		t.Fatalf("tm-b runs %d tasks, want region 2's 3", n)
	}
	start := time.Now()
	b.Kill()
	eventually(t, waitTimeout, "tm-b to be lost", func() bool { return !c.taskManagers()["tm-b"].GetLive() })
	if took := time.Since(start); took >= 10*time.Second {
		t.Fatalf("tm-b lost after %v: by the heartbeat timeout, not by its broken connection", took)
	}
	b2 := b.Restart(t)
	eventually(t, waitTimeout, "region 2 to run on the restarted tm-b", func() bool {
		rj, _ := restJobOf(t, c, id)
		return rj.State == "RUNNING" && len(rj.RestartingRegions) == 0 && len(b2.Deployments()) == 3
	})
	for _, d := range b2.Deployments() {
		if d.Id.Subtask != 1 || d.Id.Attempt != 2 {
			t.Errorf("%s: subtask %d attempt %d; want subtask 1, attempt 2 (one restart, no failed deployment)", d.TaskName, d.Id.Subtask, d.Id.Attempt)
		}
	}
	if rj, _ := restJobOf(t, c, id); rj.Restarts != 1 {
		t.Errorf("job restarted %d times, want once", rj.Restarts)
	}
	if n, cancels := len(a.Deployments()), a.Cancels(); n != 3 || cancels != 0 {
		t.Errorf("tm-a: %d deployments, %d cancels; want 3 and 0 (region 1 untouched)", n, cancels)
	}
}

// A taskmanager that registers an address nobody answers at is lost at
// once (its first probe fails), and the jobmanager keeps serving.
func TestUnreachableRegistrationIsLost(t *testing.T) {
	c := startJobManager(t, nil) // HeartbeatTimeout 10s
	cc, err := grpc.NewClient(c.jm.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cluster := weirpb.NewClusterServiceClient(cc)
	for i, addr := range []string{"127.0.0.1:1", "::::bad"} {
		id := fmt.Sprintf("tm-%d", i)
		if _, err := cluster.RegisterTaskManager(t.Context(), &weirpb.RegisterTaskManagerRequest{
			TaskmanagerId: id, InstanceId: id + "-1", Address: addr, Slots: 1}); err != nil {
			t.Fatalf("register %s at %s: %v", id, addr, err)
		}
		eventually(t, waitTimeout, id+" at an unreachable address to be lost", func() bool {
			tm, ok := c.taskManagers()[id]
			return ok && !tm.GetLive() && strings.Contains(tm.GetReason(), "probe failed: no answer at "+addr)
		})
	}
}
