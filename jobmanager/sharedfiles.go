package jobmanager

import (
	"context"
	"fmt"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
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
	for _, o := range objs {
		if err := st.Store().Delete(ctx, o.Key); err != nil {
			jm.log.Warn("deleting an unreferenced shared checkpoint file failed", "job", jobID, "key", o.Key, "error", err)
		}
	}
}
