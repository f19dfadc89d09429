package jobmanager

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager/taskmanagertest"
)

func (c *testCluster) listCheckpoints(id string) *weirpb.ListCheckpointsResponse {
	c.t.Helper()
	resp, err := c.jobs.ListCheckpoints(c.t.Context(), &weirpb.ListCheckpointsRequest{JobId: id})
	if err != nil {
		c.t.Fatalf("ListCheckpoints: %v", err)
	}
	return resp
}

// waitCompleted waits until a checkpoint newer than after has completed
// and returns the newest completed one.
func (c *testCluster) waitCompleted(id string, after int64) *weirpb.CheckpointInfo {
	c.t.Helper()
	var got *weirpb.CheckpointInfo
	eventually(c.t, waitTimeout, fmt.Sprintf("a checkpoint of job %s after %d", id, after), func() bool {
		for _, ck := range c.listCheckpoints(id).Checkpoints { // newest first
			if ck.Status == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && ck.CheckpointId > after {
				got = ck
				return true
			}
		}
		return false
	})
	return got
}

// latestSettled waits for a checkpoint of job id after after, then stops
// tm acknowledging checkpoints and waits until no pending checkpoint can
// complete any more, and returns the newest completed one: with one
// checkpoint retained it stays in storage until acknowledging resumes
// (tm.SetAckCheckpoints(true)).
func (c *testCluster) latestSettled(tm *taskmanagertest.Fake, id string, after int64) *weirpb.CheckpointInfo {
	c.t.Helper()
	c.waitCompleted(id, after)
	tm.SetAckCheckpoints(false)
	tm.WaitAcks()
	var got *weirpb.CheckpointInfo
	eventually(c.t, waitTimeout, fmt.Sprintf("no pending checkpoint of job %s able to complete", id), func() bool {
		got = nil
		for _, ck := range c.listCheckpoints(id).Checkpoints { // newest first
			switch ck.Status {
			case weirpb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS:
				if ck.Acknowledged == ck.TotalTasks {
					return false // its manifest is being written
				}
			case weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
				if got == nil {
					got = ck
				}
			}
		}
		return got != nil && got.CheckpointId > after
	})
	return got
}

// checkpointedPipeline is pipeline(2, 4) taking checkpoints every 30ms,
// restarting with fixed-delay (1 attempt, 3s).
func checkpointedPipeline(t *testing.T) *stream.JobGraph {
	g := pipeline(t, 2, 4)
	g.Checkpoint = stream.CheckpointConfig{Interval: 30 * time.Millisecond}
	g.Restart = stream.RestartConfig{Type: "fixed-delay", Attempts: 1, Delay: 3 * time.Second}
	return g
}

func startCheckpointCluster(t *testing.T) (*testCluster, *taskmanagertest.Fake, string) {
	dir := t.TempDir()
	c := startJobManager(t, func(cfg *Config) { cfg.CheckpointStorage = "file://" + dir })
	tm := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 4, taskmanagertest.AckCheckpoints())
	return c, tm, dir
}

func TestCheckpointsAndRestarts(t *testing.T) {
	c, tm, dir := startCheckpointCluster(t)
	id := c.submit(checkpointedPipeline(t), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	for _, d := range tm.Deployments() {
		if ck := d.Checkpointing; !ck.GetEnabled() || ck.Mode != weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE ||
			ck.Storage != "file://"+dir || d.RestoreCheckpointId != 0 || len(d.Restore) != 0 {
			t.Fatalf("first deployment %s: checkpointing %v, restore %d %v", d.TaskName, ck, d.RestoreCheckpointId, d.Restore)
		}
	}

	// Checkpoints complete: manifest and pointer written, tasks notified.
	first := c.waitCompleted(id, 0)
	if first.Acknowledged != 6 || first.TotalTasks != 6 || first.SizeBytes != 600 || first.SlowestTask == "" {
		t.Errorf("checkpoint %+v", first)
	}
	// Inspect a checkpoint that no newer one discards meanwhile.
	ck := c.latestSettled(tm, id, first.CheckpointId)
	insp, err := c.jobs.InspectCheckpoint(t.Context(), &weirpb.InspectCheckpointRequest{JobId: id, CheckpointId: ck.CheckpointId})
	if err != nil {
		t.Fatalf("InspectCheckpoint %d: %v", ck.CheckpointId, err)
	}
	m := insp.Manifest
	if wantKey := fmt.Sprintf("%s/chk-%d/_manifest", id, ck.CheckpointId); insp.StorageKey != wantKey {
		t.Errorf("storage key %q, want %q", insp.StorageKey, wantKey)
	}
	if m.Version != 1 || m.JobId != id || m.JobName != "pipeline" || m.CheckpointId != ck.CheckpointId || m.MaxParallelism != 128 ||
		m.Mode != weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE || m.CompleteTimeMs < m.TriggerTimeMs {
		t.Errorf("manifest header %v", m)
	}
	var uids []string
	for _, op := range m.Operators {
		uids = append(uids, op.OperatorUid)
		for i, h := range op.Handles {
			if want := taskmanagertest.HandleKey(id, ck.CheckpointId, op.OperatorUid, int32(i), 1); h.Key != want || int(h.Subtask) != i {
				t.Errorf("operator %s handle %d: %v, want key %s", op.OperatorUid, i, h, want)
			}
		}
		if len(op.Handles) != int(op.Parallelism) {
			t.Errorf("operator %s has %d handles, parallelism %d", op.OperatorUid, len(op.Handles), op.Parallelism)
		}
	}
	if !slices.Equal(uids, []string{"src", "map", "window", "sink"}) {
		t.Errorf("manifest operators %v", uids)
	}
	for _, f := range []string{filepath.Join(dir, id, "_completed"), filepath.Join(dir, id, fmt.Sprintf("chk-%d", ck.CheckpointId), "_manifest")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("checkpoint storage: %v", err)
		}
	}
	eventually(t, waitTimeout, "completion notifications to all 6 tasks", func() bool { return len(tm.CompleteNotified(ck.CheckpointId)) == 6 })
	// Only one checkpoint is retained: the first one's files go.
	eventually(t, waitTimeout, "the first checkpoint to be discarded", func() bool {
		_, err := os.Stat(filepath.Join(dir, id, fmt.Sprintf("chk-%d", first.CheckpointId), "_manifest"))
		return os.IsNotExist(err)
	})
	_, err = c.jobs.InspectCheckpoint(t.Context(), &weirpb.InspectCheckpointRequest{JobId: id, CheckpointId: first.CheckpointId})
	if status.Code(err) != codes.NotFound {
		t.Errorf("InspectCheckpoint of a discarded checkpoint: %v, want NotFound", err)
	}
	_, err = c.jobs.InspectCheckpoint(t.Context(), &weirpb.InspectCheckpointRequest{JobId: id, CheckpointId: 1 << 40})
	if status.Code(err) != codes.NotFound {
		t.Errorf("InspectCheckpoint of an unknown checkpoint: %v, want NotFound", err)
	}

	tm.SetAckCheckpoints(true)
	tm.AckHeld() // a checkpoint triggered meanwhile completes rather than blocking the next

	// A manual trigger (refused while a periodic one is pending).
	trig := triggerCheckpoint(t, c, id)
	c.waitCompleted(id, trig.CheckpointId-1)

	// A window task fails: the job restarts after 3s (moved along by the
	// clock) from the latest completed checkpoint, with attempt 2.
	tm.FailTask(2, 1, "boom")
	eventually(t, waitTimeout, "the job to be restarting", func() bool {
		j := c.getJob(id).Job
		return j.State == weirpb.JobState_JOB_STATE_FAILING &&
			strings.HasPrefix(j.Error, "restarting (attempt 2) in ") && strings.HasSuffix(j.Error, "after: task window -> sink (2/4) on taskmanager tm-a failed: boom")
	})
	var rj restJob
	getJSON(t, "http://"+c.jm.RESTAddr()+"/v1/jobs/"+id, 200, &struct {
		Job *restJob `json:"job"`
	}{&rj})
	if rj.State != "RESTARTING" || !strings.HasPrefix(rj.Error, "restarting (attempt 2)") {
		t.Errorf("REST job while restarting: %+v", rj)
	}
	eventually(t, waitTimeout, "cancellation of the other tasks", func() bool { return tm.Cancels() == 5 })
	c.clock.Advance(3 * time.Second)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	restored := c.listCheckpoints(id).RestoredFrom
	if restored < trig.CheckpointId {
		t.Fatalf("restored from checkpoint %d, want at least %d", restored, trig.CheckpointId)
	}
	second := tm.DeploymentsOf(2)
	if len(second) != 6 {
		t.Fatalf("%d deployments of attempt 2, want 6", len(second))
	}
	for _, d := range second {
		if d.RestoreCheckpointId != restored || len(d.Restore) != len(d.Chain) {
			t.Fatalf("%s: restore %d with %d handles, want %d with %d", d.TaskName, d.RestoreCheckpointId, len(d.Restore), restored, len(d.Chain))
		}
		for i, h := range d.Restore {
			if want := taskmanagertest.HandleKey(id, restored, d.Chain[i].Vertex.Uid, d.Id.Subtask, 1); h.Key != want {
				t.Errorf("%s restores %s, want %s", d.TaskName, h.Key, want)
			}
		}
	}

	// Checkpoints go on with attempt 2; an acknowledgement of attempt 1 is
	// stale.
	after := c.latestSettled(tm, id, restored)
	insp, err = c.jobs.InspectCheckpoint(t.Context(), &weirpb.InspectCheckpointRequest{JobId: id, CheckpointId: after.CheckpointId})
	if err != nil || insp.Manifest.Operators[0].Handles[0].Key != taskmanagertest.HandleKey(id, after.CheckpointId, "src", 0, 2) {
		t.Fatalf("checkpoint after the restart: %v %v", insp, err)
	}
	d0 := second[0]
	old := &weirpb.ExecutionID{JobId: id, VertexId: d0.Id.VertexId, Subtask: d0.Id.Subtask, Attempt: 1}
	if _, err := tm.Cluster().AcknowledgeCheckpoint(t.Context(), &weirpb.AcknowledgeCheckpointRequest{TaskmanagerId: "tm-a", Id: old,
		CheckpointId: after.CheckpointId + 1}); err != nil {
		t.Fatal(err)
	}
	var ov struct {
		StaleAcks int64 `json:"staleCheckpointAcks"`
	}
	getJSON(t, "http://"+c.jm.RESTAddr()+"/v1/overview", 200, &ov)
	if ov.StaleAcks < 1 {
		t.Errorf("stale acks %d", ov.StaleAcks)
	}
	// In a batch, each entry is fenced on its own: an old attempt's
	// acknowledgement and decline, and one claimed by another
	// taskmanager, are each dropped as stale.
	cur := d0.Id
	if _, err := tm.Cluster().ReportCheckpoints(t.Context(), &weirpb.ReportCheckpointsRequest{TaskmanagerId: "tm-a",
		Acks:     []*weirpb.CheckpointAck{{Id: old, CheckpointId: after.CheckpointId + 1}},
		Declines: []*weirpb.CheckpointDecline{{Id: old, CheckpointId: after.CheckpointId + 1, Reason: "stale"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Cluster().ReportCheckpoints(t.Context(), &weirpb.ReportCheckpointsRequest{TaskmanagerId: "tm-other",
		Declines: []*weirpb.CheckpointDecline{{Id: cur, CheckpointId: after.CheckpointId + 1, Reason: "not mine"}}}); err != nil {
		t.Fatal(err)
	}
	before := ov.StaleAcks
	getJSON(t, "http://"+c.jm.RESTAddr()+"/v1/overview", 200, &ov)
	if ov.StaleAcks != before+3 {
		t.Errorf("stale acks %d after three stale batch entries, want %d", ov.StaleAcks, before+3)
	}
	if _, err := tm.Cluster().ReportCheckpoints(t.Context(), &weirpb.ReportCheckpointsRequest{TaskmanagerId: "tm-a",
		Acks: []*weirpb.CheckpointAck{{CheckpointId: 1}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ReportCheckpoints with an entry without an execution: %v, want InvalidArgument", err)
	}

	// The second failure exhausts fixed-delay's single attempt.
	tm.FailTask(0, 0, "again")
	job := c.waitState(id, weirpb.JobState_JOB_STATE_FAILED)
	const want = "task src -> map (1/2) on taskmanager tm-a failed: again; restart strategy fixed-delay gave up"
	if job.Job.Error != want {
		t.Errorf("error %q, want %q", job.Job.Error, want)
	}
	// A failed job keeps its latest checkpoint.
	if _, err := os.Stat(filepath.Join(dir, id, "_completed")); err != nil {
		t.Error(err)
	}
	_, err = c.jobs.TriggerCheckpoint(t.Context(), &weirpb.TriggerJobCheckpointRequest{JobId: id})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("TriggerCheckpoint of a failed job: %v", err)
	}
}

// triggerCheckpoint triggers a checkpoint over gRPC, retrying while the
// trigger is refused (FailedPrecondition) although the job is RUNNING:
// another checkpoint is still in progress.
func triggerCheckpoint(t *testing.T, c *testCluster, id string) *weirpb.TriggerJobCheckpointResponse {
	t.Helper()
	var resp *weirpb.TriggerJobCheckpointResponse
	eventually(t, waitTimeout, "a manual checkpoint trigger", func() bool {
		var err error
		resp, err = c.jobs.TriggerCheckpoint(t.Context(), &weirpb.TriggerJobCheckpointRequest{JobId: id})
		if status.Code(err) == codes.FailedPrecondition && c.getJob(id).Job.State == weirpb.JobState_JOB_STATE_RUNNING {
			return false
		}
		if err != nil {
			t.Fatalf("TriggerCheckpoint: %v", err)
		}
		return true
	})
	return resp
}

func httpDo(t *testing.T, method, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func TestCheckpointRESTAndMetrics(t *testing.T) {
	c, tm, dir := startCheckpointCluster(t)
	id := c.submit(checkpointedPipeline(t), 0)
	plain := c.submit(pipeline(t, 1, 1), 0) // no checkpoints; waits for a slot
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	c.waitCompleted(id, 0)
	base := "http://" + c.jm.RESTAddr()

	var trig struct {
		CheckpointID int64 `json:"checkpointId"`
	}
	eventually(t, waitTimeout, "POST checkpoints to be accepted", func() bool {
		code, body := httpDo(t, http.MethodPost, base+"/v1/jobs/"+id+"/checkpoints")
		switch {
		case code == http.StatusConflict && strings.Contains(string(body), "still in progress"):
			return false
		case code != http.StatusAccepted || json.Unmarshal(body, &trig) != nil || trig.CheckpointID < 2:
			t.Fatalf("POST checkpoints: %d %s", code, body)
		}
		return true
	})
	c.waitCompleted(id, trig.CheckpointID-1)

	// Checkpoints keep completing and only the newest is retained: the
	// latest completed one in the list may be gone by the time its
	// manifest is read, so read both again until they agree.
	var latest restCheckpoint
	var insp struct {
		Manifest struct {
			JobID        string `json:"jobId"`
			CheckpointID string `json:"checkpointId"` // protojson: int64 as string
			Operators    []struct {
				OperatorUID string `json:"operatorUid"`
			} `json:"operators"`
		} `json:"manifest"`
		StorageKey string `json:"storageKey"`
	}
	eventually(t, waitTimeout, "the latest completed checkpoint's manifest to be readable", func() bool {
		var list restCheckpoints
		getJSON(t, base+"/v1/jobs/"+id+"/checkpoints", 200, &list)
		if list.Completed < 2 || len(list.Checkpoints) == 0 {
			t.Fatalf("list %+v", list)
		}
		latest = restCheckpoint{}
		for _, ck := range list.Checkpoints {
			if ck.Status == "COMPLETED" {
				latest = ck
				break
			}
		}
		if latest.ID < trig.CheckpointID || latest.SizeBytes != 600 || latest.TotalTasks != 6 || latest.SlowestTask == "" || latest.TriggerTimeMs == 0 {
			t.Fatalf("latest completed %+v", latest)
		}
		code, body := httpDo(t, http.MethodGet, fmt.Sprintf("%s/v1/jobs/%s/checkpoints/%d", base, id, latest.ID))
		switch code {
		case http.StatusNotFound: // subsumed meanwhile
			return false
		case http.StatusOK:
		default:
			t.Fatalf("GET checkpoint %d: %d %s", latest.ID, code, body)
		}
		if err := json.Unmarshal(body, &insp); err != nil {
			t.Fatalf("GET checkpoint %d: %v in %s", latest.ID, err, body)
		}
		return true
	})
	if insp.Manifest.JobID != id || insp.Manifest.CheckpointID != fmt.Sprint(latest.ID) || len(insp.Manifest.Operators) != 4 ||
		insp.StorageKey != fmt.Sprintf("%s/chk-%d/_manifest", id, latest.ID) {
		t.Errorf("manifest JSON %+v", insp)
	}
	var e map[string]string
	getJSON(t, base+"/v1/jobs/"+id+"/checkpoints/999999", 404, &e)
	getJSON(t, base+"/v1/jobs/"+id+"/checkpoints/x", 400, &e)
	getJSON(t, base+"/v1/jobs/0123456789abcdef/checkpoints", 404, &e)
	getJSON(t, base+"/v1/jobs/"+plain+"/checkpoints", 409, &e)
	// The job and the fix.
	if !strings.Contains(e["error"], plain) || !strings.Contains(e["error"], "checkpointing interval") {
		t.Errorf("409 body %v does not name the job and the setting to fix", e)
	}
	if code, body := httpDo(t, http.MethodPost, base+"/v1/jobs/"+plain+"/checkpoints"); code != http.StatusConflict {
		t.Errorf("POST checkpoints of a job without checkpointing: %d %s", code, body)
	}
	_, err := c.jobs.TriggerCheckpoint(t.Context(), &weirpb.TriggerJobCheckpointRequest{JobId: plain})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("TriggerCheckpoint without checkpointing: %v", err)
	}

	code, body := httpDo(t, http.MethodGet, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	metrics := string(body)
	for _, want := range []string{
		"weir_taskmanagers_live 1\n",
		`weir_jobs{state="RUNNING"} `,
		`weir_jobs{state="RESTARTING"} 0`,
		fmt.Sprintf(`weir_checkpoint_alignment_seconds{job=%q,task="window -> sink (2/4)"} 0.002`, id),
		fmt.Sprintf(`weir_checkpoint_last_size_bytes{job=%q} 600`, id),
		fmt.Sprintf(`weir_job_restarts_total{job=%q} 0`, id),
		fmt.Sprintf(`weir_checkpoints_in_progress{job=%q}`, id),
		fmt.Sprintf(`weir_checkpoints_failed_total{job=%q}`, id),
		fmt.Sprintf(`weir_checkpoints_aborted_total{job=%q}`, id),
		fmt.Sprintf(`weir_checkpoint_last_duration_seconds{job=%q}`, id),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if n := metricValue(t, metrics, fmt.Sprintf(`weir_checkpoints_completed_total{job=%q}`, id)); n < 2 {
		t.Errorf("completed_total %v", n)
	}
	if strings.Contains(metrics, fmt.Sprintf(`weir_checkpoints_completed_total{job=%q}`, plain)) {
		t.Error("checkpoint metrics for a job without checkpointing")
	}

	// Cancel deletes the retained checkpoints (the default retention).
	if _, err := c.jobs.CancelJob(t.Context(), &weirpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	c.waitState(id, weirpb.JobState_JOB_STATE_CANCELED)
	eventually(t, waitTimeout, "retained checkpoints to be deleted", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, id, "chk-*", "_manifest"))
		return len(m) == 0
	})
	// The job without checkpoints gets the freed slots.
	c.waitState(plain, weirpb.JobState_JOB_STATE_RUNNING)
	if n := len(tm.Deployments()); n != 8 {
		t.Errorf("%d deployments, want 6 + 2", n)
	}
}

// metricValue returns the value of the sample line that starts with name.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestSubmitCheckpointSettings(t *testing.T) {
	c := startJobManager(t, func(cfg *Config) { cfg.CheckpointStorage = "file://" + t.TempDir() })
	for _, tc := range []struct {
		name   string
		mutate func(*stream.JobGraph)
		code   codes.Code
		names  []string // what the message names
	}{
		{"unknown restart strategy", func(g *stream.JobGraph) { g.Restart.Type = "sometimes" }, codes.InvalidArgument, []string{"restart strategy", `"sometimes"`}},
		{"bad checkpoint interval", func(g *stream.JobGraph) { g.Checkpoint.Interval = time.Millisecond }, codes.InvalidArgument, []string{"checkpointing interval", "10ms"}},
		{"relative storage path", func(g *stream.JobGraph) {
			g.Checkpoint.Interval = time.Second
			g.Checkpoint.Storage = "file://relative/path"
		}, codes.FailedPrecondition, []string{"file://relative/path", `"pipeline"`, "file:///"}},
		{"unknown storage scheme", func(g *stream.JobGraph) {
			g.Checkpoint.Interval = time.Second
			g.Checkpoint.Storage = "ftp://x/y"
		}, codes.FailedPrecondition, []string{"ftp://x/y", `"ftp"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := pipeline(t, 1, 1)
			tc.mutate(g)
			_, err := c.jobs.SubmitJob(t.Context(), &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g)})
			if status.Code(err) != tc.code {
				t.Fatalf("SubmitJob: %v, want %s", err, tc.code)
			}
			for _, w := range tc.names {
				if msg := status.Convert(err).Message(); !strings.Contains(msg, w) {
					t.Errorf("SubmitJob: message %q does not name %s", msg, w)
				}
			}
		})
	}
	list, err := c.jobs.ListJobs(t.Context(), &weirpb.ListJobsRequest{})
	if err != nil || len(list.Jobs) != 0 {
		t.Errorf("failed submissions left jobs behind: %v %v", list, err)
	}
	c.jm.storages.Lock()
	n := len(c.jm.storages.m)
	c.jm.storages.Unlock()
	if n != 0 {
		t.Errorf("%d storages left open", n)
	}
}
