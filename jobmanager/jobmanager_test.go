package jobmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/failover"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager/taskmanagertest"
)

const waitTimeout = 10 * time.Second

// testCluster is a real JobManager on 127.0.0.1:0 with a JobService client.
type testCluster struct {
	t     *testing.T
	jm    *JobManager
	jobs  weirpb.JobServiceClient
	clock *skewClock
	// stop stops the jobmanager and waits for Run to return; it is also
	// called at cleanup.
	stop func()
}

// skewClock is real time plus an offset the test moves forward, to expire
// timeouts without waiting for them.
type skewClock struct{ offset atomic.Int64 }

func (c *skewClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *skewClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func startJobManager(t *testing.T, mutate func(*Config)) *testCluster {
	t.Helper()
	cfg := DefaultConfig()
	cfg.RPCAddress = "127.0.0.1:0"
	cfg.RESTAddress = "127.0.0.1:0"
	cfg.HeartbeatInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if mutate != nil {
		mutate(&cfg)
	}
	jm, err := New(cfg, testRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	clock := &skewClock{}
	jm.now = clock.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- jm.Run(ctx) }()
	select {
	case <-jm.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	cc, err := grpc.NewClient(jm.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() {
		cc.Close()
		stop()
	})
	return &testCluster{t: t, jm: jm, jobs: weirpb.NewJobServiceClient(cc), clock: clock, stop: stop}
}

func (c *testCluster) submit(g *stream.JobGraph, slotWait time.Duration) string {
	c.t.Helper()
	resp, err := c.jobs.SubmitJob(c.t.Context(), &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g), SlotWaitMs: slotWait.Milliseconds()})
	if err != nil {
		c.t.Fatalf("SubmitJob: %v", err)
	}
	return resp.JobId
}

func (c *testCluster) getJob(id string) *weirpb.GetJobResponse {
	c.t.Helper()
	resp, err := c.jobs.GetJob(c.t.Context(), &weirpb.GetJobRequest{JobId: id})
	if err != nil {
		c.t.Fatalf("GetJob: %v", err)
	}
	return resp
}

func (c *testCluster) waitState(id string, want weirpb.JobState) *weirpb.GetJobResponse {
	c.t.Helper()
	var last *weirpb.GetJobResponse
	eventually(c.t, waitTimeout, fmt.Sprintf("job %s to be %s", id, want), func() bool {
		last = c.getJob(id)
		switch s := last.Job.State; {
		case s == want:
			return true
		case s == weirpb.JobState_JOB_STATE_FINISHED || s == weirpb.JobState_JOB_STATE_CANCELED || s == weirpb.JobState_JOB_STATE_FAILED:
			c.t.Fatalf("job %s ended %s (%q) while waiting for %s", id, s, last.Job.Error, want)
		}
		return false
	})
	return last
}

func (c *testCluster) taskManagers() map[string]*weirpb.TaskManagerInfo {
	c.t.Helper()
	resp, err := c.jobs.ListTaskManagers(c.t.Context(), &weirpb.ListTaskManagersRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	out := make(map[string]*weirpb.TaskManagerInfo)
	for _, tm := range resp.Taskmanagers {
		out[tm.TaskmanagerId] = tm
	}
	return out
}

// testWriter sends logs to t.Log, so they show only for failing tests.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func taskNames(ds []*weirpb.TaskDeployment) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.TaskName)
	}
	slices.Sort(out)
	return out
}

func TestSubmitRunFinish(t *testing.T) {
	c := startJobManager(t, nil)
	a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 2)
	b := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-b", 3)
	id := c.submit(pipeline(t, 2, 4), 0)
	if len(id) != 16 {
		t.Errorf("job id %q is not 16 hex characters", id)
	}
	job := c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	if job.Job.TasksTotal != 6 || job.Job.TasksRunning != 6 {
		t.Errorf("tasks %d running of %d, want 6 of 6", job.Job.TasksRunning, job.Job.TasksTotal)
	}
	// Slots 0..3 go b, a, b, a (b has more free slots); subtask i of each
	// task is in slot i.
	if got, want := taskNames(b.Deployments()), []string{"src -> map (1/2)", "window -> sink (1/4)", "window -> sink (3/4)"}; !slices.Equal(got, want) {
		t.Errorf("tm-b runs %q, want %q", got, want)
	}
	if got, want := taskNames(a.Deployments()), []string{"src -> map (2/2)", "window -> sink (2/4)", "window -> sink (4/4)"}; !slices.Equal(got, want) {
		t.Errorf("tm-a runs %q, want %q", got, want)
	}
	for _, d := range append(a.Deployments(), b.Deployments()...) {
		if d.Id.VertexId == 0 {
			want := []string{b.Addr(), a.Addr(), b.Addr(), a.Addr()}
			if got := d.Outputs[0].Targets; !slices.Equal(got, want) {
				t.Errorf("%s targets %v, want %v", d.TaskName, got, want)
			}
		}
		if d.Id.Attempt != 1 || d.Id.JobId != id {
			t.Errorf("%s has id %v", d.TaskName, d.Id)
		}
	}
	for _, task := range job.Tasks {
		wantTM := "tm-b"
		if task.Id.Subtask%2 == 1 {
			wantTM = "tm-a"
		}
		if task.TaskmanagerId != wantTM || task.State != weirpb.TaskState_TASK_STATE_RUNNING {
			t.Errorf("task %s on %s in %s", task.Name, task.TaskmanagerId, task.State)
		}
	}
	if job.Graph.Vertices[2].OutSchema == nil || job.Graph.Vertices[2].Parallelism != 4 {
		t.Errorf("GetJob graph is not the planned graph: %v", job.Graph.Vertices[2])
	}
	tms := c.taskManagers()
	if tms["tm-a"].SlotsFree != 0 || tms["tm-b"].SlotsFree != 1 || !tms["tm-a"].Live || tms["tm-b"].SlotsTotal != 3 {
		t.Errorf("taskmanagers while running: %v", tms)
	}

	a.FinishAll()
	b.FinishAll()
	job = c.waitState(id, weirpb.JobState_JOB_STATE_FINISHED)
	if job.Job.EndTimeMs < job.Job.StartTimeMs || job.Job.Error != "" {
		t.Errorf("finished job %v", job.Job)
	}
	tms = c.taskManagers()
	if tms["tm-a"].SlotsFree != 2 || tms["tm-b"].SlotsFree != 3 {
		t.Errorf("slots not freed: %v", tms)
	}
	_, err := c.jobs.CancelJob(t.Context(), &weirpb.CancelJobRequest{JobId: id})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("cancel of finished job: %v, want FailedPrecondition", err)
	}
	list, err := c.jobs.ListJobs(t.Context(), &weirpb.ListJobsRequest{})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].JobId != id || list.Jobs[0].Name != "pipeline" {
		t.Errorf("ListJobs = %v, %v", list, err)
	}
}

func TestTaskFailureFailsJob(t *testing.T) {
	c := startJobManager(t, nil)
	failWindow2 := func(d *weirpb.TaskDeployment) string {
		if d.Id.VertexId == 2 && d.Id.Subtask == 1 {
			return "boom: division by zero"
		}
		return ""
	}
	a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 2, taskmanagertest.FailDeployments(failWindow2))
	b := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-b", 2, taskmanagertest.FailDeployments(failWindow2))
	id := c.submit(pipeline(t, 2, 4), 0)
	job := c.waitState(id, weirpb.JobState_JOB_STATE_FAILED)
	const want = "task window -> sink (2/4) on taskmanager tm-b failed: boom: division by zero; restart strategy none gave up"
	if job.Job.Error != want {
		t.Errorf("job error %q, want %q", job.Job.Error, want)
	}
	// The other five tasks were cancelled (some perhaps before they ran).
	if n := a.Cancels() + b.Cancels(); n != 5 {
		t.Errorf("%d cancel calls, want 5", n)
	}
	for _, task := range job.Tasks {
		want := weirpb.TaskState_TASK_STATE_CANCELED
		if task.Id.VertexId == 2 && task.Id.Subtask == 1 {
			want = weirpb.TaskState_TASK_STATE_FAILED
		}
		if task.State != want {
			t.Errorf("task %s is %s, want %s", task.Name, task.State, want)
		}
	}
	eventually(t, waitTimeout, "slots to be freed", func() bool {
		tms := c.taskManagers()
		return tms["tm-a"].SlotsFree == 2 && tms["tm-b"].SlotsFree == 2
	})
}

func TestCancelJob(t *testing.T) {
	c := startJobManager(t, nil)
	a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 4)
	id := c.submit(pipeline(t, 2, 4), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	if _, err := c.jobs.CancelJob(t.Context(), &weirpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	job := c.waitState(id, weirpb.JobState_JOB_STATE_CANCELED)
	if a.Cancels() != 6 {
		t.Errorf("%d cancel calls, want 6", a.Cancels())
	}
	for _, task := range job.Tasks {
		if task.State != weirpb.TaskState_TASK_STATE_CANCELED {
			t.Errorf("task %s is %s", task.Name, task.State)
		}
	}
	_, err := c.jobs.CancelJob(t.Context(), &weirpb.CancelJobRequest{JobId: id})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second cancel: %v, want FailedPrecondition", err)
	}
	for name, call := range map[string]func() error{
		"CancelJob": func() error {
			_, err := c.jobs.CancelJob(t.Context(), &weirpb.CancelJobRequest{JobId: "0123456789abcdef"})
			return err
		},
		"GetJob": func() error {
			_, err := c.jobs.GetJob(t.Context(), &weirpb.GetJobRequest{JobId: "0123456789abcdef"})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.NotFound {
			t.Errorf("%s of unknown job: %v, want NotFound", name, err)
		}
	}
}

func TestSubmitInvalidGraph(t *testing.T) {
	c := startJobManager(t, nil)
	b := stream.NewBuilder("bad")
	b.Source("src", "gen", nil).Then("x", "no-such-op", nil)
	g, _ := b.Build()
	_, err := c.jobs.SubmitJob(t.Context(), &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g)})
	if msg := status.Convert(err).Message(); status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, `"x"`) || !strings.Contains(msg, `"no-such-op"`) {
		t.Errorf("SubmitJob: %v, want InvalidArgument naming the operator and its type", err)
	}
	_, err = c.jobs.SubmitJob(t.Context(), &weirpb.SubmitJobRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("SubmitJob without graph: %v", err)
	}
}

func TestSlotWait(t *testing.T) {
	t.Run("succeeds when a taskmanager joins", func(t *testing.T) {
		c := startJobManager(t, nil)
		taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 2)
		id := c.submit(pipeline(t, 2, 4), waitTimeout)
		if s := c.getJob(id).Job.State; s != weirpb.JobState_JOB_STATE_SCHEDULED {
			t.Fatalf("state %s, want SCHEDULED while waiting", s)
		}
		b := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-b", 2)
		c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
		if n := len(b.Deployments()); n != 3 {
			t.Errorf("tm-b got %d deployments, want 3", n)
		}
	})
	t.Run("times out", func(t *testing.T) {
		c := startJobManager(t, nil)
		a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 2)
		id := c.submit(pipeline(t, 2, 4), 100*time.Millisecond)
		job := c.waitState(id, weirpb.JobState_JOB_STATE_FAILED)
		const want = "not enough free slots: job needs 4, cluster has 2 free across 1 taskmanager(s); start more taskmanagers or lower parallelism"
		if job.Job.Error != want {
			t.Errorf("error %q, want %q", job.Job.Error, want)
		}
		if n := len(a.Deployments()); n != 0 {
			t.Errorf("%d deployments", n)
		}
	})
}

func TestHeartbeatTimeoutFailsJob(t *testing.T) {
	c := startJobManager(t, nil) // HeartbeatTimeout 10s
	a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 2)
	b := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-b", 2)
	id := c.submit(pipeline(t, 2, 4), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	a.StopHeartbeats()
	// Move the clock 10.5s forward in small steps; after each, wait for two
	// answered heartbeats of tm-b so that it never looks silent for long,
	// whatever the load on the machine.
	for range 21 {
		c.clock.Advance(500 * time.Millisecond)
		n := b.Heartbeats()
		eventually(t, waitTimeout, "a heartbeat of tm-b", func() bool { return b.Heartbeats() >= n+2 })
	}
	job := c.waitState(id, weirpb.JobState_JOB_STATE_FAILED)
	if !strings.Contains(job.Job.Error, "on taskmanager tm-a failed: taskmanager tm-a at "+a.Addr()+" lost: no heartbeat for 10s") {
		t.Errorf("job error %q", job.Job.Error)
	}
	if tms := c.taskManagers(); tms["tm-a"].Live || !tms["tm-b"].Live || tms["tm-b"].SlotsFree != 2 {
		t.Errorf("taskmanagers %v", tms)
	}
	if n := b.Cancels(); n != 3 {
		t.Errorf("tm-b got %d cancels, want 3", n)
	}
	resp, err := a.Cluster().Heartbeat(t.Context(), &weirpb.HeartbeatRequest{TaskmanagerId: "tm-a"})
	if err != nil || !resp.Reregister {
		t.Errorf("heartbeat of lost taskmanager: %v, %v; want reregister", resp, err)
	}
}

func getJSON(t *testing.T, url string, wantCode int, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, body, wantCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", url, ct)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

func TestREST(t *testing.T) {
	c := startJobManager(t, nil)
	taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 4)
	id := c.submit(pipeline(t, 2, 4), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	base := "http://" + c.jm.RESTAddr()

	var health map[string]string
	getJSON(t, base+"/healthz", 200, &health)
	if health["status"] != "ok" {
		t.Errorf("healthz %v", health)
	}

	var jobs struct {
		Jobs []map[string]any `json:"jobs"`
	}
	getJSON(t, base+"/v1/jobs", 200, &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0]["id"] != id || jobs.Jobs[0]["state"] != "RUNNING" || jobs.Jobs[0]["tasksTotal"] != 6.0 {
		t.Errorf("/v1/jobs = %v", jobs)
	}

	var detail struct {
		Job      map[string]any   `json:"job"`
		Tasks    []map[string]any `json:"tasks"`
		Vertices []struct {
			ID          int    `json:"id"`
			UID         string `json:"uid"`
			TaskID      int    `json:"taskId"`
			Parallelism int    `json:"parallelism"`
			Inputs      []struct {
				From         int      `json:"from"`
				Partitioning string   `json:"partitioning"`
				KeyFields    []string `json:"keyFields"`
			} `json:"inputs"`
		} `json:"vertices"`
	}
	getJSON(t, base+"/v1/jobs/"+id, 200, &detail)
	if detail.Job["name"] != "pipeline" || len(detail.Tasks) != 6 || len(detail.Vertices) != 4 {
		t.Fatalf("/v1/jobs/id = %+v", detail)
	}
	if tk := detail.Tasks[0]; tk["taskmanagerId"] != "tm-a" || tk["name"] != "src -> map (1/2)" || tk["state"] != "RUNNING" {
		t.Errorf("task %v", tk)
	}
	if v := detail.Vertices[2]; v.UID != "window" || v.TaskID != 2 || v.Parallelism != 4 || len(v.Inputs) != 1 ||
		v.Inputs[0].From != 1 || v.Inputs[0].Partitioning != "hash" || !slices.Equal(v.Inputs[0].KeyFields, []string{"k"}) {
		t.Errorf("window vertex %+v", v)
	}
	if v := detail.Vertices[1]; v.TaskID != 0 {
		t.Errorf("map is in task %d, want 0", v.TaskID)
	}

	var tms struct {
		TaskManagers []map[string]any `json:"taskmanagers"`
	}
	getJSON(t, base+"/v1/taskmanagers", 200, &tms)
	if len(tms.TaskManagers) != 1 || tms.TaskManagers[0]["id"] != "tm-a" || tms.TaskManagers[0]["slotsFree"] != 0.0 ||
		tms.TaskManagers[0]["live"] != true || tms.TaskManagers[0]["slotsTotal"] != 4.0 {
		t.Errorf("/v1/taskmanagers = %v", tms)
	}

	var ov struct {
		TaskManagersLive int            `json:"taskmanagersLive"`
		SlotsTotal       int            `json:"slotsTotal"`
		SlotsFree        int            `json:"slotsFree"`
		Jobs             map[string]int `json:"jobs"`
	}
	getJSON(t, base+"/v1/overview", 200, &ov)
	if ov.TaskManagersLive != 1 || ov.SlotsTotal != 4 || ov.SlotsFree != 0 || ov.Jobs["RUNNING"] != 1 || ov.Jobs["FAILED"] != 0 {
		t.Errorf("/v1/overview = %+v", ov)
	}

	var e map[string]string
	getJSON(t, base+"/v1/jobs/0123456789abcdef", 404, &e)
	if !strings.Contains(e["error"], "0123456789abcdef") {
		t.Errorf("404 body %v", e)
	}
	getJSON(t, base+"/v1/nothing", 404, &e)
	resp, err := http.Post(base+"/v1/jobs", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// "{}" is YAML without operators: a job spec the submission refuses.
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /v1/jobs {}: %d, want 400", resp.StatusCode)
	}
}

func TestRunErrors(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	cfg := DefaultConfig()
	cfg.RPCAddress = lis.Addr().String()
	cfg.RESTAddress = ""
	cfg.Logger = slog.New(slog.DiscardHandler)
	jm, err := New(cfg, testRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	// A listen error that names the address and the setting to change.
	var oe *net.OpError
	if err := jm.Run(t.Context()); !errors.As(err, &oe) || oe.Op != "listen" ||
		!strings.Contains(err.Error(), cfg.RPCAddress) || !strings.Contains(err.Error(), "RPCAddress") {
		t.Errorf("Run on a taken port: %v", err)
	}
	if err := jm.Run(t.Context()); err == nil {
		t.Error("second Run succeeded")
	}
	bad := DefaultConfig()
	bad.HeartbeatTimeout = bad.HeartbeatInterval
	if _, err := New(bad, testRegistry(t)); err == nil || !strings.Contains(err.Error(), "HeartbeatTimeout") {
		t.Errorf("New with bad config: %v", err)
	}
	if _, err := New(DefaultConfig(), nil); err == nil {
		t.Error("New without registry succeeded")
	}
	bad = DefaultConfig()
	bad.DefaultRestart.Type = "sometimes"
	if _, err := New(bad, testRegistry(t)); !errors.Is(err, failover.ErrInvalidConfig) || !strings.Contains(err.Error(), "DefaultRestart") {
		t.Errorf("New with bad DefaultRestart: %v", err)
	}
	bad = DefaultConfig()
	bad.CheckpointStorage = "/tmp/x"
	if _, err := New(bad, testRegistry(t)); err == nil || !strings.Contains(err.Error(), "CheckpointStorage") {
		t.Errorf("New with bad CheckpointStorage: %v", err)
	}
}

func TestShutdownCancelsRunningTasks(t *testing.T) {
	c := startJobManager(t, nil)
	a := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 4)
	id := c.submit(pipeline(t, 2, 4), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	// Heartbeats carry record counts.
	eventually(t, waitTimeout, "record counts from heartbeats", func() bool {
		for _, task := range c.getJob(id).Tasks {
			if task.RecordsIn != 7 {
				return false
			}
		}
		return true
	})
	c.stop()
	if n := a.Cancels(); n != 6 {
		t.Errorf("%d cancels at shutdown, want 6", n)
	}
}
