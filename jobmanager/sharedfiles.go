package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
)

// Storage hygiene. A job's checkpoint storage holds, besides its retained
// checkpoints (chk-<n>/ with a _manifest) and the completed pointer, shared
// files (<job>/shared/<sha256>, the immutable files of incremental
// snapshots) that several checkpoints may name. A shared file is deleted as
// soon as no retained checkpoint's manifest and no acknowledgement of a
// checkpoint in progress names it; no age is needed for that to be safe:
//
//   - A task uploading a snapshot lists the shared files once, after its
//     barrier (so after its checkpoint was triggered), and names the ones it
//     found without uploading them again. If one of those is deleted before
//     the task's acknowledgement arrives, the deletion returned after the
//     checkpoint's trigger. Each deletion is remembered (a tombstone, with
//     when it returned) for as long as a checkpoint triggered before it may
//     be in progress, and the manifest of a checkpoint that names a
//     tombstoned file is written only if the file is in storage again
//     (uploaded anew); otherwise the checkpoint fails and the next one
//     uploads the file.
//   - A file uploaded for a checkpoint in progress is named by no
//     acknowledgement until its task acknowledges; it is kept because a
//     file is deleted only if a pass had already listed it before the
//     oldest checkpoint in progress was triggered (so it was no upload of
//     one): garbage waits at most one more pass.
//   - Checkpoints in progress never outlive their leader (a new leader
//     aborts them and starts its own ids above them), so the tombstones
//     and the acknowledgements in progress are kept in memory; what a new
//     leader must know, the retained checkpoints, is in the job store with
//     the pointer to the latest one.
//
// Files that belong to no retained checkpoint and to none in progress — a
// late upload of an aborted checkpoint by a paused or slow taskmanager, or
// one whose deletion was cut short, or one an earlier leader retained but
// this one no longer does — are removed by a sweep of the chk-<n>/ prefixes
// that runs at most every lateUploadSweepInterval per job, the first time
// after a leader starts, and when a job ends.

// lateUploadSweepInterval is how often, at most, the checkpoint prefixes of
// a running job are swept for files of checkpoints neither retained nor in
// progress.
var lateUploadSweepInterval = time.Minute

// sharedFileStore is what reference counting of shared files needs from a
// checkpoint storage (checkpoint.Storage has it).
type sharedFileStore interface {
	objectStore
	ListCheckpointIDs(ctx context.Context, jobID string) ([]int64, error)
	ReadManifest(ctx context.Context, jobID string, id int64) (*weirpb.Manifest, error)
}

// tidyState is the storage hygiene state of one job.
type tidyState struct {
	// mu serialises passes over the job's shared files with the check of
	// a manifest against them (checkSharedFiles).
	mu sync.Mutex
	// tombs are the shared files this jobmanager deleted, with when the
	// deletion returned.
	tombs map[string]time.Time
	// seen are the shared files the last pass listed, with when a pass
	// first listed them.
	seen map[string]time.Time
	// swept is when the checkpoint prefixes were last swept.
	swept time.Time
}

// tidyOf returns job jobID's hygiene state.
func (jm *JobManager) tidyOf(jobID string) *tidyState {
	jm.tidy.Lock()
	defer jm.tidy.Unlock()
	if jm.tidy.m == nil {
		jm.tidy.m = make(map[string]*tidyState)
	}
	t := jm.tidy.m[jobID]
	if t == nil {
		t = &tidyState{tombs: make(map[string]time.Time)}
		jm.tidy.m[jobID] = t
	}
	return t
}

// storageView returns what the scheduler knows of job jobID's checkpoints.
func (jm *JobManager) storageView(jobID string) (scheduler.StorageView, error) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	return jm.mu.core.StorageView(jobID)
}

// manifestRefs adds the shared files that the manifests in storage of job
// jobID name to refs. A checkpoint without a manifest (in progress,
// aborted, or its deletion cut short) names none.
func manifestRefs(ctx context.Context, st sharedFileStore, jobID string, refs map[string]bool) error {
	ids, err := st.ListCheckpointIDs(ctx, jobID)
	if err != nil {
		return err
	}
	for _, id := range ids {
		m, err := st.ReadManifest(ctx, jobID, id)
		if errors.Is(err, blobstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the manifest of checkpoint %d to count shared file references: %w", id, err)
		}
		checkpoint.ReferencedSharedFiles(m, refs)
	}
	return nil
}

// ackRefs adds the shared files that acknowledgement payloads (the state
// handles of AcknowledgeCheckpoint) name to refs.
func ackRefs(acks []any, refs map[string]bool) {
	for _, a := range acks {
		hs, _ := a.([]*weirpb.StateHandle)
		for _, h := range hs {
			for _, f := range h.GetFiles() {
				if f.GetShared() {
					refs[f.GetKey()] = true
				}
			}
		}
	}
}

// unreferencedShared returns the shared files of job jobID that neither a
// manifest in storage nor refs names and that are at least minAge old. A
// manifest that cannot be read keeps every shared file.
func unreferencedShared(ctx context.Context, st sharedFileStore, jobID string, refs map[string]bool, now time.Time, minAge time.Duration) ([]blobstore.ObjectInfo, error) {
	objs, err := st.Store().List(ctx, checkpoint.SharedPrefix(jobID))
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	return unreferencedAmong(ctx, st, jobID, objs, refs, now, minAge)
}

// unreferencedAmong is unreferencedShared of the shared files objs.
func unreferencedAmong(ctx context.Context, st sharedFileStore, jobID string, objs []blobstore.ObjectInfo, refs map[string]bool,
	now time.Time, minAge time.Duration) ([]blobstore.ObjectInfo, error) {
	if len(objs) == 0 {
		return nil, nil
	}
	all := make(map[string]bool, len(refs))
	for k := range refs {
		all[k] = true
	}
	if err := manifestRefs(ctx, st, jobID, all); err != nil {
		return nil, err
	}
	var out []blobstore.ObjectInfo
	for _, o := range objs {
		if checkpoint.IsSharedKey(jobID, o.Key) && !all[o.Key] && now.Sub(o.ModTime) >= minAge {
			out = append(out, o)
		}
	}
	return out, nil
}

// sharedGarbage returns, and unless dryRun deletes, the shared files of a
// job that no retained checkpoint and no checkpoint in progress names. t.mu
// must be held.
func (jm *JobManager) sharedGarbage(ctx context.Context, jobID string, st sharedFileStore, t *tidyState, minAge time.Duration, dryRun bool) ([]blobstore.ObjectInfo, error) {
	// The view first, the manifests after it: a checkpoint that completes
	// in between is in progress in the view, so its files are counted.
	viewed := jm.now()
	v, err := jm.storageView(jobID)
	if err != nil {
		return nil, err
	}
	return sharedGarbageOf(ctx, jobID, st, t, v, viewed, jm.now, minAge, dryRun, jm.confirmLeading)
}

// sharedGarbageOf is sharedGarbage given the view of the job's checkpoints
// taken at viewed, before the manifests are read; now is the scheduler's
// clock (that of the view's times).
func sharedGarbageOf(ctx context.Context, jobID string, st sharedFileStore, t *tidyState, v scheduler.StorageView, viewed time.Time,
	now func() time.Time, minAge time.Duration, dryRun bool, confirm func(context.Context, string) error) ([]blobstore.ObjectInfo, error) {
	refs := make(map[string]bool)
	ackRefs(v.PendingAcks, refs)
	// A tombstone older than every checkpoint in progress (or than the
	// view, when none is) can no longer matter: every task that will
	// acknowledge listed the shared files after the deletion.
	cutoff := v.OldestTrigger
	if cutoff.IsZero() {
		cutoff = viewed
	}
	for k, at := range t.tombs {
		if at.Before(cutoff) {
			delete(t.tombs, k)
		}
	}
	listed := now()
	objs, err := st.Store().List(ctx, checkpoint.SharedPrefix(jobID))
	if err != nil {
		return nil, err
	}
	// When each file was first listed: one first listed after the oldest
	// checkpoint in progress was triggered may be one of its uploads whose
	// acknowledgement has not arrived, and waits for a later pass (not
	// once the job ended). A file that a pass listed before, named or not,
	// is no such upload.
	seen := make(map[string]time.Time, len(objs))
	for _, o := range objs {
		at, ok := t.seen[o.Key]
		if !ok {
			at = listed
		}
		seen[o.Key] = at
	}
	t.seen = seen
	objs, err = unreferencedAmong(ctx, st, jobID, objs, refs, time.Now(), minAge)
	if err != nil {
		return nil, err
	}
	if !v.Ended {
		objs = slices.DeleteFunc(objs, func(o blobstore.ObjectInfo) bool { return !seen[o.Key].Before(cutoff) })
	}
	if dryRun || len(objs) == 0 {
		return objs, nil
	}
	if err := confirm(ctx, "delete unreferenced shared files of job "+jobID); err != nil {
		return nil, err
	}
	var errs []error
	for _, o := range objs {
		err := st.Store().Delete(ctx, o.Key)
		t.tombs[o.Key] = now() // also on error: it may have been deleted
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", o.Key, err))
		}
	}
	return objs, errors.Join(errs...)
}

// checkSharedFiles checks, before checkpoint m's manifest is written, that
// every shared file it names that this jobmanager deleted while the
// checkpoint was in progress is in storage again.
func (jm *JobManager) checkSharedFiles(ctx context.Context, jobID string, st checkpointStore, m *weirpb.Manifest) error {
	sst, ok := st.(sharedFileStore)
	if !ok {
		return nil
	}
	t := jm.tidyOf(jobID)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.tombs) == 0 {
		return nil
	}
	refs := make(map[string]bool)
	checkpoint.ReferencedSharedFiles(m, refs)
	for key := range refs {
		if _, deleted := t.tombs[key]; !deleted {
			continue
		}
		objs, err := sst.Store().List(ctx, key)
		if err != nil {
			return fmt.Errorf("checking shared file %s, deleted while checkpoint %d was in progress: %w", key, m.GetCheckpointId(), err)
		}
		if !slices.ContainsFunc(objs, func(o blobstore.ObjectInfo) bool { return o.Key == key }) {
			return fmt.Errorf("checkpoint %d names shared file %s, which was deleted while the checkpoint was in progress; "+
				"the next checkpoint uploads it again", m.GetCheckpointId(), key)
		}
		delete(t.tombs, key) // uploaded again
	}
	return nil
}

// tidyStorage removes what job jobID's storage holds that nothing needs:
// files of checkpoints neither retained nor in progress (when a sweep is
// due, or forced by sweep) and unreferenced shared files. It runs after
// checkpoints are deleted and when a job ends keeping its checkpoints.
func (jm *JobManager) tidyStorage(ctx context.Context, jobID string, cs checkpointStore, sweep bool) {
	st, ok := cs.(sharedFileStore)
	if !ok {
		return
	}
	t := jm.tidyOf(jobID)
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now(); sweep || now.Sub(t.swept) >= lateUploadSweepInterval {
		if err := jm.sweepCheckpoints(ctx, jobID, st, cs); err != nil {
			jm.log.Warn("sweeping the files of checkpoints neither retained nor in progress failed; they stay in storage until the next sweep",
				"job", jobID, "error", err)
		} else {
			t.swept = now
		}
	}
	if _, err := jm.sharedGarbage(ctx, jobID, st, t, 0, false); err != nil {
		jm.log.Warn("deleting unreferenced shared checkpoint files failed; they stay in storage until the next pass", "job", jobID, "error", err)
	}
}

// sweepCheckpoints deletes the files of every checkpoint of job jobID in
// storage that is neither retained nor in progress, below the next id.
func (jm *JobManager) sweepCheckpoints(ctx context.Context, jobID string, st sharedFileStore, cs checkpointStore) error {
	ids, err := st.ListCheckpointIDs(ctx, jobID)
	if err != nil {
		return err
	}
	v, err := jm.storageView(jobID)
	if err != nil {
		return err
	}
	stale := staleCheckpoints(ids, v)
	if len(stale) == 0 {
		return nil
	}
	if err := jm.confirmLeading(ctx, "delete stale checkpoint files of job "+jobID); err != nil {
		return err
	}
	var errs []error
	for _, id := range stale {
		if err := cs.DeleteCheckpoint(ctx, jobID, id); err != nil {
			errs = append(errs, err)
			continue
		}
		jm.log.Info("deleted the files of a checkpoint neither retained nor in progress (a late upload, or a deletion cut short)",
			"job", jobID, "checkpoint", id)
	}
	return errors.Join(errs...)
}

// staleCheckpoints returns the checkpoints of ids that are neither retained
// nor in progress in v, below its next id.
func staleCheckpoints(ids []int64, v scheduler.StorageView) []int64 {
	var stale []int64
	for _, id := range ids {
		if id < v.NextID && !slices.Contains(v.Retained, id) && !slices.Contains(v.Pending, id) {
			stale = append(stale, id)
		}
	}
	return stale
}

// Sweeping an ended job: sweepAttempts tries, sweepFirstRetry after the
// first failure and twice as long after each further one, each try bounded
// by sweepTimeout.
const (
	sweepAttempts   = 6
	sweepFirstRetry = time.Second
	sweepTimeout    = 30 * time.Second
)

// sweepJob deletes everything of a job that ended and keeps no checkpoint —
// ids (its retained ones) and any other found in storage, such as those
// whose deletion failed while storage was down or a leader changed — then
// every shared file and last the completed pointer, retrying while storage
// fails.
func (jm *JobManager) sweepJob(ctx context.Context, jobID string, ids []int64, cs checkpointStore) {
	delay := sweepFirstRetry
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, sweepTimeout)
		err := sweepOnce(actx, jobID, ids, cs, jm.confirmLeading)
		cancel()
		if err == nil {
			return
		}
		if attempt == sweepAttempts || ctx.Err() != nil || errors.Is(err, ha.ErrFenced) {
			jm.log.Warn("deleting the checkpoints of an ended job failed; its files stay in storage (weir checkpoints gc removes them)",
				"job", jobID, "attempts", attempt, "error", err)
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay *= 2
	}
}

func sweepOnce(ctx context.Context, jobID string, ids []int64, cs checkpointStore, confirm func(context.Context, string) error) error {
	if err := confirm(ctx, "delete the checkpoints of ended job "+jobID); err != nil {
		return err
	}
	st, shared := cs.(sharedFileStore)
	if shared {
		found, err := st.ListCheckpointIDs(ctx, jobID)
		if err != nil {
			return err
		}
		ids = append(slices.Clone(ids), found...)
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	var errs []error
	for _, id := range ids {
		if err := cs.DeleteCheckpoint(ctx, jobID, id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 || !shared {
		return errors.Join(errs...)
	}
	// The job has ended: no checkpoint is in progress, so a shared file of
	// any age that no manifest names is garbage.
	objs, err := unreferencedShared(ctx, st, jobID, nil, time.Now(), 0)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := st.Store().Delete(ctx, o.Key); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Last, so that a sweep cut short is found and finished by the next
	// leader's (the pointer names a checkpoint that is gone by now).
	return st.Store().Delete(ctx, checkpoint.PointerKey(jobID))
}
