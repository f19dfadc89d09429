package jobmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/jobmanager/webui"
	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// The REST API is JSON with lowerCamel field names; its documents are
// package view's (see there for units and state names), each built by one
// method of restModel that the web UI (package webui, under /ui/) calls
// too. It reads the cluster's state, submits, cancels and stops jobs,
// triggers checkpoints and savepoints, and disposes of savepoints;
// docs/rest.md lists the endpoints. With TLS every request needs a client
// certificate: reads the read role, everything else operate
// (security.HTTPHandler). Requests that change something are refused when
// a browser sends them from another origin (http.CrossOriginProtection).

// Aliases of the documents, for this package's tests.
type (
	restJob         = view.Job
	restTask        = view.Task
	restCheckpoint  = view.Checkpoint
	restCheckpoints = view.Checkpoints
)

// httpStatus picks the HTTP status of an error of this package, like
// toGRPCError does for gRPC.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, scheduler.ErrJobNotFound), errors.Is(err, ErrCheckpointNotFound):
		return http.StatusNotFound
	case errors.Is(err, scheduler.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, errTooManySubmissions):
		return http.StatusTooManyRequests
	case errors.Is(err, scheduler.ErrJobNotCancelable), errors.Is(err, scheduler.ErrCheckpointingOff), errors.Is(err, scheduler.ErrJobNotRunning), errors.Is(err, scheduler.ErrCheckpointNotTriggered),
		errors.Is(err, ErrStorage), errors.Is(err, ErrSavepointFailed):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// errTooManySubmissions: every submission slot is taken (maxSubmissions).
var errTooManySubmissions = errors.New("jobmanager: too many submissions at once")

// restModel builds the documents of the REST API and the web UI from the
// scheduler's state, and performs their actions. It is the one read model
// of both: neither reads the scheduler on its own.
type restModel struct{ jm *JobManager }

var _ webui.Backend = restModel{}

// Now is the jobmanager's clock.
func (m restModel) Now() time.Time { return m.jm.now() }

// HTTPStatus is the status code of an error of the model's methods.
func (m restModel) HTTPStatus(err error) int { return httpStatus(err) }

// Jobs lists every job the scheduler holds.
func (m restModel) Jobs() []view.Job {
	jm := m.jm
	jm.mu.Lock()
	views, now := jm.mu.core.Jobs(), jm.now()
	jm.mu.Unlock()
	jobs := make([]view.Job, 0, len(views))
	for i := range views {
		jobs = append(jobs, toViewJob(&views[i], now))
	}
	return jobs
}

func toViewJob(v *scheduler.JobView, now time.Time) view.Job {
	j := view.Job{ID: v.ID, Name: v.Name, State: v.State.String(), StartTimeMs: unixMillis(v.Start), EndTimeMs: unixMillis(v.End),
		TasksTotal: v.TasksTotal, TasksRunning: v.TasksRunning, Error: jobMessage(v, now), Attempt: v.Attempt, Restarts: v.Restarts,
		Deployment: stream.DeploymentOf(v.Attempt), LeaderTerm: v.Attempt / stream.AttemptsPerTerm,
		LastFailure: v.LastFailure, StopFailed: v.StopFailed, Checkpointing: v.Checkpointing, Regions: v.Regions, RestartingRegions: []view.Region{}}
	for _, r := range v.RestartingRegions {
		j.RestartingRegions = append(j.RestartingRegions, view.Region{ID: r.ID, Phase: r.Phase.String(), Attempt: r.Attempt,
			Cause: r.Cause, Deployment: stream.DeploymentOf(r.Attempt), RestartDueMs: unixMillis(r.Due), SlotDeadlineMs: unixMillis(r.SlotDeadline), Tasks: r.Tasks})
	}
	return j
}

// Job is a job with its tasks and graph.
func (m restModel) Job(id string) (view.JobDetail, error) {
	jm := m.jm
	jm.mu.Lock()
	v, err := jm.mu.core.Job(id)
	now := jm.now()
	jm.mu.Unlock()
	if err != nil {
		return view.JobDetail{}, err
	}
	d := view.JobDetail{Job: toViewJob(&v, now), Tasks: make([]view.Task, 0, len(v.Tasks)), Vertices: make([]view.Vertex, 0, len(v.Graph.Vertices))}
	for _, t := range v.Tasks {
		d.Tasks = append(d.Tasks, view.Task{VertexID: t.Vertex, Subtask: t.Subtask, Attempt: t.Attempt, Name: t.Name, State: t.State.String(),
			TaskManagerID: t.TaskManager, Error: t.Err, RecordsIn: t.RecordsIn, RecordsOut: t.RecordsOut,
			Deployment: stream.DeploymentOf(t.Attempt), RecordsInPerSec: t.RecordsInPerSec, RecordsOutPerSec: t.RecordsOutPerSec,
			Backpressure: t.Backpressure})
	}
	for _, gv := range v.Graph.Vertices {
		rv := view.Vertex{ID: gv.ID, UID: gv.UID, Name: gv.Name, Type: gv.Type, Parallelism: gv.Parallelism, TaskID: v.TaskOf[gv.ID],
			Inputs: []view.Input{}}
		for _, e := range v.Graph.Inputs(gv.ID) {
			rv.Inputs = append(rv.Inputs, view.Input{From: e.From, Input: e.Input, Partitioning: e.Partitioning.String(), KeyFields: e.KeyFields, SideOutput: e.SideOutput})
		}
		d.Vertices = append(d.Vertices, rv)
	}
	return d, nil
}

// TaskManagers lists every taskmanager registration, lost ones too.
func (m restModel) TaskManagers() []view.TaskManager {
	jm := m.jm
	jm.mu.Lock()
	views := jm.mu.core.TaskManagers()
	jm.mu.Unlock()
	jm.tmMemory.Lock()
	defer jm.tmMemory.Unlock()
	tms := make([]view.TaskManager, 0, len(views))
	for _, v := range views {
		tm := view.TaskManager{ID: v.ID, Address: v.Addr, Live: v.Live, Suspected: v.Suspected, Reason: v.Reason,
			SlotsTotal: v.Slots, SlotsFree: v.Free,
			LastHeartbeatMs: unixMillis(v.LastHeartbeat), OperatorTypes: append([]string{}, v.OperatorTypes...)}
		if m := jm.tmMemory.m[v.ID]; m != nil {
			tm.Memory = &view.Memory{RSSBytes: m.GetRssBytes(), HeapBytes: m.GetHeapBytes(),
				NetworkBufferedBytes: m.GetNetworkBufferedBytes(), NetworkMemoryBytes: m.GetNetworkMemoryBytes(),
				StateCacheBytes: m.GetStateCacheBytes()}
		}
		tms = append(tms, tm)
	}
	return tms
}

// Overview sums up the cluster.
func (m restModel) Overview() view.Overview {
	jm := m.jm
	jm.mu.Lock()
	tms, jobs := jm.mu.core.TaskManagers(), jm.mu.core.Jobs()
	stale, staleAcks := jm.mu.core.StaleCounts()
	jm.mu.Unlock()
	o := view.Overview{TaskManagers: len(tms), Jobs: make(map[string]int), StaleReports: stale, StaleAcks: staleAcks}
	for _, s := range scheduler.JobStates() {
		o.Jobs[s.String()] = 0
	}
	for _, v := range tms {
		if v.Live {
			o.TaskManagersLive++
			o.SlotsTotal += v.Slots
			o.SlotsFree += v.Free
		}
	}
	for _, v := range jobs {
		o.Jobs[v.State.String()]++
	}
	return o
}

// Checkpoints is a job's checkpoint history, counts and settings; a job
// that takes no checkpoints is refused (scheduler.ErrCheckpointingOff).
func (m restModel) Checkpoints(jobID string) (view.Checkpoints, error) {
	jm := m.jm
	resp, err := jm.listCheckpoints(jobID)
	if err != nil {
		return view.Checkpoints{}, err
	}
	jm.mu.Lock()
	cv, err := jm.mu.core.Checkpoints(jobID)
	var jv scheduler.JobView
	if err == nil {
		jv, err = jm.mu.core.Job(jobID)
	}
	jm.mu.Unlock()
	if err != nil { // the job went away in between
		return view.Checkpoints{}, err
	}
	ck := jv.Graph.Checkpoint.WithDefaults()
	retention := "delete"
	if ck.Retention == stream.RetainOnCancel {
		retention = "retain"
	}
	out := view.Checkpoints{Checkpoints: make([]view.Checkpoint, 0, len(resp.Checkpoints)), Completed: resp.Completed,
		Failed: resp.Failed, InProgress: resp.InProgress, RestoredFrom: resp.RestoredFrom, Latest: cv.Latest,
		Retained: append([]int64{}, cv.Retained...), Summary: summarize(cv.History),
		Config: view.CheckpointConfig{IntervalMs: ck.Interval.Milliseconds(), TimeoutMs: ck.Timeout.Milliseconds(),
			MinPauseMs: ck.MinPause.Milliseconds(), MaxConcurrent: ck.MaxConcurrent, Mode: ck.Mode.String(),
			TolerableFailures: ck.TolerableFailures, Retained: ck.Retained, Retention: retention, Storage: cv.Storage,
			OnCorruption: ck.OnCorruption.String(), Unaligned: ck.Unaligned, CurrentIntervalMs: cv.Interval.Milliseconds()}}
	// The coordinator's own statistics, by id, for what the gRPC message
	// lacks.
	stats := make(map[int64]int, len(cv.History))
	for i, s := range cv.History {
		stats[s.ID] = i
	}
	for _, c := range resp.Checkpoints {
		rc := view.Checkpoint{ID: c.CheckpointId,
			Status: strings.TrimPrefix(c.Status.String(), "CHECKPOINT_STATUS_"), TriggerTimeMs: c.TriggerTimeMs,
			DurationMs: c.DurationMs, SizeBytes: c.SizeBytes, SlowestTask: c.SlowestTask, SlowestTaskMs: c.SlowestTaskMs,
			Acknowledged: c.Acknowledged, TotalTasks: c.TotalTasks, Failure: c.Failure}
		if i, ok := stats[c.CheckpointId]; ok {
			s := cv.History[i]
			rc.Manual, rc.MaxSyncMs, rc.MaxAsyncMs, rc.MaxAlignmentMs = s.Manual, s.MaxSync.Milliseconds(), s.MaxAsync.Milliseconds(), s.MaxAlignment.Milliseconds()
			rc.StorageRequests = viewRequests(s.Storage)
		}
		out.Checkpoints = append(out.Checkpoints, rc)
	}
	total := jm.jobStorageCounters(jobID).Snapshot()
	out.Storage = storageCost(view.StorageRequests{Put: total.Put, Get: total.Get, List: total.List, Delete: total.Delete},
		cv.History, cv.Interval, jm.cfg.StoragePrices)
	return out, nil
}

// CheckpointStats is checkpoint id of the job's recent history with
// every task's and subtask's measurements.
func (m restModel) CheckpointStats(jobID string, id int64) (view.CheckpointStats, error) {
	cs, _, err := m.checkpointStats(jobID, id)
	return cs, err
}

// ExplainCheckpoint is the critical path of checkpoint id of the job's
// recent history, and its likely cause.
func (m restModel) ExplainCheckpoint(jobID string, id int64) (view.CheckpointExplain, error) {
	cs, jv, interval, err := m.checkpointStatsAt(jobID, id)
	if err != nil {
		return view.CheckpointExplain{}, err
	}
	ex := explainCheckpoint(&cs, upstreamOf(jobTasks(&jv)), backpressureByTask(jv.Tasks))
	explainStorage(&ex, &cs, interval, m.jm.cfg.StoragePrices)
	return ex, nil
}

func (m restModel) checkpointStats(jobID string, id int64) (view.CheckpointStats, scheduler.JobView, error) {
	cs, jv, _, err := m.checkpointStatsAt(jobID, id)
	return cs, jv, err
}

// checkpointStatsAt is checkpointStats with the job's current checkpoint
// interval.
func (m restModel) checkpointStatsAt(jobID string, id int64) (view.CheckpointStats, scheduler.JobView, time.Duration, error) {
	jm := m.jm
	jm.mu.Lock()
	jv, err := jm.mu.core.Job(jobID)
	var st coordinator.Stats
	var subs []coordinator.SubtaskStats
	var cv scheduler.CheckpointsView
	found := false
	if err == nil {
		st, subs, found, err = jm.mu.core.CheckpointSubtasks(jobID, id)
	}
	if err == nil && found {
		cv, err = jm.mu.core.Checkpoints(jobID)
	}
	now := jm.now()
	jm.mu.Unlock()
	if err != nil {
		return view.CheckpointStats{}, jv, 0, err
	}
	if !found {
		return view.CheckpointStats{}, jv, 0, fmt.Errorf("%w: job %s has no checkpoint %d in its recent history (the jobmanager keeps the statistics of the last %d checkpoints of a job); list them with GET /v1/jobs/{id}/checkpoints",
			ErrCheckpointNotFound, jobID, id, coordinator.HistorySize)
	}
	return checkpointStats(&st, subs, jobTasks(&jv), cv.TaskNames, now), jv, cv.Interval, nil
}

// Exceptions is the job's exception history, newest first.
func (m restModel) Exceptions(jobID string) ([]view.Exception, error) {
	jm := m.jm
	jm.mu.Lock()
	es, err := jm.mu.core.Exceptions(jobID)
	jm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]view.Exception, 0, len(es))
	for _, e := range es {
		x := view.Exception{TimeMs: unixMillis(e.Time), Cause: e.Cause, Task: e.Task, VertexID: e.Vertex, Subtask: e.Subtask,
			Attempt: e.Attempt, Deployment: stream.DeploymentOf(e.Attempt), LeaderTerm: e.Attempt / stream.AttemptsPerTerm,
			TaskManagerID: e.TaskManager, Scope: e.Scope, Regions: append([]int{}, e.Regions...),
			Concurrent: make([]view.ConcurrentFailure, 0, len(e.Concurrent)), ConcurrentDropped: e.ConcurrentDropped}
		for _, f := range e.Concurrent {
			x.Concurrent = append(x.Concurrent, view.ConcurrentFailure{TimeMs: unixMillis(f.Time), Task: f.Task, VertexID: f.Vertex,
				Subtask: f.Subtask, Attempt: f.Attempt, Deployment: stream.DeploymentOf(f.Attempt), TaskManagerID: f.TaskManager, Cause: f.Cause})
		}
		out = append(out, x)
	}
	return out, nil
}

// Checkpoint reads a completed checkpoint's manifest from storage.
func (m restModel) Checkpoint(ctx context.Context, jobID string, id int64) (*weirpb.InspectCheckpointResponse, error) {
	return m.jm.inspectCheckpoint(ctx, jobID, id)
}

// SavepointRequest is the progress of a savepoint requested over HTTP;
// false when it is unknown (the last maxSavepointRequests are kept).
func (m restModel) SavepointRequest(rid string) (view.SavepointRequest, bool) {
	r, ok := m.jm.savepointRequest(rid)
	if !ok {
		return view.SavepointRequest{}, false
	}
	return view.SavepointRequest{ID: r.ID, JobID: r.JobID, Stop: r.Stop, Drain: r.Drain, Status: r.Status, Location: r.Location,
		CheckpointID: r.CheckpointID, SizeBytes: r.SizeBytes, Error: r.Error, Copying: r.Copying, BytesCopied: r.BytesCopied,
		BytesTotal: r.BytesTotal}, true
}

// TriggerCheckpoint triggers a checkpoint of the job now and returns its
// id.
func (m restModel) TriggerCheckpoint(jobID string) (int64, error) {
	return m.jm.triggerCheckpoint(jobID)
}

// Savepoint starts a savepoint of the job into dir ("": the jobmanager's
// savepoint directory) and returns the id of the request that tracks it.
func (m restModel) Savepoint(jobID, dir string) (string, error) {
	return m.startSavepoint(jobID, dir, false, false)
}

// Stop starts stopping the job with a savepoint into dir ("": the
// jobmanager's savepoint directory), after its sources emitted the
// maximum watermark when drain is set, and returns the request's id.
func (m restModel) Stop(jobID, dir string, drain bool) (string, error) {
	return m.startSavepoint(jobID, dir, true, drain)
}

// startSavepoint checks the request and runs it in the background, where
// SavepointRequest follows it.
func (m restModel) startSavepoint(jobID, dir string, stop, drain bool) (string, error) {
	jm := m.jm
	if _, err := jm.savepointDir(dir); err != nil {
		return "", err
	}
	req, err := jm.newSavepointRequest(randomID(), jobID, stop, drain)
	if err != nil {
		return "", err
	}
	jm.bg.Go(func() {
		ctx, cancel := context.WithTimeout(jm.bgCtx, savepointTimeout)
		defer cancel()
		_, _ = jm.runSavepointRequest(ctx, dir, req) // the outcome is in req
	})
	return req.ID, nil
}

// Cancel cancels the job; it returns once the cancellation started.
func (m restModel) Cancel(jobID string) error {
	var err error
	m.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		acts, err = c.Cancel(jobID, now)
		return acts
	})
	return err
}

// Submit parses the YAML job spec in spec as weir submit does (package
// jobspec, against the jobmanager's operator registry) and submits it
// like SubmitJob; from and allowNonRestored are weir submit's --from and
// --allow-non-restored-state.
func (m restModel) Submit(ctx context.Context, spec []byte, from string, allowNonRestored bool) (string, error) {
	jm := m.jm
	g, err := jobspec.Parse("job spec", spec, jm.reg)
	if err != nil {
		return "", fmt.Errorf("%w: %v", scheduler.ErrInvalidArgument, err)
	}
	select {
	case jm.submitting <- struct{}{}:
		defer func() { <-jm.submitting }()
	default:
		return "", fmt.Errorf("%w: %d submissions are being planned already; retry in a moment", errTooManySubmissions, cap(jm.submitting))
	}
	return jm.submit(ctx, weirpb.FromGraph(g), 0, from, allowNonRestored)
}

func (jm *JobManager) restHandler() http.Handler {
	m := restModel{jm: jm}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "jobmanagerId": jm.id})
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"jobs": m.Jobs()})
	})
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		allow := false
		if s := q.Get("allowNonRestoredState"); s != "" {
			var err error
			if allow, err = strconv.ParseBool(s); err != nil {
				writeError(w, http.StatusBadRequest, "allowNonRestoredState must be true or false")
				return
			}
		}
		from := q.Get("fromCheckpoint")
		if len(from) > 1024 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("fromCheckpoint is %d bytes long; the limit is 1024", len(from)))
			return
		}
		if from == "" && allow {
			writeError(w, http.StatusBadRequest, "allowNonRestoredState needs fromCheckpoint")
			return
		}
		spec, err := io.ReadAll(io.LimitReader(r.Body, jobspec.MaxSpecBytes+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, "reading the job spec: "+err.Error())
			return
		}
		if len(spec) > jobspec.MaxSpecBytes {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the job spec is larger than %d bytes", jobspec.MaxSpecBytes))
			return
		}
		id, err := m.Submit(r.Context(), spec, from, allow)
		if err != nil {
			if errors.Is(err, errTooManySubmissions) {
				w.Header().Set("Retry-After", "1")
			}
			writeError(w, httpStatus(err), err.Error())
			return
		}
		w.Header().Set("Location", "/v1/jobs/"+id)
		writeJSON(w, http.StatusCreated, map[string]string{"jobId": id})
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		d, err := m.Job(r.PathValue("id"))
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, d)
	})
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		if err := m.Cancel(r.PathValue("id")); err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"jobId": r.PathValue("id")})
	})
	mux.HandleFunc("GET /v1/taskmanagers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"taskmanagers": m.TaskManagers()})
	})
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, m.Overview())
	})
	mux.HandleFunc("GET /v1/jobs/{id}/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		out, err := m.Checkpoints(r.PathValue("id"))
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /v1/jobs/{id}/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		id, err := m.TriggerCheckpoint(r.PathValue("id"))
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]int64{"checkpointId": id})
	})
	// Savepoints take as long as the copy: the POSTs answer at once with
	// a request id whose outcome GET /v1/savepoint-requests/{rid} tells.
	mux.HandleFunc("POST /v1/jobs/{id}/savepoints", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Dir string `json:"dir"`
		}
		if !readJSONBody(w, r, &body) {
			return
		}
		writeRequestID(w)(m.Savepoint(r.PathValue("id"), body.Dir))
	})
	mux.HandleFunc("POST /v1/jobs/{id}/stop", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			SavepointDir string `json:"savepointDir"`
			Drain        bool   `json:"drain"`
		}
		if !readJSONBody(w, r, &body) {
			return
		}
		writeRequestID(w)(m.Stop(r.PathValue("id"), body.SavepointDir, body.Drain))
	})
	mux.HandleFunc("GET /v1/savepoint-requests/{rid}", func(w http.ResponseWriter, r *http.Request) {
		req, ok := m.SavepointRequest(r.PathValue("rid"))
		if !ok {
			writeError(w, http.StatusNotFound, "no such savepoint request (they are kept for the last 100 requests)")
			return
		}
		writeJSON(w, http.StatusOK, req)
	})
	mux.HandleFunc("POST /v1/savepoints/dispose", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Location string `json:"location"`
		}
		if !readJSONBody(w, r, &body) {
			return
		}
		n, err := jm.disposeSavepoint(r.Context(), body.Location)
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"deletedObjects": n})
	})
	mux.HandleFunc("GET /v1/jobs/{id}/checkpoints/{cid}/stats", func(w http.ResponseWriter, r *http.Request) {
		cid, ok := checkpointIDParam(w, r)
		if !ok {
			return
		}
		out, err := m.CheckpointStats(r.PathValue("id"), cid)
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/jobs/{id}/checkpoints/{cid}/explain", func(w http.ResponseWriter, r *http.Request) {
		cid, ok := checkpointIDParam(w, r)
		if !ok {
			return
		}
		out, err := m.ExplainCheckpoint(r.PathValue("id"), cid)
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/jobs/{id}/exceptions", func(w http.ResponseWriter, r *http.Request) {
		out, err := m.Exceptions(r.PathValue("id"))
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"exceptions": out})
	})
	mux.HandleFunc("GET /v1/jobs/{id}/checkpoints/{cid}", func(w http.ResponseWriter, r *http.Request) {
		cid, err := strconv.ParseInt(r.PathValue("cid"), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("checkpoint id %.40q is not a number", r.PathValue("cid")))
			return
		}
		resp, err := m.Checkpoint(r.Context(), r.PathValue("id"), cid)
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		body, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(body, '\n')) // the client went away
	})
	mux.Handle("GET /metrics", jm.Metrics())
	mux.HandleFunc("GET /v1/ha", func(w http.ResponseWriter, r *http.Request) {
		leader, epoch := jm.leading()
		mode := "none"
		if jm.cfg.HA.etcd() {
			mode = "etcd"
		}
		writeJSON(w, http.StatusOK, restHA{Mode: mode, Leader: leader, Epoch: epoch, LeaderAddress: jm.leaderAddress(r.Context())})
	})
	mux.Handle("/ui/", webui.New(m))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A browser that opens the bare address gets the UI.
		if r.URL.Path == "/" && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/ui/", http.StatusSeeOther)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			writeError(w, http.StatusMethodNotAllowed, "no such action "+r.Method+" "+r.URL.Path+"; the REST API changes things only with POST to /v1/jobs, /v1/jobs/{id}/cancel, /v1/jobs/{id}/checkpoints, /v1/jobs/{id}/savepoints, /v1/jobs/{id}/stop and /v1/savepoints/dispose (see docs/rest.md)")
			return
		}
		writeError(w, http.StatusNotFound, "no such resource "+r.URL.Path+"; try /v1/jobs, /v1/jobs/{id}/checkpoints, /v1/jobs/{id}/exceptions, /v1/taskmanagers, /v1/overview, /metrics, /healthz or, in a browser, /ui/")
	})
	// Browsers send cookies and client certificates along with requests
	// that other sites' pages make; such a request must not change
	// anything.
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusForbidden, "a cross-origin request from a browser may not change anything; use the page the jobmanager serves or a non-browser client")
	}))
	return jm.standbyREST(csrf.Handler(mux))
}

// checkpointIDParam parses the request's {cid}, or answers 400.
func checkpointIDParam(w http.ResponseWriter, r *http.Request) (int64, bool) {
	cid, err := strconv.ParseInt(r.PathValue("cid"), 10, 64)
	if err != nil || cid < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("checkpoint id %.40q is not a positive number", r.PathValue("cid")))
		return 0, false
	}
	return cid, true
}

// writeRequestID answers a started savepoint request with its id, or the
// error that refused it.
func writeRequestID(w http.ResponseWriter) func(string, error) {
	return func(rid string, err error) {
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"requestId": rid})
	}
}

// restHA is GET /v1/ha: this jobmanager's view of the election.
type restHA struct {
	Mode          string `json:"mode"` // "none" or "etcd"
	Leader        bool   `json:"leader"`
	Epoch         int64  `json:"epoch"`
	LeaderAddress string `json:"leaderAddress"` // the leader's gRPC address; "" when unknown
}

// standbyREST answers 503 with the leader's address on a standby (ha:
// etcd), except for /v1/ha, /healthz and /metrics, which describe this
// jobmanager itself.
func (jm *JobManager) standbyREST(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/ha", "/healthz", "/metrics":
			next.ServeHTTP(w, r)
			return
		}
		if leader, _ := jm.leading(); leader {
			next.ServeHTTP(w, r)
			return
		}
		addr := jm.leaderAddress(r.Context())
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error":         "this jobmanager is a standby, not the leader; ask the leader (leaderAddress is its gRPC address)",
			"leader":        false,
			"leaderAddress": addr,
		})
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
