package storage

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// TestStorageHoldsWhatRetentionNames runs two jobs on Pebble state with
// incremental checkpoints into S3, across a leader takeover and a
// taskmanager kill, with leftovers planted in storage after the takeover:
// the files of a checkpoint the old leader no longer retained (a late
// upload) and a shared file no checkpoint names. After the jobs end, the
// bucket holds exactly what retention names: for the job that retains its
// checkpoints (retained: 2, retention: retain), its two latest completed
// checkpoints, the shared files their manifests name and the completed
// pointer; for the one that does not, nothing. Both outputs are exactly
// once.
func TestStorageHoldsWhatRetentionNames(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := clustertest.Start(t, clustertest.Options{
		TLS: true, JobManagers: 2, TaskManagers: 2, Slots: 2, S3: true,
		HeartbeatInterval: 500 * time.Millisecond, HeartbeatTimeout: 3 * time.Second, SlotWaitTimeout: 2 * time.Minute,
		LogLevel: "info",
		HA:       &clustertest.HA{Endpoints: etcd.Endpoints(), Prefix: "/weir-hygiene", LeaseTTL: clustertest.HALeaseTTL},
	})
	s3 := c.S3()
	store := s3.Store(t, "ckpt")
	newJob := func(name, retention string) *clustertest.SequenceJob {
		j := clustertest.NewSequenceJobOn(t, name, 16, 2000, 16, s3.URI("ckpt"), "  retained: 2\n"+retention)
		rewriteSpec(t, j.Spec, "parallelism: 4\n", "parallelism: 2\nstate: {backend: pebble}\n")
		return j
	}
	kept, gone := newJob("hygiene-retain", "  retention: retain\n"), newJob("hygiene-delete", "")
	keptID, goneID := kept.Submit(t, c), gone.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, keptID, time.Time{}, 3, "by the first leader")
	clustertest.WaitCheckpointsSince(t, c, goneID, time.Time{}, 3, "by the first leader")

	leader, epoch, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	c.KillJobManager(leader)
	c.WaitLeader(epoch)
	// Leftovers: checkpoint 1 is subsumed by now (two are retained).
	ctx := t.Context()
	for _, id := range []string{keptID, goneID} {
		for _, key := range []string{checkpoint.CheckpointPrefix(id, 1) + "late/0-a1", checkpoint.SharedKey(id, strings.Repeat("0", 64))} {
			if err := store.Put(ctx, key, []byte("leftover")); err != nil {
				t.Fatal(err)
			}
		}
	}
	since := time.Now()
	clustertest.WaitCheckpointsSince(t, c, keptID, since, 2, "by the new leader")
	c.KillTaskManager(1)
	c.RestartTaskManager(1)
	for _, j := range []*clustertest.SequenceJob{kept, gone} {
		if lost, duplicated := clustertest.FinishAndVerify(t, c, j); lost != 0 || duplicated != 0 {
			t.Fatalf("job %s: lost=%d duplicated=%d", j.ID, lost, duplicated)
		}
	}

	cps, err := c.Checkpoints(keptID)
	if err != nil {
		t.Fatal(err)
	}
	var completed []int64
	for _, cp := range cps.GetCheckpoints() {
		if cp.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			completed = append(completed, cp.GetCheckpointId())
		}
	}
	slices.Sort(completed)
	if len(completed) < 2 {
		t.Fatalf("the new leader completed %v; want at least two checkpoints", completed)
	}
	retained := completed[len(completed)-2:]
	var extra, missing []string
	polltest.Eventually(t, 2*time.Minute, "storage holding exactly what retention names", func() bool {
		extra, missing = unnamedObjects(t, store, keptID, retained)
		goneLeft, err := store.List(ctx, goneID+"/")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range goneLeft {
			extra = append(extra, o.Key)
		}
		return len(extra) == 0 && len(missing) == 0
	})
	objs, _ := store.List(ctx, keptID+"/")
	var bytes int64
	for _, o := range objs {
		bytes += o.Size
	}
	fmt.Printf("storage_after_end retained=%v objects=%d bytes=%d unnamed=0 deleted_job_objects=0\n", retained, len(objs), bytes)
}

// unnamedObjects compares the objects of job jobID in store with what
// retaining checkpoints retained names: the completed pointer, every
// object under their chk-<n>/ prefixes (each with its manifest) and the
// shared files their manifests name. It returns the keys found that
// nothing names and those named but missing.
func unnamedObjects(t *testing.T, store blobstore.Store, jobID string, retained []int64) (extra, missing []string) {
	t.Helper()
	ctx := context.Background()
	st := checkpoint.NewStorage(store)
	named := map[string]bool{checkpoint.PointerKey(jobID): true}
	for _, id := range retained {
		m, err := st.ReadManifest(ctx, jobID, id)
		if err != nil {
			missing = append(missing, fmt.Sprintf("manifest of checkpoint %d (%v)", id, err))
			continue
		}
		named[checkpoint.ManifestKey(jobID, id)] = true
		checkpoint.ReferencedSharedFiles(m, named)
	}
	objs, err := store.List(ctx, jobID+"/")
	if err != nil {
		t.Fatal(err)
	}
	found := make(map[string]bool, len(objs))
	for _, o := range objs {
		found[o.Key] = true
		id, inCheckpoint := checkpoint.CheckpointOf(jobID, o.Key)
		if !named[o.Key] && !(inCheckpoint && slices.Contains(retained, id)) {
			extra = append(extra, o.Key)
		}
	}
	for k := range named {
		if !found[k] {
			missing = append(missing, k)
		}
	}
	return extra, missing
}

// rewriteSpec replaces old by new, once, in the job spec at path.
func rewriteSpec(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("job spec %s has no %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}
