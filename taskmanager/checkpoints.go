package taskmanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/storeuri"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// storages caches open checkpoint storages by URI; they are safe for
// concurrent use and shared by all tasks of the taskmanager.
type storages struct {
	mu sync.Mutex
	m  map[string]*checkpoint.Storage
	// inline is the snapshot size up to which snapshots travel in their
	// handles (Config.StateInlineBytes).
	inline int
	// counts counts the requests of every storage opened here
	// (weir_storage_requests_total).
	counts blobstore.Counters
}

// openCounted opens the checkpoint storage uri names, counting its
// requests in s.counts.
func (s *storages) openCounted(ctx context.Context, uri string) (*checkpoint.Storage, error) {
	store, err := storeuri.Open(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage: %w", err)
	}
	return checkpoint.NewStorage(blobstore.Counting(store, &s.counts)), nil
}

func (s *storages) open(ctx context.Context, uri string) (*checkpoint.Storage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[uri]; ok {
		return st, nil
	}
	st, err := s.openCounted(ctx, uri)
	if err != nil {
		return nil, err
	}
	st = st.WithInlineThreshold(s.inline)
	if s.m == nil {
		s.m = make(map[string]*checkpoint.Storage)
	}
	s.m[uri] = st
	return st, nil
}

// restoreStorage opens the storage the deployment restores from: a
// savepoint's directory (not cached: each savepoint is restored a few
// times at most), confined like the files tasks use, or the job's
// checkpoint storage.
func (tm *TaskManager) restoreStorage(ctx context.Context, d *weirpb.TaskDeployment) (*checkpoint.Storage, error) {
	uri := d.GetRestoreStorage()
	if uri == "" {
		return tm.storages.open(ctx, d.GetCheckpointing().GetStorage())
	}
	if dir, ok := strings.CutPrefix(uri, "file://"); ok {
		if err := tm.paths.Check("savepoint", dir); err != nil {
			return nil, err
		}
	}
	return tm.storages.openCounted(ctx, uri)
}

// restoreProgress is how far a task's restore got, read by heartbeats
// while the task's goroutine restores.
type restoreProgress struct {
	restoring atomic.Bool  // state is being loaded; the task processes nothing yet
	restored  atomic.Int64 // bytes in place (checkpoint.Storage.WithRestoreProgress)
}

func (p *restoreProgress) load() (restoring bool, restored int64) {
	return p.restoring.Load(), p.restored.Load()
}

// restores reports whether a task deployed with d restores state, as
// restoreState decides.
func restores(d *weirpb.TaskDeployment) bool {
	return d.GetRestoreCheckpointId() != 0 && len(d.GetRestore()) > 0 && !d.GetRestoreFinished()
}

// restoreState loads the state of every chained operator from the handles
// of the deployment, counting the bytes in place in progress. It runs on the
// task's goroutine before the task starts, so a large restore does not hold
// up the jobmanager's deploy call. Once it succeeded, progress holds
// checkpoint.RestoreSize of the deployment's handles (what the jobmanager
// expects).
func (tm *TaskManager) restoreState(ctx context.Context, d *weirpb.TaskDeployment, spec *dataflow.TaskSpec, progress *restoreProgress) error {
	if !restores(d) {
		return nil
	}
	st, err := tm.restoreStorage(ctx, d)
	if err != nil {
		return fmt.Errorf("restore from checkpoint %d: %w", d.GetRestoreCheckpointId(), err)
	}
	st = st.WithRestoreProgress(func(n int64) { progress.restored.Add(n) })
	byUID := make(map[string][]*weirpb.StateHandle)
	var size int64
	for _, h := range d.GetRestore() {
		byUID[h.GetOperatorUid()] = append(byUID[h.GetOperatorUid()], h)
		size += h.GetSize()
	}
	kg := stream.KeyGroupRangeFor(spec.MaxParallelism, spec.Parallelism, spec.Subtask)
	spec.RestoreCheckpointID = d.GetRestoreCheckpointId()
	spec.Restore = make(map[string]*stream.OperatorSnapshot, len(byUID))
	start := time.Now()
	var local, streamed int64
	for uid, hs := range byUID {
		snap, err := st.LoadOperatorState(ctx, hs, kg, spec.Subtask, spec.Parallelism)
		if err != nil {
			return fmt.Errorf("restore operator %q from checkpoint %d: %w", uid, d.GetRestoreCheckpointId(), err)
		}
		n, reused, err := tm.restoreFiles(ctx, st, d.GetRestoreCheckpointId(), uid, hs, kg, spec, snap)
		if err != nil {
			return fmt.Errorf("restore operator %q from checkpoint %d: %w", uid, d.GetRestoreCheckpointId(), err)
		}
		size += n
		local += reused
		for _, f := range snap.Files {
			if f.Fetch != nil {
				streamed += f.Size
			}
		}
		spec.Restore[uid] = snap
	}
	tm.metrics.stateBytesRead.Add(float64(size))
	// streamed_bytes (counted in bytes) are read when the task opens its
	// state.
	tm.log.Info("state restored", "task", spec.TaskName, "checkpoint", d.GetRestoreCheckpointId(),
		"bytes", size, "local_bytes", local, "streamed_bytes", streamed, "duration", time.Since(start))
	return nil
}

// restoreFiles downloads the files of the incremental snapshots among hs
// whose key groups overlap kg, one directory per snapshotted subtask, and
// lists them in snap.Files. Files the task still has from its own snapshot
// of that checkpoint are reused (local recovery). Changelog segments are
// not downloaded but streamed into the state backend's replay when the task
// opens its state (backends.StreamedOnRestore). It returns the bytes
// downloaded or to stream, and the bytes of the files reused.
func (tm *TaskManager) restoreFiles(ctx context.Context, st *checkpoint.Storage, id int64, uid string,
	hs []*weirpb.StateHandle, kg stream.KeyGroupRange, spec *dataflow.TaskSpec, snap *stream.OperatorSnapshot) (downloaded, reused int64, err error) {
	for _, h := range hs {
		if !checkpoint.RestoresFiles(h, kg) {
			continue
		}
		dir := backends.RestoreDir(spec.LocalStateDir, uid, id, int(h.GetSubtask()))
		if err := os.RemoveAll(dir); err != nil {
			return 0, 0, fmt.Errorf("clearing restore directory %s: %w", dir, err)
		}
		local := backends.SnapshotDir(spec.LocalStateDir, uid, id)
		opts := checkpoint.DownloadOptions{Stream: backends.StreamedOnRestore}
		if int(h.GetSubtask()) == spec.Subtask {
			opts.Reuse = func(name string) string { return filepath.Join(local, name) }
		}
		files, n, err := st.DownloadFiles(ctx, h.GetFiles(), dir, opts)
		if err != nil {
			return 0, 0, err
		}
		downloaded += n
		for _, f := range h.GetFiles() {
			reused += f.GetSize()
		}
		reused -= n
		snap.Files = append(snap.Files, files...)
	}
	return downloaded, reused, nil
}

// taskHooks receives a task's snapshots and uploads them in the background,
// then acknowledges the checkpoint to the jobmanager (through the
// taskmanager's ackBatcher).
type taskHooks struct {
	tm      *TaskManager
	id      *weirpb.ExecutionID
	name    string
	storage string
	spec    *dataflow.TaskSpec
	ctx     context.Context // cancelled when the task is cancelled or fails
	wg      *sync.WaitGroup // uploads in flight
}

var _ dataflow.CheckpointHooks = (*taskHooks)(nil)

func (h *taskHooks) SnapshotTaken(id, timestamp int64, snaps map[string]*stream.OperatorSnapshot, stats dataflow.SnapshotStats) {
	// Called right after the synchronous snapshot: the first barrier came
	// alignment and sync before now.
	barrier := time.Now().Add(-stats.Sync - stats.Alignment).UnixMilli()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		start := time.Now()
		var reqs blobstore.Counters // this upload's storage requests
		handles, bytes, stateBytes, err := h.upload(blobstore.WithCounters(h.ctx, &reqs), id, snaps)
		if err != nil {
			if h.ctx.Err() == nil {
				h.tm.log.Warn("checkpoint upload failed; declining", "task", h.name, "checkpoint", id, "err", err)
				h.decline(id, err)
			}
			return
		}
		markChannelState(handles, h.spec.Chain[0].Vertex.UID, stats.ChannelStateBytes)
		async := time.Since(start)
		h.tm.metrics.observeSnapshot(h.id.GetJobId(), h.name, h.spec.Subtask, bytes, stateBytes, stats, async)
		h.tm.acks.ack(h.ctx, h.name, &weirpb.CheckpointAck{Id: h.id, CheckpointId: id, Handles: handles,
			SyncDurationMs: stats.Sync.Milliseconds(), AsyncDurationMs: async.Milliseconds(),
			AlignmentDurationMs: stats.Alignment.Milliseconds(), Bytes: bytes, BarrierReceivedUnixMs: barrier,
			ChannelStateBytes: stats.ChannelStateBytes, StorageRequests: storageRequests(reqs.Snapshot())})
	}()
}

// upload writes the snapshots of checkpoint id and returns their handles,
// the bytes written, and the state size of each operator (by uid: its
// encoded state plus all its snapshot files, reused ones included).
func (h *taskHooks) upload(ctx context.Context, id int64, snaps map[string]*stream.OperatorSnapshot) ([]*weirpb.StateHandle, int64, map[string]int64, error) {
	st, err := h.tm.storages.open(ctx, h.storage)
	if err != nil {
		return nil, 0, nil, err
	}
	stateBytes := make(map[string]int64, len(snaps))
	uids := make([]string, 0, len(snaps))
	for uid := range snaps {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	kg := stream.KeyGroupRangeFor(h.spec.MaxParallelism, h.spec.Parallelism, h.spec.Subtask)
	var handles []*weirpb.StateHandle
	var total int64
	for _, uid := range uids {
		// Union state goes to an object of its own: on restore every
		// subtask receives all union objects but only its own other state.
		snap := snaps[uid]
		main := &stream.OperatorSnapshot{Keyed: snap.Keyed, List: snap.List}
		parts := []struct {
			snap  *stream.OperatorSnapshot
			union bool
		}{{main, false}}
		if len(snap.Union) > 0 {
			parts = append(parts, struct {
				snap  *stream.OperatorSnapshot
				union bool
			}{&stream.OperatorSnapshot{Union: snap.Union}, true})
		}
		for _, part := range parts {
			data, err := checkpoint.EncodeSnapshot(part.snap)
			if err != nil {
				return nil, 0, nil, fmt.Errorf("operator %q: encode snapshot: %w", uid, err)
			}
			upload := st.UploadSnapshot
			if part.union {
				upload = st.UploadUnionSnapshot
			}
			hd, err := upload(ctx, h.id.GetJobId(), id, uid, h.spec.Subtask, h.spec.Parallelism, h.id.GetAttempt(), kg, data)
			if err != nil {
				return nil, 0, nil, fmt.Errorf("operator %q: %w", uid, err)
			}
			total += int64(len(data))
			stateBytes[uid] += int64(len(data))
			if !part.union && len(snap.Files) > 0 {
				files, n, err := st.UploadFiles(ctx, h.id.GetJobId(), id, uid, h.spec.Subtask, h.id.GetAttempt(), snap.Files)
				if err != nil {
					return nil, 0, nil, fmt.Errorf("operator %q: %w", uid, err)
				}
				hd.Files = files
				total += n
				for _, f := range snap.Files {
					stateBytes[uid] += f.Size
				}
			}
			handles = append(handles, hd)
		}
	}
	return handles, total, stateBytes, nil
}

// SnapshotFailed declines checkpoint id; it runs on the task goroutine, so
// the RPC goes to the background.
func (h *taskHooks) SnapshotFailed(id int64, err error) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.decline(id, err)
	}()
}

// decline declines checkpoint id; the decline goes to the jobmanager at
// once (ackBatcher).
func (h *taskHooks) decline(id int64, cause error) {
	h.tm.acks.decline(h.name, &weirpb.CheckpointDecline{Id: h.id, CheckpointId: id, Reason: fmt.Sprintf("task %s: %v", h.name, cause)})
}

var _ dataflow.InputEndedHook = (*taskHooks)(nil)

// SourceInputEnded tells the jobmanager, in the background, that this source
// task waits for its final checkpoint.
func (h *taskHooks) SourceInputEnded() {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
		defer cancel()
		_, err := h.tm.cluster().SourceInputEnded(ctx, &weirpb.SourceInputEndedRequest{TaskmanagerId: h.tm.cfg.ID, Id: h.id})
		if err != nil && h.ctx.Err() == nil {
			h.tm.log.Debug("reporting the end of a source's input failed; the final checkpoint waits for the interval", "task", h.name, "err", err)
		}
	}()
}

// task returns the running task with exactly this execution id.
func (tm *TaskManager) task(id *weirpb.ExecutionID) (*runningTask, bool) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	rt, ok := tm.mu.tasks[keyOf(id)]
	if !ok || rt.id.GetAttempt() != id.GetAttempt() {
		return nil, false
	}
	return rt, true
}

// storageRequests is counts as sent in an acknowledgement.
func storageRequests(c blobstore.RequestCounts) *weirpb.StorageRequests {
	return &weirpb.StorageRequests{Put: c.Put, Get: c.Get, List: c.List, Delete: c.Delete}
}
