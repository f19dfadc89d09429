package jobmanager

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager/taskmanagertest"
)

func TestDist(t *testing.T) {
	for _, tt := range []struct {
		in   []int64
		want view.Dist
	}{
		{nil, view.Dist{}},
		{[]int64{5}, view.Dist{Count: 1, Min: 5, Avg: 5, Max: 5, P50: 5, P99: 5}},
		{[]int64{4, 1, 3, 2}, view.Dist{Count: 4, Min: 1, Avg: 2, Max: 4, P50: 2, P99: 4}},
	} {
		if got := dist(slices.Clone(tt.in)); got != tt.want {
			t.Errorf("dist(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	// 1..100: the percentiles are the values themselves.
	vs := make([]int64, 100)
	for i := range vs {
		vs[len(vs)-1-i] = int64(i + 1)
	}
	if got := dist(vs); got.P50 != 50 || got.P99 != 99 || got.Avg != 50 || got.Max != 100 {
		t.Errorf("dist(1..100) = %+v", got)
	}
}

// TestSummarize runs checkpoints through a coordinator with chosen
// acknowledgements and checks the summary against values worked out by
// hand: only completed checkpoints count, each with its slowest
// subtask's phases and the total of its in-flight data.
func TestSummarize(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	ms := time.Millisecond
	a, b := coordinator.TaskID{Vertex: 0}, coordinator.TaskID{Vertex: 1}
	c := coordinator.New(coordinator.Config{TolerableFailures: 10}, []coordinator.TaskID{a, b}, []coordinator.TaskID{a}, 1, t0)
	type ack struct {
		task                            coordinator.TaskID
		at, barrier, align, sync, async time.Duration
		bytes, channel                  int64
	}
	run := func(trigger time.Time, acks []ack, complete bool) {
		t.Helper()
		id, err := c.TriggerNow(trigger)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range acks {
			c.Ack(trigger.Add(x.at), x.task, id, nil, coordinator.AckStats{AlignmentDuration: x.align, SyncDuration: x.sync,
				AsyncDuration: x.async, Bytes: x.bytes, ChannelStateBytes: x.channel, BarrierReceived: trigger.Add(x.barrier)})
		}
		if complete {
			c.ManifestWritten(trigger.Add(acks[len(acks)-1].at), id, nil)
		}
		c.Ready()
	}
	// 1: completed after 200 ms, 100 bytes.
	run(t0, []ack{{a, 100 * ms, 50 * ms, 30 * ms, 1 * ms, 1 * ms, 40, 0}, {b, 200 * ms, 20 * ms, 0, 0, 0, 60, 0}}, true)
	// 2: completed after 400 ms, 300 bytes; b's barrier after 300 ms.
	run(t0.Add(time.Second), []ack{{a, 100 * ms, 10 * ms, 0, 4 * ms, 6 * ms, 100, 1}, {b, 400 * ms, 300 * ms, 20 * ms, 2 * ms, 8 * ms, 200, 2}}, true)
	// 3: declined; 4: in progress. Neither counts.
	id3, _ := c.TriggerNow(t0.Add(2 * time.Second))
	c.Decline(t0.Add(2*time.Second+900*ms), a, id3, "no")
	run(t0.Add(3*time.Second), []ack{{a, 999 * ms, 900 * ms, 0, 0, 0, 5, 0}}, false)

	got := summarize(c.History())
	want := view.CheckpointSummary{
		EndToEndMs:        view.Dist{Count: 2, Min: 200, Avg: 300, Max: 400, P50: 200, P99: 400},
		SizeBytes:         view.Dist{Count: 2, Min: 100, Avg: 200, Max: 300, P50: 100, P99: 300},
		ChannelStateBytes: view.Dist{Count: 2, Min: 0, Avg: 1, Max: 3, P50: 0, P99: 3},
		StartDelayMs:      view.Dist{Count: 2, Min: 50, Avg: 175, Max: 300, P50: 50, P99: 300},
		AlignmentMs:       view.Dist{Count: 2, Min: 20, Avg: 25, Max: 30, P50: 20, P99: 30},
		SyncMs:            view.Dist{Count: 2, Min: 1, Avg: 2, Max: 4, P50: 1, P99: 4},
		AsyncMs:           view.Dist{Count: 2, Min: 1, Avg: 4, Max: 8, P50: 1, P99: 8},
	}
	if got != want {
		t.Errorf("summarize:\n got %+v\nwant %+v", got, want)
	}
}

// explainFixture is a checkpoint of a job src -> map (task 0, 2 subtasks)
// → sink (task 2, 2 subtasks) whose subtask values the cases set.
func explainFixture(src, sink [2]view.SubtaskCheckpointStats) view.CheckpointStats {
	for i := range 2 {
		src[i].Subtask, sink[i].Subtask = i, i
	}
	return view.CheckpointStats{Checkpoint: view.Checkpoint{ID: 7, Status: "COMPLETED", DurationMs: 3000},
		Tasks: []view.TaskCheckpointStats{
			{TaskID: 0, Name: "src -> map", Parallelism: 2, Subtasks: src[:]},
			{TaskID: 2, Name: "sink", Parallelism: 2, Subtasks: sink[:]}}}
}

func sub(e2e, delay, align, sync, async int64) view.SubtaskCheckpointStats {
	return view.SubtaskCheckpointStats{Acknowledged: true, EndToEndMs: e2e, StartDelayMs: delay, AlignmentMs: align, SyncMs: sync, AsyncMs: async}
}

// TestExplainCheckpoint explains synthetic checkpoints: the slowest
// subtask, the path's phases (summing to its end-to-end time), the
// dominant phase, the input the delayed barrier came through, and the
// cause.
func TestExplainCheckpoint(t *testing.T) {
	fast := [2]view.SubtaskCheckpointStats{sub(40, 1, 0, 3, 20), sub(50, 2, 0, 4, 30)}
	upstream := map[int][]int{0: nil, 2: {0}}
	for _, tt := range []struct {
		name     string
		cs       view.CheckpointStats
		bp       map[int]float64
		slowest  string
		subtask  int
		dominant string
		cause    string
		input    string
		path     []int64
	}{
		{"throttled sink behind backpressure", explainFixture(fast, [2]view.SubtaskCheckpointStats{sub(2900, 2800, 40, 5, 30), sub(3000, 2850, 90, 5, 20)}),
			map[int]float64{0: 0.93, 2: 0}, "sink", 1, "start_delay", causeBackpressure, "src -> map → sink", []int64{2850, 90, 5, 20, 35}},
		{"delayed barrier, nothing backpressured", explainFixture(fast, [2]view.SubtaskCheckpointStats{sub(900, 10, 800, 5, 30), sub(100, 1, 2, 5, 20)}),
			map[int]float64{0: 0.01}, "sink", 0, "alignment", causeBarrierDelay, "src -> map → sink", []int64{10, 800, 5, 30, 55}},
		{"slow upload at the source", explainFixture([2]view.SubtaskCheckpointStats{sub(40, 1, 0, 3, 20), sub(2000, 2, 0, 4, 1900)}, fast),
			nil, "src -> map", 1, "async", causeSlowUpload, "src -> map → sink", []int64{2, 0, 4, 1900, 94}},
		{"slow snapshot", explainFixture(fast, [2]view.SubtaskCheckpointStats{sub(700, 5, 0, 650, 30), sub(100, 1, 2, 5, 20)}),
			nil, "sink", 0, "sync", causeSlowSnapshot, "src -> map → sink", []int64{5, 0, 650, 30, 15}},
		{"acknowledgements batched: the subtask that finished last", explainFixture([2]view.SubtaskCheckpointStats{sub(500, 1, 0, 3, 20), sub(500, 2, 0, 4, 30)},
			[2]view.SubtaskCheckpointStats{sub(500, 5, 0, 5, 30), sub(500, 400, 0, 5, 20)}),
			map[int]float64{0: 0.9}, "sink", 1, "start_delay", causeBackpressure, "src -> map → sink", []int64{400, 0, 5, 20, 75}},
		{"late acknowledgement", explainFixture(fast, [2]view.SubtaskCheckpointStats{sub(900, 5, 0, 5, 30), sub(100, 1, 2, 5, 20)}),
			nil, "sink", 0, "ack", causeSlowAck, "src -> map → sink", []int64{5, 0, 5, 30, 860}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ex := explainCheckpoint(&tt.cs, upstream, tt.bp)
			if ex.SlowestTask != tt.slowest || ex.SlowestSubtask != tt.subtask || ex.Dominant != tt.dominant || ex.Cause != tt.cause ||
				ex.SlowestInput != tt.input {
				t.Errorf("explain: slowest %q/%d dominant %q cause %q input %q; want %q/%d %q %q %q\n%s",
					ex.SlowestTask, ex.SlowestSubtask, ex.Dominant, ex.Cause, ex.SlowestInput, tt.slowest, tt.subtask, tt.dominant, tt.cause, tt.input,
					strings.Join(ex.Explanation, "\n"))
			}
			var path []int64
			var sum int64
			for _, p := range ex.Path {
				path = append(path, p.Ms)
				sum += p.Ms
			}
			if !slices.Equal(path, tt.path) {
				t.Errorf("path %v, want %v", path, tt.path)
			}
			var slowest view.SubtaskCheckpointStats
			for _, task := range tt.cs.Tasks {
				if task.Name == tt.slowest {
					slowest = task.Subtasks[tt.subtask]
				}
			}
			if sum != slowest.EndToEndMs {
				t.Errorf("path sums to %d ms, the slowest subtask took %d", sum, slowest.EndToEndMs)
			}
			if len(ex.Explanation) < 3 || !strings.Contains(strings.Join(ex.Explanation, " "), tt.slowest) {
				t.Errorf("explanation does not name %q:\n%s", tt.slowest, strings.Join(ex.Explanation, "\n"))
			}
		})
	}
	// Nothing acknowledged: nothing to explain.
	none := view.CheckpointStats{Checkpoint: view.Checkpoint{ID: 9, Status: "IN_PROGRESS"},
		Tasks: []view.TaskCheckpointStats{{TaskID: 0, Name: "src", Parallelism: 1, Subtasks: []view.SubtaskCheckpointStats{{}}}}}
	if ex := explainCheckpoint(&none, upstream, nil); ex.Cause != causeNone || len(ex.Path) != 0 || len(ex.Explanation) != 1 {
		t.Errorf("explain of an unacknowledged checkpoint: %+v", ex)
	}
}

// restGet decodes GET url's JSON body into out and returns the status.
func restGet(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %d, body not JSON: %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode
}

// TestRESTCheckpointStats acknowledges a checkpoint with chosen
// measurements, through the gRPC acknowledgement a taskmanager sends,
// with the sink's barrier 2.5 s late, and reads them back over REST: per
// subtask, summed up per task and over the history, and explained.
func TestRESTCheckpointStats(t *testing.T) {
	dir := t.TempDir()
	c := startJobManager(t, func(cfg *Config) { cfg.CheckpointStorage = "file://" + dir })
	tm := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 4)
	g := pipeline(t, 2, 2) // src -> map (task 0) → window -> sink (task 2)
	g.Checkpoint = stream.CheckpointConfig{Interval: time.Hour}
	id := c.submit(g, 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	base := "http://" + c.jm.RESTAddr() + "/v1/jobs/" + id

	var trig map[string]int64
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/checkpoints", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&trig)
	resp.Body.Close()
	cid := trig["checkpointId"]
	var trigger int64
	eventually(t, waitTimeout, "the trigger to reach the sources", func() bool {
		for _, r := range tm.Triggers() {
			if r.CheckpointId == cid {
				trigger = r.TimestampMs
				return true
			}
		}
		return false
	})
	// The uploads' storage requests: subtask i of the source task made
	// 3+i PUTs and a LIST, each sink subtask 5 PUTs and a GET.
	uploadRequests := func(vertex, subtask int32) *weirpb.StorageRequests {
		if vertex == 0 {
			return &weirpb.StorageRequests{Put: 3 + int64(subtask), List: 1}
		}
		return &weirpb.StorageRequests{Put: 5, Get: 1}
	}
	ackRequests := view.StorageRequests{Put: 3 + 4 + 5 + 5, Get: 2, List: 2}
	ack := func(vertex int32, barrier, align, sync, async int64) {
		t.Helper()
		batch := &weirpb.ReportCheckpointsRequest{TaskmanagerId: tm.ID()}
		for _, e := range tm.Live() {
			if e.VertexId == vertex {
				batch.Acks = append(batch.Acks, &weirpb.CheckpointAck{Id: e, CheckpointId: cid, Bytes: 1000 + int64(e.Subtask),
					BarrierReceivedUnixMs: trigger + barrier, AlignmentDurationMs: align, SyncDurationMs: sync, AsyncDurationMs: async,
					StorageRequests: uploadRequests(vertex, e.Subtask)})
			}
		}
		if len(batch.Acks) != 2 {
			t.Fatalf("%d live subtasks of task %d, want 2", len(batch.Acks), vertex)
		}
		if _, err := tm.Cluster().ReportCheckpoints(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
	}
	ack(0, 0, 0, 5, 7)
	c.clock.Advance(3 * time.Second) // the jobmanager's clock: the sink acknowledges 3 s after the trigger
	ack(2, 2500, 100, 10, 20)

	var cps view.Checkpoints
	eventually(t, waitTimeout, "the checkpoint to complete", func() bool {
		restGet(t, base+"/checkpoints", &cps)
		return len(cps.Checkpoints) > 0 && cps.Checkpoints[0].ID == cid && cps.Checkpoints[0].Status == "COMPLETED"
	})
	if s := cps.Summary; s.EndToEndMs.Count != 1 || s.SizeBytes.Max != 4002 || s.StartDelayMs.Max != 2500 || s.AlignmentMs.Max != 100 ||
		s.SyncMs.Max != 10 || s.AsyncMs.Max != 20 || s.EndToEndMs.Min < 3000 {
		t.Errorf("summary %+v", s)
	}

	var st view.CheckpointStats
	if code := restGet(t, fmt.Sprintf("%s/checkpoints/%d/stats", base, cid), &st); code != http.StatusOK {
		t.Fatalf("stats: %d", code)
	}
	if st.ID != cid || st.Status != "COMPLETED" || st.SizeBytes != 4002 || st.ChannelStateBytes != 0 || len(st.Tasks) != 2 {
		t.Fatalf("stats %+v", st)
	}
	src, sink := st.Tasks[0], st.Tasks[1]
	if src.Name != "src -> map" || sink.Name != "window -> sink" || !slices.Equal(sink.Operators, []string{"window", "sink"}) ||
		src.Acknowledged != 2 || sink.Acknowledged != 2 {
		t.Fatalf("tasks %+v / %+v", src, sink)
	}
	for _, s := range sink.Subtasks {
		if !s.Acknowledged || s.StartDelayMs != 2500 || s.AlignmentMs != 100 || s.SyncMs != 10 || s.AsyncMs != 20 ||
			s.EndToEndMs < 3000 || s.StateBytes != 1000+int64(s.Subtask) {
			t.Errorf("sink subtask %+v", s)
		}
	}
	for _, s := range src.Subtasks {
		if !s.Acknowledged || s.StartDelayMs != 0 || s.SyncMs != 5 || s.AsyncMs != 7 || s.EndToEndMs >= 3000 {
			t.Errorf("source subtask %+v", s)
		}
	}
	if sink.StartDelayMs.Min != 2500 || sink.StateBytes.Min != 1000 || sink.StateBytes.Max != 1001 {
		t.Errorf("sink spread %+v %+v", sink.StartDelayMs, sink.StateBytes)
	}

	// Storage requests: each subtask's as it reported them; the
	// checkpoint's are theirs plus the manifest's write (at least a PUT,
	// the manifest itself); the job's are, so far, the checkpoint's.
	for _, task := range st.Tasks {
		for _, s := range task.Subtasks {
			r := uploadRequests(int32(task.TaskID), int32(s.Subtask))
			if want := (view.StorageRequests{Put: r.Put, Get: r.Get, List: r.List}); s.StorageRequests != want {
				t.Errorf("%s subtask %d storage requests %+v, want %+v", task.Name, s.Subtask, s.StorageRequests, want)
			}
		}
	}
	ckReqs := st.StorageRequests
	if ckReqs.Put < ackRequests.Put+1 || ckReqs.Get < ackRequests.Get || ckReqs.List < ackRequests.List || ckReqs.Delete != 0 {
		t.Errorf("checkpoint storage requests %+v, want the uploads' %+v and the manifest's", ckReqs, ackRequests)
	}
	restGet(t, base+"/checkpoints", &cps)
	sc := cps.Storage
	if sc.Requests != ckReqs || cps.Checkpoints[0].StorageRequests != ckReqs {
		t.Errorf("job storage requests %+v, listed checkpoint %+v; want the checkpoint's %+v", sc.Requests, cps.Checkpoints[0].StorageRequests, ckReqs)
	}
	wantRates := view.StorageRequestRates{Put: float64(ckReqs.Put), Get: float64(ckReqs.Get), List: float64(ckReqs.List)}
	prices := DefaultStoragePrices
	wantCost := 720 * (wantRates.Put*prices.Put + wantRates.Get*prices.Get + wantRates.List*prices.List) / 1000 // hourly checkpoints
	if sc.PerCheckpoint != wantRates || sc.CheckpointsPerMonth != 720 || math.Abs(sc.EstimatedMonthlyCost-wantCost) > 1e-9 || sc.Currency != "USD" {
		t.Errorf("storage cost %+v, want %+v per checkpoint, 720 a month, %.6f USD", sc, wantRates, wantCost)
	}

	// The latest completed checkpoint's largest start delay and in-flight
	// data, as metrics.
	mfs := scrapeJobManager(t, c)
	if v := seriesOf(mfs, "weir_checkpoint_last_start_delay_seconds", id).GetGauge().GetValue(); v != 2.5 {
		t.Errorf("weir_checkpoint_last_start_delay_seconds = %v, want 2.5", v)
	}
	if m := seriesOf(mfs, "weir_checkpoint_last_channel_state_bytes", id); m == nil || m.GetGauge().GetValue() != 0 {
		t.Errorf("weir_checkpoint_last_channel_state_bytes = %v, want 0", m)
	}
	for kind, want := range map[string]int64{"put": ckReqs.Put, "get": ckReqs.Get, "list": ckReqs.List, "delete": 0} {
		if m := kindSeriesOf(mfs, "weir_checkpoint_last_storage_requests", id, kind); m.GetGauge().GetValue() != float64(want) {
			t.Errorf("weir_checkpoint_last_storage_requests{kind=%q} = %v, want %d", kind, m, want)
		}
		if m := kindSeriesOf(mfs, "weir_job_storage_requests_total", id, kind); m.GetCounter().GetValue() != float64(want) {
			t.Errorf("weir_job_storage_requests_total{kind=%q} = %v, want %d", kind, m, want)
		}
	}
	if m := seriesOf(mfs, "weir_job_storage_estimated_monthly_cost", id); math.Abs(m.GetGauge().GetValue()-wantCost) > 1e-9 {
		t.Errorf("weir_job_storage_estimated_monthly_cost = %v, want %.6f", m, wantCost)
	}

	var ex view.CheckpointExplain
	if code := restGet(t, fmt.Sprintf("%s/checkpoints/%d/explain", base, cid), &ex); code != http.StatusOK {
		t.Fatalf("explain: %d", code)
	}
	// The fake taskmanager reports no backpressure: the barrier came late
	// without it.
	if ex.SlowestTask != "window -> sink" || ex.Dominant != "start_delay" || ex.Cause != causeBarrierDelay ||
		ex.SlowestInput != "src -> map → window -> sink" || ex.DelayedTask != "window -> sink" {
		t.Errorf("explain %+v", ex)
	}
	if ex.StorageRequests != ckReqs || math.Abs(ex.EstimatedMonthlyCost-wantCost) > 1e-9 ||
		!slices.ContainsFunc(ex.Explanation, func(s string) bool { return strings.HasPrefix(s, fmt.Sprintf("Storage requests: %d PUT,", ckReqs.Put)) }) {
		t.Errorf("explain's storage: %+v, %.6f, %q", ex.StorageRequests, ex.EstimatedMonthlyCost, ex.Explanation)
	}

	var e map[string]string
	for _, u := range []string{fmt.Sprintf("%s/checkpoints/%d/stats", base, cid+5), base + "x/checkpoints/1/explain"} {
		if code := restGet(t, u, &e); code != http.StatusNotFound || e["error"] == "" {
			t.Errorf("GET %s: %d %v, want 404", u, code, e)
		}
	}
	if code := restGet(t, base+"/checkpoints/0/stats", &e); code != http.StatusBadRequest {
		t.Errorf("checkpoint 0: %d, want 400", code)
	}
}

// TestRESTExceptions fails tasks twice: the first failure restarts the
// job, and another reported in the same heartbeat joins it as concurrent;
// the second exhausts the restart strategy. The history lists both,
// newest first, with the task, its deployment and taskmanager.
func TestRESTExceptions(t *testing.T) {
	c := startJobManager(t, nil)
	tm := taskmanagertest.Start(t, c.jm.RPCAddr(), "tm-a", 4)
	g := pipeline(t, 2, 2)
	g.Restart = stream.RestartConfig{Type: "fixed-delay", Attempts: 1, Delay: 10 * time.Millisecond}
	id := c.submit(g, 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	base := "http://" + c.jm.RESTAddr() + "/v1/jobs/" + id

	var out struct{ Exceptions []view.Exception }
	if restGet(t, base+"/exceptions", &out); len(out.Exceptions) != 0 {
		t.Fatalf("exceptions of a healthy job: %+v", out.Exceptions)
	}
	// Two failures in one heartbeat: the first fails the job over, the
	// second is reported while it does.
	var failed []*weirpb.TaskStatus
	for _, sub := range []int32{1, 0} {
		for _, e := range tm.Live() {
			if e.VertexId == 2 && e.Subtask == sub {
				failed = append(failed, &weirpb.TaskStatus{Id: e, State: weirpb.TaskState_TASK_STATE_FAILED, Error: fmt.Sprintf("failure of subtask %d", sub)})
			}
		}
	}
	if _, err := tm.Cluster().Heartbeat(t.Context(), &weirpb.HeartbeatRequest{TaskmanagerId: tm.ID(), InstanceId: tm.Instance(), Tasks: failed}); err != nil || len(failed) != 2 {
		t.Fatalf("heartbeat with %d failures: %v", len(failed), err)
	}
	eventually(t, waitTimeout, "the job to run again", func() bool {
		return c.getJob(id).Job.State == weirpb.JobState_JOB_STATE_RUNNING && len(tm.DeploymentsOf(2)) == 4
	})
	tm.FailTask(0, 0, "second failure")
	c.waitState(id, weirpb.JobState_JOB_STATE_FAILED)
	restGet(t, base+"/exceptions", &out)
	if len(out.Exceptions) != 2 {
		t.Fatalf("%d exceptions, want 2: %+v", len(out.Exceptions), out.Exceptions)
	}
	second, first := out.Exceptions[0], out.Exceptions[1]
	if first.Task != "window -> sink (2/2)" || first.VertexID != 2 || first.Subtask != 1 || first.Attempt != 1 || first.Deployment != 1 ||
		first.LeaderTerm != 0 || first.TaskManagerID != "tm-a" || first.Scope != "global" || !strings.Contains(first.Cause, "failure of subtask 1") {
		t.Errorf("first exception %+v", first)
	}
	if len(first.Concurrent) != 1 || first.Concurrent[0].Task != "window -> sink (1/2)" || first.Concurrent[0].Deployment != 1 ||
		first.Concurrent[0].Cause != "failure of subtask 0" {
		t.Errorf("first exception's concurrent failures %+v, want subtask 0's", first.Concurrent)
	}
	if second.Task != "src -> map (1/2)" || second.Attempt != 2 || second.Deployment != 2 || second.Scope != "job_failed" || len(second.Concurrent) != 0 ||
		!strings.Contains(second.Cause, "second failure") || second.TimeMs < first.TimeMs {
		t.Errorf("second exception %+v", second)
	}
	var job view.JobDetail
	restGet(t, base, &job)
	if job.Job.Attempt != 2 || job.Job.Deployment != 2 || job.Job.LeaderTerm != 0 {
		t.Errorf("job attempt %d deployment %d term %d", job.Job.Attempt, job.Job.Deployment, job.Job.LeaderTerm)
	}
}
