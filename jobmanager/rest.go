package jobmanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/weirstream/weir/jobmanager/scheduler"
)

// The REST API is JSON with lowerCamel field names. Times are Unix
// milliseconds (0: not yet), durations milliseconds. States are the
// upper-case names of the gRPC enums without prefix ("RUNNING"), plus
// RESTARTING (which gRPC shows as FAILING). It is read-only except for one
// endpoint, POST /v1/jobs/{id}/checkpoints, which triggers a checkpoint.

type restJob struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	State        string `json:"state"`
	StartTimeMs  int64  `json:"startTimeMs"`
	EndTimeMs    int64  `json:"endTimeMs"`
	TasksTotal   int    `json:"tasksTotal"`
	TasksRunning int    `json:"tasksRunning"`
	Error        string `json:"error,omitempty"`
	Attempt      int64  `json:"attempt"`
	Restarts     int64  `json:"restarts"`
	LastFailure  string `json:"lastFailure,omitempty"`
	// Checkpointing says whether the job takes checkpoints.
	Checkpointing bool `json:"checkpointing"`
	// Regions is the number of pipelined failover regions (1: a failure
	// restarts the whole job).
	Regions int `json:"regions"`
	// RestartingRegions are the regions that restart while the rest of
	// the job runs on (empty while the job restarts as a whole).
	RestartingRegions []restRegion `json:"restartingRegions"`
}

type restRegion struct {
	ID int `json:"id"` // 1-based
	// Phase: CANCELING, WAITING (the restart delay), WAITING_FOR_SLOTS or
	// DEPLOYING.
	Phase string `json:"phase"`
	// Attempt is the attempt its executions are (to be) deployed with.
	Attempt        int64    `json:"attempt"`
	Cause          string   `json:"cause"`
	RestartDueMs   int64    `json:"restartDueMs"`
	SlotDeadlineMs int64    `json:"slotDeadlineMs,omitempty"`
	Tasks          []string `json:"tasks"`
}

type restTask struct {
	VertexID      int    `json:"vertexId"`
	Subtask       int    `json:"subtask"`
	Attempt       int64  `json:"attempt"`
	Name          string `json:"name"`
	State         string `json:"state"`
	TaskManagerID string `json:"taskmanagerId,omitempty"`
	Error         string `json:"error,omitempty"`
	RecordsIn     int64  `json:"recordsIn"`
	RecordsOut    int64  `json:"recordsOut"`
}

type restInput struct {
	From         int      `json:"from"`
	Input        int      `json:"input"`
	Partitioning string   `json:"partitioning"`
	KeyFields    []string `json:"keyFields,omitempty"`
	// SideOutput is the upstream operator's side output the input reads;
	// absent for its main output.
	SideOutput string `json:"sideOutput,omitempty"`
}

type restVertex struct {
	ID          int         `json:"id"`
	UID         string      `json:"uid"`
	Name        string      `json:"name"`
	Type        string      `json:"type"`
	Parallelism int         `json:"parallelism"`
	TaskID      int         `json:"taskId"` // vertex id of its chain's head
	Inputs      []restInput `json:"inputs"`
}

type restJobDetail struct {
	Job      restJob      `json:"job"`
	Tasks    []restTask   `json:"tasks"`
	Vertices []restVertex `json:"vertices"`
}

type restTaskManager struct {
	ID              string   `json:"id"`
	Address         string   `json:"address"`
	Live            bool     `json:"live"`
	Suspected       bool     `json:"suspected"`
	Reason          string   `json:"reason,omitempty"`
	SlotsTotal      int      `json:"slotsTotal"`
	SlotsFree       int      `json:"slotsFree"`
	LastHeartbeatMs int64    `json:"lastHeartbeatMs"`
	OperatorTypes   []string `json:"operatorTypes"`
}

type restOverview struct {
	TaskManagers     int            `json:"taskmanagers"`
	TaskManagersLive int            `json:"taskmanagersLive"`
	SlotsTotal       int            `json:"slotsTotal"`
	SlotsFree        int            `json:"slotsFree"`
	Jobs             map[string]int `json:"jobs"` // by state
	StaleReports     int64          `json:"staleReports"`
	StaleAcks        int64          `json:"staleCheckpointAcks"`
}

type restCheckpoint struct {
	ID            int64  `json:"id"`
	Status        string `json:"status"` // IN_PROGRESS, COMPLETED, FAILED
	TriggerTimeMs int64  `json:"triggerTimeMs"`
	DurationMs    int64  `json:"durationMs"`
	SizeBytes     int64  `json:"sizeBytes"`
	SlowestTask   string `json:"slowestTask,omitempty"`
	SlowestTaskMs int64  `json:"slowestTaskMs"`
	Acknowledged  int32  `json:"acknowledged"`
	TotalTasks    int32  `json:"totalTasks"`
	Failure       string `json:"failure,omitempty"`
}

type restCheckpoints struct {
	Checkpoints  []restCheckpoint `json:"checkpoints"`
	Completed    int64            `json:"completed"`
	Failed       int64            `json:"failed"`
	InProgress   int64            `json:"inProgress"`
	RestoredFrom int64            `json:"restoredFrom"`
}

func toRESTJob(v *scheduler.JobView, now time.Time) restJob {
	j := restJob{ID: v.ID, Name: v.Name, State: v.State.String(), StartTimeMs: unixMillis(v.Start), EndTimeMs: unixMillis(v.End),
		TasksTotal: v.TasksTotal, TasksRunning: v.TasksRunning, Error: jobMessage(v, now), Attempt: v.Attempt, Restarts: v.Restarts,
		LastFailure: v.LastFailure, Checkpointing: v.Checkpointing, Regions: v.Regions, RestartingRegions: []restRegion{}}
	for _, r := range v.RestartingRegions {
		j.RestartingRegions = append(j.RestartingRegions, restRegion{ID: r.ID, Phase: r.Phase.String(), Attempt: r.Attempt,
			Cause: r.Cause, RestartDueMs: unixMillis(r.Due), SlotDeadlineMs: unixMillis(r.SlotDeadline), Tasks: r.Tasks})
	}
	return j
}

// httpStatus picks the HTTP status of an error of this package, like
// toGRPCError does for gRPC.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, scheduler.ErrJobNotFound), errors.Is(err, ErrCheckpointNotFound):
		return http.StatusNotFound
	case errors.Is(err, scheduler.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, scheduler.ErrJobNotCancelable), errors.Is(err, scheduler.ErrCheckpointingOff), errors.Is(err, scheduler.ErrJobNotRunning), errors.Is(err, scheduler.ErrCheckpointNotTriggered),
		errors.Is(err, ErrStorage), errors.Is(err, ErrSavepointFailed):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func (jm *JobManager) restHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "jobmanagerId": jm.id})
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, _ *http.Request) {
		jm.mu.Lock()
		views, now := jm.mu.core.Jobs(), jm.now()
		jm.mu.Unlock()
		jobs := make([]restJob, 0, len(views))
		for i := range views {
			jobs = append(jobs, toRESTJob(&views[i], now))
		}
		writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		jm.mu.Lock()
		v, err := jm.mu.core.Job(r.PathValue("id"))
		now := jm.now()
		jm.mu.Unlock()
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		d := restJobDetail{Job: toRESTJob(&v, now), Tasks: make([]restTask, 0, len(v.Tasks)), Vertices: make([]restVertex, 0, len(v.Graph.Vertices))}
		for _, t := range v.Tasks {
			d.Tasks = append(d.Tasks, restTask{VertexID: t.Vertex, Subtask: t.Subtask, Attempt: t.Attempt, Name: t.Name, State: t.State.String(),
				TaskManagerID: t.TaskManager, Error: t.Err, RecordsIn: t.RecordsIn, RecordsOut: t.RecordsOut})
		}
		for _, gv := range v.Graph.Vertices {
			rv := restVertex{ID: gv.ID, UID: gv.UID, Name: gv.Name, Type: gv.Type, Parallelism: gv.Parallelism, TaskID: v.TaskOf[gv.ID],
				Inputs: []restInput{}}
			for _, e := range v.Graph.Inputs(gv.ID) {
				rv.Inputs = append(rv.Inputs, restInput{From: e.From, Input: e.Input, Partitioning: e.Partitioning.String(), KeyFields: e.KeyFields, SideOutput: e.SideOutput})
			}
			d.Vertices = append(d.Vertices, rv)
		}
		writeJSON(w, http.StatusOK, d)
	})
	mux.HandleFunc("GET /v1/taskmanagers", func(w http.ResponseWriter, _ *http.Request) {
		jm.mu.Lock()
		views := jm.mu.core.TaskManagers()
		jm.mu.Unlock()
		tms := make([]restTaskManager, 0, len(views))
		for _, v := range views {
			tms = append(tms, restTaskManager{ID: v.ID, Address: v.Addr, Live: v.Live, Suspected: v.Suspected, Reason: v.Reason,
				SlotsTotal: v.Slots, SlotsFree: v.Free,
				LastHeartbeatMs: unixMillis(v.LastHeartbeat), OperatorTypes: append([]string{}, v.OperatorTypes...)})
		}
		writeJSON(w, http.StatusOK, map[string]any{"taskmanagers": tms})
	})
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, _ *http.Request) {
		jm.mu.Lock()
		tms, jobs := jm.mu.core.TaskManagers(), jm.mu.core.Jobs()
		stale, staleAcks := jm.mu.core.StaleCounts()
		jm.mu.Unlock()
		o := restOverview{TaskManagers: len(tms), Jobs: make(map[string]int), StaleReports: stale, StaleAcks: staleAcks}
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
		writeJSON(w, http.StatusOK, o)
	})
	mux.HandleFunc("GET /v1/jobs/{id}/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		resp, err := jm.listCheckpoints(r.PathValue("id"))
		if err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		out := restCheckpoints{Checkpoints: make([]restCheckpoint, 0, len(resp.Checkpoints)), Completed: resp.Completed,
			Failed: resp.Failed, InProgress: resp.InProgress, RestoredFrom: resp.RestoredFrom}
		for _, c := range resp.Checkpoints {
			out.Checkpoints = append(out.Checkpoints, restCheckpoint{ID: c.CheckpointId,
				Status: strings.TrimPrefix(c.Status.String(), "CHECKPOINT_STATUS_"), TriggerTimeMs: c.TriggerTimeMs,
				DurationMs: c.DurationMs, SizeBytes: c.SizeBytes, SlowestTask: c.SlowestTask, SlowestTaskMs: c.SlowestTaskMs,
				Acknowledged: c.Acknowledged, TotalTasks: c.TotalTasks, Failure: c.Failure})
		}
		writeJSON(w, http.StatusOK, out)
	})
	// The one endpoint that changes something: trigger a checkpoint now.
	mux.HandleFunc("POST /v1/jobs/{id}/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		id, err := jm.triggerCheckpoint(r.PathValue("id"))
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
		jm.startSavepointRequest(w, r.PathValue("id"), body.Dir, false, false)
	})
	mux.HandleFunc("POST /v1/jobs/{id}/stop", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			SavepointDir string `json:"savepointDir"`
			Drain        bool   `json:"drain"`
		}
		if !readJSONBody(w, r, &body) {
			return
		}
		jm.startSavepointRequest(w, r.PathValue("id"), body.SavepointDir, true, body.Drain)
	})
	mux.HandleFunc("GET /v1/savepoint-requests/{rid}", func(w http.ResponseWriter, r *http.Request) {
		req, ok := jm.savepointRequest(r.PathValue("rid"))
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
	mux.HandleFunc("GET /v1/jobs/{id}/checkpoints/{cid}", func(w http.ResponseWriter, r *http.Request) {
		cid, err := strconv.ParseInt(r.PathValue("cid"), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("checkpoint id %q is not a number", r.PathValue("cid")))
			return
		}
		resp, err := jm.inspectCheckpoint(r.Context(), r.PathValue("id"), cid)
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
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			writeError(w, http.StatusMethodNotAllowed, "the REST API is read-only except POST /v1/jobs/{id}/checkpoints, /v1/jobs/{id}/savepoints, /v1/jobs/{id}/stop and /v1/savepoints/dispose; use GET (submit and cancel jobs over gRPC with the weir CLI)")
			return
		}
		writeError(w, http.StatusNotFound, "no such resource "+r.URL.Path+"; try /v1/jobs, /v1/jobs/{id}/checkpoints, /v1/taskmanagers, /v1/overview, /metrics or /healthz")
	})
	return jm.standbyREST(mux)
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
