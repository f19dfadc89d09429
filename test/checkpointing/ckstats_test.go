package checkpointing

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// slowSinkSpec is a job whose sink side cannot keep up: an unthrottled
// source, then (across a rebalance, so that it is a task of its own) a
// filter that builds a long string for every row before it keeps it, and
// a discard sink chained to it. No operator type throttles on purpose;
// the filter's expression makes the sink side expensive instead. The
// source waits for credit most of the time, and barriers queue behind the
// records on their way to the filter.
const slowSinkSpec = `name: slow-sink
checkpointing: {interval: 500ms, timeout: 2m, storage: %q}
operators:
  - uid: events
    type: datagen
    parallelism: 1
    config:
      seed: 3
      fields:
        - {name: key, kind: key, cardinality: 1000, prefix: k}
  - uid: slow
    type: filter
    parallelism: 1
    partitioning: rebalance
    config: {where: 'not (repeat(key, 300) contains "#")'}
  - uid: out
    type: discard
`

// TestCheckpointStatsExplainSlowSink runs the slow-sink job on real
// processes and checks the per-subtask checkpoint statistics and the
// explanation of a completed checkpoint against what REST says
// independently: the explained slowest subtask is the one with the
// largest end-to-end time, its path sums to that time, and the barrier
// waited longest on the sink side (the filter's task), behind the
// backpressured source. It prints
//
//	ckstats_source_backpressure=<fraction>
//	ckstats_explain_cause=<cause> ckstats_explain_dominant=<phase> ckstats_sink_start_delay_ms=<ms>
func TestCheckpointStatsExplainSlowSink(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 1, Slots: 2, LogLevel: "info"})
	hc := c.HTTPClient()
	base := c.URL(c.REST)
	get := func(path string, v any) int {
		t.Helper()
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %d %s: %v", path, resp.StatusCode, body, err)
		}
		return resp.StatusCode
	}

	body := fmt.Sprintf(slowSinkSpec, "file://"+filepath.Join(t.TempDir(), "checkpoints"))
	resp, err := hc.Post(base+"/v1/jobs", "application/yaml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var submitted struct {
		JobID string `json:"jobId"`
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &submitted) != nil {
		t.Fatalf("POST /v1/jobs: %d %s", resp.StatusCode, data)
	}
	job := submitted.JobID

	// The source is backpressured once the buffers towards the filter
	// filled up (rates need two heartbeats).
	var srcBP float64
	polltest.Eventually(t, 90*time.Second, "the source to be backpressured", func() bool {
		var d view.JobDetail
		get("/v1/jobs/"+job, &d)
		if d.Job.State == "FAILED" {
			t.Fatalf("job failed: %s", d.Job.Error)
		}
		for _, task := range d.Tasks {
			if task.VertexID == 0 && task.State == "RUNNING" {
				srcBP = task.Backpressure
			}
		}
		return srcBP >= 0.5
	})
	fmt.Printf("ckstats_source_backpressure=%.2f\n", srcBP)

	// A checkpoint triggered while the source is backpressured.
	var cid int64
	polltest.Eventually(t, 120*time.Second, "two checkpoints to complete under backpressure", func() bool {
		var cps view.Checkpoints
		get("/v1/jobs/"+job+"/checkpoints", &cps)
		n := 0
		for _, ck := range cps.Checkpoints {
			if ck.Status == "COMPLETED" {
				if n == 0 {
					cid = ck.ID
				}
				n++
			}
		}
		return n >= 2
	})

	var st view.CheckpointStats
	if code := get(fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/stats", job, cid), &st); code != http.StatusOK || len(st.Tasks) != 2 {
		t.Fatalf("stats of checkpoint %d: %d %+v", cid, code, st)
	}
	var ex view.CheckpointExplain
	if code := get(fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/explain", job, cid), &ex); code != http.StatusOK {
		t.Fatalf("explain of checkpoint %d: %d", cid, code)
	}
	// The independent reading of the same statistics.
	var slowName string
	var slowest view.SubtaskCheckpointStats
	var bytes int64
	for _, task := range st.Tasks {
		for _, s := range task.Subtasks {
			if !s.Acknowledged {
				t.Fatalf("completed checkpoint %d: %s subtask %d did not acknowledge", cid, task.Name, s.Subtask)
			}
			bytes += s.StateBytes
			own := s.StartDelayMs + s.AlignmentMs + s.SyncMs + s.AsyncMs
			if slowName == "" || s.EndToEndMs > slowest.EndToEndMs ||
				s.EndToEndMs == slowest.EndToEndMs && own > slowest.StartDelayMs+slowest.AlignmentMs+slowest.SyncMs+slowest.AsyncMs {
				slowName, slowest = task.Name, s
			}
			t.Logf("checkpoint %d: %s subtask %d: %+v", cid, task.Name, s.Subtask, s)
		}
	}
	if bytes != st.SizeBytes {
		t.Errorf("subtasks' state bytes sum to %d, the checkpoint's size is %d", bytes, st.SizeBytes)
	}
	// Storage requests: the checkpoint's are its subtasks' uploads plus
	// the manifest's write (a PUT at least), and the job's total holds
	// them all.
	var uploads view.StorageRequests
	for _, task := range st.Tasks {
		for _, s := range task.Subtasks {
			uploads.Put, uploads.Get, uploads.List = uploads.Put+s.StorageRequests.Put, uploads.Get+s.StorageRequests.Get, uploads.List+s.StorageRequests.List
		}
	}
	var cps view.Checkpoints
	get("/v1/jobs/"+job+"/checkpoints", &cps)
	if r, total := st.StorageRequests, cps.Storage.Requests; r.Put < uploads.Put+1 || r.Get < uploads.Get || r.List < uploads.List ||
		total.Put < r.Put || cps.Storage.EstimatedMonthlyCost <= 0 {
		t.Errorf("storage requests: checkpoint %+v, its subtasks' %+v, the job's %+v (estimated %.2f %s a month)",
			r, uploads, total, cps.Storage.EstimatedMonthlyCost, cps.Storage.Currency)
	}
	var sum int64
	for _, p := range ex.Path {
		sum += p.Ms
	}
	if ex.SlowestTask != slowName || ex.SlowestSubtask != slowest.Subtask || sum != slowest.EndToEndMs {
		t.Errorf("explain names %s/%d with a path of %d ms; the statistics' slowest is %s/%d with %d ms",
			ex.SlowestTask, ex.SlowestSubtask, sum, slowName, slowest.Subtask, slowest.EndToEndMs)
	}
	t.Logf("explanation:\n%s", strings.Join(ex.Explanation, "\n"))
	sink := st.Tasks[1]
	if sink.Name != "slow -> out" || ex.DelayedTask != sink.Name || ex.SlowestInput != "events → slow -> out" {
		t.Errorf("explain: delayed task %q, slowest input %q; want the sink side %q behind events\n%s",
			ex.DelayedTask, ex.SlowestInput, sink.Name, strings.Join(ex.Explanation, "\n"))
	}
	if (ex.Dominant == "start_delay" || ex.Dominant == "alignment") && ex.Cause != "backpressure" {
		t.Errorf("explain: %s dominated with the source %.0f%% backpressured, but the cause is %s", ex.Dominant, 100*ex.UpstreamBackpressure, ex.Cause)
	}
	fmt.Printf("ckstats_explain_cause=%s ckstats_explain_dominant=%s ckstats_sink_start_delay_ms=%d\n",
		ex.Cause, ex.Dominant, sink.Subtasks[0].StartDelayMs)

	// The CLI prints the same explanation.
	out, err := c.Weir("checkpoints", "explain", job, strconv.FormatInt(cid, 10), "--rest", c.REST)
	if err != nil || !strings.Contains(out, "cause: "+ex.Cause) || !strings.Contains(out, "critical path ("+ex.SlowestTask) {
		t.Errorf("weir checkpoints explain: %v\n%s", err, out)
	}
}
