package jobmanager

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/taskmanager/taskmanagertest"
)

// restSpec is a YAML job spec of the test registry's types: the same
// graph as pipeline(t, 2, 4).
const restSpec = `name: pipeline
operators:
  - {uid: src, type: gen, parallelism: 2}
  - {uid: map, type: pass, parallelism: 2}
  - {uid: window, type: count, parallelism: 4, keyBy: [k]}
  - {uid: sink, type: discard, parallelism: 4}
`

// restCall sends a request with an optional body and headers and returns
// the status and the body, which must be a JSON object.
func restCall(t *testing.T, method, url, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s: %d with a body that is not a JSON object: %q", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode, out
}

// TestRESTSubmitAndCancel submits a YAML spec over REST and cancels the
// job: the job runs with the spec's graph (checked over gRPC), a refused
// submission leaves no job behind, and cancel answers 404, 202 and 409 as
// the job's state says.
func TestRESTSubmitAndCancel(t *testing.T) {
	c := startJobManager(t, nil)
	taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 4)
	base := "http://" + c.jm.RESTAddr()

	code, body := restCall(t, http.MethodPost, base+"/v1/jobs", restSpec, map[string]string{"Content-Type": "application/yaml"})
	id, _ := body["jobId"].(string)
	if code != http.StatusCreated || id == "" {
		t.Fatalf("POST /v1/jobs: %d %v", code, body)
	}
	got := c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	var uids []string
	for _, v := range got.GetGraph().GetVertices() {
		uids = append(uids, v.GetUid())
	}
	if got.GetJob().GetName() != "pipeline" || !slices.Equal(uids, []string{"src", "map", "window", "sink"}) || len(got.GetTasks()) != 6 {
		t.Fatalf("submitted job: name %q, operators %v, %d tasks; want pipeline, [src map window sink], 6", got.GetJob().GetName(), uids, len(got.GetTasks()))
	}

	refused := []struct {
		name, query, spec string
		code              int
		want              string // in the error
	}{
		{"no operators", "", "name: x\n", http.StatusBadRequest, "job spec:"},
		{"unknown type", "", "name: x\noperators:\n  - {uid: a, type: nosuch}\n", http.StatusBadRequest, "job spec:3"},
		{"not YAML", "", "{[", http.StatusBadRequest, "job spec:"},
		{"too large", "", "name: x\n# " + strings.Repeat("x", jobspec.MaxSpecBytes) + "\n", http.StatusRequestEntityTooLarge, "larger than"},
		{"allow without from", "?allowNonRestoredState=true", restSpec, http.StatusBadRequest, "needs fromCheckpoint"},
		{"allow not a bool", "?fromCheckpoint=x@1&allowNonRestoredState=maybe", restSpec, http.StatusBadRequest, "true or false"},
		{"from an unknown job", "?fromCheckpoint=0123456789abcdef@1", restSpec, 0, ""},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, body := restCall(t, http.MethodPost, base+"/v1/jobs"+tc.query, tc.spec, nil)
			msg, _ := body["error"].(string)
			if code < 400 || code >= 500 || (tc.code != 0 && code != tc.code) || !strings.Contains(msg, tc.want) {
				t.Errorf("POST /v1/jobs%s: %d %q, want %d with %q", tc.query, code, msg, tc.code, tc.want)
			}
		})
	}
	var jobs struct {
		Jobs []restJob `json:"jobs"`
	}
	getJSON(t, base+"/v1/jobs", 200, &jobs)
	if len(jobs.Jobs) != 1 {
		t.Fatalf("%d jobs after refused submissions, want 1: %+v", len(jobs.Jobs), jobs.Jobs)
	}

	if code, body := restCall(t, http.MethodPost, base+"/v1/jobs/0123456789abcdef/cancel", "", nil); code != http.StatusNotFound {
		t.Errorf("cancel of an unknown job: %d %v, want 404", code, body)
	}
	if code, body := restCall(t, http.MethodPost, base+"/v1/jobs/"+id+"/cancel", "", nil); code != http.StatusAccepted || body["jobId"] != id {
		t.Fatalf("cancel: %d %v, want 202 with the job id", code, body)
	}
	c.waitState(id, weirpb.JobState_JOB_STATE_CANCELED)
	if code, body := restCall(t, http.MethodPost, base+"/v1/jobs/"+id+"/cancel", "", nil); code != http.StatusConflict {
		t.Errorf("cancel of a cancelled job: %d %v, want 409", code, body)
	}
}

// TestRESTCrossOrigin checks that a browser's cross-origin POST is refused
// before it reaches a handler, that same-origin and non-browser ones are
// not, and that only browsers are sent from / to the UI.
func TestRESTCrossOrigin(t *testing.T) {
	c := startJobManager(t, nil)
	base := "http://" + c.jm.RESTAddr()

	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "http://evil.example"},
	} {
		code, body := restCall(t, http.MethodPost, base+"/v1/jobs", restSpec, h)
		if msg, _ := body["error"].(string); code != http.StatusForbidden || !strings.Contains(msg, "cross-origin") {
			t.Errorf("POST /v1/jobs with %v: %d %v, want 403", h, code, body)
		}
	}
	// Same origin, and no browser headers at all: the handler answers (the
	// job is unknown).
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "same-origin", "Origin": base},
		nil,
	} {
		if code, body := restCall(t, http.MethodPost, base+"/v1/jobs/0123456789abcdef/cancel", "", h); code != http.StatusNotFound {
			t.Errorf("POST cancel with %v: %d %v, want 404", h, code, body)
		}
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		accept string
		code   int
	}{
		{"text/html,application/xhtml+xml", http.StatusSeeOther},
		{"application/json", http.StatusNotFound},
		{"", http.StatusNotFound},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || (tc.code == http.StatusSeeOther && resp.Header.Get("Location") != "/ui/") {
			t.Errorf("GET / with Accept %q: %d to %q, want %d", tc.accept, resp.StatusCode, resp.Header.Get("Location"), tc.code)
		}
	}
}

// TestRESTCheckpointsDocument checks what GET /v1/jobs/{id}/checkpoints
// adds to the gRPC listing: the job's settings with defaults, the latest
// and retained checkpoints, and the coordinator's per-checkpoint maxima.
func TestRESTCheckpointsDocument(t *testing.T) {
	c, _, dir := startCheckpointCluster(t)
	id := c.submit(checkpointedPipeline(t), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	done := c.waitCompleted(id, 0)
	base := "http://" + c.jm.RESTAddr()

	var list restCheckpoints
	getJSON(t, base+"/v1/jobs/"+id+"/checkpoints", 200, &list)
	cfg := list.Config
	if cfg.IntervalMs != 30 || cfg.TimeoutMs != 600_000 || cfg.MaxConcurrent != 1 || cfg.Mode != "exactly_once" || cfg.Retained != 1 ||
		cfg.Retention != "delete" || cfg.OnCorruption != "fail" || cfg.Storage != "file://"+dir {
		t.Errorf("config %+v", cfg)
	}
	if list.Latest < done.CheckpointId || len(list.Retained) == 0 || !slices.Contains(list.Retained, list.Latest) {
		t.Errorf("latest %d, retained %v; want at least %d, and retained to hold the latest", list.Latest, list.Retained, done.CheckpointId)
	}
	for _, ck := range list.Checkpoints {
		if ck.Manual {
			t.Errorf("checkpoint %d is manual; none was triggered by hand", ck.ID)
		}
	}
}
