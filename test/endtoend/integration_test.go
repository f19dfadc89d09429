package endtoend

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// datagenConfig is the source of the window test. Timestamps step 5 ms with
// up to 20 ms of jitter, so windows see out-of-order rows.
const datagenConfig = `{"rows": 60000, "seed": 7, "batchSize": 512, "fields": [
  {"name": "key", "kind": "key", "cardinality": 13, "prefix": "user-"},
  {"name": "value", "kind": "random", "type": "int64", "min": 0, "max": 999},
  {"name": "ts", "kind": "timestamp", "start": "2026-01-01T00:00:00Z", "stepMillis": 5, "jitterMillis": 20}]}`

const windowSpec = `name: keyed-window-it
parallelism: 4
operators:
  - uid: events
    type: datagen
    parallelism: 2
    config: %s
  - uid: stamped
    type: watermarks
    parallelism: 2
    config: {timestampField: ts, maxOutOfOrderness: 50ms}
  - uid: per-user
    type: tumbling_window
    keyBy: [key]
    config:
      size: 1s
      aggregates:
        - {fn: count, as: n}
        - {fn: sum, field: value, as: total}
        - {fn: max, field: value, as: top}
  - uid: out
    type: file
    config: {path: %q, format: csv}
`

// expectedWindows computes every window's result straight from the
// generator's rows, independently of the engine.
func expectedWindows(t *testing.T) map[clustertest.WindowKey]clustertest.WindowAgg {
	var cfg connectors.DatagenConfig
	if err := json.Unmarshal([]byte(datagenConfig), &cfg); err != nil {
		t.Fatal(err)
	}
	want := make(map[clustertest.WindowKey]clustertest.WindowAgg)
	for seq := int64(0); seq < cfg.Rows; seq++ {
		row := connectors.GenerateRow(cfg, seq)
		key, value, ts := row[0].(string), row[1].(int64), row[2].(int64)
		k := clustertest.WindowKey{Key: key, Start: ts - ts%1000}
		a, seen := want[k]
		a.N++
		a.Total += value
		if !seen || value > a.Top {
			a.Top = value
		}
		want[k] = a
	}
	return want
}

// readWindows reads every window the file sink wrote.
func readWindows(t *testing.T, dir string) map[clustertest.WindowKey]clustertest.WindowAgg {
	header, rows := clustertest.CommittedRows(t, dir)
	if len(rows) == 0 {
		t.Fatalf("no output rows in %s", dir)
	}
	if strings.Join(header, ",") != "key,window_start,window_end,n,total,top" {
		t.Fatalf("header %v", header)
	}
	got := make(map[clustertest.WindowKey]clustertest.WindowAgg)
	for _, rec := range rows {
		start, end := clustertest.ParseTime(t, rec[1]), clustertest.ParseTime(t, rec[2])
		if end-start != 1000 {
			t.Fatalf("window %v is not 1s long", rec)
		}
		n, _ := strconv.ParseInt(rec[3], 10, 64)
		total, _ := strconv.ParseInt(rec[4], 10, 64)
		top, _ := strconv.ParseInt(rec[5], 10, 64)
		k := clustertest.WindowKey{Key: rec[0], Start: start}
		if _, dup := got[k]; dup {
			t.Fatalf("window %v emitted twice", k)
		}
		got[k] = clustertest.WindowAgg{N: n, Total: total, Top: top}
	}
	return got
}

func TestKeyedWindowJobAcrossTwoTaskManagers(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2})
	out := filepath.Join(t.TempDir(), "out")
	spec := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(spec, []byte(fmt.Sprintf(windowSpec, datagenConfig, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	text, err := c.Weir("submit", spec, "--wait")
	if err != nil {
		t.Fatalf("weir submit --wait: %v\n%s", err, text)
	}
	fields := strings.Fields(text)
	jobID := fields[len(fields)-2] // "... job <id> finished"
	job, err := c.Job(jobID)
	if err != nil {
		t.Fatal(err)
	}
	if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job state %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
	}
	// Parallelism 4 on two taskmanagers with two slots each: both run tasks.
	perTM := map[string]int{}
	for _, task := range job.GetTasks() {
		perTM[task.GetTaskmanagerId()]++
	}
	if len(perTM) != 2 {
		t.Fatalf("tasks ran on %v, want both taskmanagers", perTM)
	}

	want := expectedWindows(t)
	got := readWindows(t, out)
	var missing, wrong, extra int
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
		case g != w:
			wrong++
			if wrong <= 5 {
				t.Errorf("window %v: got %+v, want %+v", k, g, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	t.Logf("windows=%d missing=%d wrong=%d extra=%d", len(want), missing, wrong, extra)
	if missing+wrong+extra > 0 {
		t.Fatalf("window results differ from the independent computation: missing=%d wrong=%d extra=%d of %d", missing, wrong, extra, len(want))
	}

	// The CLI and the REST API see the job and both taskmanagers.
	list, err := c.Weir("jobs", "list")
	if err != nil || !strings.Contains(list, jobID) || !strings.Contains(list, "finished") {
		t.Fatalf("weir jobs list: %v\n%s", err, list)
	}
	tms, err := c.Weir("taskmanagers", "list", "-o", "json")
	if err != nil {
		t.Fatalf("weir taskmanagers list: %v\n%s", err, tms)
	}
	var tmList struct {
		Taskmanagers []struct {
			TaskmanagerID string `json:"taskmanagerId"`
			Live          bool   `json:"live"`
		} `json:"taskmanagers"`
	}
	if err := json.Unmarshal([]byte(tms), &tmList); err != nil || len(tmList.Taskmanagers) != 2 {
		t.Fatalf("taskmanagers json: %v\n%s", err, tms)
	}
	resp, err := c.HTTPClient().Get(c.URL(c.REST) + "/v1/jobs/" + jobID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), jobID) {
		t.Fatalf("REST /v1/jobs/%s: %d %s", jobID, resp.StatusCode, body)
	}
}

func TestBadInputGetsOneClearError(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 1, Slots: 2, SlotWaitTimeout: 3 * time.Second})
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := func(par int, extra string) string {
		return fmt.Sprintf(`name: j
parallelism: %d
operators:
  - uid: events
    type: datagen
    config: {rows: 10, fields: [{name: id, kind: sequence}, {name: k, kind: key, cardinality: 3}]}
%s  - uid: out
    type: discard
`, par, extra)
	}
	cases := []struct {
		name, spec string
		want       []string
	}{
		{"unknown operator", good(1, "  - uid: m\n    type: mapp\n"), []string{"job.yaml:8:", `unknown operator type "mapp"`}},
		{"bad expression", good(1, "  - uid: f\n    type: filter\n    config: {where: \"id >\"}\n"), []string{"job.yaml:9:", `operator "f"`, "where"}},
		{"wrong type", good(1, "  - uid: f\n    type: filter\n    config: {where: \"k + 1 > 2\"}\n"), []string{"job.yaml:9:", `operator "f"`, "mismatched types string and int"}},
		{"missing field", "name: j\noperators:\n  - type: datagen\n", []string{"job.yaml:3:", "uid"}},
		{"keyBy unknown field", good(1, "  - uid: w\n    type: tumbling_window\n    keyBy: [user]\n    config: {size: 1s, aggregates: [{fn: count, as: n}]}\n"), []string{"job.yaml:9:", `no field "user"`}},
		{"parallelism 0", good(0, ""), []string{"job.yaml:2:", "parallelism"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := write("job.yaml", tc.spec)
			out, err := c.Weir("submit", p)
			if err == nil {
				t.Fatalf("weir submit succeeded on a bad spec:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("error output does not contain %q:\n%s", w, out)
				}
			}
			if n := strings.Count(strings.TrimSpace(out), "\n"); n > 0 {
				t.Fatalf("want one error line, got %d lines:\n%s", n+1, out)
			}
		})
	}
	// Nothing half-done: none of the bad specs created a job.
	if list, err := c.Weir("jobs", "list", "-o", "json"); err != nil || strings.Contains(list, "jobId") {
		t.Fatalf("bad specs left jobs behind: %v\n%s", err, list)
	}

	t.Run("more parallelism than slots", func(t *testing.T) {
		p := write("big.yaml", good(3, ""))
		out, err := c.Weir("submit", p, "--wait", "--slot-wait", "2s")
		if err == nil || !strings.Contains(out, "slots") {
			t.Fatalf("want a slots error, got %v:\n%s", err, out)
		}
	})
	t.Run("unreachable jobmanager", func(t *testing.T) {
		p := write("ok.yaml", good(1, ""))
		out, err := c.Weir("--jobmanager", "127.0.0.1:1", "--timeout", "2s", "submit", p)
		if err == nil || !strings.Contains(out, "cannot reach the jobmanager at 127.0.0.1:1") {
			t.Fatalf("want an unreachable-jobmanager error, got %v:\n%s", err, out)
		}
	})
}
