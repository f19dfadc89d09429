package ops

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// opsSpec is a checkpointed, bounded job with late data: event times
// jitter by up to 400 ms while watermarks allow none, so the 100 ms
// windows drop rows as late, to their side output. Each subtask of chaos
// fails once after 8000 rows (about 4 s in), so the job restarts from a
// checkpoint; it ends after about 10 s.
const opsSpec = `name: ops-metrics
parallelism: 2
checkpointing:
  interval: 300ms
  storage: %q
restartStrategy:
  type: fixed-delay
  attempts: 5
  delay: 200ms
operators:
  - uid: events
    type: datagen
    config:
      rows: 40000
      ratePerSecond: 4000
      seed: 3
      batchSize: 100
      fields:
        - {name: key, kind: key, cardinality: 8, prefix: k}
        - {name: ts, kind: timestamp, start: "2026-01-01T00:00:00Z", stepMillis: 1, jitterMillis: 400}
  - uid: stamped
    type: watermarks
    config: {timestampField: ts, maxOutOfOrderness: 0s}
  - uid: chaos
    type: fail
    config:
      failures:
        - {attempt: 1, at: records, after: 8000}
  - uid: counts
    type: tumbling_window
    keyBy: [key]
    config: {size: 100ms, aggregates: [{fn: count, as: n}]}
  - uid: out
    type: file
    config: {path: %q, format: csv}
  - uid: late-out
    type: file
    input: counts.late
    config: {path: %q, format: jsonl}
`

// The documents of the REST API this test reads.
type (
	restJob struct {
		Job struct {
			State    string `json:"state"`
			Restarts int64  `json:"restarts"`
		} `json:"job"`
		Tasks []struct {
			Name          string `json:"name"`
			Subtask       int    `json:"subtask"`
			State         string `json:"state"`
			TaskManagerID string `json:"taskmanagerId"`
			RecordsIn     int64  `json:"recordsIn"`
			RecordsOut    int64  `json:"recordsOut"`
		} `json:"tasks"`
	}
	restCheckpoints struct {
		Completed    int64 `json:"completed"`
		Failed       int64 `json:"failed"`
		RestoredFrom int64 `json:"restoredFrom"`
	}
	restTaskManager struct {
		ID   string `json:"id"`
		Live bool   `json:"live"`
	}
)

// scrape is one process's /metrics.
type scrape struct {
	name     string
	families map[string]*dto.MetricFamily
}

// value returns the sum of the samples of family name whose labels
// include want (counter, gauge or untyped), and how many there were.
func (s scrape) value(name string, want map[string]string) (sum float64, n int) {
	for _, m := range s.families[name].GetMetric() {
		labels := make(map[string]string)
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		n++
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, n
}

type env struct {
	t      *testing.T
	c      *clustertest.Cluster
	client *http.Client
}

func (e env) get(url string, v any) {
	e.t.Helper()
	resp, err := e.client.Get(url)
	if err != nil {
		e.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		e.t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if v == nil {
		return
	}
	if err := json.Unmarshal(body, v); err != nil {
		e.t.Fatalf("GET %s: %v", url, err)
	}
}

func (e env) metrics(name, url string) scrape {
	e.t.Helper()
	resp, err := e.client.Get(url)
	if err != nil {
		e.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		e.t.Fatalf("%s: parsing /metrics: %v", name, err)
	}
	return scrape{name: name, families: mfs}
}

func (e env) jobManager() scrape { return e.metrics("jobmanager", e.c.URL(e.c.REST)+"/metrics") }

// taskManagers scrapes every taskmanager, by id.
func (e env) taskManagers() map[string]scrape {
	out := make(map[string]scrape)
	for i := range e.c.TMs {
		id := fmt.Sprintf("tm-%d", i)
		out[id] = e.metrics(id, e.c.URL(e.c.TaskManagerMetricsAddr(i))+"/metrics")
	}
	return out
}

func (e env) checkpoints(job string) restCheckpoints {
	var v restCheckpoints
	e.get(e.c.URL(e.c.REST)+"/v1/jobs/"+job+"/checkpoints", &v)
	return v
}

func (e env) job(job string) restJob {
	var v restJob
	e.get(e.c.URL(e.c.REST)+"/v1/jobs/"+job, &v)
	return v
}

// TestMetricsDashboardAndAlerts runs a checkpointed job with late data and
// a restart on a real cluster, then checks that every metric the alerting
// rules and the dashboard use is served, and metric values against the
// REST API.
func TestMetricsDashboardAndAlerts(t *testing.T) {
	start := time.Now()
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 4, LogLevel: "info"})
	t.Logf("cluster up after %v", time.Since(start).Round(time.Millisecond))
	e := env{t: t, c: c, client: c.HTTPClient()}
	dir := t.TempDir()
	lateDir := filepath.Join(dir, "late")
	spec := filepath.Join(dir, "job.yaml")
	body := fmt.Sprintf(opsSpec, "file://"+filepath.Join(dir, "ckpt"), filepath.Join(dir, "out"), lateDir)
	if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := c.Weir("submit", spec)
	if err != nil {
		t.Fatalf("weir submit: %v\n%s", err, out)
	}
	fields := strings.Fields(out)
	id := fields[len(fields)-1]

	// Once the job restarted from a checkpoint and completed more since,
	// every series exists: restores, snapshots, late records.
	var restored int64
	completedAtRestart := int64(-1)
	polltest.Eventually(t, 90*time.Second, "a restart from a checkpoint and two checkpoints after it", func() bool {
		j := e.job(id)
		if j.Job.State == "FINISHED" || j.Job.State == "FAILED" {
			t.Fatalf("job %s ended (%s) before the checks; slow the source down", id, j.Job.State)
		}
		if j.Job.Restarts < 1 || j.Job.State != "RUNNING" {
			return false
		}
		ck := e.checkpoints(id)
		if ck.RestoredFrom == 0 {
			t.Fatalf("the job restarted without restoring a checkpoint; make chaos fail later")
		}
		restored = ck.RestoredFrom
		if completedAtRestart < 0 {
			completedAtRestart = ck.Completed
		}
		return ck.Completed >= completedAtRestart+2
	})
	t.Logf("restarted and checkpointed after %v", time.Since(start).Round(time.Millisecond))
	before := e.checkpoints(id)
	jmScrape := e.jobManager()
	after := e.checkpoints(id)
	tms := e.taskManagers()
	jobLabel := map[string]string{"job": id}

	// (b) Values against REST, read before and after the scrape.
	completed, n := jmScrape.value("weir_checkpoints_completed_total", jobLabel)
	if n != 1 || completed < float64(before.Completed) || completed > float64(after.Completed) {
		t.Errorf("weir_checkpoints_completed_total %v (%d series); REST says %d before the scrape and %d after",
			completed, n, before.Completed, after.Completed)
	}
	// REST's failed counts the aborted checkpoints too.
	failed, _ := jmScrape.value("weir_checkpoints_failed_total", jobLabel)
	aborted, _ := jmScrape.value("weir_checkpoints_aborted_total", jobLabel)
	if failed+aborted < float64(before.Failed) || failed+aborted > float64(after.Failed) {
		t.Errorf("weir_checkpoints_failed_total %v + weir_checkpoints_aborted_total %v; REST says %d failed before the scrape and %d after",
			failed, aborted, before.Failed, after.Failed)
	}
	if got, _ := jmScrape.value("weir_checkpoint_restored_id", jobLabel); got != float64(restored) {
		t.Errorf("weir_checkpoint_restored_id %v, REST restoredFrom %d", got, restored)
	}
	if got, _ := jmScrape.value("weir_job_restarts_total", jobLabel); got < 1 || got > float64(e.job(id).Job.Restarts) {
		t.Errorf("weir_job_restarts_total %v; REST says %d restarts", got, e.job(id).Job.Restarts)
	}
	// GET /v1/taskmanagers: {"taskmanagers": [...]} (a bare list before).
	var raw json.RawMessage
	e.get(c.URL(c.REST)+"/v1/taskmanagers", &raw)
	var tmList []restTaskManager
	if json.Unmarshal(raw, &tmList) != nil {
		var doc struct {
			TaskManagers []restTaskManager `json:"taskmanagers"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("GET /v1/taskmanagers: %v", err)
		}
		tmList = doc.TaskManagers
	}
	live := 0
	for _, tm := range tmList {
		if tm.Live {
			live++
		}
	}
	if got, _ := jmScrape.value("weir_taskmanagers_live", nil); got != float64(live) || live != 2 {
		t.Errorf("weir_taskmanagers_live %v, REST lists %d live taskmanagers (want 2)", got, live)
	}
	var restoreSeries int
	for _, s := range tms {
		_, n := s.value("weir_task_restore_duration_seconds", jobLabel)
		restoreSeries += n
	}
	if restoreSeries == 0 {
		t.Error("no taskmanager has weir_task_restore_duration_seconds for the restored job")
	}
	if state, _ := sumOver(tms, "weir_operator_state_bytes", map[string]string{"job": id, "operator": "counts"}); state <= 0 {
		t.Errorf("weir_operator_state_bytes of the window operator: %v, want > 0", state)
	}

	// (a) Every metric the rules and the dashboard use is served, and
	// every process serves the Go runtime's and the process's metrics.
	families := make(map[string]dto.MetricType)
	for _, s := range append([]scrape{jmScrape}, mapValues(tms)...) {
		for name, mf := range s.families {
			families[name] = mf.GetType()
		}
		for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
			if _, ok := s.families[name]; !ok {
				t.Errorf("%s does not serve %s", s.name, name)
			}
		}
	}
	used := usedMetrics(t)
	var missing []string
	checked := make(map[string]bool)
	for _, u := range used {
		fam, ok := familyOf(u.name, families)
		if !ok {
			missing = append(missing, fmt.Sprintf("%s (%s)", u.name, u.where))
			continue
		}
		checked[fam] = true
	}
	if len(missing) > 0 {
		t.Errorf("metrics used but not served by any process:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(checked) < 30 {
		t.Errorf("only %d metric names found in the rules and the dashboard; the extraction lost some", len(checked))
	}

	// The job finishes; then the sinks' final record counts are what REST
	// reports, read on the taskmanager that ran each subtask.
	polltest.Eventually(t, 90*time.Second, "the job to finish", func() bool {
		s := e.job(id).Job.State
		if s == "FAILED" || s == "CANCELED" {
			t.Fatalf("job %s ended %s", id, s)
		}
		return s == "FINISHED"
	})
	t.Logf("finished after %v", time.Since(start).Round(time.Millisecond))
	final := e.job(id)
	tms = e.taskManagers()
	sinks := 0
	for _, task := range final.Tasks {
		base, _, _ := strings.Cut(task.Name, " (")
		if base != "out" && base != "late-out" {
			continue
		}
		sinks++
		s, ok := tms[task.TaskManagerID]
		if !ok {
			t.Fatalf("task %s ran on %q, which is not a taskmanager of the cluster", task.Name, task.TaskManagerID)
		}
		labels := map[string]string{"job": id, "task": base, "subtask": fmt.Sprint(task.Subtask)}
		got, n := s.value("weir_task_records_in_total", labels)
		if n != 1 || got != float64(task.RecordsIn) {
			t.Errorf("%s on %s: weir_task_records_in_total %v (%d series), REST recordsIn %d", task.Name, task.TaskManagerID, got, n, task.RecordsIn)
		}
		if _, n := s.value("weir_task_backpressured_seconds_total", labels); n != 1 {
			t.Errorf("%s on %s: %d series of weir_task_backpressured_seconds_total, want 1", task.Name, task.TaskManagerID, n)
		}
	}
	if sinks != 4 {
		t.Errorf("REST lists %d sink subtasks, want 4", sinks)
	}
	// Every late row in the side output's files was counted as dropped by
	// some attempt of a window subtask.
	lateRows := countLines(t, lateDir)
	late, _ := sumOver(tms, "weir_operator_late_records_dropped_total", map[string]string{"job": id, "operator": "counts"})
	if lateRows == 0 || late < float64(lateRows) {
		t.Errorf("weir_operator_late_records_dropped_total sums to %v; the late side output holds %d rows (want > 0, at most the metric)", late, lateRows)
	}
	t.Logf("late rows %d, counted as dropped %v; checkpoints completed %v; restored from %d", lateRows, late, completed, restored)
	fmt.Printf("ops_metrics_checked=%d\n", len(checked))
}

// sumOver sums a metric over the taskmanagers.
func sumOver(tms map[string]scrape, name string, labels map[string]string) (float64, int) {
	var sum float64
	var n int
	for _, s := range tms {
		v, k := s.value(name, labels)
		sum += v
		n += k
	}
	return sum, n
}

func mapValues(m map[string]scrape) []scrape {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]scrape, 0, len(m))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}

// countLines counts the lines of the committed files under dir (not the
// hidden in-progress ones).
func countLines(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range entries {
		if en.IsDir() || strings.HasPrefix(en.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) != "" {
				n++
			}
		}
	}
	return n
}

// usedMetric is a metric name an expression of the rules or the
// dashboard selects, and where.
type usedMetric struct{ name, where string }

// repoFile returns the path of a file of the repository, from this
// package's directory.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", filepath.FromSlash(rel))
}

// ruleFile is the Prometheus rule file format; unknown keys are errors.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboard is the part of a Grafana dashboard's JSON model this test
// reads.
type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Panels        []dashPanel
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashPanel struct {
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []dashPanel `json:"panels"` // of a collapsed row
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// usedMetrics loads the alerting rules strictly and the dashboard, and
// returns every metric name their expressions select.
func usedMetrics(t *testing.T) []usedMetric {
	t.Helper()
	var out []usedMetric
	addExpr := func(where, expr string) {
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			return
		}
		if len(names) == 0 {
			t.Errorf("%s: expression %q selects no metric", where, expr)
		}
		for _, n := range names {
			out = append(out, usedMetric{n, where})
		}
	}

	data, err := os.ReadFile(repoFile(t, "deploy/prometheus/weir-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var rules ruleFile
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("deploy/prometheus/weir-alerts.yaml: %v", err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("weir-alerts.yaml: group %q without a name or rules", g.Name)
		}
		for _, r := range g.Rules {
			if (r.Alert == "") == (r.Record == "") || r.Expr == "" {
				t.Errorf("weir-alerts.yaml: group %s: a rule needs alert or record, and expr: %+v", g.Name, r)
			}
			if r.Alert != "" {
				alerts++
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
					t.Errorf("weir-alerts.yaml: alert %s lacks a severity label or a summary", r.Alert)
				}
			}
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if d != "" {
					if _, err := model.ParseDuration(d); err != nil {
						t.Errorf("weir-alerts.yaml: alert %s: %v", r.Alert, err)
					}
				}
			}
			addExpr("alert "+r.Alert+r.Record, r.Expr)
		}
	}
	if alerts < 5 {
		t.Errorf("weir-alerts.yaml has %d alerts, want at least 5", alerts)
	}

	data, err = os.ReadFile(repoFile(t, "deploy/grafana/weir-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("deploy/grafana/weir-dashboard.json: %v", err)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("dashboard schemaVersion %d", d.SchemaVersion)
	}
	var walk func([]dashPanel)
	targets := 0
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				targets++
				addExpr("panel "+p.Title, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	if targets < 20 {
		t.Errorf("the dashboard has %d queries, want at least 20", targets)
	}
	var haveDatasource bool
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			haveDatasource = true
		case "query":
			var q struct {
				Query string `json:"query"`
			}
			query := ""
			if json.Unmarshal(v.Query, &q) == nil {
				query = q.Query
			} else if err := json.Unmarshal(v.Query, &query); err != nil {
				t.Errorf("dashboard variable %s: query %s is neither a string nor an object with one", v.Name, v.Query)
				continue
			}
			// label_values(<selector>, <label>): the selector names the metric.
			sel, ok := strings.CutPrefix(query, "label_values(")
			comma := strings.LastIndex(sel, ",")
			if !ok || comma < 0 {
				t.Errorf("dashboard variable %s: query %q is not label_values(metric, label)", v.Name, query)
				continue
			}
			addExpr("variable "+v.Name, sel[:comma])
		}
	}
	if !haveDatasource {
		t.Error("the dashboard has no data source variable")
	}
	return slices.Clip(out)
}
