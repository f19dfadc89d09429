// Package webui is the jobmanager's web UI: server-rendered HTML pages of
// the cluster, its taskmanagers, jobs, checkpoints and failures, and forms
// for the actions of the REST API (trigger a checkpoint or a savepoint,
// stop, cancel). The jobmanager's REST server mounts it under /ui/.
//
// The UI reads nothing on its own: every page renders documents of package
// view that a Backend builds, the same functions the REST API's handlers
// call, and every action calls the Backend method the REST API calls. The
// REST server's authorization applies to it unchanged (with TLS: pages
// need the read role, actions operate). Actions are POSTs that carry a
// token of this process in the form, so that another site cannot make a
// browser submit them; the REST server also refuses cross-origin POSTs.
// Templates, style sheet and script are embedded: nothing is fetched from
// elsewhere, and the pages' Content-Security-Policy allows nothing else.
//
// webui imports view, the generated protobuf types (a checkpoint's
// manifest) and the standard library.
package webui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"time"

	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/proto/weirpb"
)

// Backend builds the documents the pages show and performs the actions.
// Its methods may be called concurrently. Errors are the backend's own;
// HTTPStatus picks their status code (404 for an unknown job, 409 for an
// action the job's state does not allow, ...), and their text is shown.
type Backend interface {
	// Now is the backend's clock, for ages such as a heartbeat's.
	Now() time.Time
	Overview() view.Overview
	TaskManagers() []view.TaskManager
	Jobs() []view.Job
	Job(id string) (view.JobDetail, error)
	Checkpoints(jobID string) (view.Checkpoints, error)
	// CheckpointStats and ExplainCheckpoint describe a checkpoint of the
	// job's recent history (completed, failed or in progress).
	CheckpointStats(jobID string, id int64) (view.CheckpointStats, error)
	ExplainCheckpoint(jobID string, id int64) (view.CheckpointExplain, error)
	// Exceptions is the job's failure history, newest first.
	Exceptions(jobID string) ([]view.Exception, error)
	// Checkpoint reads the manifest of a completed checkpoint.
	Checkpoint(ctx context.Context, jobID string, id int64) (*weirpb.InspectCheckpointResponse, error)
	// SavepointRequest is false for an unknown request id.
	SavepointRequest(rid string) (view.SavepointRequest, bool)
	TriggerCheckpoint(jobID string) (int64, error)
	// Savepoint and Stop start a savepoint (and a stop with it) into dir
	// ("": the default directory) and return the request's id.
	Savepoint(jobID, dir string) (string, error)
	Stop(jobID, dir string, drain bool) (string, error)
	Cancel(jobID string) error
	HTTPStatus(err error) int
}

// TokenField is the form field that carries the anti-forgery token of
// every action.
const TokenField = "csrf_token"

// maxFormBytes bounds an action's form.
const maxFormBytes = 16 << 10

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pages holds one template set per page, each the layout plus the page.
var pages = parsePages()

func parsePages() map[string]*template.Template {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	m := make(map[string]*template.Template)
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n))
		m[n[len("templates/"):]] = t
	}
	return m
}

// Handler serves the UI. Mount it at /ui/.
type Handler struct {
	b     Backend
	token string
	mux   *http.ServeMux
}

var _ http.Handler = (*Handler)(nil)

// New returns the UI over b, with an anti-forgery token of its own.
func New(b Backend) *Handler {
	var raw [16]byte
	_, _ = rand.Read(raw[:]) // never fails
	h := &Handler{b: b, token: hex.EncodeToString(raw[:]), mux: http.NewServeMux()}
	static, _ := fs.Sub(staticFS, "static") // the directory is embedded
	h.mux.HandleFunc("GET /ui/static/{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if fi, err := fs.Stat(static, name); err != nil || fi.IsDir() {
			h.fail(w, r, http.StatusNotFound, "There is no page "+r.URL.Path+".")
			return
		}
		http.ServeFileFS(w, r, static, name)
	})
	h.mux.HandleFunc("GET /ui/{$}", h.overview)
	h.mux.HandleFunc("GET /ui/taskmanagers", h.taskManagers)
	h.mux.HandleFunc("GET /ui/jobs", h.jobs)
	h.mux.HandleFunc("GET /ui/jobs/{id}", h.job)
	h.mux.HandleFunc("GET /ui/jobs/{id}/checkpoints", h.checkpoints)
	h.mux.HandleFunc("GET /ui/jobs/{id}/checkpoints/{cid}", h.checkpoint)
	h.mux.HandleFunc("GET /ui/jobs/{id}/exceptions", h.exceptions)
	h.mux.HandleFunc("GET /ui/savepoints/{rid}", h.savepoint)
	h.mux.HandleFunc("POST /ui/jobs/{id}/{action}", h.action)
	h.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "There is no page "+r.URL.Path+".")
	})
	return h
}

// ServeHTTP serves a page or an action.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// page is what every page's template gets.
type page struct {
	Title string
	// Section is the navigation entry to highlight: overview,
	// taskmanagers or jobs.
	Section string
	// Tab is the job tab to highlight (job, checkpoints, exceptions) on a
	// job's pages.
	Tab   string
	JobID string
	Token string
	Now   time.Time
	// Notice is a line shown above the content (an action's outcome).
	Notice string
	Data   any
}

func (h *Handler) render(w http.ResponseWriter, code int, name string, p page) {
	t, ok := pages[name]
	if !ok {
		http.Error(w, "webui: no template "+name, http.StatusInternalServerError)
		return
	}
	p.Token, p.Now = h.token, h.b.Now()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if err := t.Execute(w, p); err != nil {
		// The header is out; end the page with the reason.
		fmt.Fprintf(w, "<p class=error>webui: rendering %s: %s</p>", template.HTMLEscapeString(name), template.HTMLEscapeString(err.Error()))
	}
}

// fail answers with an error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	h.render(w, code, "error.html", page{Title: http.StatusText(code), Data: struct {
		Code    int
		Message string
		Path    string
	}{code, msg, r.URL.Path}})
}

func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	h.fail(w, r, h.b.HTTPStatus(err), err.Error())
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "overview.html", page{Title: "Overview", Section: "overview", Data: overviewData(h.b.Overview(), h.b.Jobs())})
}

func (h *Handler) taskManagers(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "taskmanagers.html", page{Title: "Taskmanagers", Section: "taskmanagers", Data: h.b.TaskManagers()})
}

func (h *Handler) jobs(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "jobs.html", page{Title: "Jobs", Section: "jobs", Data: h.b.Jobs()})
}

func (h *Handler) job(w http.ResponseWriter, r *http.Request) {
	d, err := h.b.Job(r.PathValue("id"))
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	p := page{Title: "Job " + d.Job.Name, Section: "jobs", Tab: "job", JobID: d.Job.ID, Data: jobData(d)}
	switch r.URL.Query().Get("done") {
	case "cancel":
		p.Notice = "The job is being cancelled."
	}
	h.render(w, http.StatusOK, "job.html", p)
}

func (h *Handler) checkpoints(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	d, err := h.b.Job(id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	p := page{Title: "Checkpoints of " + d.Job.Name, Section: "jobs", Tab: "checkpoints", JobID: id}
	data := checkpointsPage{Job: d.Job}
	if d.Job.Checkpointing {
		cps, err := h.b.Checkpoints(id)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		data.Checkpoints = &cps
	}
	p.Data = data
	// The outcome of the trigger action, which redirects here; only a
	// number is shown.
	if n, err := parseID(r.URL.Query().Get("triggered")); err == nil {
		p.Notice = fmt.Sprintf("Checkpoint %d was triggered.", n)
	}
	h.render(w, http.StatusOK, "checkpoints.html", p)
}

func (h *Handler) checkpoint(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	cid, err := parseID(r.PathValue("cid"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "A checkpoint id is a positive number.")
		return
	}
	d, err := h.b.Job(id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := checkpointStatsPage{Job: d.Job, ID: cid}
	// The statistics live in the jobmanager's history, the manifest in
	// storage: a page needs one of them.
	stats, statsErr := h.b.CheckpointStats(id, cid)
	if statsErr == nil {
		data.Stats = &stats
		if ex, err := h.b.ExplainCheckpoint(id, cid); err == nil {
			data.Explain = &ex
		}
	}
	if statsErr != nil || stats.Status == "COMPLETED" {
		resp, err := h.b.Checkpoint(r.Context(), id, cid)
		switch {
		case err == nil:
			m := manifestData(d.Job, resp)
			data.Manifest = &m
		case statsErr != nil:
			h.failErr(w, r, err)
			return
		default:
			data.ManifestErr = err.Error()
		}
	}
	h.render(w, http.StatusOK, "checkpoint.html", page{Title: fmt.Sprintf("Checkpoint %d of %s", cid, d.Job.Name), Section: "jobs",
		Tab: "checkpoints", JobID: id, Data: data})
}

func (h *Handler) exceptions(w http.ResponseWriter, r *http.Request) {
	d, err := h.b.Job(r.PathValue("id"))
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	history, err := h.b.Exceptions(d.Job.ID)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.render(w, http.StatusOK, "exceptions.html", page{Title: "Exceptions of " + d.Job.Name, Section: "jobs", Tab: "exceptions",
		JobID: d.Job.ID, Data: exceptionsData(d, history)})
}

func (h *Handler) savepoint(w http.ResponseWriter, r *http.Request) {
	req, ok := h.b.SavepointRequest(r.PathValue("rid"))
	if !ok {
		h.fail(w, r, http.StatusNotFound, "No such savepoint request; the jobmanager keeps the last 100.")
		return
	}
	h.render(w, http.StatusOK, "savepoint.html", page{Title: "Savepoint request", Section: "jobs", JobID: req.JobID, Data: req})
}

// action performs a form's action after checking its token, and redirects
// to the page that shows the outcome (POST, redirect, GET: reloading the
// page does not repeat the action).
func (h *Handler) action(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read; it may be larger than 16 KiB.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get(TokenField)), []byte(h.token)) != 1 {
		h.fail(w, r, http.StatusForbidden, "The form's token is missing or stale (the jobmanager restarted?). Reload the page and try again.")
		return
	}
	id := r.PathValue("id")
	job := "/ui/jobs/" + url.PathEscape(id)
	switch r.PathValue("action") {
	case "checkpoint":
		cid, err := h.b.TriggerCheckpoint(id)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("%s/checkpoints?triggered=%d", job, cid), http.StatusSeeOther)
	case "savepoint":
		rid, err := h.b.Savepoint(id, r.PostForm.Get("dir"))
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		http.Redirect(w, r, "/ui/savepoints/"+url.PathEscape(rid), http.StatusSeeOther)
	case "stop":
		rid, err := h.b.Stop(id, r.PostForm.Get("dir"), r.PostForm.Get("drain") == "on")
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		http.Redirect(w, r, "/ui/savepoints/"+url.PathEscape(rid), http.StatusSeeOther)
	case "cancel":
		if err := h.b.Cancel(id); err != nil {
			h.failErr(w, r, err)
			return
		}
		http.Redirect(w, r, job+"?done=cancel", http.StatusSeeOther)
	default:
		h.fail(w, r, http.StatusNotFound, "There is no such action; the actions are checkpoint, savepoint, stop and cancel.")
	}
}
