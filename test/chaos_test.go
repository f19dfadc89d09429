package test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

type chaosConfig struct {
	duration time.Duration // how long kills go on, at least
	kills    int           // at least this many SIGKILLs
	rate     int           // rows per second
	keys     int
}

// chaosFromEnv: `make test` runs the short version; `make chaos` sets
// WEIR_CHAOS_DURATION and WEIR_CHAOS_KILLS for the long one.
func chaosFromEnv() chaosConfig {
	c := chaosConfig{duration: 20 * time.Second, kills: 5, rate: 4000, keys: 64}
	if d, err := time.ParseDuration(os.Getenv("WEIR_CHAOS_DURATION")); err == nil && d > 0 {
		c.duration = d
	}
	if k, err := strconv.Atoi(os.Getenv("WEIR_CHAOS_KILLS")); err == nil && k > 0 {
		c.kills = k
	}
	return c
}

func TestChaosKillAndPauseTaskManagers(t *testing.T) {
	cc := chaosFromEnv()
	const hbTimeout = 3 * time.Second
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 3, Slots: 2, HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout: hbTimeout, SlotWaitTimeout: 2 * time.Minute, LogLevel: "info"})
	// Enough rows to outlast the kills: twice the chaos duration at the
	// rate, rounded to whole sequences per key.
	job := newSequenceJob(t, "chaos", 2*cc.duration.Seconds(), cc.rate, cc.keys)
	jobID := job.submit(t, c)

	rnd := rand.New(rand.NewPCG(1, 2)) // which taskmanager, and pacing: deterministic
	completed := func() (n int64, lastTrigger int64) {
		p := checkpointProgress(c, jobID)
		return p.completed, p.lastTrigger
	}
	ended := func() bool { return jobEnded(c, jobID) }
	// recovered waits until a checkpoint triggered after `since` completes:
	// the job runs again end to end.
	var recoveries []time.Duration
	recovered := func(since time.Time) {
		clustertest.Eventually(t, 2*time.Minute, "a checkpoint after the failure", func() bool {
			_, last := completed()
			return last > since.UnixMilli() || ended()
		})
		took := time.Since(since)
		recoveries = append(recoveries, took)
		if took > 20*time.Second {
			// Rare and worth understanding: keep the jobmanager's view.
			t.Logf("slow recovery (%v) after the fault at %s; jobmanager log tail:\n%s", took, since.Format(time.TimeOnly), tailLines(c.JM.Log(), 40))
		}
	}

	start := time.Now()
	kills, pauses := 0, 0
	lastCount, _ := completed()
	for (kills < cc.kills || pauses < 1 || time.Since(start) < cc.duration) && !ended() {
		// Fault only after the checkpoint count has moved since the last one.
		clustertest.Eventually(t, 2*time.Minute, "checkpoints to progress", func() bool {
			n, _ := completed()
			return n > lastCount || ended()
		})
		if ended() {
			break
		}
		time.Sleep(time.Duration(500+rnd.IntN(1500)) * time.Millisecond) // chaos pacing, not synchronisation
		victim := rnd.IntN(len(c.TMs))
		at := time.Now()
		if kills >= 2 && pauses == 0 {
			// SIGSTOP past the heartbeat timeout, then SIGCONT: the paused
			// taskmanager's tasks are failed over, and when it wakes its
			// stale tasks are cancelled and their messages rejected.
			c.PauseTaskManager(victim)
			time.Sleep(hbTimeout + time.Second) // the pause itself
			c.ResumeTaskManager(victim)
			pauses++
		} else {
			c.KillTaskManager(victim)
			c.RestartTaskManager(victim)
			kills++
		}
		recovered(at)
		lastCount, _ = completed()
	}
	final := c.WaitJob(jobID, 10*time.Minute)
	if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", final.GetJob().GetState(), final.GetJob().GetError())
	}
	checkpoints, _ := completed()

	// Every key must show exactly 1..perKey.
	lost, duplicated := job.verify(t)
	slices.Sort(recoveries)
	p50, p90, worst := 0.0, 0.0, 0.0
	if n := len(recoveries); n > 0 {
		p50, p90, worst = recoveries[n/2].Seconds(), recoveries[n*9/10].Seconds(), recoveries[n-1].Seconds()
	}
	fmt.Printf("kills=%d pauses=%d checkpoints=%d lost=%d duplicated=%d recovery_p50=%.2f recovery_max=%.2f\n",
		kills, pauses, checkpoints, lost, duplicated, p50, worst)
	t.Logf("recovery_p90=%.2f over %d faults", p90, len(recoveries))
	if kills < cc.kills || pauses < 1 {
		t.Errorf("only %d kills and %d pauses happened before the job ended; want at least %d and 1", kills, pauses, cc.kills)
	}
	if lost != 0 || duplicated != 0 {
		t.Fatalf("not exactly-once under chaos: lost=%d duplicated=%d", lost, duplicated)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
