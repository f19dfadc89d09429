package jobmanager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
)

// DefaultGCMinAge is how old an unreferenced checkpoint object must be
// before CollectGarbage removes it by default: no minimum, since what
// checkpoints in progress name or may still name is known (sharedfiles.go).
const DefaultGCMinAge = time.Duration(0)

// objectStore is the optional capability of a checkpointStore that garbage
// collection needs (checkpoint.Storage has it).
type objectStore interface {
	Store() blobstore.Store
}

// garbage picks from the objects of job jobID's checkpoint storage those
// that no kept checkpoint refers to and that are older than minAge: objects
// under chk-<n>/ for a checkpoint n that keep says to drop. The completed
// pointer and anything not under a chk-<n>/ prefix are never garbage.
func garbage(objs []blobstore.ObjectInfo, jobID string, keep func(id int64) bool, now time.Time, minAge time.Duration) []blobstore.ObjectInfo {
	var out []blobstore.ObjectInfo
	for _, o := range objs {
		id, ok := checkpoint.CheckpointOf(jobID, o.Key)
		if !ok || id < 1 || keep(id) || now.Sub(o.ModTime) < minAge {
			continue
		}
		out = append(out, o)
	}
	return out
}

// collectGarbage lists, and unless dryRun deletes, the job's unreferenced
// checkpoint objects.
func (jm *JobManager) collectGarbage(ctx context.Context, jobID string, dryRun bool, minAge time.Duration) (*weirpb.CollectGarbageResponse, error) {
	jm.mu.Lock()
	v, err := jm.mu.core.Checkpoints(jobID)
	jm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !v.Enabled {
		return nil, fmt.Errorf("%w: job %s takes no checkpoints", scheduler.ErrCheckpointingOff, jobID)
	}
	st, ok := jm.storage(jobID).(objectStore)
	if !ok {
		return nil, fmt.Errorf("%w: the checkpoint storage of job %s cannot list its objects", ErrStorage, jobID)
	}
	// Keep every retained checkpoint, every one in progress, and any id
	// above the newest known: its trigger may be on its way.
	var newest int64
	inProgress := map[int64]bool{}
	for _, h := range v.History {
		newest = max(newest, h.ID)
		if h.Status == coordinator.InProgress {
			inProgress[h.ID] = true
		}
	}
	keep := func(id int64) bool { return slices.Contains(v.Retained, id) || inProgress[id] || id > newest }
	objs, err := st.Store().List(ctx, jobID+"/")
	if err != nil {
		return nil, fmt.Errorf("%w: listing the checkpoint objects of job %s in %s: %v", ErrStorage, jobID, v.Storage, err)
	}
	resp := &weirpb.CollectGarbageResponse{Deleted: !dryRun}
	add := func(objs []blobstore.ObjectInfo) {
		for _, o := range objs {
			resp.Objects = append(resp.Objects, &weirpb.GarbageObject{Key: o.Key, Size: o.Size, ModTimeMs: o.ModTime.UnixMilli()})
			resp.Bytes += o.Size
		}
	}
	t := jm.tidyOf(jobID)
	t.mu.Lock()
	defer t.mu.Unlock()
	gone := garbage(objs, jobID, keep, time.Now(), minAge)
	if !dryRun && len(gone) > 0 {
		if err := jm.confirmLeading(ctx, "collect garbage of job "+jobID); err != nil {
			return nil, err
		}
		for _, o := range gone {
			if err := st.Store().Delete(ctx, o.Key); err != nil {
				return nil, fmt.Errorf("%w: deleting %s: %v", ErrStorage, o.Key, err)
			}
		}
	}
	add(gone)
	if sst, ok := st.(sharedFileStore); ok {
		// (In a dry run the manifests of the checkpoints listed above
		// still count, so shared files only they name are not listed.)
		shared, err := jm.sharedGarbage(ctx, jobID, sst, t, minAge, dryRun)
		if err != nil {
			return nil, fmt.Errorf("%w: job %s: %v", ErrStorage, jobID, err)
		}
		add(shared)
	}
	return resp, nil
}
