package jobmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/storeuri"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
)

// Savepoints. A savepoint is a checkpoint copied into a directory of its
// own: every object it needs, with keys relative to that directory and its
// manifest as _metadata, so that it can be moved and outlives the job. The
// jobmanager triggers the checkpoint, keeps the job's checkpoint deletions
// back until the copy is done (pins), and copies.

// savepointDirName is the savepoint of checkpoint id of job jobID, under
// the savepoint directory.
func savepointDirName(jobID string, id int64) string {
	return "savepoint-" + jobID + "-" + strconv.FormatInt(id, 10)
}

// savepointDir resolves and checks the directory a savepoint request
// names: dir, else Config.SavepointDir. A file:// one must be under the
// allowed paths.
func (jm *JobManager) savepointDir(dir string) (string, error) {
	if dir == "" {
		dir = jm.cfg.SavepointDir
	}
	if dir == "" {
		return "", fmt.Errorf("%w: no savepoint directory: pass one (weir savepoint --dir, weir jobs stop --savepoint-dir) or set the jobmanager's savepointDir",
			scheduler.ErrInvalidArgument)
	}
	if len(dir) > 1024 {
		return "", fmt.Errorf("%w: the savepoint directory is %d bytes long; the limit is 1024", scheduler.ErrInvalidArgument, len(dir))
	}
	if err := checkStorageURI("savepoint directory", dir, jm); err != nil {
		return "", err
	}
	return strings.TrimSuffix(dir, "/"), nil
}

// checkStorageURI checks a file:// or s3:// URI a client names; a file://
// one must be absolute and under the allowed paths.
func checkStorageURI(what, uri string, jm *JobManager) error {
	if p, ok := strings.CutPrefix(uri, "file://"); ok {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: %s %.200q: a file:// URI needs an absolute path (file:///dir)", scheduler.ErrInvalidArgument, what, uri)
		}
		if err := jm.paths.Check(what, p); err != nil {
			return fmt.Errorf("%w: %v", scheduler.ErrInvalidArgument, err)
		}
		return nil
	}
	if strings.HasPrefix(uri, "s3://") {
		return nil
	}
	return fmt.Errorf("%w: %s %.200q: want file:///path or s3://bucket/prefix", scheduler.ErrInvalidArgument, what, uri)
}

// savepoint takes a savepoint of job jobID under dir; with req.Stop the
// job stops at it (FINISHED), with req.Drain after its sources emitted the
// maximum watermark. It returns once the savepoint is complete; req, when
// registered (savepointRequests), shows its progress meanwhile.
func (jm *JobManager) savepoint(ctx context.Context, dir string, req *restSavepointRequest) (*weirpb.SavepointResponse, error) {
	jobID, stop := req.JobID, req.Stop
	dir, err := jm.savepointDir(dir)
	if err != nil {
		return nil, err
	}
	jm.pin(jobID)
	defer jm.unpin(jobID)
	var id int64
	jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		if stop {
			id, acts, err = c.StopWithSavepoint(jobID, req.Drain, now)
		} else {
			id, acts, err = c.TriggerSavepoint(jobID, now)
		}
		return acts
	})
	if err != nil {
		return nil, err
	}
	jm.updateSavepointRequest(req, func(r *restSavepointRequest) { r.CheckpointID = id })
	if id, err = jm.awaitSavepointCheckpoint(ctx, jobID, id, stop); err != nil {
		return nil, err
	}
	ctx = jm.jobStorageCtx(ctx, jobID)
	st, ok := jm.storage(jobID).(rawStore)
	if !ok {
		return nil, fmt.Errorf("%w: job %s: its checkpoint storage cannot be copied from", ErrStorage, jobID)
	}
	src := checkpoint.NewStorage(st.Store())
	m, err := src.ReadManifest(ctx, jobID, id)
	if err != nil {
		return nil, fmt.Errorf("%w: savepoint of job %s: reading checkpoint %d: %v", ErrStorage, jobID, id, err)
	}
	loc := dir + "/" + savepointDirName(jobID, id)
	dst, err := storeuri.Open(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("%w: savepoint of job %s: opening %s: %v", ErrStorage, jobID, loc, err)
	}
	dst = blobstore.Counting(dst, &jm.storageCounts)
	start := time.Now()
	_, size, err := checkpoint.WriteSavepoint(ctx, src, m, dst, func(done, total int64) {
		jm.updateSavepointRequest(req, func(r *restSavepointRequest) {
			r.CheckpointID, r.Copying, r.BytesCopied, r.BytesTotal = id, true, done, total
		})
	})
	if err != nil {
		return nil, fmt.Errorf("%w: savepoint of job %s: copying checkpoint %d to %s: %v", ErrStorage, jobID, id, loc, err)
	}
	jm.log.Info("savepoint written", "job", jobID, "checkpoint", id, "location", loc, "bytes", size, "duration", time.Since(start), "stopped", stop)
	return &weirpb.SavepointResponse{Location: loc, CheckpointId: id, SizeBytes: size}, nil
}

// awaitSavepointCheckpoint waits for the checkpoint of a savepoint: id
// completed (a trigger), or the job stopped at id or a later one (a stop).
func (jm *JobManager) awaitSavepointCheckpoint(ctx context.Context, jobID string, id int64, stop bool) (int64, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := jm.savepointCheckpointDone(jobID, id, stop)
		if err != nil || done > 0 {
			return done, err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("savepoint of job %s: waiting for checkpoint %d: %w", jobID, id, ctx.Err())
		case <-tick.C: // polling the scheduler's view
		}
	}
}

// savepointCheckpointDone reports the checkpoint the savepoint is of once
// it completed (0: not yet), or why it never will.
func (jm *JobManager) savepointCheckpointDone(jobID string, id int64, stop bool) (int64, error) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	if stop {
		v, err := jm.mu.core.Job(jobID)
		switch {
		case err != nil:
			return 0, err
		case v.StoppedAt > 0 && v.State.Terminal():
			return v.StoppedAt, nil
		case v.StoppedAt == 0 && v.StopPending == 0:
			reason := v.StopFailed
			if reason == "" {
				reason = "the job is " + v.State.String()
			}
			return 0, fmt.Errorf("%w: job %s was not stopped: %s", ErrSavepointFailed, jobID, reason)
		}
		return 0, nil
	}
	cv, err := jm.mu.core.Checkpoints(jobID)
	if err != nil {
		return 0, err
	}
	for _, s := range cv.History {
		if s.ID != id {
			continue
		}
		switch s.Status.String() {
		case "completed":
			return id, nil
		case "failed":
			return 0, fmt.Errorf("%w: checkpoint %d of job %s failed: %s", ErrSavepointFailed, id, jobID, s.Failure)
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%w: checkpoint %d of job %s is no longer known", ErrSavepointFailed, id, jobID)
}

// ErrSavepointFailed is returned when a savepoint's checkpoint does not
// complete.
var ErrSavepointFailed = errors.New("jobmanager: savepoint failed")

// disposeSavepoint deletes the savepoint at loc.
func (jm *JobManager) disposeSavepoint(ctx context.Context, loc string) (int, error) {
	if err := checkStorageURI("savepoint", loc, jm); err != nil {
		return 0, err
	}
	dst, err := storeuri.Open(ctx, loc)
	if err != nil {
		return 0, fmt.Errorf("%w: savepoint %s: %v", ErrStorage, loc, err)
	}
	n, err := checkpoint.DisposeSavepoint(ctx, dst)
	if err != nil {
		return n, fmt.Errorf("%w: disposing savepoint %s: %v", scheduler.ErrInvalidArgument, loc, err)
	}
	jm.log.Info("savepoint disposed", "location", loc, "objects", n)
	return n, nil
}

// pin keeps job jobID's checkpoint deletions back (deferred) until unpin;
// pins nest.
func (jm *JobManager) pin(jobID string) {
	jm.pins.Lock()
	defer jm.pins.Unlock()
	if jm.pins.n == nil {
		jm.pins.n = make(map[string]int)
		jm.pins.deferred = make(map[string][]scheduler.Action)
	}
	jm.pins.n[jobID]++
}

// unpin ends a pin; the last one queues the deletions kept back.
func (jm *JobManager) unpin(jobID string) {
	jm.pins.Lock()
	jm.pins.n[jobID]--
	var acts []scheduler.Action
	if jm.pins.n[jobID] <= 0 {
		delete(jm.pins.n, jobID)
		acts = jm.pins.deferred[jobID]
		delete(jm.pins.deferred, jobID)
	}
	jm.pins.Unlock()
	jm.enqueue(acts)
}

// deferIfPinned keeps a back while its job is pinned.
func (jm *JobManager) deferIfPinned(a scheduler.DeleteCheckpointsAction) bool {
	jm.pins.Lock()
	defer jm.pins.Unlock()
	if jm.pins.n[a.JobID] == 0 {
		return false
	}
	jm.pins.deferred[a.JobID] = append(jm.pins.deferred[a.JobID], a)
	return true
}

// Savepoint requests: every savepoint the REST API starts (it answers at
// once and runs the savepoint in the background), and every one a gRPC
// call names with a request_id (the call waits for it; weir savepoint and
// weir jobs stop poll GetSavepointProgress meanwhile to show its progress
// on a terminal). A request is kept, with its progress and then its
// outcome, until maxSavepointRequests newer ones pushed it out.

// maxSavepointRequests bounds the requests kept, oldest forgotten first.
const maxSavepointRequests = 100

// savepointTimeout bounds one savepoint of the REST API.
const savepointTimeout = time.Hour

// Errors of savepoint requests.
var (
	// ErrSavepointRequestExists: a request with the id is kept already.
	ErrSavepointRequestExists = errors.New("jobmanager: savepoint request id in use")
	// ErrSavepointRequestNotFound: no request with the id is kept.
	ErrSavepointRequestNotFound = errors.New("jobmanager: no such savepoint request")
)

// restSavepointRequest is one request's state, as GET
// /v1/savepoint-requests/{rid} shows it. Its fields change under
// jm.spReqs' lock (updateSavepointRequest).
type restSavepointRequest struct {
	ID           string `json:"requestId"`
	JobID        string `json:"jobId"`
	Stop         bool   `json:"stop"`
	Drain        bool   `json:"drain,omitempty"`
	Status       string `json:"status"` // IN_PROGRESS, COMPLETED or FAILED
	Location     string `json:"location,omitempty"`
	CheckpointID int64  `json:"checkpointId,omitempty"`
	SizeBytes    int64  `json:"sizeBytes,omitempty"`
	Error        string `json:"error,omitempty"`
	// Copying: the checkpoint completed and its objects are being copied
	// (IN_PROGRESS); BytesCopied of BytesTotal are.
	Copying     bool  `json:"copying,omitempty"`
	BytesCopied int64 `json:"bytesCopied"`
	BytesTotal  int64 `json:"bytesTotal"`

	registered bool // kept in jm.spReqs
}

// validRequestID checks a request id a client chose: 1 to 64 letters,
// digits, '-' or '_'.
func validRequestID(id string) error {
	ok := len(id) > 0 && len(id) <= 64
	for _, c := range id {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_')
	}
	if !ok {
		return fmt.Errorf("%w: savepoint request id %.80q: want 1 to 64 letters, digits, '-' or '_'", scheduler.ErrInvalidArgument, id)
	}
	return nil
}

// newSavepointRequest returns the request of a savepoint of job jobID
// (stop: a stop with it, drain: with --drain). With id it is registered
// under id, refused when a kept request has it; without, it is not
// registered and its progress updates are dropped.
func (jm *JobManager) newSavepointRequest(id, jobID string, stop, drain bool) (*restSavepointRequest, error) {
	req := &restSavepointRequest{ID: id, JobID: jobID, Stop: stop, Drain: drain, Status: "IN_PROGRESS"}
	if id == "" {
		return req, nil
	}
	if err := validRequestID(id); err != nil {
		return nil, err
	}
	jm.spReqs.Lock()
	defer jm.spReqs.Unlock()
	if _, dup := jm.spReqs.m[id]; dup {
		return nil, fmt.Errorf("%w: %s; choose another (random) id", ErrSavepointRequestExists, id)
	}
	if jm.spReqs.m == nil {
		jm.spReqs.m = make(map[string]*restSavepointRequest)
	}
	req.registered = true
	jm.spReqs.m[id] = req
	jm.spReqs.order = append(jm.spReqs.order, id)
	for len(jm.spReqs.order) > maxSavepointRequests {
		delete(jm.spReqs.m, jm.spReqs.order[0])
		jm.spReqs.order = jm.spReqs.order[1:]
	}
	return req, nil
}

// updateSavepointRequest applies f to req under the lock its readers take.
func (jm *JobManager) updateSavepointRequest(req *restSavepointRequest, f func(*restSavepointRequest)) {
	if !req.registered {
		f(req)
		return
	}
	jm.spReqs.Lock()
	defer jm.spReqs.Unlock()
	f(req)
}

// runSavepointRequest runs the savepoint of req and records its outcome.
func (jm *JobManager) runSavepointRequest(ctx context.Context, dir string, req *restSavepointRequest) (*weirpb.SavepointResponse, error) {
	resp, err := jm.savepoint(ctx, dir, req)
	jm.updateSavepointRequest(req, func(r *restSavepointRequest) {
		r.Copying = false
		if err != nil {
			r.Status, r.Error = "FAILED", err.Error()
			return
		}
		r.Status, r.Location, r.CheckpointID, r.SizeBytes = "COMPLETED", resp.GetLocation(), resp.GetCheckpointId(), resp.GetSizeBytes()
	})
	return resp, err
}

// savepointRequest returns a copy of the request rid.
func (jm *JobManager) savepointRequest(rid string) (restSavepointRequest, bool) {
	jm.spReqs.Lock()
	defer jm.spReqs.Unlock()
	r, ok := jm.spReqs.m[rid]
	if !ok {
		return restSavepointRequest{}, false
	}
	return *r, true
}

// savepointProgress is GetSavepointProgress.
func (jm *JobManager) savepointProgress(rid string) (*weirpb.SavepointProgress, error) {
	r, ok := jm.savepointRequest(rid)
	if !ok {
		return nil, fmt.Errorf("%w: %.80q (the last %d requests are kept)", ErrSavepointRequestNotFound, rid, maxSavepointRequests)
	}
	p := &weirpb.SavepointProgress{RequestId: r.ID, JobId: r.JobID, Status: r.Status, Stop: r.Stop, Drain: r.Drain, CheckpointId: r.CheckpointID,
		Copying: r.Copying, BytesCopied: r.BytesCopied, BytesTotal: r.BytesTotal, Error: r.Error}
	if r.Status == "COMPLETED" {
		p.Result = &weirpb.SavepointResponse{Location: r.Location, CheckpointId: r.CheckpointID, SizeBytes: r.SizeBytes}
	}
	return p, nil
}

// readJSONBody decodes the request's JSON body (at most 64 KiB; an empty
// one is {}) into v, or answers 400 and returns false.
func readJSONBody(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err == nil && len(data) > 64<<10 {
		err = errors.New("the body is larger than 64 KiB")
	}
	if err == nil && len(bytes.TrimSpace(data)) > 0 {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "the request body must be a JSON object: "+err.Error())
		return false
	}
	return true
}
