package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

const storageSpec = `name: storage-overhead
parallelism: 2
state: {backend: pebble}
checkpointing:
  interval: 1s
  mode: exactly_once
  storage: %q
restartStrategy:
  type: fixed-delay
  attempts: 100
  delay: 200ms
operators:
  - uid: events
    type: datagen
    config: {ratePerSecond: 20000, seed: 5, batchSize: 256, fields: [
      {name: key, kind: key, cardinality: 40000, prefix: k},
      {name: value, kind: random, type: int64, min: 0, max: 999}]}
  - uid: counts
    type: running_count
    keyBy: [key]
  - uid: out
    type: discard
`

// BenchmarkStorageOverhead runs a keyed count on Pebble state (40,000 keys,
// 20,000 rows/s, incremental checkpoints every second into S3 on versitygw,
// one retained) on two taskmanagers for a minute, killing and restarting
// one taskmanager halfway, and samples the job's storage every two seconds
// after a warm-up: the bytes of every object under the job's prefix
// against the bytes the retained checkpoint references (the objects under
// chk-<n>/ of each checkpoint with a manifest, the shared files those
// manifests name, and the completed pointer) plus those of uploads in
// flight (see storageSample). What is left over is garbage. It prints
//
//	storage_overhead_ratio               the largest sample of stored /
//	                                     (referenced + in flight)
//	storage_overhead_ratio_mean          the mean of those samples
//	storage_overhead_ratio_p50           their median
//	storage_overhead_ratio_retained_only the largest sample of stored /
//	                                     referenced: a checkpoint that
//	                                     materializes Pebble's files anew
//	                                     uploads about the whole state while
//	                                     the one it replaces is retained
//	storage_referenced_bytes             referenced bytes, sample mean
//	storage_samples                      how many samples were taken
//
// A sample lists the prefix while checkpoints run, so a checkpoint whose
// files are being deleted counts with part of its files; the ratio depends
// on how much of the state changes between checkpoints (here, with random
// keys, most Pebble files are rewritten within a few checkpoints), so it
// compares commits on this job, not jobs with each other.
func BenchmarkStorageOverhead(b *testing.B) {
	c := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "warn", S3: true,
		HeartbeatInterval: 500 * time.Millisecond, HeartbeatTimeout: 3 * time.Second})
	s3 := c.S3()
	store := s3.Store(b, "ckpt")
	var maxRatio, maxRetainedOnly, sumRatio, sumRef float64
	var samples int
	var ratios []float64
	for i := 0; i < b.N; i++ {
		spec := filepath.Join(b.TempDir(), "job.yaml")
		if err := os.WriteFile(spec, []byte(fmt.Sprintf(storageSpec, s3.URI("ckpt"))), 0o644); err != nil {
			b.Fatal(err)
		}
		out, err := c.Weir("submit", spec)
		if err != nil {
			b.Fatalf("weir submit: %v\n%s", err, out)
		}
		id := strings.Fields(out)[len(strings.Fields(out))-1]
		polltest.Eventually(b, 2*time.Minute, "a first checkpoint", func() bool {
			resp, err := c.Checkpoints(id)
			return err == nil && resp.GetCompleted() >= 1
		})
		warm := time.Now().Add(10 * time.Second)
		end := warm.Add(60 * time.Second)
		killed := false
		for now := time.Now(); now.Before(end); now = time.Now() {
			if !killed && now.After(warm.Add(30*time.Second)) {
				c.KillTaskManager(1)
				c.RestartTaskManager(1)
				killed = true
			}
			if now.After(warm) {
				stored, referenced, inflight, err := storageSample(b.Context(), store, id)
				if err != nil {
					b.Logf("sample skipped: %v", err) // a manifest deleted between list and read
				} else if referenced > 0 {
					r := float64(stored) / float64(referenced+inflight)
					if r > 1.5 {
						b.Logf("sample at %s (killed=%v): stored %d, referenced %d, in flight %d, ratio %.2f",
							now.Sub(warm).Round(time.Second), killed, stored, referenced, inflight, r)
					}
					ratios = append(ratios, r)
					maxRatio = max(maxRatio, r)
					maxRetainedOnly = max(maxRetainedOnly, float64(stored)/float64(referenced))
					sumRatio += r
					sumRef += float64(referenced)
					samples++
				}
			}
			time.Sleep(2 * time.Second) // the sampling period, not synchronisation
		}
		if out, err := c.Weir("jobs", "cancel", id); err != nil {
			b.Fatalf("cancel: %v %s", err, out)
		}
		if s := c.WaitJob(id, 2*time.Minute).GetJob().GetState(); s != weirpb.JobState_JOB_STATE_CANCELED {
			b.Fatalf("job ended %v", s)
		}
	}
	if samples == 0 {
		b.Fatal("no storage sample was taken")
	}
	fmt.Printf("storage_overhead_ratio=%.2f\n", maxRatio)
	fmt.Printf("storage_overhead_ratio_mean=%.2f\n", sumRatio/float64(samples))
	slices.Sort(ratios)
	fmt.Printf("storage_overhead_ratio_p50=%.2f\n", ratios[len(ratios)/2])
	fmt.Printf("storage_overhead_ratio_retained_only=%.2f\n", maxRetainedOnly)
	fmt.Printf("storage_referenced_bytes=%.0f\n", sumRef/float64(samples))
	fmt.Printf("storage_samples=%d\n", samples)
}

// storageSample returns the bytes of every object of job jobID in store,
// the bytes its checkpoints with a manifest reference, and the bytes of
// uploads in flight: objects of checkpoints above the latest with a
// manifest, and shared files no manifest names written since that
// checkpoint was triggered (the server's clock and the jobmanager's are
// this machine's).
func storageSample(ctx context.Context, store blobstore.Store, jobID string) (stored, referenced, inflight int64, err error) {
	objs, err := store.List(ctx, jobID+"/")
	if err != nil {
		return 0, 0, 0, err
	}
	size := make(map[string]int64, len(objs))
	for _, o := range objs {
		size[o.Key] = o.Size
		stored += o.Size
	}
	st := checkpoint.NewStorage(store)
	ids, err := st.ListCheckpointIDs(ctx, jobID)
	if err != nil {
		return 0, 0, 0, err
	}
	named := map[string]bool{checkpoint.PointerKey(jobID): true}
	manifests := map[int64]bool{}
	var latest int64
	var latestTrigger time.Time
	for _, id := range ids {
		m, err := st.ReadManifest(ctx, jobID, id)
		if errors.Is(err, blobstore.ErrNotFound) {
			continue // in progress, or being deleted
		}
		if err != nil {
			return 0, 0, 0, err
		}
		manifests[id] = true
		if id > latest {
			latest, latestTrigger = id, time.UnixMilli(m.GetTriggerTimeMs())
		}
		checkpoint.ReferencedSharedFiles(m, named)
	}
	for _, o := range objs {
		id, inCheckpoint := checkpoint.CheckpointOf(jobID, o.Key)
		switch {
		case inCheckpoint && manifests[id]:
			named[o.Key] = true
		case named[o.Key]:
		case inCheckpoint && id > latest,
			checkpoint.IsSharedKey(jobID, o.Key) && !o.ModTime.Before(latestTrigger):
			inflight += o.Size
		}
	}
	for k := range named {
		referenced += size[k]
	}
	return stored, referenced, inflight, nil
}
