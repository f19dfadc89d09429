package bench

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

const (
	savepointJob   = "savepoint-bench"
	savepointOp    = "counts"
	savepointState = "v"
	savepointSeed  = 11
	// savepointSamples is how many seeded keys have their value checked
	// after each restore.
	savepointSamples = 10_000
)

// BenchmarkSavepoint1GB measures a savepoint of about 1 GB of keyed state
// in the Pebble backend and a restore of it at double the parallelism.
//
// The state is WEIR_SAVEPOINT_KEYS keys (default 10 million) of 8 bytes
// with 100-byte random — incompressible — values, in one value state of one
// operator whose WEIR_SAVEPOINT_PARALLELISM subtasks (default 2) each own
// their key-group range of 128 (stream.DefaultMaxParallelism). Each
// subtask's state is a backends.Managed opened by backends.OpenManaged
// with the Pebble backend (its default caches), as the task runtime opens
// it, and loaded in key order (key group, then key bytes) so that flushes
// go to the bottom level without compactions, with the backend's
// write-back value cache flushed after each key group, as a running job's
// checkpoints would flush it. The load is not measured. S3 is a versitygw
// server on this machine.
//
// Each iteration then takes a savepoint as the runtime does, in three
// timed phases, each run for all subtasks at once (one goroutine per
// subtask, as separate slots would) and finished for all before the next
// starts:
//
//	snapshot  (*Managed).Snapshot with stream.SnapshotContext{Full: true}:
//	          the canonical chunks per key group, held in memory
//	upload    checkpoint.EncodeSnapshot and (*Storage).UploadSnapshot of
//	          each subtask's snapshot (the taskmanager's upload of a full
//	          snapshot), then the manifest ((*Storage).WriteManifest, as
//	          the jobmanager completes the checkpoint)
//	copy      (*Storage).ReadManifest and checkpoint.WriteSavepoint into a
//	          savepoint directory (another prefix of the same bucket), as
//	          the jobmanager does once the checkpoint completed
//
// and restores the savepoint at twice the parallelism: every new subtask,
// all at once (as separate slots would; WEIR_SAVEPOINT_RESTORE_CONCURRENCY
// lowers how many run together, 1 restores one after another), runs
// checkpoint.ReadSavepoint, (*Storage).LoadOperatorState of its key-group
// range from the savepoint directory (download of the object(s) holding
// its key groups, checksum, decode) and backends.OpenManaged with that
// snapshot (the chunks written into a new Pebble database). After the
// timed restore the keys of the new backends are counted and a seeded
// sample of keys is read back and compared with the values loaded; the
// benchmark fails unless every key and the sampled values came back.
//
// It prints:
//
//	savepoint_keys                  keys of state
//	savepoint_state_bytes           live bytes of state: the backends'
//	                                SizeBytes, 112 a key (key and value,
//	                                and the backend's 4-byte prefix of key
//	                                group, table and key length)
//	savepoint_parallelism           subtasks the savepoint is taken from
//	savepoint_seconds               snapshot + upload + copy
//	savepoint_snapshot_seconds      the snapshot phase
//	savepoint_upload_seconds        the upload phase (with the manifest)
//	savepoint_copy_seconds          the copy into the savepoint directory
//	savepoint_bytes                 bytes of the savepoint (WriteSavepoint's
//	                                count: snapshot objects and metadata)
//	restore_rescaled_seconds        restore of all new subtasks
//	restore_rescaled_parallelism    new subtasks (2 × savepoint_parallelism)
//	restore_rescaled_concurrency    how many of them restore at once
//	savepoint_load_s                seconds the (unmeasured) load took
//
// Times are the mean over the iterations (one with -benchtime 1x). In a
// cluster each subtask uploads as soon as its own snapshot is taken; here
// a phase waits for every subtask to finish the one before, which costs
// the imbalance between subtasks whose states are the same size.
// savepoint_seconds is the savepoint's share of the work done in the
// tasks and the jobmanager's copy; it excludes triggering the checkpoint,
// barrier alignment, the acknowledgements and every RPC, and the
// jobmanager's bookkeeping, so it is a lower bound of what `weir
// savepoint` takes on a running job with this state, and cannot be
// compared with the duration a cluster reports for a savepoint. The
// restore excludes scheduling and deploying the tasks and the operators'
// own Open. With the S3 server on the same machine no network is crossed,
// and the server's disk writes and the benchmark's CPU share the
// machine's cores: the figures compare runs on one machine (one commit
// with another), not with S3 over a network.
//
// The API holds the state in Go memory, whole: each subtask's snapshot
// (all its chunks) and, while it is encoded and uploaded, its encoded
// object too; each object the copy reads; and each object a restoring
// subtask reads (the one or more holding its key groups, all of it), with
// the entries decoded from it while they are written into Pebble. Nothing
// streams. At the default size, with Go's heap allowed to grow to twice
// what is live, the process peaks at about 8–9.5 GB resident, during the
// snapshot and the restore; WEIR_SAVEPOINT_KEYS sizes it down, and
// WEIR_SAVEPOINT_RESTORE_CONCURRENCY=1 lowers the restore's share.
func BenchmarkSavepoint1GB(b *testing.B) {
	var (
		n      = int(envInt("WEIR_SAVEPOINT_KEYS", 10_000_000))
		par    = int(envInt("WEIR_SAVEPOINT_PARALLELISM", 2))
		newPar = 2 * par
		conc   = int(envInt("WEIR_SAVEPOINT_RESTORE_CONCURRENCY", int64(newPar)))
		maxPar = stream.DefaultMaxParallelism
	)
	if newPar > maxPar {
		b.Fatalf("WEIR_SAVEPOINT_PARALLELISM=%d: restoring at %d needs more key groups than %d", par, newPar, maxPar)
	}
	conc = min(conc, newPar)
	gw := blobstoretest.StartVersityGWServer(b)
	st := checkpoint.NewStorage(gw.NewS3Store(b))
	ctx := b.Context()
	root := b.TempDir()

	// The subtasks the savepoint is taken from, loaded in parallel.
	src := make([]*backends.Managed, par)
	for s := range par {
		m, err := backends.OpenManaged(savepointOctx(root, "src", s, par), 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(false)
		src[s] = m
	}
	start := time.Now()
	var g errgroup.Group
	for s := range par {
		g.Go(func() error { return loadSavepointState(src[s].Backend(), n, maxPar) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	load := time.Since(start)
	var stateBytes int64
	for _, m := range src {
		stateBytes += m.Backend().SizeBytes()
	}
	b.Logf("loaded %d keys (%d bytes) into %d subtasks in %v", n, stateBytes, par, load)

	var (
		iters                            int
		snapDur, upDur, copyDur, restDur time.Duration
		spBytes                          int64
	)
	for b.Loop() {
		iters++
		id := int64(iters)
		runtime.GC() // not the previous iteration's garbage

		// Snapshot: the canonical chunks of every subtask.
		start := time.Now()
		snaps := make([]*stream.OperatorSnapshot, par)
		var g errgroup.Group
		for s := range par {
			g.Go(func() error {
				c := &stream.SnapshotContext{CheckpointID: id, Timestamp: time.Now().UnixMilli(), KeyGroups: src[s].KeyGroups(), Full: true}
				if err := src[s].Snapshot(c); err != nil {
					return fmt.Errorf("subtask %d: %w", s, err)
				}
				snaps[s] = &c.State
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		snapped := time.Now()

		// Upload: encode and put each subtask's object, then the manifest.
		handles := make([]*weirpb.StateHandle, par)
		ug, uctx := errgroup.WithContext(ctx)
		for s := range par {
			ug.Go(func() error {
				data, err := checkpoint.EncodeSnapshot(snaps[s])
				if err != nil {
					return fmt.Errorf("subtask %d: encode: %w", s, err)
				}
				snaps[s] = nil // as the taskmanager drops it once encoded
				h, err := st.UploadSnapshot(uctx, savepointJob, id, savepointOp, s, par, 1, src[s].KeyGroups(), data)
				if err != nil {
					return err
				}
				handles[s] = h
				return nil
			})
		}
		if err := ug.Wait(); err != nil {
			b.Fatal(err)
		}
		m := &weirpb.Manifest{
			Version: checkpoint.ManifestVersion, JobId: savepointJob, JobName: "savepoint", CheckpointId: id,
			TriggerTimeMs: start.UnixMilli(), CompleteTimeMs: time.Now().UnixMilli(),
			Mode: weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE, MaxParallelism: int32(maxPar),
			Operators: []*weirpb.OperatorState{{OperatorUid: savepointOp, Parallelism: int32(par), Handles: handles}},
		}
		if _, _, err := st.WriteManifest(ctx, m); err != nil {
			b.Fatal(err)
		}
		uploaded := time.Now()

		// Copy into the savepoint directory.
		dst := gw.NewS3Store(b)
		m, err := st.ReadManifest(ctx, savepointJob, id)
		if err != nil {
			b.Fatal(err)
		}
		_, size, err := checkpoint.WriteSavepoint(ctx, st, m, dst, nil)
		if err != nil {
			b.Fatal(err)
		}
		copied := time.Now()
		snapDur += snapped.Sub(start)
		upDur += uploaded.Sub(snapped)
		copyDur += copied.Sub(uploaded)
		spBytes = size

		// Restore at double the parallelism, conc subtasks at a time.
		runtime.GC()
		restored := make([]*backends.Managed, newPar)
		loadDur, openDur := make([]time.Duration, newPar), make([]time.Duration, newPar)
		start = time.Now()
		rg, rctx := errgroup.WithContext(ctx)
		rg.SetLimit(conc)
		for j := range newPar {
			rg.Go(func() error {
				t0 := time.Now()
				meta, err := checkpoint.ReadSavepoint(rctx, dst)
				if err != nil {
					return err
				}
				var hs []*weirpb.StateHandle
				for _, op := range meta.GetOperators() {
					if op.GetOperatorUid() == savepointOp {
						hs = op.GetHandles()
					}
				}
				kg := stream.KeyGroupRangeFor(maxPar, newPar, j)
				snap, err := checkpoint.NewStorage(dst).LoadOperatorState(rctx, hs, kg, j, newPar)
				if err != nil {
					return fmt.Errorf("new subtask %d: %w", j, err)
				}
				t1 := time.Now()
				r, err := backends.OpenManaged(savepointOctx(root, fmt.Sprint("restore-", id), j, newPar), meta.GetCheckpointId(), snap)
				if err != nil {
					return fmt.Errorf("new subtask %d: %w", j, err)
				}
				restored[j] = r
				loadDur[j], openDur[j] = t1.Sub(t0), time.Since(t1)
				return nil
			})
		}
		err = rg.Wait()
		restDur += time.Since(start)
		b.StopTimer()
		if err == nil {
			for j := range newPar {
				b.Logf("iteration %d: new subtask %d %v: load %v, open %v", iters, j, restored[j].KeyGroups(),
					loadDur[j].Round(time.Millisecond), openDur[j].Round(time.Millisecond))
			}
			err = checkSavepointRestore(restored, n, maxPar, stateBytes, id)
		}
		for _, r := range restored {
			if r != nil {
				if cerr := r.Close(false); err == nil {
					err = cerr
				}
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		// Keep the server's disk to one iteration's data.
		if _, err := checkpoint.DisposeSavepoint(ctx, dst); err != nil {
			b.Fatal(err)
		}
		if err := st.DeleteCheckpoint(ctx, savepointJob, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	mean := func(d time.Duration) float64 { return d.Seconds() / float64(iters) }
	fmt.Printf("savepoint_keys=%d\n", n)
	fmt.Printf("savepoint_state_bytes=%d\n", stateBytes)
	fmt.Printf("savepoint_parallelism=%d\n", par)
	fmt.Printf("savepoint_seconds=%.2f\n", mean(snapDur+upDur+copyDur))
	fmt.Printf("savepoint_snapshot_seconds=%.2f\n", mean(snapDur))
	fmt.Printf("savepoint_upload_seconds=%.2f\n", mean(upDur))
	fmt.Printf("savepoint_copy_seconds=%.2f\n", mean(copyDur))
	fmt.Printf("savepoint_bytes=%d\n", spBytes)
	fmt.Printf("restore_rescaled_seconds=%.2f\n", mean(restDur))
	fmt.Printf("restore_rescaled_parallelism=%d\n", newPar)
	fmt.Printf("restore_rescaled_concurrency=%d\n", conc)
	fmt.Printf("savepoint_load_s=%.0f\n", load.Seconds())
}

// savepointOctx is the operator context of subtask of parallelism subtasks
// of the benchmark's operator, with the Pebble backend in a local state
// directory of its own under root/name.
func savepointOctx(root, name string, subtask, parallelism int) *stream.OperatorContext {
	maxPar := stream.DefaultMaxParallelism
	return &stream.OperatorContext{
		JobID: savepointJob, OperatorUID: savepointOp,
		TaskName:       fmt.Sprintf("%s (%d/%d)", savepointOp, subtask+1, parallelism),
		Subtask:        subtask,
		Parallelism:    parallelism,
		MaxParallelism: maxPar,
		KeyGroups:      stream.KeyGroupRangeFor(maxPar, parallelism, subtask),
		StateBackend:   stream.StateBackendPebble,
		LocalStateDir:  filepath.Join(root, fmt.Sprintf("%s-%d", name, subtask)),
	}
}

// savepointKey is key i: 8 bytes spread over the key space. Its key group
// is i % maxParallelism.
func savepointKey(key []byte, i int) []byte {
	return binary.BigEndian.AppendUint64(key[:0], uint64(i)*stream.Golden64)
}

// savepointValue fills v (a multiple of 8 bytes long) with key i's value:
// random bytes from a generator seeded by i, so that any key's value can
// be checked without keeping them.
func savepointValue(pcg *rand.PCG, v []byte, i int) {
	pcg.Seed(savepointSeed, uint64(i))
	for j := 0; j < len(v); j += 8 {
		binary.LittleEndian.PutUint64(v[j:], pcg.Uint64())
	}
}

// loadSavepointState writes the keys of [0, n) whose key group (i %
// maxPar) be owns, with 100-byte values, in key order: key group by key
// group, each in the order of the keys' bytes.
func loadSavepointState(be statebackend.Backend, n, maxPar int) error {
	s, err := statebackend.GetValueState(be, savepointState, statebackend.BytesCodec)
	if err != nil {
		return err
	}
	var pcg rand.PCG
	buf := make([]byte, 104)
	val := buf[:100]
	key := make([]byte, 0, 8)
	var ids []int
	kgs := be.KeyGroups()
	for kg := kgs.Start; kg <= kgs.End; kg++ {
		ids = ids[:0]
		for i := kg; i < n; i += maxPar {
			ids = append(ids, i)
		}
		slices.SortFunc(ids, func(x, y int) int {
			return cmp.Compare(uint64(x)*stream.Golden64, uint64(y)*stream.Golden64)
		})
		for _, i := range ids {
			savepointValue(&pcg, buf, i)
			key = savepointKey(key, i)
			be.SetCurrentKey(key, kg)
			// The backend may keep the value it is given: a fresh one each.
			s.Update(slices.Clone(val))
		}
		// Flush the backend's write-back value cache (Keys does), as a
		// running job's checkpoints would: entries evicted from the
		// cache stay referenced from its list of dirty entries until the
		// next flush, so that a load of 10 million keys without one would
		// hold over 3 GB, and the savepoint's snapshot would write them.
		be.Keys(savepointState, kg, func([]byte) bool { return false })
	}
	return nil
}

// checkSavepointRestore returns an error unless the restored backends hold
// n keys in all, as many live bytes as the state had, and the values
// loaded for a seeded sample of keys.
func checkSavepointRestore(restored []*backends.Managed, n, maxPar int, stateBytes, seed int64) error {
	var keys, size int64
	for _, r := range restored {
		be := r.Backend()
		kgs := be.KeyGroups()
		for kg := kgs.Start; kg <= kgs.End; kg++ {
			be.Keys(savepointState, kg, func([]byte) bool { keys++; return true })
		}
		size += be.SizeBytes()
	}
	if keys != int64(n) {
		return fmt.Errorf("the restored backends hold %d keys; the savepoint was taken of %d", keys, n)
	}
	if size != stateBytes {
		return fmt.Errorf("the restored backends hold %d live bytes; the state had %d", size, stateBytes)
	}
	states := make([]statebackend.ValueState[[]byte], len(restored))
	for j, r := range restored {
		s, err := statebackend.GetValueState(r.Backend(), savepointState, statebackend.BytesCodec)
		if err != nil {
			return err
		}
		states[j] = s
	}
	rng := rand.New(rand.NewPCG(savepointSeed, uint64(seed)))
	var pcg rand.PCG
	want := make([]byte, 104)
	key := make([]byte, 0, 8)
	for range min(n, savepointSamples) {
		i := rng.IntN(n)
		kg := i % maxPar
		j := stream.SubtaskForKeyGroup(maxPar, len(restored), kg)
		key = savepointKey(key, i)
		restored[j].Backend().SetCurrentKey(key, kg)
		got, ok := states[j].Value()
		savepointValue(&pcg, want, i)
		if !ok || string(got) != string(want[:100]) {
			return fmt.Errorf("key %d (key group %d, new subtask %d): restored value %x (present: %v), loaded %x", i, kg, j, got, ok, want[:100])
		}
	}
	return nil
}
