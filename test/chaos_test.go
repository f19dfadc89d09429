package test

import (
	"fmt"
	"math"
	"math/rand/v2"
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

// recoveryTimes collects how long each fault took to recover from.
type recoveryTimes []time.Duration

// wait waits until a checkpoint triggered after the fault at `at`
// completes (the job runs again end to end) and records how long after
// the fault it completed.
func (r *recoveryTimes) wait(t *testing.T, c *clustertest.Cluster, jobID string, at time.Time) {
	t.Helper()
	var done time.Time
	polltest.Eventually(t, 3*time.Minute, "a checkpoint triggered after the fault at "+at.Format(time.TimeOnly), func() bool {
		var n int
		n, done = completedSince(c, jobID, at)
		return n > 0 || jobEnded(c, jobID)
	})
	if done.IsZero() {
		t.Fatalf("the job ended before it recovered from the fault at %s: its input is too small", at.Format(time.TimeOnly))
	}
	took := done.Sub(at)
	*r = append(*r, took)
	if took > 15*time.Second {
		// Rare and worth understanding: keep the jobmanager's view.
		t.Logf("slow recovery (%v) after the fault at %s; jobmanager log tail:\n%s", took, at.Format(time.TimeOnly), tailLines(c.JM.Log(), 60))
	}
}

// quantile returns the q-quantile (nearest rank) in seconds.
func (r recoveryTimes) quantile(q float64) float64 {
	if len(r) == 0 {
		return 0
	}
	s := slices.Clone(r)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)].Seconds()
}

// waitProgress waits until a checkpoint completes that was triggered after
// since, or the job ends; it reports whether the job still runs.
func waitProgress(t *testing.T, c *clustertest.Cluster, jobID string, since time.Time) bool {
	t.Helper()
	polltest.Eventually(t, 3*time.Minute, "checkpoints to progress", func() bool {
		n, _ := completedSince(c, jobID, since)
		return n > 0 || jobEnded(c, jobID)
	})
	return !jobEnded(c, jobID)
}

func TestChaosKillAndPauseTaskManagers(t *testing.T) {
	cc := chaosFromEnv()
	const hbTimeout = 3 * time.Second
	c := clustertest.Start(t, clustertest.Options{TLS: true, TaskManagers: 3, Slots: 2, HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout: hbTimeout, SlotWaitTimeout: 2 * time.Minute, LogLevel: "info"})
	faults := cc.kills + cc.pauses
	job := newSequenceJob(t, "chaos", float64(faults*jobSecondsPerFault+10), cc.rate, cc.keys)
	jobID := job.submit(t, c)

	rnd := rand.New(rand.NewPCG(1, 2)) // which fault, which taskmanager, pacing: deterministic
	var recoveries recoveryTimes
	kills, pauses, samePort := 0, 0, 0
	last := time.Now()
	for i := 0; i < faults; i++ {
		if !waitProgress(t, c, jobID, last) {
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
		recoveries.wait(t, c, jobID, at)
		last = time.Now()
	}
	final := c.WaitJob(jobID, 10*time.Minute)
	if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", final.GetJob().GetState(), final.GetJob().GetError())
	}
	checkpoints := checkpointProgress(c, jobID).completed

	// Every key must show exactly 1..perKey.
	lost, duplicated := job.verify(t)
	fmt.Printf("kills=%d pauses=%d checkpoints=%d lost=%d duplicated=%d recovery_p50=%.2f recovery_p99=%.2f recovery_max=%.2f\n",
		kills, pauses, checkpoints, lost, duplicated, recoveries.quantile(0.5), recoveries.quantile(0.99), recoveries.quantile(1))
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
	job := newSequenceJob(t, "same-port", float64(restarts*3+10), 4000, 32)
	jobID := job.submit(t, c)

	var recoveries recoveryTimes
	last := time.Now()
	for i := range restarts {
		if !waitProgress(t, c, jobID, last) {
			t.Fatalf("the job ended after %d of %d restarts: its input is too small for this machine's pace", i, restarts)
		}
		victim := i % len(c.TMs)
		before, oldInstance := c.TaskManagerAddr(victim)
		at := time.Now()
		c.RestartTaskManagerSamePort(victim)
		if addr, instance := c.TaskManagerAddr(victim); addr != before || instance == oldInstance {
			t.Fatalf("restart %d: taskmanager %d at %s (instance %s), want %s and a new instance", i, victim, addr, instance, before)
		}
		recoveries.wait(t, c, jobID, at)
		last = time.Now()
	}
	final := c.WaitJob(jobID, 5*time.Minute)
	if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", final.GetJob().GetState(), final.GetJob().GetError())
	}
	lost, duplicated := job.verify(t)
	fmt.Printf("same_port_restarts=%d lost=%d duplicated=%d same_port_restart_recovery_seconds_p50=%.2f same_port_restart_recovery_seconds_max=%.2f same_port_failed_deployments=%d\n",
		restarts, lost, duplicated, recoveries.quantile(0.5), recoveries.quantile(1), c.CountLogLines("deploying task failed"))
	if lost != 0 || duplicated != 0 {
		t.Fatalf("not exactly-once across same-port restarts: lost=%d duplicated=%d", lost, duplicated)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
