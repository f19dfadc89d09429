package webui

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/proto/weirpb"
)

var errNoJob = errors.New("fake: no such job")

// fakeBackend holds one job, named hostile, and records the actions.
type fakeBackend struct {
	mu      sync.Mutex
	actions []string
}

var _ Backend = (*fakeBackend)(nil)

const (
	fakeJob = "00112233aabbccdd"
	hostile = `<script>alert("x")</script>`
)

func (f *fakeBackend) record(a string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, a)
}

func (f *fakeBackend) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...)
}

func (f *fakeBackend) Now() time.Time { return time.UnixMilli(1_700_000_010_000) }
func (f *fakeBackend) Overview() view.Overview {
	return view.Overview{TaskManagers: 2, TaskManagersLive: 1, SlotsTotal: 4, SlotsFree: 1, Jobs: map[string]int{"RUNNING": 1, "FAILED": 0}}
}
func (f *fakeBackend) TaskManagers() []view.TaskManager {
	return []view.TaskManager{
		{ID: "tm-0", Address: "127.0.0.1:1", Live: true, SlotsTotal: 4, SlotsFree: 1, LastHeartbeatMs: 1_700_000_008_000, OperatorTypes: []string{"gen"}},
		{ID: "tm-1", Address: "127.0.0.1:2", Reason: "heartbeat timeout " + hostile, SlotsTotal: 4, LastHeartbeatMs: 1_700_000_000_000},
	}
}
func (f *fakeBackend) job() view.Job {
	return view.Job{ID: fakeJob, Name: hostile, State: "RUNNING", StartTimeMs: 1_700_000_000_000, TasksTotal: 2, TasksRunning: 2,
		Attempt: 2, Restarts: 1, LastFailure: "task failed: " + hostile, Checkpointing: true, Regions: 1, RestartingRegions: []view.Region{}}
}
func (f *fakeBackend) Jobs() []view.Job { return []view.Job{f.job()} }
func (f *fakeBackend) Job(id string) (view.JobDetail, error) {
	if id != fakeJob {
		return view.JobDetail{}, errNoJob
	}
	return view.JobDetail{Job: f.job(),
		Tasks: []view.Task{{VertexID: 0, Name: "src (1/1)", State: "RUNNING", TaskManagerID: "tm-0", RecordsOut: 10, Attempt: 2},
			{VertexID: 1, Name: "sink (1/1)", State: "RUNNING", TaskManagerID: "tm-0", RecordsIn: 10, Attempt: 2, Error: "earlier: " + hostile}},
		Vertices: []view.Vertex{{ID: 0, UID: "src", Type: "gen", Parallelism: 1, Inputs: []view.Input{}},
			{ID: 1, UID: "sink", Type: "discard", Parallelism: 3, TaskID: 1, Inputs: []view.Input{{From: 0, Partitioning: "hash", KeyFields: []string{"k"}}}}}}, nil
}
func (f *fakeBackend) Checkpoints(id string) (view.Checkpoints, error) {
	if id != fakeJob {
		return view.Checkpoints{}, errNoJob
	}
	return view.Checkpoints{Completed: 7, Failed: 1, Latest: 8, Retained: []int64{8},
		Checkpoints: []view.Checkpoint{{ID: 9, Status: "IN_PROGRESS"}, {ID: 8, Status: "COMPLETED", SizeBytes: 2048, SlowestTask: "sink (1/1)"},
			{ID: 7, Status: "FAILED", Failure: "declined: " + hostile}},
		Config: view.CheckpointConfig{IntervalMs: 1000, Mode: "exactly_once", Storage: "file:///cp"}}, nil
}
func (f *fakeBackend) Checkpoint(_ context.Context, id string, cid int64) (*weirpb.InspectCheckpointResponse, error) {
	if id != fakeJob || cid != 8 {
		return nil, errNoJob
	}
	return &weirpb.InspectCheckpointResponse{StorageKey: "job/chk-8/_metadata", Manifest: &weirpb.Manifest{CheckpointId: 8,
		Operators: []*weirpb.OperatorState{{OperatorUid: "sink", Parallelism: 3, Handles: []*weirpb.StateHandle{
			{Subtask: 1, Size: 100, Key: "k1", KeyGroupStart: 43, KeyGroupEnd: 85},
			{Subtask: 0, Size: 5, InlineData: []byte("secret-state-bytes"), KeyGroupStart: 0, KeyGroupEnd: 42}}}}}}, nil
}
func (f *fakeBackend) CheckpointStats(id string, cid int64) (view.CheckpointStats, error) {
	if id != fakeJob || cid != 8 && cid != 9 {
		return view.CheckpointStats{}, errNoJob
	}
	cs := view.CheckpointStats{Checkpoint: view.Checkpoint{ID: cid, Status: "COMPLETED", DurationMs: 1500, SizeBytes: 2048,
		Acknowledged: 2, TotalTasks: 2}, ChannelStateBytes: 0,
		Tasks: []view.TaskCheckpointStats{{TaskID: 1, Name: "sink " + hostile, Parallelism: 2, Acknowledged: 1,
			EndToEndMs: view.Dist{Count: 1, Min: 1500, Avg: 1500, Max: 1500},
			Subtasks: []view.SubtaskCheckpointStats{{Subtask: 0, Acknowledged: true, EndToEndMs: 1500, StartDelayMs: 1234,
				AlignmentMs: 11, SyncMs: 22, AsyncMs: 33, StateBytes: 2048}, {Subtask: 1}}}}}
	if cid == 9 {
		cs.Status = "IN_PROGRESS"
	}
	return cs, nil
}
func (f *fakeBackend) ExplainCheckpoint(id string, cid int64) (view.CheckpointExplain, error) {
	if _, err := f.CheckpointStats(id, cid); err != nil {
		return view.CheckpointExplain{}, err
	}
	return view.CheckpointExplain{ID: cid, Cause: "backpressure", Dominant: "start_delay", SlowestTask: "sink",
		Path:        []view.Phase{{Name: "start_delay", Ms: 1234}, {Name: "alignment", Ms: 11}, {Name: "sync", Ms: 22}, {Name: "async", Ms: 33}, {Name: "ack", Ms: 200}},
		Explanation: []string{"Cause: backpressure " + hostile}}, nil
}
func (f *fakeBackend) Exceptions(id string) ([]view.Exception, error) {
	if id != fakeJob {
		return nil, errNoJob
	}
	return []view.Exception{{TimeMs: 1_700_000_005_000, Cause: "task sink failed: " + hostile, Task: "sink (1/1)", VertexID: 1,
		Attempt: 65538, Deployment: 2, LeaderTerm: 1, TaskManagerID: "tm-0", Scope: "region", Regions: []int{1},
		Concurrent: []view.ConcurrentFailure{{Task: "src (1/1)", Deployment: 2, Cause: "meanwhile: " + hostile}}, ConcurrentDropped: 3},
		{TimeMs: 1_700_000_001_000, Cause: "checkpointing failed", Scope: "global"}}, nil
}
func (f *fakeBackend) SavepointRequest(rid string) (view.SavepointRequest, bool) {
	if rid != "r1" {
		return view.SavepointRequest{}, false
	}
	return view.SavepointRequest{ID: "r1", JobID: fakeJob, Status: "COMPLETED", Location: "file:///sp/savepoint-1", CheckpointID: 8}, true
}
func (f *fakeBackend) TriggerCheckpoint(id string) (int64, error) {
	f.record("checkpoint " + id)
	if id != fakeJob {
		return 0, errNoJob
	}
	return 10, nil
}
func (f *fakeBackend) Savepoint(id, dir string) (string, error) {
	f.record("savepoint " + id + " " + dir)
	return "r1", nil
}
func (f *fakeBackend) Stop(id, dir string, drain bool) (string, error) {
	f.record("stop " + id + " " + dir + map[bool]string{true: " drain", false: ""}[drain])
	return "r1", nil
}
func (f *fakeBackend) Cancel(id string) error { f.record("cancel " + id); return nil }
func (f *fakeBackend) HTTPStatus(err error) int {
	if errors.Is(err, errNoJob) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	resp := w.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestPages renders every page of the fake backend's state: each shows
// its data, escapes what the backend says (the job's name is markup), and
// never shows a checkpoint's state bytes.
func TestPages(t *testing.T) {
	h := New(&fakeBackend{})
	for _, tc := range []struct {
		path string
		code int
		want []string
	}{
		{"/ui/", 200, []string{`id="tm-live">1<`, `id="slots-total">4<`, `id="jobs-RUNNING">1<`}},
		{"/ui/taskmanagers", 200, []string{"tm-0", "2.0 s ago", "LOST", "heartbeat timeout &lt;script&gt;"}},
		{"/ui/jobs", 200, []string{fakeJob, "RUNNING"}},
		{"/ui/jobs/" + fakeJob, 200, []string{`id="job-state">RUNNING<`, `class="num op-parallelism">3<`, "← src · hash (k)", `name="csrf_token"`}},
		{"/ui/jobs/" + fakeJob + "/checkpoints?triggered=10", 200, []string{"Checkpoint 10 was triggered.", `id="cp-completed">7<`, "2.0 KiB", "declined: &lt;script&gt;", "file:///cp"}},
		{"/ui/jobs/" + fakeJob + "/checkpoints?triggered=%3Cb%3E", 200, []string{`id="cp-completed">7<`}},
		{"/ui/jobs/" + fakeJob + "/checkpoints/8", 200, []string{"job/chk-8/_metadata", "43–85", "0–42", "105 B",
			`class="num st-delay">1.2 s<`, `class="num st-async">33 ms<`, "not acknowledged", `data-cause="backpressure"`,
			`step dominant" data-phase="start_delay"`, "sink &lt;script&gt;"}},
		{"/ui/jobs/" + fakeJob + "/checkpoints/9", 200, []string{"IN_PROGRESS", `class="num st-sync">22 ms<`}},
		{"/ui/jobs/" + fakeJob + "/exceptions", 200, []string{"task failed: &lt;script&gt;", "earlier: &lt;script&gt;",
			"task sink failed: &lt;script&gt;", `title="execution attempt 65538">2 <span class="dim">term 1</span>`, "region 1 of 1", "whole job",
			"1 (+3) more failures reported meanwhile", "meanwhile: &lt;script&gt;"}},
		{"/ui/savepoints/r1", 200, []string{"file:///sp/savepoint-1", "COMPLETED"}},
		{"/ui/jobs/nosuch", 404, []string{"fake: no such job"}},
		{"/ui/jobs/" + fakeJob + "/checkpoints/0", 400, []string{"positive number"}},
		{"/ui/savepoints/r2", 404, []string{"savepoint request"}},
		{"/ui/nothing", 404, []string{"There is no page"}},
		{"/ui/static/", 404, []string{"There is no page"}},
		{"/ui/static/nothing.css", 404, []string{"There is no page"}},
	} {
		resp, body := get(t, h, tc.path)
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("GET %s: %d %q, want %d text/html", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.code)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q in\n%s", tc.path, w, body)
			}
		}
		if strings.Contains(body, hostile) || strings.Contains(body, "secret-state-bytes") || strings.Contains(body, "&lt;b&gt;") {
			t.Errorf("GET %s: unescaped markup, state bytes or an echoed query in\n%s", tc.path, body)
		}
	}
	for _, f := range []string{"style.css", "ui.js"} {
		if resp, body := get(t, h, "/ui/static/"+f); resp.StatusCode != 200 || len(body) < 100 {
			t.Errorf("GET /ui/static/%s: %d, %d bytes", f, resp.StatusCode, len(body))
		}
	}
}

// TestActions posts the job page's forms: with the page's token each
// reaches the backend and redirects to its outcome; without it, or with
// another, nothing reaches the backend.
func TestActions(t *testing.T) {
	b := &fakeBackend{}
	h := New(b)
	_, page := get(t, h, "/ui/jobs/"+fakeJob)
	m := regexp.MustCompile(`name="csrf_token" value="([0-9a-f]{32})"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no token in the job page:\n%s", page)
	}
	token := m[1]
	post := func(action string, form url.Values) *http.Response {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/ui/jobs/"+fakeJob+"/"+action, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result()
	}

	for _, form := range []url.Values{{}, {TokenField: {"00" + token[2:]}}, {TokenField: {token + "0"}}} {
		if resp := post("cancel", form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("cancel with form %v: %d, want 403", form, resp.StatusCode)
		}
	}
	if got := b.recorded(); len(got) != 0 {
		t.Fatalf("refused forms reached the backend: %v", got)
	}

	for _, tc := range []struct {
		action string
		form   url.Values
		to     string
		did    string
	}{
		{"checkpoint", url.Values{}, "/ui/jobs/" + fakeJob + "/checkpoints?triggered=10", "checkpoint " + fakeJob},
		{"savepoint", url.Values{"dir": {"file:///sp"}}, "/ui/savepoints/r1", "savepoint " + fakeJob + " file:///sp"},
		{"stop", url.Values{"dir": {""}, "drain": {"on"}}, "/ui/savepoints/r1", "stop " + fakeJob + "  drain"},
		{"cancel", url.Values{}, "/ui/jobs/" + fakeJob + "?done=cancel", "cancel " + fakeJob},
	} {
		tc.form.Set(TokenField, token)
		resp := post(tc.action, tc.form)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.to {
			t.Errorf("%s: %d to %q, want 303 to %q", tc.action, resp.StatusCode, resp.Header.Get("Location"), tc.to)
		}
		if got := b.recorded(); len(got) == 0 || got[len(got)-1] != tc.did {
			t.Errorf("%s: backend did %v, want %q last", tc.action, got, tc.did)
		}
	}
	if resp := post("explode", url.Values{TokenField: {token}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown action: %d, want 404", resp.StatusCode)
	}
	// A backend error becomes its status, on a page.
	r := httptest.NewRequest(http.MethodPost, "/ui/jobs/nosuch/checkpoint", strings.NewReader(url.Values{TokenField: {token}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "fake: no such job") {
		t.Errorf("trigger for an unknown job: %d %s", w.Code, w.Body.String())
	}
	// Another handler has another token.
	if New(b).token == token {
		t.Error("two handlers share a token")
	}
}
