package jobmanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/jobmanager/scheduler/schedulertest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// BenchmarkCoordinatorCheckpointCPU measures what one checkpoint costs
// the jobmanager's core at 1,000 and 10,000 subtasks, without processes or
// network: the scheduler and its coordinator trigger it, the triggers and
// notifications are grouped into per-taskmanager calls as dispatch does,
// every subtask's acknowledgement (a state handle of three files, as an
// incremental snapshot of its stateful operator has) is applied in
// per-taskmanager batches as ReportCheckpoints applies them, and the
// manifest is built and written, with the pointer, to an in-memory blob
// store. It prints the process CPU time per checkpoint (getrusage, over
// many checkpoints; garbage collection included) and the wall time. Each
// checkpoint must complete with every subtask's handles in its manifest.
//
//	go test -run '^$' -bench CoordinatorCheckpointCPU -benchtime 1x ./jobmanager/
func BenchmarkCoordinatorCheckpointCPU(b *testing.B) {
	for _, c := range []struct {
		name        string
		subtasks    int
		checkpoints int
	}{
		{"1k", 1_000, 200},
		{"10k", 10_000, 30},
	} {
		b.Run(c.name, func(b *testing.B) {
			var cpu, wall time.Duration
			for range b.N {
				cpu, wall = checkpointCost(b, c.subtasks, c.checkpoints)
			}
			fmt.Printf("coordinator_checkpoint_cpu_ms_%s_subtasks=%.2f\n", c.name, ms(cpu))
			fmt.Printf("coordinator_checkpoint_wall_ms_%s_subtasks=%.2f\n", c.name, ms(wall))
			b.ReportMetric(ms(cpu), "cpu-ms/checkpoint")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// processCPU is the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchExec is one running execution of the benchmark's job.
type benchExec struct {
	tm              string
	vertex, subtask int
	attempt         int64
	handles         []*weirpb.StateHandle
	parallelism     int32
	keyGroups       stream.KeyGroupRange
}

// checkpointCost runs a job of subtasks subtasks (src -> map, keyBy,
// window -> sink, each at parallelism subtasks/2) on taskmanagers of 400
// slots each, takes n checkpoints after two for warming up, and returns the
// CPU and wall time per checkpoint.
func checkpointCost(b *testing.B, subtasks, n int) (cpu, wall time.Duration) {
	b.Helper()
	ctx := context.Background()
	const jobID = "bench"
	p := subtasks / 2
	maxPar := 128
	for maxPar < p {
		maxPar *= 2
	}
	reg := schedulertest.Registry(b)
	bld := stream.NewBuilder("checkpoint-cost").MaxParallelism(maxPar)
	bld.Source("src", "gen", nil).SetParallelism(p).
		Then("map", "pass", nil).SetParallelism(p).
		KeyBy("k").
		Then("window", "count", nil).SetParallelism(p).
		Then("sink", "discard", nil).SetParallelism(p)
	g, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	g = schedulertest.Planned(b, g, reg)

	sched := scheduler.New(scheduler.Config{HeartbeatTimeout: time.Hour, CancelTimeout: time.Hour})
	now := time.Unix(1_700_000_000, 0)
	const slotsPerTM = 400
	tms := (p + slotsPerTM - 1) / slotsPerTM
	for i := range tms {
		id := fmt.Sprintf("tm-%d", i)
		if _, err := sched.Register(scheduler.Registration{ID: id, Instance: id + "-1", Addr: id + ":1", Slots: slotsPerTM}, now); err != nil {
			b.Fatal(err)
		}
	}
	const interval = time.Second
	acts, err := sched.Submit(jobID, g, scheduler.JobOptions{SlotWait: time.Minute,
		Checkpoint: stream.CheckpointConfig{Interval: interval, Storage: "mem://"}.WithDefaults(), Storage: "mem://"}, now)
	if err != nil {
		b.Fatal(err)
	}
	var execs []*benchExec
	for _, a := range acts {
		d, ok := a.(scheduler.DeployAction)
		if !ok {
			continue
		}
		sched.DeployDone(d, nil, now)
		ex := &benchExec{tm: d.TaskManager, vertex: d.Task.Head, subtask: d.Subtask, attempt: d.Attempt,
			parallelism: int32(d.Task.Parallelism), keyGroups: stream.KeyGroupRangeFor(maxPar, d.Task.Parallelism, d.Subtask)}
		ex.handles = benchHandles(jobID, g, d.Task, ex)
		execs = append(execs, ex)
	}
	for _, ex := range execs {
		sched.Report(ex.tm, scheduler.TaskReport{JobID: jobID, Vertex: ex.vertex, Subtask: ex.subtask, Attempt: ex.attempt,
			State: scheduler.TaskRunning}, now)
	}
	sched.Logs()
	if len(execs) != subtasks {
		b.Fatalf("%d executions deployed, want %d", len(execs), subtasks)
	}
	byTM := make(map[string][]*benchExec)
	for _, ex := range execs {
		byTM[ex.tm] = append(byTM[ex.tm], ex)
	}

	st := checkpoint.NewStorage(blobstore.NewMem())
	stats := scheduler.AckStats{SyncDuration: time.Millisecond, AsyncDuration: 20 * time.Millisecond, Bytes: 3 << 20}
	var last *weirpb.Manifest
	one := func() {
		now = now.Add(interval)
		acts := sched.Tick(now)
		sched.Logs()
		var triggers []scheduler.Action
		for _, a := range acts {
			if _, ok := a.(scheduler.TriggerAction); ok {
				triggers = append(triggers, a)
			}
		}
		if len(triggers) != p {
			b.Fatalf("%d triggers, want one per source subtask (%d)", len(triggers), p)
		}
		if calls := groupCalls(triggers); calls != tms {
			b.Fatalf("%d trigger calls, want one per taskmanager (%d)", calls, tms)
		}
		id := triggers[0].(scheduler.TriggerAction).CheckpointID
		// One ReportCheckpoints step per taskmanager.
		var write *scheduler.WriteManifestAction
		for _, tm := range sortedKeys(byTM) {
			var out []scheduler.Action
			for _, ex := range byTM[tm] {
				out = append(out, sched.Ack(tm, jobID, ex.vertex, ex.subtask, ex.attempt, id, ex.handles, stats, now)...)
			}
			sched.Logs()
			for _, a := range out {
				if w, ok := a.(scheduler.WriteManifestAction); ok {
					write = &w
				}
			}
		}
		if write == nil || write.ID != id {
			b.Fatalf("checkpoint %d: no manifest to write after every acknowledgement", id)
		}
		m := buildManifest(*write)
		key, sum, err := st.WriteManifest(ctx, m)
		if err == nil {
			err = st.WritePointer(ctx, jobID, &weirpb.CompletedPointer{Version: 1, CheckpointId: id, ManifestKey: key, ManifestSha256: sum})
		}
		if err != nil {
			b.Fatal(err)
		}
		done := sched.ManifestWritten(jobID, completed{m: m}, err, now)
		sched.Logs()
		var notifies []scheduler.Action
		for _, a := range done {
			switch a := a.(type) {
			case scheduler.NotifyAction:
				notifies = append(notifies, a)
			case scheduler.DeleteCheckpointsAction:
				for _, old := range a.IDs {
					if err := st.DeleteCheckpoint(ctx, jobID, old); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		if len(notifies) != subtasks || groupCalls(notifies) != tms {
			b.Fatalf("checkpoint %d: %d notifications in %d calls, want %d in %d", id, len(notifies), groupCalls(notifies), subtasks, tms)
		}
		if got := manifestHandles(m); got != subtasks {
			b.Fatalf("checkpoint %d: the manifest has %d handles, want %d (one per subtask)", id, got, subtasks)
		}
		last = m
	}
	one()
	one()
	cpu0, wall0 := processCPU(b), time.Now()
	for range n {
		one()
	}
	cpu, wall = (processCPU(b)-cpu0)/time.Duration(n), time.Since(wall0)/time.Duration(n)

	// The stored manifest lists every subtask's state, files included.
	back, err := st.ReadLatestManifest(ctx, jobID)
	if err != nil {
		b.Fatal(err)
	}
	if back.GetCheckpointId() != last.GetCheckpointId() || manifestHandles(back) != subtasks {
		b.Fatalf("stored manifest of checkpoint %d has %d handles; want checkpoint %d with %d", back.GetCheckpointId(),
			manifestHandles(back), last.GetCheckpointId(), subtasks)
	}
	for _, op := range back.GetOperators() {
		if op.GetOperatorUid() != "src" && op.GetOperatorUid() != "window" {
			if len(op.GetHandles()) != 0 {
				b.Fatalf("stateless operator %s has %d handles", op.GetOperatorUid(), len(op.GetHandles()))
			}
			continue
		}
		seen := make(map[int32]bool)
		for _, h := range op.GetHandles() {
			if len(h.GetFiles()) != 3 {
				b.Fatalf("operator %s subtask %d: %d files, want 3", op.GetOperatorUid(), h.GetSubtask(), len(h.GetFiles()))
			}
			seen[h.GetSubtask()] = true
		}
		if len(seen) != p {
			b.Fatalf("operator %s: state of %d subtasks, want %d", op.GetOperatorUid(), len(seen), p)
		}
	}
	return cpu, wall
}

// groupCalls counts the calls dispatch makes of trigger or notify actions
// issued together.
func groupCalls(acts []scheduler.Action) int {
	lanes := make(map[laneKey]*checkpointCall)
	calls := 0
	for _, a := range acts {
		k, _ := laneOf(a)
		if c := lanes[k]; c == nil || !c.merge(a) {
			lanes[k] = newCheckpointCall(a)
			calls++
		}
	}
	return calls
}

func sortedKeys(m map[string][]*benchExec) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	// Deterministic order; any would do.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func manifestHandles(m *weirpb.Manifest) int {
	n := 0
	for _, op := range m.GetOperators() {
		n += len(op.GetHandles())
	}
	return n
}

// benchHandles are the state handles execution ex acknowledges: one, of
// the stateful operator heading its chain (src keeps its splits, window
// its keyed state; map and sink keep none), an incremental snapshot of
// three files (two shared, one of the checkpoint).
func benchHandles(jobID string, g *stream.JobGraph, t *scheduler.Task, ex *benchExec) []*weirpb.StateHandle {
	uid := g.Vertices[t.Head].UID
	key := checkpoint.SnapshotKey(jobID, 1, uid, ex.subtask, ex.attempt)
	h := &weirpb.StateHandle{OperatorUid: uid, Subtask: int32(ex.subtask), Parallelism: ex.parallelism, Key: key,
		Size: 4096, Sha256: fakeSum(key), KeyGroupStart: int32(ex.keyGroups.Start), KeyGroupEnd: int32(ex.keyGroups.End)}
	for i := range 3 {
		name := fmt.Sprintf("%06d.sst", i+1)
		f := &weirpb.StateFile{Name: name, Size: 1 << 20, Sha256: fakeSum(key + name), Shared: i < 2}
		if f.Shared {
			f.Key = checkpoint.SharedPrefix(jobID) + f.Sha256
		} else {
			f.Key = key + "-" + name
		}
		h.Files = append(h.Files, f)
	}
	return []*weirpb.StateHandle{h}
}

func fakeSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
