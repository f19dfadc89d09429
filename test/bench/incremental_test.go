package bench

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// incrementalTunings are alternative Pebble settings the benchmark can run
// with (WEIR_INCR_TUNING=<name>) to compare with the backend's defaults
// (the empty name). "pebble" restores Pebble's own defaults for the
// settings the backend changes.
var incrementalTunings = map[string]func(*pebble.Options){
	"": nil,
	"pebble": func(o *pebble.Options) {
		o.L0CompactionThreshold = 4
		o.L0CompactionFileThreshold = 500
		o.L0StopWritesThreshold = 12
		o.Experimental.ReadSamplingMultiplier = 1 << 4
		o.LBaseMaxBytes = 64 << 20
		o.TargetFileSizes = [len(o.TargetFileSizes)]int64{}
		o.TargetFileSizes[0] = 2 << 20
		for i := 1; i < len(o.TargetFileSizes); i++ {
			o.TargetFileSizes[i] = o.TargetFileSizes[i-1] * 2
		}
	},
}

// BenchmarkIncrementalCheckpoint1GB is issue 5's benchmark: about 1 GB of
// keyed state in the Pebble backend (WEIR_INCR_KEYS keys, default 10
// million, of 8 bytes with 100-byte random — incompressible — values),
// loaded in key order (not measured), a first checkpoint uploaded in full,
// then rounds of: update a seeded random 1 % of the keys (blind puts: each
// is an update of an existing key), snapshot (SnapshotFiles: close the
// changelog segment, or materialize a Pebble checkpoint once the chain
// reaches WEIR_INCR_FACTOR_PCT, default 200, % of the state) and upload
// (checkpoint.Storage.UploadFiles, shared files content-addressed) to S3
// on a versitygw server. WEIR_INCR_WARMUP rounds (default 3) are not
// measured; then, unless WEIR_INCR_ROUNDS sets a count, exactly one
// materialization cycle is: rounds up to and including the next
// materialization, so the amortized ratio includes it. Last, the
// checkpoint just before that materialization — the longest changelog
// chain a restore replays — is downloaded and opened (changelog replayed),
// after the source backend has closed as a failed process would have:
// incremental_restore_seconds.
//
// It prints:
//
//	incremental_state_bytes              live key+value bytes of state
//	incremental_changed_bytes_per_round  key+value bytes written per round
//	incremental_upload_ratio_amortized   Σ bytes uploaded ÷ Σ bytes changed
//	                                     over the measured rounds
//	incremental_upload_ratio_p50         median of the per-round ratios
//	incremental_upload_ratio             = the amortized ratio
//	checkpoint_duration_p50_ms/_p99_ms   snapshot + upload of one round
//	checkpoint_duration_max_ms           the slowest (the materialization)
//	full_checkpoint_bytes                bytes uploaded by the first checkpoint
//	incremental_rounds                   measured rounds
//	incremental_materializations         materializations in them
//	incremental_restore_seconds          download + open + replay
//	incremental_restore_download_seconds the download alone (of all but
//	                                     the changelog segments)
//	incremental_restore_open_seconds     the open (OpenFromCheckpoint,
//	                                     streaming the segments) alone
//	incremental_restore_settle_seconds   closing the source backend and
//	                                     syncing its writes, before the
//	                                     restore (not part of it)
//	incremental_flushes                  memtable flushes in them
//	incremental_compactions              compactions in them (each is logged
//	                                     with -v: reason, levels, bytes)
//	incremental_compacted_bytes          bytes those compactions wrote
//	incremental_load_s                   seconds the load took
//	s3_requests_per_checkpoint           S3 requests of one measured round's
//	                                     upload, all kinds (mean); the PUTs
//	                                     are checked against the objects
//	                                     each upload added to the bucket
//
// Bytes uploaded are every byte PUT to storage: new sstables and the
// per-checkpoint files (MANIFEST, OPTIONS, markers).
func BenchmarkIncrementalCheckpoint1GB(b *testing.B) {
	var (
		n       = int(envInt("WEIR_INCR_KEYS", 10_000_000))
		warmup  = int(envInt("WEIR_INCR_WARMUP", 3))
		rounds  = int(envInt("WEIR_INCR_ROUNDS", 0))
		factor  = float64(envInt("WEIR_INCR_FACTOR_PCT", 200)) / 100
		tuning  = os.Getenv("WEIR_INCR_TUNING")
		valSize = 100
		maxPar  = stream.DefaultMaxParallelism
	)
	base, ok := incrementalTunings[tuning]
	if !ok {
		b.Fatalf("WEIR_INCR_TUNING=%q: unknown tuning", tuning)
	}
	// WEIR_INCR_L0 (sublevels), WEIR_INCR_LBASE_MB and WEIR_INCR_TARGET_MB
	// override single settings on top of the tuning, for exploring.
	l0, lbase, target := envInt("WEIR_INCR_L0", 0), envInt("WEIR_INCR_LBASE_MB", 0), envInt("WEIR_INCR_TARGET_MB", 0)
	noReadCompactions := os.Getenv("WEIR_INCR_NO_READ_COMPACTIONS") != ""
	var ev compactionCounter
	configure := func(o *pebble.Options) {
		if base != nil {
			base(o)
		}
		if noReadCompactions {
			o.Experimental.ReadSamplingMultiplier = -1
		}
		if l0 > 0 {
			o.L0CompactionThreshold = int(l0)
			o.L0CompactionFileThreshold = max(o.L0CompactionFileThreshold, int(l0)*8)
			o.L0StopWritesThreshold = max(o.L0StopWritesThreshold, int(l0)*4)
		}
		if lbase > 0 {
			o.LBaseMaxBytes = lbase << 20
		}
		if target > 0 {
			for i := range o.TargetFileSizes {
				o.TargetFileSizes[i] = target << 20
			}
		}
		o.EventListener = ev.listener()
	}
	memtable := envInt("WEIR_INCR_MEMTABLE_MB", 0) << 20
	// The block cache holds the whole state (WEIR_INCR_CACHE_MB, default
	// 2048): every update reads the key first, and with the backend's
	// 64 MiB default most reads go to disk, which makes a round of 100k
	// updates take seconds — time spent on reads, not checkpoints.
	cache := envInt("WEIR_INCR_CACHE_MB", 2048) << 20
	endpoint, access, secret := blobstoretest.StartVersityGW(b)
	raw := blobstoretest.NewS3Store(b, endpoint, access, secret)
	st := checkpoint.NewStorage(blobstore.Counting(raw, new(blobstore.Counters)))
	root := b.TempDir()
	kg := stream.KeyGroupRange{Start: 0, End: maxPar - 1}
	be, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, "db"), DeleteOnClose: true, Configure: configure, MemTableBytes: memtable, CacheBytes: cache, MaterializeFactor: factor}, kg)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	s, err := statebackend.GetValueState(be, "v", statebackend.BytesCodec)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 42))
	buf := make([]byte, valSize+7)
	val := buf[:valSize]
	key := make([]byte, 8)
	put := func(i int) int64 {
		for j := 0; j < valSize; j += 8 {
			binary.LittleEndian.PutUint64(buf[j:], rng.Uint64())
		}
		binary.BigEndian.PutUint64(key, uint64(i)*0x9e3779b97f4a7c15)
		be.SetCurrentKey(key, i%maxPar)
		s.Update(val)
		return int64(len(key) + valSize)
	}
	// Load in key order — key group first, then the key's bytes, as the
	// backend lays keys out — so that flushes do not overlap and go to the
	// bottom level without compactions. The load is not measured.
	start := time.Now()
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(x, y uint32) int {
		if c := cmp.Compare(x%uint32(maxPar), y%uint32(maxPar)); c != 0 {
			return c
		}
		return cmp.Compare(uint64(x)*0x9e3779b97f4a7c15, uint64(y)*0x9e3779b97f4a7c15)
	})
	for _, i := range order {
		put(int(i))
	}
	order = nil
	load := time.Since(start)
	b.Logf("loaded %d keys in %v", n, load)

	ctx := b.Context()
	ckpt := int64(0)
	var prevDir string
	var lastHandle, prevHandle []*weirpb.StateFile
	var prevSize int64
	// objects lists the bucket's keys, uncounted. A checkpoint's PUTs must
	// be one per file of its handle whose key was not in the bucket
	// before (per-checkpoint files have new keys; a shared file is put
	// only when absent, and two files of one upload with the same content
	// are put twice).
	objects := func() map[string]bool {
		objs, err := raw.List(ctx, "job/")
		if err != nil {
			b.Fatal(err)
		}
		keys := make(map[string]bool, len(objs))
		for _, o := range objs {
			keys[o.Key] = true
		}
		return keys
	}
	var lastReqs blobstore.RequestCounts
	take := func() (int64, time.Duration) {
		prevHandle, prevSize = lastHandle, be.SizeBytes()
		ckpt++
		before := objects()
		start := time.Now()
		dir := filepath.Join(root, fmt.Sprint("chk-", ckpt))
		files, err := be.SnapshotFiles(dir)
		if err != nil {
			b.Fatal(err)
		}
		var reqs blobstore.Counters
		handle, up, err := st.UploadFiles(blobstore.WithCounters(ctx, &reqs), "job", ckpt, "op", 0, 1, files)
		if err != nil {
			b.Fatal(err)
		}
		lastHandle = handle
		d := time.Since(start)
		lastReqs = reqs.Snapshot()
		var want int64
		for _, f := range handle {
			if !before[f.GetKey()] {
				want++
			}
		}
		if lastReqs.Put != want {
			b.Fatalf("checkpoint %d: %d PUT requests counted; its handle has %d files not in storage before", ckpt, lastReqs.Put, want)
		}
		after := objects()
		for _, f := range handle {
			if !after[f.GetKey()] {
				b.Fatalf("checkpoint %d: file %s of its handle is not in storage", ckpt, f.GetKey())
			}
		}
		// Keep the latest local checkpoint only (its hard links hold
		// compacted-away files on disk).
		if prevDir != "" {
			os.RemoveAll(prevDir)
		}
		prevDir = dir
		return up, d
	}
	full, fullDur := take()
	stateBytes := be.SizeBytes()

	nround := 0
	round := func() (changed, uploaded int64, d time.Duration) {
		nround++
		ev.round.Store(int64(nround))
		for range n / 100 {
			changed += put(rng.IntN(n))
		}
		uploaded, d = take()
		return changed, uploaded, d
	}
	for range warmup {
		round()
	}
	ev.reset()
	mat0 := be.SnapshotStats().Materializations
	var totalUp, totalChanged int64
	var reqTotal blobstore.RequestCounts
	var durs []time.Duration
	var ratios []float64
	// restoreHandle is the checkpoint whose restore is timed: the one just
	// before the measured materialization, whose changelog chain is the
	// longest a restore replays.
	var restoreHandle []*weirpb.StateFile
	var restoreSize int64
	for b.Loop() {
		// Without WEIR_INCR_ROUNDS: exactly one materialization cycle —
		// rounds until the next materialization, inclusive (a cap guards
		// against a backend that never materializes).
		for r := 0; rounds > 0 && r < rounds || rounds == 0 && r < 2000; r++ {
			changed, up, d := round()
			reqTotal.Put += lastReqs.Put
			reqTotal.Get += lastReqs.Get
			reqTotal.List += lastReqs.List
			reqTotal.Delete += lastReqs.Delete
			totalUp += up
			totalChanged += changed
			durs = append(durs, d)
			ratios = append(ratios, float64(up)/float64(changed))
			b.Logf("round %d: changed %d B, uploaded %d B (ratio %.2f), %v", r, changed, up, float64(up)/float64(changed), d)
			if rounds == 0 && be.SnapshotStats().Materializations > mat0 {
				restoreHandle, restoreSize = prevHandle, prevSize
				break
			}
		}
	}
	if restoreHandle == nil {
		restoreHandle, restoreSize = lastHandle, be.SizeBytes()
	}
	mats := be.SnapshotStats().Materializations - mat0
	flushes, compactions, compacted, log := ev.get()
	// A restore follows the death of the process that took the checkpoint:
	// the source backend stops here (its background compactions would
	// otherwise compete with the restore for both cores and the disk), and
	// the writes it left in the page cache reach the disk before the clock
	// starts (incremental_restore_settle_seconds).
	settle := time.Now()
	if err := be.Close(); err != nil {
		b.Fatal(err)
	}
	syscall.Sync()
	settleDur := time.Since(settle)
	// Restore the last checkpoint: download, open, replay the changelog.
	start = time.Now()
	restoreDir := filepath.Join(root, "restore")
	// As a taskmanager restores: the changelog segments are streamed from
	// storage into the replay, the rest downloaded first.
	files, _, err := st.DownloadFiles(ctx, restoreHandle, restoreDir, checkpoint.DownloadOptions{Stream: backends.StreamedOnRestore})
	if err != nil {
		b.Fatal(err)
	}
	downloadDur := time.Since(start)
	rb, err := pebblestate.OpenFromCheckpoint(pebblestate.Options{Dir: filepath.Join(root, "restored-db"), DeleteOnClose: true, CacheBytes: 64 << 20, FetchSegment: pebblestate.FetchFrom(files)}, restoreDir, kg)
	if err != nil {
		b.Fatal(err)
	}
	restoreDur := time.Since(start)
	if rb.SizeBytes() != restoreSize {
		b.Fatalf("restored state has %d bytes, the backend had %d at that checkpoint", rb.SizeBytes(), restoreSize)
	}
	rb.Close()
	for _, l := range log {
		b.Log(l)
	}
	slices.Sort(durs)
	slices.Sort(ratios)
	amortized := float64(totalUp) / float64(totalChanged)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("incremental_state_bytes=%d\n", stateBytes)
	fmt.Printf("incremental_changed_bytes_per_round=%d\n", totalChanged/int64(len(durs)))
	fmt.Printf("incremental_upload_ratio_amortized=%.2f\n", amortized)
	fmt.Printf("incremental_upload_ratio_p50=%.2f\n", ratios[len(ratios)/2])
	fmt.Printf("incremental_upload_ratio=%.2f\n", amortized)
	fmt.Printf("checkpoint_duration_p50_ms=%.0f\n", ms(durs[len(durs)/2]))
	fmt.Printf("checkpoint_duration_p99_ms=%.0f\n", ms(durs[min(len(durs)-1, len(durs)*99/100)]))
	fmt.Printf("checkpoint_duration_max_ms=%.0f\n", ms(durs[len(durs)-1]))
	fmt.Printf("full_checkpoint_bytes=%d\n", full)
	fmt.Printf("incremental_rounds=%d\n", len(durs))
	perCk := func(v int64) float64 { return float64(v) / float64(len(durs)) }
	fmt.Printf("s3_puts_per_checkpoint=%.1f s3_lists_per_checkpoint=%.1f s3_gets_per_checkpoint=%.1f\n",
		perCk(reqTotal.Put), perCk(reqTotal.List), perCk(reqTotal.Get))
	fmt.Printf("s3_requests_per_checkpoint=%.1f\n", perCk(reqTotal.Put+reqTotal.Get+reqTotal.List+reqTotal.Delete))
	fmt.Printf("incremental_materializations=%d\n", mats)
	fmt.Printf("incremental_restore_seconds=%.1f\n", restoreDur.Seconds())
	fmt.Printf("incremental_restore_download_seconds=%.1f\n", downloadDur.Seconds())
	fmt.Printf("incremental_restore_open_seconds=%.1f\n", (restoreDur - downloadDur).Seconds())
	fmt.Printf("incremental_restore_settle_seconds=%.1f\n", settleDur.Seconds())
	fmt.Printf("incremental_flushes=%d\n", flushes)
	fmt.Printf("incremental_compactions=%d\n", compactions)
	fmt.Printf("incremental_compacted_bytes=%d\n", compacted)
	fmt.Printf("incremental_load_s=%.0f\n", load.Seconds())
	b.Logf("keys %d, load %v, first checkpoint %v, tuning %q, %d warm-up + %d measured rounds", n, load, fullDur, tuning, warmup, rounds)
}

// compactionCounter counts the flushes and compactions Pebble finishes, and
// logs each compaction (reason, levels, bytes written), to show what makes
// a checkpoint upload rewritten files.
type compactionCounter struct {
	round       atomic.Int64 // the round being run, for the log
	mu          sync.Mutex
	flushes     int
	compactions int
	written     uint64
	log         []string
}

func (c *compactionCounter) listener() *pebble.EventListener {
	return &pebble.EventListener{
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err != nil {
				return
			}
			c.mu.Lock()
			c.flushes++
			c.mu.Unlock()
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err != nil {
				return
			}
			var in []string
			var inBytes, out uint64
			for _, l := range info.Input {
				for _, t := range l.Tables {
					inBytes += t.Size
				}
				in = append(in, fmt.Sprintf("L%d×%d", l.Level, len(l.Tables)))
			}
			for _, t := range info.Output.Tables {
				out += t.Size
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			c.compactions++
			c.written += out
			c.log = append(c.log, fmt.Sprintf("round %d: compaction %s: %v → L%d, read %d MB, wrote %d MB in %v",
				c.round.Load(), info.Reason, in, info.Output.Level, inBytes>>20, out>>20, info.TotalDuration.Round(time.Millisecond)))
		},
	}
}

func (c *compactionCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushes, c.compactions, c.written, c.log = 0, 0, 0, nil
}

func (c *compactionCounter) get() (flushes, compactions int, written uint64, log []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushes, c.compactions, c.written, slices.Clone(c.log)
}
