package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/proto/weirpb"
)

// sharedFileMinAge is how old a shared snapshot file that no manifest
// refers to must be before it is deleted: a checkpoint in progress may have
// just uploaded it, and its manifest is not written yet.
var sharedFileMinAge = 10 * time.Minute

// sharedFileStore is what reference counting of shared files needs from a
// checkpoint storage (checkpoint.Storage has it).
type sharedFileStore interface {
	objectStore
	ListCheckpointIDs(ctx context.Context, jobID string) ([]int64, error)
	ReadManifest(ctx context.Context, jobID string, id int64) (*weirpb.Manifest, error)
}

// unreferencedShared returns the shared files (<job>/shared/<sha256>) of
// job jobID that no manifest still in storage refers to and that are older
// than minAge. A manifest that cannot be read keeps every shared file.
func unreferencedShared(ctx context.Context, st sharedFileStore, jobID string, now time.Time, minAge time.Duration) ([]blobstore.ObjectInfo, error) {
	objs, err := st.Store().List(ctx, checkpoint.SharedPrefix(jobID))
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	ids, err := st.ListCheckpointIDs(ctx, jobID)
	if err != nil {
		return nil, err
	}
	refs := make(map[string]bool)
	for _, id := range ids {
		m, err := st.ReadManifest(ctx, jobID, id)
		if errors.Is(err, blobstore.ErrNotFound) {
			// Files of a checkpoint that never completed, or whose
			// deletion was cut short: no manifest, no references. (One
			// in progress is protected by minAge.)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the manifest of checkpoint %d to count shared file references: %w", id, err)
		}
		checkpoint.ReferencedSharedFiles(m, refs)
	}
	var out []blobstore.ObjectInfo
	for _, o := range objs {
		if checkpoint.IsSharedKey(jobID, o.Key) && !refs[o.Key] && now.Sub(o.ModTime) >= minAge {
			out = append(out, o)
		}
	}
	return out, nil
}

// deleteUnreferencedShared deletes the shared files no retained checkpoint
// refers to any more; it runs after checkpoints are deleted.
func (jm *JobManager) deleteUnreferencedShared(ctx context.Context, jobID string, cs checkpointStore) {
	st, ok := cs.(sharedFileStore)
	if !ok {
		return
	}
	objs, err := unreferencedShared(ctx, st, jobID, time.Now(), sharedFileMinAge)
	if err != nil {
		jm.log.Warn("counting shared checkpoint file references failed; shared files stay in storage", "job", jobID, "error", err)
		return
	}
	if len(objs) == 0 {
		return
	}
	if err := jm.confirmLeading(ctx, "delete unreferenced shared files of job "+jobID); err != nil {
		jm.log.Warn("not deleting unreferenced shared checkpoint files", "job", jobID, "error", err)
		return
	}
	for _, o := range objs {
		if err := st.Store().Delete(ctx, o.Key); err != nil {
			jm.log.Warn("deleting an unreferenced shared checkpoint file failed", "job", jobID, "key", o.Key, "error", err)
		}
	}
}

// Sweeping an ended job: sweepAttempts tries, sweepFirstRetry after the
// first failure and twice as long after each further one, each try bounded
// by sweepTimeout.
const (
	sweepAttempts   = 6
	sweepFirstRetry = time.Second
	sweepTimeout    = 30 * time.Second
)

// sweepJob deletes every checkpoint of a job that ended and keeps none —
// ids (its retained ones) and any other found in storage, such as those
// whose deletion failed while storage was down or a leader changed — and
// then every shared file, retrying while storage fails.
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
	objs, err := unreferencedShared(ctx, st, jobID, time.Now(), 0)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := st.Store().Delete(ctx, o.Key); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
