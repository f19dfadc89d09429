package jobmanager

import (
	"encoding/json"
	"errors"
	"net/http"
)

// The REST API is read-only JSON with lowerCamel field names. Times are
// Unix milliseconds (0: not yet). States are the upper-case names of the
// gRPC enums without prefix ("RUNNING").

type restJob struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	State        string `json:"state"`
	StartTimeMs  int64  `json:"startTimeMs"`
	EndTimeMs    int64  `json:"endTimeMs"`
	TasksTotal   int    `json:"tasksTotal"`
	TasksRunning int    `json:"tasksRunning"`
	Error        string `json:"error,omitempty"`
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
}

func toRESTJob(v *jobView) restJob {
	return restJob{ID: v.ID, Name: v.Name, State: v.State.String(), StartTimeMs: unixMillis(v.Start), EndTimeMs: unixMillis(v.End),
		TasksTotal: v.TasksTotal, TasksRunning: v.TasksRunning, Error: v.Err}
}

func (jm *JobManager) restHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "jobmanagerId": jm.id})
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, _ *http.Request) {
		jm.mu.Lock()
		views := jm.mu.core.jobViews()
		jm.mu.Unlock()
		jobs := make([]restJob, 0, len(views))
		for i := range views {
			jobs = append(jobs, toRESTJob(&views[i]))
		}
		writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		jm.mu.Lock()
		v, err := jm.mu.core.jobView(r.PathValue("id"))
		jm.mu.Unlock()
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrJobNotFound) {
				code = http.StatusNotFound
			}
			writeError(w, code, err.Error())
			return
		}
		d := restJobDetail{Job: toRESTJob(&v), Tasks: make([]restTask, 0, len(v.Tasks)), Vertices: make([]restVertex, 0, len(v.Graph.Vertices))}
		for _, t := range v.Tasks {
			d.Tasks = append(d.Tasks, restTask{VertexID: t.Vertex, Subtask: t.Subtask, Attempt: t.Attempt, Name: t.Name, State: t.State.String(),
				TaskManagerID: t.TaskManager, Error: t.Err, RecordsIn: t.RecordsIn, RecordsOut: t.RecordsOut})
		}
		for _, gv := range v.Graph.Vertices {
			rv := restVertex{ID: gv.ID, UID: gv.UID, Name: gv.Name, Type: gv.Type, Parallelism: gv.Parallelism, TaskID: v.TaskOf[gv.ID],
				Inputs: []restInput{}}
			for _, e := range v.Graph.Inputs(gv.ID) {
				rv.Inputs = append(rv.Inputs, restInput{From: e.From, Input: e.Input, Partitioning: e.Partitioning.String(), KeyFields: e.KeyFields})
			}
			d.Vertices = append(d.Vertices, rv)
		}
		writeJSON(w, http.StatusOK, d)
	})
	mux.HandleFunc("GET /v1/taskmanagers", func(w http.ResponseWriter, _ *http.Request) {
		jm.mu.Lock()
		views := jm.mu.core.tmViews()
		jm.mu.Unlock()
		tms := make([]restTaskManager, 0, len(views))
		for _, v := range views {
			tms = append(tms, restTaskManager{ID: v.ID, Address: v.Addr, Live: v.Live, SlotsTotal: v.Slots, SlotsFree: v.Free,
				LastHeartbeatMs: unixMillis(v.LastHeartbeat), OperatorTypes: append([]string{}, v.OperatorTypes...)})
		}
		writeJSON(w, http.StatusOK, map[string]any{"taskmanagers": tms})
	})
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, _ *http.Request) {
		jm.mu.Lock()
		tms, jobs, stale := jm.mu.core.tmViews(), jm.mu.core.jobViews(), jm.mu.core.staleReports
		jm.mu.Unlock()
		o := restOverview{TaskManagers: len(tms), Jobs: make(map[string]int), StaleReports: stale}
		for _, s := range jobStateNames[1:] {
			o.Jobs[s] = 0
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
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			writeError(w, http.StatusMethodNotAllowed, "the REST API is read-only; use GET (submit and cancel jobs over gRPC with the weir CLI)")
			return
		}
		writeError(w, http.StatusNotFound, "no such resource "+r.URL.Path+"; try /v1/jobs, /v1/taskmanagers, /v1/overview or /healthz")
	})
	return mux
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
