package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/client"
	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/jobmanager/jobmanagertest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/testbin"
)

// TestSweepSubtaskState: the directory of a subtask no longer running here
// goes once its local snapshots are all older than the checkpoint swept
// with; one that holds that checkpoint's snapshot, or whose task runs,
// stays; each checkpoint is swept once.
func TestSweepSubtaskState(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.StateDir = testTaskManagerID, t.TempDir()
	tm, err := New(cfg, newTestRegistry(newTestState()))
	if err != nil {
		t.Fatal(err)
	}
	const job = "job-sweep"
	mk := func(vertex, subtask int32, rel ...string) {
		t.Helper()
		for _, r := range rel {
			p := filepath.Join(tm.subtaskStateDir(job, vertex, subtask), r)
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, "000001.sst"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(1, 0, "snapshots/counts/chk-5", "snapshots/counts/chk-6") // moved, holds checkpoint 6
	mk(1, 1, "snapshots/counts/chk-3", "snapshots/other/chk-4")  // moved, older snapshots only
	mk(1, 2, "restore/counts/chk-3-s2", "counts")                // no snapshots: leftovers of a killed process
	mk(1, 3, "snapshots/counts/chk-1")                           // running here
	mk(1, 4, "snapshots/counts/chk-2")                           // ended, waiting for a stale attempt
	notDone := make(chan struct{})
	defer close(notDone)
	tm.mu.Lock()
	tm.mu.jobsRun[job] = true
	tm.mu.tasks[taskKey{job, 1, 3}] = &runningTask{state: running, done: make(chan struct{})}
	tm.mu.tasks[taskKey{job, 1, 4}] = &runningTask{state: canceled, done: notDone}
	ended := make(chan struct{})
	close(ended)
	tm.mu.tasks[taskKey{job, 1, 5}] = &runningTask{state: failed, done: ended} // ended, no directory
	tm.mu.Unlock()

	left := func() []string {
		entries, _ := os.ReadDir(filepath.Join(cfg.StateDir, job))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	for _, step := range []struct {
		id   int64
		want []string
	}{
		{6, []string{"v1-s0", "v1-s3", "v1-s4"}},
		{6, []string{"v1-s0", "v1-s3", "v1-s4"}},
		{5, []string{"v1-s0", "v1-s3", "v1-s4"}},
		{7, []string{"v1-s3", "v1-s4"}},
	} {
		tm.sweepSubtaskState(job, step.id)
		if got := left(); !slices.Equal(got, step.want) {
			t.Fatalf("after a sweep with checkpoint %d the job's directory holds %v, want %v", step.id, got, step.want)
		}
	}
	// A job this process never ran a task of is left alone.
	other := filepath.Join(cfg.StateDir, "job-other", "v0-s0")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	tm.sweepSubtaskState("job-other", 100)
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("a sweep removed state of a job this process never ran: %v", err)
	}
}

// TestRestoreFilesRemoved: a task's restore directory holds files only
// while an attempt opens its state — none are left by a restore that
// failed, and leftovers (of a killed process) are gone once an attempt
// starts.
func TestRestoreFilesRemoved(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	stateDir := t.TempDir()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), func(c *Config) { c.StateDir = stateDir })
	leftover := func(job string) string {
		t.Helper()
		dir := backends.RestoreDir(h.tm.subtaskStateDir(job, 0, 0), "sink", 3, 0)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "000007.sst"), []byte("left by a killed process"), 0o644); err != nil {
			t.Fatal(err)
		}
		return backends.RestoreRoot(h.tm.subtaskStateDir(job, 0, 0))
	}

	t.Run("restore fails", func(t *testing.T) {
		const job = "job-restore-fails"
		root := leftover(job)
		store := (&url.URL{Scheme: "file", Path: t.TempDir()}).String()
		d := chainedTask(job, 2, genJSON(100, true), "count", "")
		d.Checkpointing = &weirpb.TaskCheckpointing{Enabled: true, Storage: store}
		d.RestoreCheckpointId = 7
		d.Restore = []*weirpb.StateHandle{corruptFileHandle(t, store, job, 7, "sink")}
		h.mustSubmit(t, d)
		f := jm.WaitReported(t, d.GetId(), failed)
		if !strings.Contains(f.GetError(), "checksum mismatch") || !f.GetCorruptCheckpoint() {
			t.Fatalf("task failed with %q (corrupt %v); want the checksum mismatch of the restored file", f.GetError(), f.GetCorruptCheckpoint())
		}
		// The task reports FAILED after it cleaned up.
		if left := filesUnder(root); len(left) != 0 {
			t.Fatalf("after the failed restore these are left: %v", left)
		}
	})

	t.Run("leftovers of an earlier process", func(t *testing.T) {
		const job = "job-leftovers"
		root := leftover(job)
		d := chainedTask(job, 1, genJSON(100, true), "count", "")
		h.mustSubmit(t, d)
		jm.WaitReported(t, d.GetId(), running)
		waitOpened(t, st, 2) // the restore files go before anything opens
		if left := filesUnder(root); len(left) != 0 {
			t.Fatalf("while the task runs these are left: %v", left)
		}
		h.cancelTask(t, d.GetId())
		jm.WaitReported(t, d.GetId(), canceled)
	})
}

// TestDeploymentSweepsSubtaskState: a deployment that restores checkpoint
// id of its job removes the local state of the job's subtasks that do not
// run here and hold no local snapshot as new as id — here left by an
// earlier process with the same state directory — before it returns.
func TestDeploymentSweepsSubtaskState(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), func(c *Config) { c.StateDir = t.TempDir() })
	const job = "job-deploy-sweep"
	for _, d := range []string{
		backends.SnapshotDir(h.tm.subtaskStateDir(job, 0, 1), "sink", 3), // older than the restored checkpoint
		backends.SnapshotDir(h.tm.subtaskStateDir(job, 0, 2), "sink", 7), // the restored checkpoint's
		backends.SnapshotDir(h.tm.subtaskStateDir(job, 0, 3), "sink", 9), // newer
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	store := (&url.URL{Scheme: "file", Path: t.TempDir()}).String()
	d := chainedTask(job, 2, genJSON(100, true), "count", "")
	d.Checkpointing = &weirpb.TaskCheckpointing{Enabled: true, Storage: store}
	d.RestoreCheckpointId = 7
	d.Restore = []*weirpb.StateHandle{uploadHandle(t, store, job, 7, "sink", false)}
	h.mustSubmit(t, d)
	entries, _ := os.ReadDir(filepath.Join(h.tm.cfg.StateDir, job))
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	// v0-s0 is the deployed task's, created as it restores; the owner
	// file marks the directory as this taskmanager's.
	left = slices.DeleteFunc(left, func(n string) bool { return n == "v0-s0" })
	if want := []string{ownerFile, "v0-s2", "v0-s3"}; !slices.Equal(left, want) {
		t.Errorf("after the deployment the job's directory holds %v, want %v (and the task's own)", left, want)
	}
	jm.WaitReported(t, d.GetId(), running)
	waitOpened(t, st, 2)
	h.cancelTask(t, d.GetId())
	jm.WaitReported(t, d.GetId(), canceled)
}

// corruptFileHandle uploads to store a snapshot of operator uid, subtask 0
// of 1, in checkpoint id of job, with one incremental-snapshot file, and
// returns its handle with the file's checksum made wrong.
func corruptFileHandle(t *testing.T, store, job string, id int64, uid string) *weirpb.StateHandle {
	t.Helper()
	return uploadHandle(t, store, job, id, uid, true)
}

// uploadHandle uploads to store an empty snapshot of operator uid, subtask
// 0 of 1, in checkpoint id of job and returns its handle; withCorruptFile
// adds an incremental-snapshot file whose checksum in the handle is wrong.
func uploadHandle(t *testing.T, store, job string, id int64, uid string, withCorruptFile bool) *weirpb.StateHandle {
	t.Helper()
	ctx := t.Context()
	st, err := checkpoint.OpenStorage(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	data, err := checkpoint.EncodeSnapshot(&stream.OperatorSnapshot{})
	if err != nil {
		t.Fatal(err)
	}
	kg := stream.KeyGroupRange{Start: 0, End: 127}
	h, err := st.UploadSnapshot(ctx, job, id, uid, 0, 1, 1, kg, data)
	if err != nil {
		t.Fatal(err)
	}
	if !withCorruptFile {
		return h
	}
	path := filepath.Join(t.TempDir(), "000001.sst")
	if err := os.WriteFile(path, []byte("sstable"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, _, err := st.UploadFiles(ctx, job, id, uid, 0, 1, []stream.SnapshotFile{{Path: path, Name: "000001.sst", Size: 7}})
	if err != nil {
		t.Fatal(err)
	}
	files[0].Sha256 = strings.Repeat("0", 64)
	h.Files = files
	return h
}

// filesUnder lists the paths under root (nil when root does not exist).
func filesUnder(root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// ---- keyed Pebble jobs on a real jobmanager ----

// failSwitch fails subtask 0 of the "failswitch" operator in the
// deployment (stream.DeploymentOf) the test arms, at its next batch.
type failSwitch struct {
	mu         sync.Mutex
	deployment int64
}

func (s *failSwitch) arm(deployment int64) {
	s.mu.Lock()
	s.deployment = deployment
	s.mu.Unlock()
}

func (s *failSwitch) fires(deployment int64, subtask int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return subtask == 0 && deployment == s.deployment
}

type failSwitchOp struct {
	stream.BaseOperator
	sw         *failSwitch
	deployment int64
	subtask    int
}

func (o *failSwitchOp) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.deployment, o.subtask = stream.DeploymentOf(octx.Attempt), octx.Subtask
	return nil
}

func (o *failSwitchOp) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	if o.sw.fires(o.deployment, o.subtask) {
		b.Release()
		return fmt.Errorf("failswitch: failing deployment %d on purpose", o.deployment)
	}
	out.Collect(b)
	return nil
}

// localCluster is a real jobmanager with taskmanagers of this package,
// each with a state directory of its own, and a client.
type localCluster struct {
	cl  *client.Client
	tms map[string]*harness
	sw  *failSwitch
	// store is the checkpoint storage.
	store string
}

// startLocalCluster starts a jobmanager and one taskmanager per entry of
// slots (id → slots).
func startLocalCluster(t *testing.T, slots map[string]int) *localCluster {
	t.Helper()
	c := &localCluster{tms: map[string]*harness{}, sw: &failSwitch{},
		store: (&url.URL{Scheme: "file", Path: t.TempDir()}).String()}
	reg := testbin.Registry()
	reg.Register(stream.OperatorType{
		Name: "failswitch", Kind: stream.KindTransform,
		Plan:        func(p *stream.PlanContext) (*stream.Schema, error) { return p.Inputs[0].Schema, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &failSwitchOp{sw: c.sw}, nil },
	})
	jcfg := jobmanager.DefaultConfig()
	jcfg.RPCAddress, jcfg.RESTAddress = "127.0.0.1:0", ""
	jcfg.HeartbeatInterval = 100 * time.Millisecond
	jcfg.CheckpointStorage = c.store
	jmLogs := &logRecorder{}
	jcfg.Logger = slog.New(jmLogs)
	jm, err := jobmanager.New(jcfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- jm.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("jobmanager: %v", err)
		}
		if t.Failed() {
			for _, m := range jmLogs.all() {
				t.Log("jobmanager: " + m)
			}
		}
	})
	select {
	case <-jm.Ready():
	case err := <-done:
		t.Fatalf("jobmanager: %v", err)
	}
	for id, n := range slots {
		c.tms[id] = startTaskManager(t, jm.RPCAddr(), reg, func(cfg *Config) {
			cfg.ID, cfg.Slots, cfg.StateDir = id, n, t.TempDir()
		})
	}
	c.cl, err = client.New(client.Config{JobManagers: []string{jm.RPCAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cl.Close() })
	waitFor(t, "the taskmanagers to register", func() bool {
		tms, err := c.cl.TaskManagers(t.Context())
		return err == nil && len(tms) == len(slots)
	})
	return c
}

// keyedPebbleJob is datagen → keyBy(key) → running_count "counts" (Pebble
// state, incremental checkpoints every 50ms) → failswitch → discard, at
// parallelism p, restarting on every failure. Failed checkpoints are
// tolerated: a trigger that reaches a task before it runs fails the
// checkpoint, which is not what these tests are about.
func (c *localCluster) keyedPebbleJob(t *testing.T, p int) *stream.JobGraph {
	t.Helper()
	b := stream.NewBuilder("local-state").Parallelism(p).MaxParallelism(32)
	gen := map[string]any{"ratePerSecond": 4000, "seed": 7,
		"fields": []map[string]any{{"name": "key", "kind": "key", "cardinality": 5000, "prefix": "k"}}}
	b.Source("events", "datagen", gen).KeyBy("key").Then("counts", "running_count", nil).
		Then("failer", "failswitch", nil).Then("out", "discard", nil)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g.State = stream.StateConfig{Backend: stream.StateBackendPebble}
	g.Checkpoint = stream.CheckpointConfig{Interval: 50 * time.Millisecond, Storage: c.store, TolerableFailures: 1000}
	g.Restart = stream.RestartConfig{Type: "fixed-delay", Attempts: 100, Delay: time.Millisecond}
	return g
}

func (c *localCluster) submit(t *testing.T, g *stream.JobGraph) string {
	t.Helper()
	id, err := c.cl.Submit(t.Context(), g)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// deployment returns the deployment every task of job runs in, with where
// each task runs (task name → taskmanager id), or ok false while the tasks
// are not all RUNNING in one deployment.
func (c *localCluster) deployment(t *testing.T, job string) (d int64, where map[string]string, ok bool) {
	resp, err := c.cl.Job(t.Context(), job)
	if err != nil || len(resp.GetTasks()) == 0 {
		return 0, nil, false
	}
	where = map[string]string{}
	for i, task := range resp.GetTasks() {
		td := stream.DeploymentOf(task.GetId().GetAttempt())
		if task.GetState() != running || (i > 0 && td != d) {
			return 0, nil, false
		}
		d = td
		where[task.GetName()] = task.GetTaskmanagerId()
	}
	return d, where, true
}

// completed returns how many checkpoints of job completed.
func (c *localCluster) completed(t *testing.T, job string) int64 {
	cks, err := c.cl.Checkpoints(t.Context(), job)
	if err != nil {
		return -1
	}
	return cks.GetCompleted()
}

// runDeployment waits until every task of job runs in one deployment, d or
// a later one, and then for two more completed checkpoints, calling watch
// at every poll. It returns the deployment and where each task runs.
func (c *localCluster) runDeployment(t *testing.T, job string, d int64, watch func()) (int64, map[string]string) {
	t.Helper()
	var where map[string]string
	var base, got int64
	waitFor(t, fmt.Sprintf("deployment %d or later of job %s to run", d, job), func() bool {
		watch()
		var ok bool
		got, where, ok = c.deployment(t, job)
		if !ok || got < d {
			return false
		}
		base = c.completed(t, job)
		return base >= 0
	})
	waitFor(t, fmt.Sprintf("two checkpoints of deployment %d", got), func() bool {
		watch()
		return c.completed(t, job) >= base+2
	})
	if now, _, ok := c.deployment(t, job); !ok || now != got {
		// Restarted meanwhile for a reason of its own: wait again.
		return c.runDeployment(t, job, got+1, watch)
	}
	return got, where
}

// cancelJob cancels job and waits until it ended.
func (c *localCluster) cancelJob(t *testing.T, job string) {
	t.Helper()
	if err := c.cl.Cancel(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if _, err := c.cl.WaitJob(ctx, job, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// localStateScan is what lies in a taskmanager's state directory.
type localStateScan struct {
	// maxSnapshots is the most local snapshot directories of one operator
	// of one subtask, in maxWhere.
	maxSnapshots int
	maxWhere     string
	restoreDirs  []string
	bytes        int64
}

func scanLocalState(stateDir string) localStateScan {
	var s localStateScan
	ops, _ := filepath.Glob(filepath.Join(stateDir, "*", "*", "snapshots", "*"))
	for _, op := range ops {
		chks, _ := filepath.Glob(filepath.Join(op, "chk-*"))
		if len(chks) > s.maxSnapshots {
			s.maxSnapshots, s.maxWhere = len(chks), op
		}
	}
	s.restoreDirs, _ = filepath.Glob(filepath.Join(stateDir, "*", "*", "restore"))
	filepath.WalkDir(stateDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				s.bytes += fi.Size()
			}
		}
		return nil
	})
	return s
}

var restoredRE = regexp.MustCompile(`state restored .*task=(\S+).* local_bytes=(\d+) streamed_bytes=(\d+)`)

// TestLocalStateBoundedAcrossAttempts runs a keyed Pebble job with
// incremental checkpoints on one taskmanager through four failed
// deployments. Throughout, no operator of a subtask has more than
// backends.LocalSnapshotsKept local snapshot directories, plus the one
// being written; every restore reuses local files (local recovery); once
// the last deployment runs no restore directory is left; and the job's
// directory goes when the job ends.
func TestLocalStateBoundedAcrossAttempts(t *testing.T) {
	const failures = 4
	c := startLocalCluster(t, map[string]int{"tm-a": 2})
	h := c.tms["tm-a"]
	job := c.submit(t, c.keyedPebbleJob(t, 2))

	const bound = backends.LocalSnapshotsKept + 1
	var worst localStateScan
	var peakBytes int64
	watch := func() {
		s := scanLocalState(h.tm.cfg.StateDir)
		if s.maxSnapshots > worst.maxSnapshots {
			worst = s
		}
		peakBytes = max(peakBytes, s.bytes)
		if s.maxSnapshots > bound {
			t.Fatalf("%d local snapshot directories in %s; want at most %d (LocalSnapshotsKept and one being written)", s.maxSnapshots, s.maxWhere, bound)
		}
	}
	var d int64
	for range failures {
		d, _ = c.runDeployment(t, job, d+1, watch)
		c.sw.arm(d)
	}
	c.runDeployment(t, job, d+1, watch)
	if s := scanLocalState(h.tm.cfg.StateDir); len(s.restoreDirs) != 0 {
		var left []string
		for _, d := range s.restoreDirs {
			left = append(left, filesUnder(d)...)
		}
		t.Errorf("restore directories left while the job runs: %v", left)
	}
	if worst.maxSnapshots == 0 {
		t.Fatal("no local snapshot directory seen: the job did not checkpoint incrementally")
	}

	// Local recovery: each subtask of counts restored at least once per
	// failure, reusing its own local snapshot's files.
	var restores int
	for _, m := range h.logs.all() {
		sub := restoredRE.FindStringSubmatch(m)
		if sub == nil || !strings.Contains(sub[1], "counts") {
			continue
		}
		restores++
		if n, _ := strconv.ParseInt(sub[2], 10, 64); n == 0 {
			t.Errorf("a restore reused no local files: %s", m)
		}
		// Changelog segments kept locally are reused, not streamed.
		if n, _ := strconv.ParseInt(sub[3], 10, 64); n != 0 {
			t.Errorf("a restore streamed %d bytes though every file was local: %s", n, m)
		}
	}
	if restores < 2*failures {
		t.Errorf("%d restores of the counts subtasks, want at least %d", restores, 2*failures)
	}

	c.cancelJob(t, job)
	jobDir := filepath.Join(h.tm.cfg.StateDir, job)
	waitFor(t, "the job's local state directory to go", func() bool {
		_, err := os.Stat(jobDir)
		return errors.Is(err, fs.ErrNotExist)
	})
	after := scanLocalState(h.tm.cfg.StateDir)
	t.Logf("local snapshot directories per operator: at most %d (bound %d); local_state_bytes_peak=%d local_state_bytes_after_end=%d",
		worst.maxSnapshots, bound, peakBytes, after.bytes)
}

// TestMovedSubtaskLocalStateRemoved: when a failover moves a subtask to
// another taskmanager, the one it left removes its local state once a
// checkpoint of the new deployment completed, while the job goes on; the
// rest goes when the job ends.
//
// Placement is deterministic (round-robin over taskmanagers, most free
// slots first, ties by id): the job's two slots go to tm-a and tm-b; a
// second job then takes the free slot of tm-a, so the restarted job's slot
// 0 goes to tm-b and slot 1 to tm-a.
func TestMovedSubtaskLocalStateRemoved(t *testing.T) {
	c := startLocalCluster(t, map[string]int{"tm-a": 2, "tm-b": 2})
	job := c.submit(t, c.keyedPebbleJob(t, 2))
	d, where := c.runDeployment(t, job, 1, func() {})
	counts := func(where map[string]string, subtask int) string {
		for name, tm := range where {
			if strings.Contains(name, "counts") && strings.Contains(name, fmt.Sprintf("(%d/2)", subtask+1)) {
				return tm
			}
		}
		t.Fatalf("no counts subtask %d among %v", subtask, where)
		return ""
	}
	if counts(where, 0) != "tm-a" || counts(where, 1) != "tm-b" {
		t.Fatalf("deployment %d placed the tasks %v; want counts subtask 0 on tm-a and 1 on tm-b", d, where)
	}
	// The local state of counts subtask s on a taskmanager.
	subtaskDirs := func(tm string, subtask int) []string {
		m, _ := filepath.Glob(filepath.Join(c.tms[tm].tm.cfg.StateDir, job, fmt.Sprintf("v*-s%d", subtask)))
		return m
	}
	waitFor(t, "local snapshots of counts on both taskmanagers", func() bool {
		return scanLocalState(c.tms["tm-a"].tm.cfg.StateDir).maxSnapshots > 0 && scanLocalState(c.tms["tm-b"].tm.cfg.StateDir).maxSnapshots > 0
	})

	other := stream.NewBuilder("occupy").Parallelism(1)
	other.Source("events", "datagen", map[string]any{"ratePerSecond": 10, "fields": []map[string]any{{"name": "key", "kind": "key", "cardinality": 10}}}).
		Then("out", "discard", nil)
	og, err := other.Build()
	if err != nil {
		t.Fatal(err)
	}
	occupy := c.submit(t, og)
	waitFor(t, "the second job to run on tm-a", func() bool {
		_, w, ok := c.deployment(t, occupy)
		return ok && slices.Contains(slices.Collect(maps.Values(w)), "tm-a")
	})

	c.sw.arm(d)
	d, where = c.runDeployment(t, job, d+1, func() {})
	if counts(where, 0) != "tm-b" || counts(where, 1) != "tm-a" {
		t.Fatalf("deployment %d placed the tasks %v; want counts subtask 0 on tm-b and 1 on tm-a", d, where)
	}
	// Checkpoints of deployment 2 completed: the moved subtasks' local
	// state is of no more use where they left.
	waitFor(t, "the local state of the moved subtasks to go", func() bool {
		return len(subtaskDirs("tm-a", 0)) == 0 && len(subtaskDirs("tm-b", 1)) == 0
	})
	// The subtasks running now keep theirs.
	if len(subtaskDirs("tm-b", 0)) == 0 || len(subtaskDirs("tm-a", 1)) == 0 {
		t.Errorf("local state of running subtasks missing: tm-b s0 %v, tm-a s1 %v", subtaskDirs("tm-b", 0), subtaskDirs("tm-a", 1))
	}

	c.cancelJob(t, job)
	c.cancelJob(t, occupy)
	waitFor(t, "no local state left on either taskmanager", func() bool {
		for _, h := range c.tms {
			if entries, _ := os.ReadDir(h.tm.cfg.StateDir); len(entries) != 0 {
				return false
			}
		}
		return true
	})
}

// TestAdoptLocalStateOfEarlierProcess: a taskmanager restarted with the
// same id and state directory removes the job directories the process
// before it made, once their jobs are not active, even though it ran no
// task of them; directories of other taskmanagers, and unmarked ones, stay.
func TestAdoptLocalStateOfEarlierProcess(t *testing.T) {
	dir := t.TempDir()
	mkJob := func(job, owner string) {
		t.Helper()
		p := filepath.Join(dir, job, "v1-s0", "snapshots", "counts", "chk-3")
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(dir, job, ownerFile), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mkJob("ended-mine", testTaskManagerID)
	mkJob("running-mine", testTaskManagerID)
	mkJob("ended-other", "tm-other")
	mkJob("ended-unmarked", "")
	cfg := DefaultConfig()
	cfg.ID, cfg.StateDir = testTaskManagerID, dir
	tm, err := New(cfg, newTestRegistry(newTestState()))
	if err != nil {
		t.Fatal(err)
	}
	tm.adoptLocalState()
	tm.sweepLocalState([]string{"running-mine"})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"ended-other", "ended-unmarked", "running-mine"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}

	// A job whose first task deploys here gets the mark.
	tm.markJobDir("new-job")
	if owner, err := os.ReadFile(filepath.Join(dir, "new-job", ownerFile)); err != nil || string(owner) != testTaskManagerID {
		t.Fatalf("mark: %q %v", owner, err)
	}
}
