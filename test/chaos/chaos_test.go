package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// The fault tests are sized by work, not by time: the job's input is a
// fixed number of rows at a fixed rate, enough for every planned fault plus
// a tail, and faults are paced by the job's progress (completed
// checkpoints). A rate-limited source makes no progress while the job is
// down and starts its rate anew after a restore, so however long an outage
// lasts, each fault cycle uses about the same share of the input: the job
// ends after the last fault, and soon after it.

type chaosConfig struct {
	kills  int // SIGKILLs of a taskmanager, each restarted at once
	pauses int // SIGSTOPs past the heartbeat timeout, then SIGCONT
	rate   int // rows per second
	keys   int
}

// chaosFromEnv: `make test` runs the short version; `make chaos` sets
// WEIR_CHAOS_KILLS for the long one (one pause per ten kills).
func chaosFromEnv() chaosConfig {
	c := chaosConfig{kills: 5, pauses: 1, rate: 4000, keys: 64}
	if k, err := strconv.Atoi(os.Getenv("WEIR_CHAOS_KILLS")); err == nil && k > 0 {
		c.kills = k
		c.pauses = max(1, k/10)
	}
	return c
}

// jobSecondsPerFault is the input, in seconds at the job's rate, planned
// for each fault cycle: the job runs about 2-3 s between two faults (the
// first checkpoint after the recovery, one more, and the pacing), and
// nothing while it is down.
const jobSecondsPerFault = 5

func TestChaosKillAndPauseTaskManagers(t *testing.T) {
	cc := chaosFromEnv()
	const hbTimeout = 3 * time.Second
	c := clustertest.Start(t, clustertest.Options{TLS: true, TaskManagers: 3, Slots: 2, HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout: hbTimeout, SlotWaitTimeout: 2 * time.Minute, LogLevel: "info"})
	faults := cc.kills + cc.pauses
	job := clustertest.NewSequenceJob(t, "chaos", float64(faults*jobSecondsPerFault+10), cc.rate, cc.keys)
	jobID := job.Submit(t, c)

	rnd := rand.New(rand.NewPCG(1, 2)) // which fault, which taskmanager, pacing: deterministic
	var recoveries clustertest.RecoveryTimes
	kills, pauses, samePort := 0, 0, 0
	last := time.Now()
	for i := 0; i < faults; i++ {
		if !clustertest.WaitProgress(t, c, jobID, last) {
			t.Fatalf("the job ended after %d of %d faults: its input is too small for this machine's pace", i, faults)
		}
		time.Sleep(time.Duration(300+rnd.IntN(1200)) * time.Millisecond) // chaos pacing, not synchronisation
		victim := rnd.IntN(len(c.TMs))
		at := time.Now()
		if pauses < cc.pauses && i%10 == 2 {
			// SIGSTOP past the heartbeat timeout, then SIGCONT: the paused
			// taskmanager's tasks are failed over, and when it wakes its
			// stale tasks are cancelled and their messages rejected.
			c.PauseTaskManager(victim)
			time.Sleep(hbTimeout + time.Second) // the pause itself
			c.ResumeTaskManager(victim)
			pauses++
		} else {
			// Half the restarts reuse the port, as a service manager
			// restarting a taskmanager with a fixed port does.
			if rnd.IntN(2) == 0 {
				c.RestartTaskManagerSamePort(victim)
				samePort++
			} else {
				c.KillTaskManager(victim)
				c.RestartTaskManager(victim)
			}
			kills++
		}
		recoveries.Wait(t, c, jobID, at)
		last = time.Now()
	}
	final := c.WaitJob(jobID, 10*time.Minute)
	if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", final.GetJob().GetState(), final.GetJob().GetError())
	}
	checkpoints := checkpointProgress(c, jobID).completed

	// Every key must show exactly 1..perKey.
	lost, duplicated := job.Verify(t)
	fmt.Printf("kills=%d pauses=%d checkpoints=%d lost=%d duplicated=%d recovery_p50=%.2f recovery_p99=%.2f recovery_max=%.2f\n",
		kills, pauses, checkpoints, lost, duplicated, recoveries.Quantile(0.5), recoveries.Quantile(0.99), recoveries.Quantile(1))
	t.Logf("%d of the %d kills restarted the taskmanager on the same port; %d failed deployments; job restarts %d",
		samePort, kills, c.CountLogLines("deploying task failed"), c.JobRestarts(jobID))
	if lost != 0 || duplicated != 0 {
		t.Fatalf("not exactly-once under chaos: lost=%d duplicated=%d", lost, duplicated)
	}
}

// TestSamePortRestartRecovery SIGKILLs a taskmanager and restarts it at
// once on the same port, ten times (WEIR_SAME_PORT_RESTARTS). Every slot is
// in use, so the job can only run again on the restarted process: at the
// address of the one just killed, whose connections the jobmanager must not
// reuse.
func TestSamePortRestartRecovery(t *testing.T) {
	restarts := 10
	if n, err := strconv.Atoi(os.Getenv("WEIR_SAME_PORT_RESTARTS")); err == nil && n > 0 {
		restarts = n
	}
	c := clustertest.Start(t, clustertest.Options{TLS: true, TaskManagers: 2, Slots: 2, HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout: 3 * time.Second, SlotWaitTimeout: 2 * time.Minute, LogLevel: "info"})
	job := clustertest.NewSequenceJob(t, "same-port", float64(restarts*3+10), 4000, 32)
	jobID := job.Submit(t, c)

	var recoveries clustertest.RecoveryTimes
	last := time.Now()
	for i := range restarts {
		if !clustertest.WaitProgress(t, c, jobID, last) {
			t.Fatalf("the job ended after %d of %d restarts: its input is too small for this machine's pace", i, restarts)
		}
		victim := i % len(c.TMs)
		before, oldInstance := c.TaskManagerAddr(victim)
		at := time.Now()
		c.RestartTaskManagerSamePort(victim)
		if addr, instance := c.TaskManagerAddr(victim); addr != before || instance == oldInstance {
			t.Fatalf("restart %d: taskmanager %d at %s (instance %s), want %s and a new instance", i, victim, addr, instance, before)
		}
		recoveries.Wait(t, c, jobID, at)
		last = time.Now()
	}
	final := c.WaitJob(jobID, 5*time.Minute)
	if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", final.GetJob().GetState(), final.GetJob().GetError())
	}
	lost, duplicated := job.Verify(t)
	fmt.Printf("same_port_restarts=%d lost=%d duplicated=%d same_port_restart_recovery_seconds_p50=%.2f same_port_restart_recovery_seconds_max=%.2f same_port_failed_deployments=%d\n",
		restarts, lost, duplicated, recoveries.Quantile(0.5), recoveries.Quantile(1), c.CountLogLines("deploying task failed"))
	if lost != 0 || duplicated != 0 {
		t.Fatalf("not exactly-once across same-port restarts: lost=%d duplicated=%d", lost, duplicated)
	}
}

// checkpointsOf summarises a job's checkpoint list as its jobmanager
// reports it.
type checkpointsOf struct {
	completed   int64 // the jobmanager's count of completed checkpoints
	lastTrigger int64 // trigger time (unix ms) of the latest completed one
}

func checkpointProgress(c *clustertest.Cluster, jobID string) checkpointsOf {
	resp, err := c.Checkpoints(jobID)
	if err != nil {
		return checkpointsOf{}
	}
	p := checkpointsOf{completed: resp.GetCompleted()}
	for _, ck := range resp.GetCheckpoints() {
		if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			p.lastTrigger = max(p.lastTrigger, ck.GetTriggerTimeMs())
		}
	}
	return p
}
