package jobmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// Placeholders in fuzzed request targets that stand for the ids of the
// jobs the fuzzed jobmanager holds (the ids are random per process, so the
// committed corpus cannot name them): fuzzCheckpointedJob takes
// checkpoints and has a readable manifest for checkpoint 1 and a corrupt
// one for checkpoint 2; fuzzPlainJob takes none.
const (
	fuzzCheckpointedJob = "{job}"
	fuzzPlainJob        = "{plain}"
)

// restFuzzTarget is the REST handler of a JobManager that was never Run,
// so nothing listens; requests are served in-process.
type restFuzzTarget struct {
	handler http.Handler
	// ids replaces the placeholders of a request target with job ids.
	ids *strings.Replacer
}

// newRESTFuzzTarget builds a jobmanager from the default config changed by
// mutate and submits two jobs that wait for slots forever: no taskmanager registers
// and the clock stands still, so every fuzz iteration sees the same state.
// A standby (ha: etcd, never Run) gets no jobs: it answers from nothing.
func newRESTFuzzTarget(f *testing.F, mutate func(*Config)) *restFuzzTarget {
	f.Helper()
	cfg := DefaultConfig()
	cfg.RESTAddress = ""
	cfg.Logger = slog.New(slog.DiscardHandler)
	if mutate != nil {
		mutate(&cfg)
	}
	jm, err := New(cfg, testRegistry(f))
	if err != nil {
		f.Fatal(err)
	}
	frozen := time.UnixMilli(1_700_000_000_000)
	jm.now = func() time.Time { return frozen }
	store := checkpoint.NewStorage(blobstore.NewMem())
	jm.openStorage = func(context.Context, string) (checkpointStore, error) { return store, nil }
	// Without jobs the placeholders stand for an id that no job has.
	target := &restFuzzTarget{handler: jm.restHandler(),
		ids: strings.NewReplacer(fuzzCheckpointedJob, "0123456789abcdef", fuzzPlainJob, "fedcba9876543210")}
	if leader, _ := jm.leading(); !leader {
		return target
	}

	ctx := f.Context()
	ck := pipeline(f, 2, 4)
	ck.Checkpoint = stream.CheckpointConfig{Interval: time.Minute}
	ckID, err := jm.submit(ctx, weirpb.FromGraph(ck), 0, "", false)
	if err != nil {
		f.Fatal(err)
	}
	plainID, err := jm.submit(ctx, weirpb.FromGraph(pipeline(f, 1, 1)), 0, "", false)
	if err != nil {
		f.Fatal(err)
	}
	m := &weirpb.Manifest{JobId: ckID, JobName: "pipeline", CheckpointId: 1, MaxParallelism: 128,
		Operators: []*weirpb.OperatorState{{OperatorUid: "window", Parallelism: 4, Handles: []*weirpb.StateHandle{
			{OperatorUid: "window", Parallelism: 4, Key: ckID + "/chk-1/window/0-a1", Size: 3, Sha256: strings.Repeat("0", 64)},
		}}}}
	if _, _, err := store.WriteManifest(ctx, m); err != nil {
		f.Fatal(err)
	}
	if err := store.Store().Put(ctx, checkpoint.ManifestKey(ckID, 2), []byte{0xff, 0x00}); err != nil {
		f.Fatal(err)
	}
	target.ids = strings.NewReplacer(fuzzCheckpointedJob, ckID, fuzzPlainJob, plainID)
	return target
}

// serve sends one request to the handler. ok is false for a request the
// HTTP server would have rejected with 400 before any handler runs: a
// method that is not a token, or a target that does not parse.
func (rt *restFuzzTarget) serve(ctx context.Context, method, target string, body []byte) (w *httptest.ResponseRecorder, r *http.Request, ok bool) {
	target = rt.ids.Replace(target)
	// The request line is split at spaces, and a target with control
	// characters does not parse; neither reaches a handler.
	if strings.ContainsAny(target, " \t\r\n") {
		return nil, nil, false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, nil, false
	}
	r, err = http.NewRequestWithContext(ctx, method, "http://jobmanager.test/", bytes.NewReader(body))
	if err != nil {
		return nil, nil, false
	}
	r.URL, r.RequestURI, r.Host = u, target, "jobmanager.test"
	if len(body) > 0 {
		r.Header.Set("Content-Type", "application/json")
	}
	w = httptest.NewRecorder()
	rt.handler.ServeHTTP(w, r)
	return w, r, true
}

// checkJSONResponse checks the shape every answer of the REST API has:
// a JSON body, and for an error an object whose "error" says what went
// wrong. Redirects (the router's answer to paths with "..", "//" or a
// missing trailing slash), the Prometheus text of GET /metrics, the
// router's bare 400 for "OPTIONS *" and the web UI under /ui/ are not
// JSON.
func checkJSONResponse(t *testing.T, r *http.Request, w *httptest.ResponseRecorder) {
	t.Helper()
	code, body := w.Code, w.Body.Bytes()
	switch {
	case code >= 300 && code < 400:
		if w.Header().Get("Location") == "" {
			t.Fatalf("%s %q: %d without a Location", r.Method, r.RequestURI, code)
		}
		return
	case r.URL.Path == "/metrics" && code == http.StatusOK:
		return
	case r.RequestURI == "*":
		return
	case strings.HasPrefix(r.URL.Path, "/ui/") && w.Header().Get("Content-Type") == "text/html; charset=utf-8":
		// The web UI's pages, errors included, are HTML.
		return
	case strings.HasPrefix(r.URL.Path, "/ui/static/") && code == http.StatusOK:
		return // its style sheet and script
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %q: %d with Content-Type %q, want application/json; body %q", r.Method, r.RequestURI, code, ct, body)
	}
	if !json.Valid(body) {
		t.Fatalf("%s %q: %d with a body that is not JSON: %q", r.Method, r.RequestURI, code, body)
	}
	if code >= 400 {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
			t.Fatalf("%s %q: %d without an error message: %q", r.Method, r.RequestURI, code, body)
		}
	}
}

// FuzzREST sends arbitrary requests (method, target and body) to the REST
// handler of a leading jobmanager that holds two jobs, and to that of a
// standby. Properties:
//   - no request panics a handler;
//   - the leader never answers 5xx: every malformed request (an unknown
//     job or checkpoint id, a checkpoint id that is not a number, a method
//     the API does not have, an unknown path, a body where none is read) is
//     the caller's fault or a conflict with the job's state and gets 4xx;
//   - a standby answers 503 with Retry-After to everything but /v1/ha,
//     /healthz and /metrics, which it answers itself;
//   - every answer except redirects and the metrics is JSON, and every
//     error is an object with a non-empty "error".
//
// The targets may contain {job} and {plain}, which stand for the ids of a
// job that takes checkpoints and one that does not. The seeds, one or more
// per endpoint, are in testdata/fuzz/FuzzREST.
func FuzzREST(f *testing.F) {
	leader := newRESTFuzzTarget(f, nil)
	standby := newRESTFuzzTarget(f, func(cfg *Config) {
		cfg.HA.Mode = "etcd"
		cfg.HA.Endpoints = []string{"http://127.0.0.1:1"} // never dialled: the standby is never Run
	})
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		w, r, ok := leader.serve(t.Context(), method, target, body)
		if !ok {
			return
		}
		if w.Code >= 500 {
			t.Fatalf("%s %q: %d: %s", r.Method, r.RequestURI, w.Code, w.Body.Bytes())
		}
		checkJSONResponse(t, r, w)

		// The placeholders become ids of the same length and alphabet for
		// both, so what the leader's server would parse, the standby's would.
		if w, r, ok = standby.serve(t.Context(), method, target, body); !ok {
			t.Fatalf("standby: %s %q does not parse", method, target)
		}
		switch r.URL.Path {
		case "/v1/ha", "/healthz", "/metrics":
			if w.Code >= 500 {
				t.Fatalf("standby %s %q: %d: %s", r.Method, r.RequestURI, w.Code, w.Body.Bytes())
			}
		default:
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
				t.Fatalf("standby %s %q: %d (Retry-After %q), want 503 with Retry-After", r.Method, r.RequestURI, w.Code, w.Header().Get("Retry-After"))
			}
		}
		checkJSONResponse(t, r, w)
	})
}
