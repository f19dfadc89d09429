package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// browserStarts is how many times startBrowser starts the browser before
// it gives up.
const browserStarts = 3

// startBrowser starts a headless browser and returns a context that drives
// its first tab; the test's cleanup stops it. A browser that exits before
// it listens (it crashed on the way up, as Chromium now and then does on a
// loaded machine) is started afresh, with its output logged, up to
// browserStarts times: the browser is the test's tool, not what it tests.
func startBrowser(t *testing.T, ctx context.Context, browser string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1440, 900))
	for attempt := 1; ; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		err := chromedp.Do(bctx) // no steps: starts the browser and opens its tab
		if err == nil {
			t.Cleanup(func() {
				cancelBrowser()
				cancelAlloc()
			})
			return bctx
		}
		cancelBrowser()
		cancelAlloc()
		if !strings.Contains(err.Error(), "failed to start") || attempt == browserStarts {
			t.Fatalf("browser: start %s (attempt %d of %d): %v", browser, attempt, browserStarts, err)
		}
		t.Logf("browser: start %s (attempt %d of %d) failed, starting it again: %v", browser, attempt, browserStarts, err)
	}
}

// findBrowser looks for a browser as scripts/ensure-chromium.sh does.
func findBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if fi, err := os.Stat("/usr/bin/chromium"); err == nil && fi.Mode()&0o111 != 0 {
		return "/usr/bin/chromium"
	}
	return ""
}

// spec is a checkpointed job: unbounded generated events, one-second
// event-time windows per key, CSV files. Its first deployment fails once
// (the test binaries' failure-injection operator), so that the exceptions
// page has a failure to show. The first %s is the checkpoint storage, the
// second the output directory. Checkpoints are kept long
// enough (retained) for a page to show one after REST named it.
const spec = `name: ui-window-counts
checkpointing:
  interval: 1s
  retained: 20
  storage: %q
operators:
  - uid: events
    name: Events
    type: datagen
    parallelism: 2
    config:
      rows: 0
      ratePerSecond: 2000
      seed: 7
      fields:
        - {name: key, kind: key, cardinality: 20, prefix: k}
        - {name: value, kind: random, type: int64, min: 0, max: 99}
        - {name: ts, kind: timestamp, stepMillis: 5, jitterMillis: 3}
  - uid: stamped
    type: watermarks
    parallelism: 2
    config: {timestampField: ts, maxOutOfOrderness: 50ms}
  - uid: chaos
    type: fail
    parallelism: 2
    config:
      failures:
        - {attempt: 1, subtask: 0, at: records, after: 3000}
  - uid: counts
    name: Counts per key and second
    type: tumbling_window
    parallelism: 2
    keyBy: [key]
    config:
      size: 1s
      aggregates:
        - {fn: count, as: n}
        - {fn: sum, field: value, as: total}
  - uid: out
    type: file
    parallelism: 2
    config: {path: %q, format: csv}
`

// rest reads the cluster's REST API.
type rest struct {
	t    *testing.T
	hc   *http.Client
	base string
}

func (r rest) get(path string, v any) {
	r.t.Helper()
	resp, err := r.hc.Get(r.base + path)
	if err != nil {
		r.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		r.t.Fatalf("GET %s: %d %s (%v)", path, resp.StatusCode, body, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		r.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

func (r rest) checkpoints(jobID string) view.Checkpoints {
	r.t.Helper()
	var cps view.Checkpoints
	r.get("/v1/jobs/"+jobID+"/checkpoints", &cps)
	return cps
}

// screenshotDir is where the pages' screenshots go: WEIR_UI_SCREENSHOTS
// when set, else the test's artifact directory (kept with go test
// -artifacts, under -outputdir).
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("WEIR_UI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

// TestWebUI runs a checkpointed job on a cluster of a jobmanager and two
// taskmanagers until it recovered from an injected failure, opens every page of the web UI in headless Chromium and
// compares what the pages show with the REST API's JSON: the number of
// live taskmanagers and slots, the job's state, its operators'
// parallelism, the source's rate in the graph (the configured 2000
// rows/s), checkpoint ids and statuses, the summary's count, a
// checkpoint's per-subtask statistics and critical path (exactly REST's,
// as a completed checkpoint's do not change) and its operators, the
// restarts, the last failure and the exception history (the injected
// failure among the first entry or its concurrent failures). It
// clicks "Trigger checkpoint" and checks over REST that the checkpoint it
// names was triggered by hand and completed, and checks that forged
// actions (no token; a foreign origin) are refused and change nothing.
// It saves a full-page screenshot of every page and prints their paths
// and
//
//	ui_pages=<pages visited>
func TestWebUI(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		if os.Getenv("WEIR_SKIP_UI") == "1" {
			t.Skip("no chromium, chromium-browser or google-chrome found, and WEIR_SKIP_UI=1")
		}
		t.Fatal("no chromium, chromium-browser or google-chrome found; run scripts/ensure-chromium.sh (as root it installs Debian's chromium) or set WEIR_SKIP_UI=1 to skip this test")
	}
	shots := screenshotDir(t)

	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "info"})
	hc := c.HTTPClient()
	base := c.URL(c.REST)
	api := rest{t: t, hc: hc, base: base}

	// Submitted over REST as the YAML it is.
	dir := t.TempDir()
	body := fmt.Sprintf(spec, "file://"+filepath.Join(dir, "checkpoints"), filepath.Join(dir, "out"))
	resp, err := hc.Post(base+"/v1/jobs", "application/yaml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var submitted struct {
		JobID string `json:"jobId"`
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &submitted) != nil || submitted.JobID == "" {
		t.Fatalf("POST /v1/jobs: %d %s", resp.StatusCode, data)
	}
	jobID := submitted.JobID
	polltest.Eventually(t, 90*time.Second, "job "+jobID+" to run again after its failure, with two completed checkpoints", func() bool {
		var d view.JobDetail
		api.get("/v1/jobs/"+jobID, &d)
		if d.Job.State == "FAILED" || d.Job.State == "CANCELED" {
			t.Fatalf("job %s ended %s: %s", jobID, d.Job.State, d.Job.Error)
		}
		return d.Job.State == "RUNNING" && d.Job.Restarts >= 1 && d.Job.TasksRunning == d.Job.TasksTotal && api.checkpoints(jobID).Completed >= 2
	})

	// The source's rate, measured by the jobmanager from heartbeats,
	// settles at the configured 2000 rows a second.
	sourceRate := func(d view.JobDetail) float64 {
		var sum float64
		for _, task := range d.Tasks {
			if task.VertexID == 0 {
				sum += task.RecordsOutPerSec
			}
		}
		return sum
	}
	polltest.Eventually(t, 60*time.Second, "the source's rate to be about 2000 rows/s", func() bool {
		var d view.JobDetail
		api.get("/v1/jobs/"+jobID, &d)
		r := sourceRate(d)
		return r >= 1000 && r <= 4000
	})

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bctx := startBrowser(t, ctx, browser)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("browser: text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	number := func(sel string) int64 {
		t.Helper()
		s := text(sel)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s shows %q, not a number", sel, s)
		}
		return n
	}
	// eval runs js in the page and decodes its value into v.
	eval := func(js string, v any) {
		t.Helper()
		raw, err := chromedp.Run(bctx, chromedp.Evaluate[json.RawMessage](js))
		if err == nil {
			err = json.Unmarshal(raw, v)
		}
		if err != nil {
			t.Fatalf("browser: evaluate %s: %v", js, err)
		}
	}

	pages := 0
	var files []string
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Fatalf("browser: screenshot of %s: %v", name, err)
		}
		f := filepath.Join(shots, fmt.Sprintf("%02d-%s.png", len(files)+1, name))
		if err := os.WriteFile(f, png, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// visit opens a page, checks it is not an error page, runs check and
	// takes the screenshot.
	visit := func(name, path string, check func()) {
		t.Helper()
		do("open "+path, chromedp.Navigate(base+path), chromedp.WaitReady(chromedp.CSS("footer")))
		var errors int
		eval(`document.querySelectorAll("#error-message").length`, &errors)
		if errors != 0 {
			t.Fatalf("%s is an error page: %s", path, text("#error-message"))
		}
		check()
		shoot(name)
		pages++
	}

	visit("overview", "/ui/", func() {
		var o view.Overview
		api.get("/v1/overview", &o)
		if got := number("#tm-live"); got != int64(o.TaskManagersLive) || got != 2 {
			t.Errorf("overview: %d live taskmanagers, REST says %d (want 2)", got, o.TaskManagersLive)
		}
		if got := number("#slots-total"); got != int64(o.SlotsTotal) {
			t.Errorf("overview: %d slots, REST says %d", got, o.SlotsTotal)
		}
		if got := number("#jobs-RUNNING"); got != int64(o.Jobs["RUNNING"]) || got != 1 {
			t.Errorf("overview: %d running jobs, REST says %d (want 1)", got, o.Jobs["RUNNING"])
		}
	})
	visit("taskmanagers", "/ui/taskmanagers", func() {
		var tms struct {
			TaskManagers []view.TaskManager `json:"taskmanagers"`
		}
		api.get("/v1/taskmanagers", &tms)
		var rows [][]string // id, status, slots
		eval(`[...document.querySelectorAll("#taskmanagers tbody tr")].map(r => [r.dataset.tm, r.querySelector(".tm-status").textContent.trim(), r.querySelector(".tm-slots").textContent.trim()])`, &rows)
		var want [][]string
		for _, tm := range tms.TaskManagers {
			status := "LIVE"
			if !tm.Live {
				status = "LOST"
			} else if tm.Suspected {
				status = "SUSPECTED"
			}
			want = append(want, []string{tm.ID, status, strconv.Itoa(tm.SlotsTotal)})
		}
		if !slices.EqualFunc(rows, want, slices.Equal) {
			t.Errorf("taskmanagers page shows %v, REST says %v", rows, want)
		}
		// Memory: the resident set changes between two heartbeats, the
		// network memory budget does not.
		var mem [][]string // id, rss, budget
		eval(`[...document.querySelectorAll("#taskmanagers tbody tr")].map(r => [r.dataset.tm, r.querySelector(".tm-memory").dataset.rss || "", r.querySelector(".tm-network").dataset.budget || ""])`, &mem)
		for i, tm := range tms.TaskManagers {
			if !tm.Live {
				continue
			}
			if tm.Memory == nil || tm.Memory.RSSBytes <= 0 || tm.Memory.HeapBytes <= 0 || tm.Memory.NetworkMemoryBytes <= 0 {
				t.Errorf("REST taskmanager %s memory %+v: want resident set, heap and network budget", tm.ID, tm.Memory)
				continue
			}
			if i >= len(mem) || mem[i][0] != tm.ID || mem[i][2] != strconv.FormatInt(tm.Memory.NetworkMemoryBytes, 10) {
				t.Errorf("taskmanagers page memory %v, REST says %s has a %d-byte network budget", mem, tm.ID, tm.Memory.NetworkMemoryBytes)
			} else if rss, err := strconv.ParseInt(mem[i][1], 10, 64); err != nil || rss <= 0 {
				t.Errorf("taskmanagers page shows resident set %q for %s", mem[i][1], tm.ID)
			}
		}
	})
	visit("jobs", "/ui/jobs", func() {
		var jobs struct {
			Jobs []view.Job `json:"jobs"`
		}
		api.get("/v1/jobs", &jobs)
		if len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != jobID {
			t.Fatalf("REST lists %+v, want job %s only", jobs.Jobs, jobID)
		}
		if got := text(`tr[data-job="` + jobID + `"] .job-state`); got != jobs.Jobs[0].State {
			t.Errorf("jobs page: state %q, REST says %q", got, jobs.Jobs[0].State)
		}
	})
	var token string
	visit("job", "/ui/jobs/"+jobID, func() {
		var d view.JobDetail
		api.get("/v1/jobs/"+jobID, &d)
		if got := text("#job-state"); got != d.Job.State || got != "RUNNING" {
			t.Errorf("job page: state %q, REST says %q (want RUNNING)", got, d.Job.State)
		}
		var ops [][]string // uid, parallelism
		eval(`[...document.querySelectorAll("#operators tbody tr")].map(r => [r.dataset.uid, r.querySelector(".op-parallelism").textContent.trim()])`, &ops)
		var want [][]string
		for _, v := range d.Vertices {
			want = append(want, []string{v.UID, strconv.Itoa(v.Parallelism)})
		}
		if !slices.EqualFunc(ops, want, slices.Equal) || len(ops) != 5 {
			t.Errorf("job page: operators %v, REST says %v", ops, want)
		}
		var tasks int
		eval(`document.querySelectorAll("#tasks tbody tr").length`, &tasks)
		if tasks != len(d.Tasks) {
			t.Errorf("job page: %d tasks, REST says %d", tasks, len(d.Tasks))
		}
		// The graph box of the source shows its rate (the configured
		// 2000 rows/s), and every task a backpressure percentage.
		var boxes [][]string // uid, out rate, backpressure
		eval(`[...document.querySelectorAll("#graph .op")].map(o => [o.dataset.uid, o.querySelector(".op-out-rate").textContent.trim(), o.querySelector(".op-bp").textContent.trim()])`, &boxes)
		if len(boxes) != len(d.Vertices) {
			t.Errorf("job page: %d graph boxes, REST says %d operators", len(boxes), len(d.Vertices))
		}
		for _, b := range boxes {
			if !strings.HasPrefix(b[2], "backpressure ") || !strings.HasSuffix(b[2], "%") {
				t.Errorf("job page: box %s shows %q", b[0], b[2])
			}
			if b[0] != "events" {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(b[1], "out "), "/s"), 64)
			if err != nil || v < 1000 || v > 4000 {
				t.Errorf("job page: the source's box shows %q, want about 2000/s (REST now: %.0f/s)", b[1], sourceRate(d))
			}
		}
		var bps []string
		eval(`[...document.querySelectorAll("#tasks tbody tr .task-bp")].map(c => c.textContent.trim())`, &bps)
		for _, bp := range bps {
			if v, err := strconv.Atoi(strings.TrimSuffix(bp, "%")); err != nil || v < 0 || v > 100 {
				t.Errorf("job page: a task's backpressure shows %q", bp)
			}
		}
		attr, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`input[name="csrf_token"]`), "value"))
		if err != nil {
			t.Fatalf("browser: the token: %v", err)
		}
		token = attr.Value
		if !attr.Exists || len(token) < 16 {
			t.Fatalf("job page: no anti-forgery token (%q)", token)
		}
	})
	// The page is rendered between before and after; shown is a completed
	// checkpoint it lists.
	before := api.checkpoints(jobID)
	var shown int64
	visit("checkpoints", "/ui/jobs/"+jobID+"/checkpoints", func() {
		after := api.checkpoints(jobID)
		completed := number("#cp-completed")
		if completed < before.Completed || completed > after.Completed || completed < 2 {
			t.Errorf("checkpoints page: %d completed; REST said %d before and %d after", completed, before.Completed, after.Completed)
		}
		var rows [][]string // id, status
		eval(`[...document.querySelectorAll("#cp-history tbody tr")].map(r => [r.dataset.id, r.querySelector(".cp-status span").textContent.trim()])`, &rows)
		status := make(map[string]string)
		for _, ck := range after.Checkpoints {
			status[strconv.FormatInt(ck.ID, 10)] = ck.Status
		}
		for _, r := range rows {
			// What completed or failed stays so; one in progress may have
			// ended since.
			if got := status[r[0]]; got != r[1] && r[1] != "IN_PROGRESS" {
				t.Errorf("checkpoints page: checkpoint %s %s, REST says %q", r[0], r[1], got)
			}
			if r[1] == "COMPLETED" && shown == 0 {
				shown, _ = strconv.ParseInt(r[0], 10, 64)
			}
		}
		if shown == 0 {
			t.Fatalf("checkpoints page lists no completed checkpoint: %v", rows)
		}
		if got := text("#cp-interval"); got != "1.0 s" || after.Config.IntervalMs != 1000 {
			t.Errorf("checkpoints page: interval %q, REST says %d ms", got, after.Config.IntervalMs)
		}
		// The summary counts the completed checkpoints of the history.
		if got := number("#cp-summary-count"); got < int64(before.Summary.EndToEndMs.Count) || got > int64(after.Summary.EndToEndMs.Count) || got < 2 {
			t.Errorf("checkpoints page: summary over %d checkpoints; REST said %d before and %d after", got,
				before.Summary.EndToEndMs.Count, after.Summary.EndToEndMs.Count)
		}
		var summaryRows int
		eval(`document.querySelectorAll("#cp-summary tbody tr").length`, &summaryRows)
		if summaryRows != 7 {
			t.Errorf("checkpoints page: %d summary rows, want 7", summaryRows)
		}
	})
	visit("checkpoint", fmt.Sprintf("/ui/jobs/%s/checkpoints/%d", jobID, shown), func() {
		var m struct {
			Manifest struct {
				CheckpointID string `json:"checkpointId"` // protojson: int64 as a string
				Operators    []struct {
					OperatorUID string `json:"operatorUid"`
				} `json:"operators"`
			} `json:"manifest"`
		}
		api.get(fmt.Sprintf("/v1/jobs/%s/checkpoints/%d", jobID, shown), &m)
		if got := text("#manifest-id"); got != m.Manifest.CheckpointID {
			t.Errorf("checkpoint page: id %q, REST says %q", got, m.Manifest.CheckpointID)
		}
		var uids, want []string
		eval(`[...document.querySelectorAll("section.operator")].map(s => s.dataset.uid)`, &uids)
		for _, op := range m.Manifest.Operators {
			want = append(want, op.OperatorUID)
		}
		if !slices.Equal(uids, want) || len(uids) == 0 {
			t.Errorf("checkpoint page: operators %v, REST says %v", uids, want)
		}
		// The statistics of a completed checkpoint do not change: the
		// page's rows are REST's, exactly.
		var st view.CheckpointStats
		api.get(fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/stats", jobID, shown), &st)
		if got := text("#cps-status"); got != st.Status || got != "COMPLETED" {
			t.Errorf("checkpoint page: status %q, REST says %q", got, st.Status)
		}
		var rows [][]string // task, subtask, end to end, start delay, bytes
		eval(`[...document.querySelectorAll("section.cp-task tbody tr[data-e2e]")].map(r => [r.closest("section").dataset.task, r.dataset.subtask, r.dataset.e2e, r.dataset.delay, r.dataset.bytes])`, &rows)
		var wantRows [][]string
		for _, task := range st.Tasks {
			for _, s := range task.Subtasks {
				if s.Acknowledged {
					wantRows = append(wantRows, []string{strconv.Itoa(task.TaskID), strconv.Itoa(s.Subtask), strconv.FormatInt(s.EndToEndMs, 10),
						strconv.FormatInt(s.StartDelayMs, 10), strconv.FormatInt(s.StateBytes, 10)})
				}
			}
		}
		if !slices.EqualFunc(rows, wantRows, slices.Equal) || len(rows) == 0 {
			t.Errorf("checkpoint page: subtask rows %v, REST says %v", rows, wantRows)
		}
		var ex view.CheckpointExplain
		api.get(fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/explain", jobID, shown), &ex)
		var path [][]string // phase, ms
		eval(`[...document.querySelectorAll("#cp-path .step[data-phase]")].map(s => [s.dataset.phase, s.dataset.ms])`, &path)
		var wantPath [][]string
		for _, p := range ex.Path {
			wantPath = append(wantPath, []string{p.Name, strconv.FormatInt(p.Ms, 10)})
		}
		if !slices.EqualFunc(path, wantPath, slices.Equal) || len(path) != 5 {
			t.Errorf("checkpoint page: critical path %v, REST says %v", path, wantPath)
		}
		var dominant string
		eval(`document.querySelector("#cp-path .step.dominant").dataset.phase`, &dominant)
		if dominant != ex.Dominant {
			t.Errorf("checkpoint page: dominant phase %q, REST says %q", dominant, ex.Dominant)
		}
	})
	visit("exceptions", "/ui/jobs/"+jobID+"/exceptions", func() {
		var d view.JobDetail
		api.get("/v1/jobs/"+jobID, &d)
		if got := number("#exc-restarts"); got != d.Job.Restarts || got < 1 {
			t.Errorf("exceptions page: %d restarts, REST says %d (want at least 1)", got, d.Job.Restarts)
		}
		if got := text("#exc-last-failure"); got != d.Job.LastFailure || got == "" {
			t.Errorf("exceptions page: last failure %q, REST says %q", got, d.Job.LastFailure)
		}
		if got := text("#exc-state"); got != d.Job.State {
			t.Errorf("exceptions page: state %q, REST says %q", got, d.Job.State)
		}
		var ex struct {
			Exceptions []view.Exception `json:"exceptions"`
		}
		api.get("/v1/jobs/"+jobID+"/exceptions", &ex)
		var rows [][]string // time, scope
		eval(`[...document.querySelectorAll("#exc-history tbody tr")].map(r => [r.dataset.time, r.dataset.scope])`, &rows)
		var want [][]string
		for _, e := range ex.Exceptions {
			want = append(want, []string{strconv.FormatInt(e.TimeMs, 10), e.Scope})
		}
		if !slices.EqualFunc(rows, want, slices.Equal) || len(rows) < 1 {
			t.Errorf("exceptions page: history %v, REST says %v", rows, want)
		}
		// The injected failure: chaos subtask 0 of the first deployment.
		// The injected failure (chaos, subtask 0, deployment 1) is the
		// first failure or one reported while it was handled (the
		// downstream task may report its broken input first).
		if n := len(ex.Exceptions); n > 0 {
			first := ex.Exceptions[n-1]
			found := strings.Contains(first.Task, "chaos") && first.Deployment == 1 && strings.Contains(first.Cause, "injected failure")
			for _, f := range first.Concurrent {
				found = found || strings.Contains(f.Task, "chaos") && f.Deployment == 1 && strings.Contains(f.Cause, "injected failure")
			}
			if !found {
				t.Errorf("exceptions: the first failure is %+v; chaos's injected failure in deployment 1 is not it or among its concurrent failures", first)
			}
		}
	})

	// The action: click, land on the checkpoints page that names the
	// checkpoint. While a periodic one is in progress the trigger is
	// refused (409 on an error page): click again.
	var triggered int64
	notice := regexp.MustCompile(`^Checkpoint (\d+) was triggered\.$`)
	polltest.NoError(t, 60*time.Second, "a checkpoint triggered from the job page", func() error {
		do("click trigger", chromedp.Navigate(base+"/ui/jobs/"+jobID), chromedp.WaitReady(chromedp.CSS("#trigger-checkpoint")),
			chromedp.Click(chromedp.CSS("#trigger-checkpoint")), chromedp.WaitReady(chromedp.CSS("#notice, #error-message")))
		var outcome []string
		eval(`[...document.querySelectorAll("#notice, #error-message")].map(e => e.id + "=" + e.textContent.trim())`, &outcome)
		if len(outcome) != 1 {
			return fmt.Errorf("after the click the page shows %v", outcome)
		}
		id, msg, _ := strings.Cut(outcome[0], "=")
		if id == "error-message" {
			if strings.Contains(msg, "in progress") {
				return fmt.Errorf("refused: %s", msg)
			}
			t.Fatalf("trigger refused: %s", msg)
		}
		m := notice.FindStringSubmatch(msg)
		if m == nil {
			t.Fatalf("notice %q", msg)
		}
		triggered, _ = strconv.ParseInt(m[1], 10, 64)
		return nil
	})
	// The page that names the checkpoint, fully laid out.
	do("the page after the click", chromedp.WaitReady(chromedp.CSS("footer")), chromedp.WaitVisible(chromedp.CSS("#notice")))
	shoot("checkpoint-triggered")
	polltest.NoError(t, 60*time.Second, fmt.Sprintf("checkpoint %d to complete", triggered), func() error {
		for _, ck := range api.checkpoints(jobID).Checkpoints {
			if ck.ID != triggered {
				continue
			}
			switch {
			case !ck.Manual:
				t.Fatalf("checkpoint %d is not marked manual: %+v", triggered, ck)
			case ck.Status == "FAILED":
				t.Fatalf("checkpoint %d failed: %s", triggered, ck.Failure)
			case ck.Status == "COMPLETED":
				return nil
			}
			return fmt.Errorf("checkpoint %d is %s", triggered, ck.Status)
		}
		return fmt.Errorf("REST does not list checkpoint %d", triggered)
	})

	// Forged actions: a form without the token, and one with it from a
	// foreign origin. Neither may cancel the job.
	forged := []struct {
		what   string
		form   url.Values
		header map[string]string
	}{
		{"no token", url.Values{}, nil},
		{"a wrong token", url.Values{"csrf_token": {strings.Repeat("0", len(token))}}, nil},
		{"a foreign Origin", url.Values{"csrf_token": {token}}, map[string]string{"Origin": "http://evil.example"}},
		{"Sec-Fetch-Site cross-site", url.Values{"csrf_token": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	}
	for _, f := range forged {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/ui/jobs/"+jobID+"/cancel", strings.NewReader(f.form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range f.header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("cancel with %s: %d, want 403", f.what, resp.StatusCode)
		}
	}
	var d view.JobDetail
	api.get("/v1/jobs/"+jobID, &d)
	if d.Job.State != "RUNNING" {
		t.Errorf("after the forged cancels the job is %s, want RUNNING", d.Job.State)
	}

	for _, f := range files {
		fmt.Printf("screenshot %s\n", f)
	}
	fmt.Printf("ui_pages=%d\n", pages)
	if pages < 6 {
		t.Errorf("visited %d pages, want at least 6", pages)
	}
}
