package ha

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/test/clustertest"

	"github.com/weirstream/weir/test/polltest"
)

// The HA tests run the sequence workload (the chaos job) on two
// jobmanagers in ha: etcd mode against a real etcd embedded in the test
// binary, and hit the jobmanagers — not the taskmanagers, which the chaos
// test covers — with SIGKILL, SIGSTOP and an etcd restart. Each prints
//
//	takeovers=T zombie_writes_rejected=Z lost=0 duplicated=0 ...
//
// where T counts "elected leader" lines beyond the first, Z counts the
// zombie_write_rejected=1 lines of every process (exited ones included),
// and lost/duplicated are counted against the job's known output.

const (
	haRate = 4000 // rows per second
	haKeys = 64
	// zombieLine is what a process logs once per rejected zombie write.
	zombieLine = "zombie_write_rejected=1"
	// electedLine is what a jobmanager logs when it takes over.
	electedLine = `msg="elected leader"`
)

// haKillsFromEnv: `make test` kills the leader 3 times; `make chaos` sets
// WEIR_HA_KILLS for the long run.
func haKillsFromEnv() int {
	if k, err := strconv.Atoi(os.Getenv("WEIR_HA_KILLS")); err == nil && k > 0 {
		return k
	}
	return 3
}

// startHA starts etcd and a cluster of two jobmanagers and two
// taskmanagers (4 slots: the job's parallelism) in ha: etcd mode.
func startHA(t *testing.T) (*etcdtest.Server, *clustertest.Cluster) {
	t.Helper()
	return startHAOpts(t, false)
}

// startHAOpts is startHA, with fault proxies on every network path
// (clustertest.Options.FaultProxies) when proxies is set.
func startHAOpts(t *testing.T, proxies bool) (*etcdtest.Server, *clustertest.Cluster) {
	t.Helper()
	etcd := etcdtest.Start(t)
	return etcd, clustertest.StartHA(t, proxies, clustertest.HA{Endpoints: etcd.Endpoints(), Prefix: "/weir-hatest", LeaseTTL: clustertest.HALeaseTTL})
}

// report prints the test's result line and fails on lost or duplicated
// rows.
func report(t *testing.T, c *clustertest.Cluster, scenario string, lost, duplicated int, extra string) (takeovers, zombies int) {
	t.Helper()
	takeovers = c.CountLogLines(electedLine) - 1
	zombies = c.CountLogLines(zombieLine)
	fmt.Printf("takeovers=%d zombie_writes_rejected=%d lost=%d duplicated=%d%s scenario=%s\n", takeovers, zombies, lost, duplicated, extra, scenario)
	for _, p := range c.Processes() {
		if n := strings.Count(p.Log(), zombieLine); n > 0 {
			t.Logf("%s (pid %d) rejected %d zombie writes", p.Name, p.Pid(), n)
		}
	}
	if lost != 0 || duplicated != 0 {
		t.Fatalf("not exactly-once across jobmanager takeovers: lost=%d duplicated=%d", lost, duplicated)
	}
	return takeovers, zombies
}

// TestHAKillLeader SIGKILLs the leading jobmanager several times while the
// job runs (taskmanagers are left alone). Each time the standby must take
// over and complete two checkpoints before the next kill; the supervisor
// restarts the killed process, which stands by. The takeover time is from
// the kill to the first checkpoint the new leader completes.
func TestHAKillLeader(t *testing.T) {
	kills := haKillsFromEnv()
	_, c := startHA(t)
	// Rows for the progress made between kills plus a tail after the last.
	job := clustertest.NewSequenceJob(t, "ha-kill", float64(10+4*kills), haRate, haKeys)
	submitted := time.Now()
	jobID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, jobID, submitted, 2, "by the first leader")

	var took []time.Duration
	for k := 0; k < kills; k++ {
		leader, epoch := c.WaitLeader(0)
		at := time.Now()
		c.KillJobManager(leader)
		dead := time.Now() // checkpoints triggered from here on are the new leader's
		next, nextEpoch := c.WaitLeader(epoch)
		first := clustertest.WaitCheckpointsSince(t, c, jobID, dead, 2, fmt.Sprintf("by the new leader (jobmanager-%d, epoch %d) after kill %d", next, nextEpoch, k+1))
		took = append(took, first.Sub(at))
		t.Logf("kill %d: jobmanager-%d (epoch %d) killed; jobmanager-%d took over (epoch %d); first checkpoint %.2fs after the kill",
			k+1, leader, epoch, next, nextEpoch, first.Sub(at).Seconds())
	}
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	slices.Sort(took)
	p50, worst := took[len(took)/2].Seconds(), took[len(took)-1].Seconds()
	takeovers, _ := report(t, c, "kill-leader", lost, duplicated,
		fmt.Sprintf(" takeover_seconds_p50=%.2f takeover_seconds_max=%.2f", p50, worst))
	if takeovers < kills {
		t.Errorf("%d takeovers logged (%q lines beyond the first), want at least %d: one per kill", takeovers, electedLine, kills)
	}
	if r := c.JobManagerRestarts(); r < kills {
		t.Errorf("the supervisor restarted jobmanagers %d times, want at least %d", r, kills)
	}
}

// TestHAPausedLeaderIsFenced SIGSTOPs the leader for longer than its lease
// TTL: the standby takes over and completes checkpoints. Then SIGCONT: the
// old leader wakes believing it leads; whatever it attempts is rejected
// (etcd writes fenced at the jobmanager, stale-epoch calls at the
// taskmanagers, each logging zombie_write_rejected=1), it exits, the
// supervisor restarts it as a standby, and the new leader keeps leading.
func TestHAPausedLeaderIsFenced(t *testing.T) {
	_, c := startHA(t)
	job := clustertest.NewSequenceJob(t, "ha-pause", 25, haRate, haKeys)
	submitted := time.Now()
	jobID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, jobID, submitted, 2, "by the first leader")

	leader, epoch := c.WaitLeader(0)
	old := c.PauseJobManager(leader)
	paused := time.Now()
	// The standby can only lead once the paused leader's lease expired:
	// the pause outlasts the TTL. The lease runs from the last keep-alive
	// etcd acknowledged, not from the pause: the etcd client sends one a
	// third of the TTL after the last answer, on a 500 ms tick, so the
	// last one may be up to TTL/3 + 500 ms older than the pause.
	next, nextEpoch := c.WaitLeader(epoch)
	clustertest.WaitCheckpointsSince(t, c, jobID, paused, 2, "by the new leader while the old one is paused")
	earliest := clustertest.HALeaseTTL - clustertest.HALeaseTTL/3 - 500*time.Millisecond
	if d := time.Since(paused); d < earliest {
		t.Fatalf("a standby led %v after the leader was paused, before the %v lease could expire (%v at the earliest)", d, clustertest.HALeaseTTL, earliest)
	}
	resumed := time.Now()
	c.ResumeJobManager(leader)
	polltest.Eventually(t, time.Minute, "the woken old leader to exit", old.Exited)
	if !strings.Contains(old.Log(), "leadership lost") {
		t.Errorf("the old leader exited without logging that it lost its leadership; log tail:\n%s", clustertest.TailLines(old.Log(), 20))
	}
	clustertest.WaitCheckpointsSince(t, c, jobID, resumed, 2, "by the new leader after the old one woke")
	if i, e, err := c.Leader(); err != nil || i != next || e != nextEpoch {
		t.Errorf("after the old leader woke, etcd names jobmanager-%d epoch %d (err %v); want jobmanager-%d epoch %d still leading", i, e, err, next, nextEpoch)
	}
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	takeovers, zombies := report(t, c, "pause-leader", lost, duplicated, "")
	t.Logf("jobmanager-%d paused at epoch %d, jobmanager-%d took over at epoch %d; %d takeovers, %d zombie writes rejected", leader, epoch, next, nextEpoch, takeovers, zombies)
	if takeovers < 1 {
		t.Errorf("no takeover logged")
	}
}

// TestHAEtcdRestart stops etcd for longer than the lease TTL while the job
// runs: the leader steps down and exits, and the job stops rather than
// diverges. When etcd is back the jobmanagers campaign again, one leads,
// recovers the job from its latest checkpoint and completes more.
func TestHAEtcdRestart(t *testing.T) {
	etcd, c := startHA(t)
	job := clustertest.NewSequenceJob(t, "ha-etcd", 25, haRate, haKeys)
	submitted := time.Now()
	jobID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, jobID, submitted, 2, "before etcd stops")

	leader, epoch := c.WaitLeader(0)
	old := c.JobManager(leader)
	etcd.Stop()
	stopped := time.Now()
	polltest.Eventually(t, time.Minute, "the leader to step down and exit without etcd", old.Exited)
	if rest := clustertest.HALeaseTTL + time.Second - time.Since(stopped); rest > 0 {
		time.Sleep(rest) // keep etcd away past the lease TTL: the fault itself, not synchronisation
	}
	etcd.Restart()
	back := time.Now()
	next, nextEpoch := c.WaitLeader(epoch)
	first := clustertest.WaitCheckpointsSince(t, c, jobID, back, 2, fmt.Sprintf("by jobmanager-%d (epoch %d) after etcd came back", next, nextEpoch))
	t.Logf("etcd down %.2fs; jobmanager-%d led at epoch %d before, jobmanager-%d at epoch %d after; first checkpoint %.2fs after etcd came back",
		back.Sub(stopped).Seconds(), leader, epoch, next, nextEpoch, first.Sub(back).Seconds())
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	takeovers, _ := report(t, c, "etcd-restart", lost, duplicated, "")
	if takeovers < 1 {
		t.Errorf("no new election logged after etcd came back")
	}
}

// TestHALeaderCutFromEtcd cuts the network between the leading jobmanager
// and etcd (etcd and everything else stay up) past the lease TTL: the
// leader must step down and exit before the standby, which still reaches
// etcd, takes over; its writes are fenced meanwhile. Once healed, the old
// leader's process (restarted by the supervisor) stands by.
func TestHALeaderCutFromEtcd(t *testing.T) {
	_, c := startHAOpts(t, true)
	job := clustertest.NewSequenceJob(t, "ha-etcd-cut", 25, haRate, haKeys)
	submitted := time.Now()
	jobID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, jobID, submitted, 2, "by the first leader")

	leader, epoch := c.WaitLeader(0)
	old := c.JobManager(leader)
	px := c.EtcdProxy(leader)
	px.Cut()
	cut := time.Now()
	next, nextEpoch := c.WaitLeader(epoch)
	tookOver := time.Since(cut)
	if next == leader {
		t.Fatalf("jobmanager-%d, cut off from etcd, leads again at epoch %d", leader, nextEpoch)
	}
	polltest.Eventually(t, time.Minute, "the leader cut off from etcd to step down and exit", old.Exited)
	clustertest.WaitCheckpointsSince(t, c, jobID, cut, 2, fmt.Sprintf("by the new leader (jobmanager-%d, epoch %d)", next, nextEpoch))
	px.Heal()
	healed := time.Now()
	clustertest.WaitCheckpointsSince(t, c, jobID, healed, 2, "after the cut healed")
	if i, e, err := c.Leader(); err != nil || i != next || e != nextEpoch {
		t.Errorf("after the heal etcd names jobmanager-%d epoch %d (err %v); want jobmanager-%d epoch %d still leading", i, e, err, next, nextEpoch)
	}
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	takeovers, _ := report(t, c, "leader-cut-from-etcd", lost, duplicated,
		fmt.Sprintf(" takeover_seconds=%.2f", tookOver.Seconds()))
	if takeovers < 1 {
		t.Errorf("no takeover logged")
	}
}

// TestHAEtcdMemberFaults runs the cluster on an etcd of three members and
// hits etcd itself while the job runs: the raft leader member is killed
// (and restarted), a member is cut off from its clients (and healed), and
// quorum is lost — two members stopped — past the lease TTL, so that the
// leading jobmanager must step down; once the members are back a
// jobmanager leads again and recovers the job. After each fault the job
// completes two more checkpoints, and its output is exact at the end.
func TestHAEtcdMemberFaults(t *testing.T) {
	c := clustertest.StartHA(t, false, clustertest.HA{EtcdMembers: 3, Prefix: "/weir-hatest", LeaseTTL: clustertest.HALeaseTTL})
	etcd := c.EtcdCluster()
	job := clustertest.NewSequenceJob(t, "ha-etcd-members", 40, haRate, haKeys)
	submitted := time.Now()
	jobID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, jobID, submitted, 2, "before the etcd faults")
	faults := 0

	// The raft leader dies: the members elect another, and the
	// jobmanagers' clients move to a live member.
	dead := etcd.Member(etcd.Leader())
	dead.Kill()
	faults++
	killed := time.Now()
	clustertest.WaitCheckpointsSince(t, c, jobID, killed, 2, fmt.Sprintf("with etcd leader %s killed", dead.Name()))
	dead.Restart()
	etcd.WaitHealthy(t)

	// One member is cut off from its clients; the others serve them.
	cut := etcd.Member((etcd.Leader() + 1) % etcd.Size())
	cut.Cut()
	faults++
	cutAt := time.Now()
	clustertest.WaitCheckpointsSince(t, c, jobID, cutAt, 2, fmt.Sprintf("with etcd member %s cut off", cut.Name()))
	cut.Heal()
	etcd.WaitHealthy(t)

	// Quorum is lost past the lease TTL: the leader cannot renew its lease
	// and steps down; the job stops rather than diverges.
	_, epoch := c.WaitLeader(0)
	a, b := etcd.Member(0), etcd.Member(1)
	a.Stop()
	b.Stop()
	faults++
	lostAt := time.Now()
	if rest := clustertest.HALeaseTTL + time.Second - time.Since(lostAt); rest > 0 {
		time.Sleep(rest) // keep quorum away past the lease TTL: the fault itself, not synchronisation
	}
	a.Restart()
	b.Restart()
	etcd.WaitHealthy(t)
	back := time.Now()
	next, nextEpoch := c.WaitLeader(epoch)
	clustertest.WaitCheckpointsSince(t, c, jobID, back, 2, fmt.Sprintf("by jobmanager-%d (epoch %d) after quorum came back", next, nextEpoch))
	t.Logf("quorum lost for %.2fs; jobmanager-%d leads at epoch %d after", back.Sub(lostAt).Seconds(), next, nextEpoch)

	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	report(t, c, "etcd-member-faults", lost, duplicated, fmt.Sprintf(" etcd_members=%d etcd_faults=%d", etcd.Size(), faults))
}
