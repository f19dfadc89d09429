package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"

	"github.com/weirstream/weir/test/polltest"
)

// TestNetworkPartitions breaks the network paths of running taskmanagers
// through the harness's fault proxies — reset and silent partitions
// between the jobmanager and a taskmanager, and between taskmanagers in
// the middle of the data exchange — heals them, and checks that every key's
// sequence is committed exactly once. WEIR_PARTITION_ROUNDS repeats the
// four faults (default once).
func TestNetworkPartitions(t *testing.T) {
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("WEIR_PARTITION_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	const hbTimeout = 3 * time.Second
	c := clustertest.Start(t, clustertest.Options{TLS: true, TaskManagers: 3, Slots: 2, HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout: hbTimeout, SlotWaitTimeout: 2 * time.Minute, LogLevel: "info", FaultProxies: true})

	type fault struct {
		name    string
		hold    time.Duration
		inject  func(px *clustertest.TMProxies)
		healAll func(px *clustertest.TMProxies)
	}
	heal := func(px *clustertest.TMProxies) { px.Control.Heal(); px.JobManager.Heal(); px.Data.Heal() }
	faults := []fault{
		// The jobmanager and a taskmanager lose each other, with resets,
		// past the heartbeat timeout: the jobmanager declares it lost at
		// once (its connection broke, the probe fails), the taskmanager
		// cancels its tasks when its heartbeats have failed for the
		// timeout, and registers again once healed.
		{"control-cut", hbTimeout + time.Second, func(px *clustertest.TMProxies) { px.Control.Cut(); px.JobManager.Cut() }, heal},
		// The same, silently: calls hang; only the heartbeat timeout tells.
		{"control-drop", hbTimeout + time.Second, func(px *clustertest.TMProxies) { px.Control.Drop(); px.JobManager.Drop() }, heal},
		// Data streams into a taskmanager reset mid-exchange: the tasks at
		// both ends fail, and the jobmanager probes the taskmanager they
		// name (it answers: only the data path broke).
		{"data-cut", time.Second, func(px *clustertest.TMProxies) { px.Data.Cut() }, heal},
		// Data into a taskmanager stalls: backpressure until the heal
		// resets the streams.
		{"data-drop", 2 * time.Second, func(px *clustertest.TMProxies) { px.Data.Drop() }, heal},
	}
	n := rounds * len(faults)
	job := clustertest.NewSequenceJob(t, "partitions", float64(n*8+10), 4000, 64)
	jobID := job.Submit(t, c)

	var recoveries clustertest.RecoveryTimes
	last := time.Now()
	for i := range n {
		f := faults[i%len(faults)]
		if !clustertest.WaitProgress(t, c, jobID, last) {
			t.Fatalf("the job ended after %d of %d partitions: its input is too small for this machine's pace", i, n)
		}
		victim := busyTaskManager(t, c, jobID, i)
		px := c.Proxies(victim)
		at := time.Now()
		f.inject(px)
		time.Sleep(f.hold) // the partition itself
		f.healAll(px)
		t.Logf("%s of tm-%d for %v, healed", f.name, victim, f.hold)
		recoveries.Wait(t, c, jobID, at)
		// Every taskmanager takes part again before the next fault.
		c.WaitLiveTaskManagers(len(c.TMs))
		last = time.Now()
	}
	final := c.WaitJob(jobID, 10*time.Minute)
	if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", final.GetJob().GetState(), final.GetJob().GetError())
	}
	lost, duplicated := job.Verify(t)
	fmt.Printf("partitions=%d lost=%d duplicated=%d partition_recovery_p50=%.2f partition_recovery_max=%.2f\n",
		n, lost, duplicated, recoveries.Quantile(0.5), recoveries.Quantile(1))
	if lost != 0 || duplicated != 0 {
		t.Fatalf("not exactly-once across partitions: lost=%d duplicated=%d", lost, duplicated)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Client.ListTaskManagers(ctx, &weirpb.ListTaskManagersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range resp.GetTaskmanagers() {
		if !tm.GetLive() {
			t.Errorf("taskmanager %s not live after every partition healed", tm.GetTaskmanagerId())
		}
	}
}

// busyTaskManager returns the index of a taskmanager that runs a task of
// the job receiving data over the network (its keyed "continuity" tasks),
// the k-th such in id order (wrapping around), so that a fault hits the
// job.
func busyTaskManager(t *testing.T, c *clustertest.Cluster, jobID string, k int) int {
	t.Helper()
	var busy []int
	polltest.Eventually(t, time.Minute, "the job's tasks to run", func() bool {
		resp, err := c.Job(jobID)
		if err != nil {
			return false
		}
		seen := make(map[int]bool)
		busy = busy[:0]
		for _, task := range resp.GetTasks() {
			if task.GetState() != weirpb.TaskState_TASK_STATE_RUNNING || !strings.HasPrefix(task.GetName(), "continuity") {
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(task.GetTaskmanagerId(), "tm-"))
			if err == nil && !seen[i] {
				seen[i] = true
				busy = append(busy, i)
			}
		}
		return len(busy) > 0
	})
	slices.Sort(busy)
	return busy[k%len(busy)]
}
