package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// TestStorageFaults runs the exactly-once workload with its checkpoints on
// a real S3 server (versitygw) behind a fault proxy and breaks storage
// while checkpoints are taken: unreachable during uploads, unreachable at
// the manifest write, the server killed and started again, and slow
// responses past the checkpoint timeout. After each fault it checks that
// the latest completed checkpoint names only objects that exist; once the
// job has finished, that the bucket holds nothing of the job's but what
// retention keeps (nothing but the completed pointer: a finished job's
// checkpoints are deleted). WEIR_STORAGE_FAULT_ROUNDS repeats the faults.
func TestStorageFaults(t *testing.T) {
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("WEIR_STORAGE_FAULT_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	prefix := fmt.Sprintf("storage-faults-%d", time.Now().UnixNano())
	c := clustertest.Start(t, clustertest.Options{TLS: true, TaskManagers: 2, Slots: 2, HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout: 3 * time.Second, SlotWaitTimeout: 2 * time.Minute, LogLevel: "info", S3: true,
		PlaintextS3: true}) // the manifest-write fault reads the requests
	s3 := c.S3()
	px := s3.Proxy

	type fault struct {
		name   string
		inject func()
	}
	faults := []fault{
		{"unreachable-during-uploads", func() {
			px.Cut()
			time.Sleep(2 * time.Second) // the outage
			px.Heal()
		}},
		{"unreachable-at-manifest-write", func() {
			fired := px.CutWhen([]byte("/_manifest"))
			select {
			case <-fired:
			case <-time.After(time.Minute):
				t.Fatal("no manifest write within a minute")
			}
			time.Sleep(2 * time.Second) // the outage
			px.Heal()
		}},
		{"server-killed-and-restarted", func() {
			s3.Server.Kill()
			time.Sleep(time.Second) // the outage
			s3.Restart()
		}},
		{"slow-past-checkpoint-timeout", func() {
			px.Delay(400 * time.Millisecond)
			time.Sleep(5 * time.Second) // the slow spell
			px.Delay(0)
		}},
	}
	n := rounds * len(faults)
	job := clustertest.NewSequenceJobOn(t, "storage-faults", float64(n*8+10), 2000, 32,
		s3.URI(prefix), "  timeout: 3s\n  tolerableFailures: 2\n")
	jobID := job.Submit(t, c)
	st := checkpoint.NewStorage(s3.Store(t, prefix))

	var recoveries clustertest.RecoveryTimes
	last := time.Now()
	for i := range n {
		f := faults[i%len(faults)]
		if !clustertest.WaitProgress(t, c, jobID, last) {
			t.Fatalf("the job ended after %d of %d storage faults: its input is too small for this machine's pace", i, n)
		}
		at := time.Now()
		f.inject()
		t.Logf("storage fault %s", f.name)
		recoveries.Wait(t, c, jobID, at)
		st = checkpoint.NewStorage(s3.Store(t, prefix)) // the endpoint may have moved
		if err := latestIntact(t.Context(), st, jobID); err != nil {
			t.Fatalf("after %s: %v", f.name, err)
		}
		last = time.Now()
	}
	final := c.WaitJob(jobID, 10*time.Minute)
	if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", final.GetJob().GetState(), final.GetJob().GetError())
	}
	lost, duplicated := job.Verify(t)

	// Retention deletes a finished job's checkpoints in the background.
	left := waitDeleted(t, st, jobID, time.Minute)
	fmt.Printf("storage_faults=%d lost=%d duplicated=%d storage_recovery_p50=%.2f storage_recovery_max=%.2f orphaned_objects=%d\n",
		n, lost, duplicated, recoveries.Quantile(0.5), recoveries.Quantile(1), len(left))
	if lost != 0 || duplicated != 0 {
		t.Fatalf("not exactly-once across storage faults: lost=%d duplicated=%d", lost, duplicated)
	}
	if len(left) > 0 {
		t.Fatalf("the finished job left %d objects in checkpoint storage: %s", len(left), strings.Join(left[:min(len(left), 20)], ", "))
	}
}

// latestIntact checks that every object the job's latest completed
// checkpoint names exists with its recorded size.
func latestIntact(ctx context.Context, st *checkpoint.Storage, jobID string) error {
	m, err := st.ReadLatestManifest(ctx, jobID)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil // none completed yet
	}
	if err != nil {
		return fmt.Errorf("reading the latest checkpoint: %w", err)
	}
	objs, err := st.Store().List(ctx, jobID+"/")
	if err != nil {
		return err
	}
	size := make(map[string]int64, len(objs))
	for _, o := range objs {
		size[o.Key] = o.Size
	}
	check := func(key string, want int64) error {
		got, ok := size[key]
		switch {
		case !ok:
			return fmt.Errorf("completed checkpoint %d names %s, which is missing", m.GetCheckpointId(), key)
		case got != want:
			return fmt.Errorf("completed checkpoint %d names %s of %d bytes; it has %d", m.GetCheckpointId(), key, want, got)
		}
		return nil
	}
	for _, op := range m.GetOperators() {
		for _, h := range op.GetHandles() {
			if h.GetKey() != "" {
				if err := check(h.GetKey(), h.GetSize()); err != nil {
					return err
				}
			}
			for _, f := range h.GetFiles() {
				if err := check(f.GetKey(), f.GetSize()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jobObjects lists the job's objects in checkpoint storage other than its
// completed pointer, sorted.
func jobObjects(t *testing.T, st *checkpoint.Storage, jobID string) []string {
	t.Helper()
	objs, err := st.Store().List(t.Context(), jobID+"/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		if _, ok := checkpoint.CheckpointOf(jobID, o.Key); ok || strings.HasPrefix(o.Key, checkpoint.SharedPrefix(jobID)) {
			keys = append(keys, o.Key)
		}
	}
	sort.Strings(keys)
	return keys
}
