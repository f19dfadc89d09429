package storage

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// TestSoak is `make soak`: for WEIR_SOAK_DURATION (skipped when unset) it
// runs the exactly-once workload on an HA cluster (two jobmanagers on a
// real etcd of three members, three taskmanagers, checkpoints on
// versitygw) with fault proxies on every network path, and injects a
// random mix of every fault the harness has: taskmanager kills (restarted
// on a new or the same port), pauses, control and data partitions, S3
// outages, slow S3, S3 server kills, leader kills, leaders cut off from
// etcd, and etcd's leader member killed or a member cut off. Time is cut
// into windows (WEIR_SOAK_WINDOW, default 10m), one job each; after each
// window it prints the faults, lost and duplicated rows (0), recovery and
// checkpoint-duration percentiles, the objects the finished job left in
// storage (0), and per process its RSS, file descriptors and goroutines,
// which must stay flat. WEIR_SOAK_SEED picks the faults (default 1).
func TestSoak(t *testing.T) {
	total, err := time.ParseDuration(os.Getenv("WEIR_SOAK_DURATION"))
	if err != nil || total <= 0 {
		t.Skip("set WEIR_SOAK_DURATION (make soak) to run the soak test")
	}
	window := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("WEIR_SOAK_WINDOW")); err == nil && d > 0 {
		window = d
	}
	seed := uint64(1)
	if s, err := strconv.ParseUint(os.Getenv("WEIR_SOAK_SEED"), 10, 64); err == nil {
		seed = s
	}
	const hbTimeout = 3 * time.Second
	c := clustertest.Start(t, clustertest.Options{JobManagers: 2, TaskManagers: 3, Slots: 2,
		HeartbeatInterval: 500 * time.Millisecond, HeartbeatTimeout: hbTimeout, SlotWaitTimeout: 2 * time.Minute,
		LogLevel: "info", FaultProxies: true, S3: true, TLS: true,
		HA: &clustertest.HA{Prefix: "/weir-soak", LeaseTTL: 3 * time.Second, EtcdMembers: 3}})
	s3 := c.S3()
	etcd := c.EtcdCluster()
	rnd := rand.New(rand.NewPCG(seed, 7))
	tm := func() int { return rnd.IntN(len(c.TMs)) }

	type fault struct {
		name   string
		inject func()
	}
	faults := []fault{
		{"tm-kill", func() { i := tm(); c.KillTaskManager(i); c.RestartTaskManager(i) }},
		{"tm-kill-same-port", func() { c.RestartTaskManagerSamePort(tm()) }},
		{"tm-pause", func() {
			i := tm()
			c.PauseTaskManager(i)
			time.Sleep(hbTimeout + time.Second) // the pause itself
			c.ResumeTaskManager(i)
		}},
		{"tm-control-cut", func() {
			px := c.Proxies(tm())
			px.Control.Cut()
			time.Sleep(hbTimeout + time.Second) // the partition itself
			px.Control.Heal()
		}},
		{"tm-data-cut", func() {
			px := c.Proxies(tm())
			px.Data.Cut()
			time.Sleep(time.Second) // the partition itself
			px.Data.Heal()
		}},
		{"tm-data-drop", func() {
			px := c.Proxies(tm())
			px.Data.Drop()
			time.Sleep(2 * time.Second) // the partition itself
			px.Data.Heal()
		}},
		{"s3-cut", func() {
			s3.Proxy.Cut()
			time.Sleep(2 * time.Second) // the outage
			s3.Proxy.Heal()
		}},
		{"s3-slow", func() {
			s3.Proxy.Delay(300 * time.Millisecond)
			time.Sleep(4 * time.Second) // the slow spell
			s3.Proxy.Delay(0)
		}},
		{"s3-kill", func() {
			s3.Server.Kill()
			time.Sleep(time.Second) // the outage
			s3.Restart()
		}},
		{"leader-kill", func() {
			leader, _ := c.WaitLeader(0)
			c.KillJobManager(leader)
		}},
		{"etcd-leader-kill", func() {
			m := etcd.Member(etcd.Leader())
			m.Kill()
			time.Sleep(2 * time.Second) // the outage
			m.Restart()
			etcd.WaitHealthy(t)
		}},
		{"etcd-member-cut", func() {
			m := etcd.Member(rnd.IntN(etcd.Size()))
			m.Cut()
			time.Sleep(2 * time.Second) // the partition itself
			m.Heal()
		}},
		{"leader-etcd-cut", func() {
			leader, epoch := c.WaitLeader(0)
			px := c.EtcdProxy(leader)
			px.Cut()
			c.WaitLeader(epoch) // another jobmanager leads
			px.Heal()
		}},
	}

	start := time.Now()
	for w := 0; w == 0 || time.Since(start) < total; w++ {
		prefix := fmt.Sprintf("soak-%d-%d", start.UnixNano(), w)
		job := clustertest.NewSequenceJobOn(t, fmt.Sprintf("soak-%d", w), window.Seconds(), 2000, 64,
			s3.URI(prefix), "  timeout: 10s\n  tolerableFailures: 3\n")
		jobID := job.Submit(t, c)
		end := time.Now().Add(window)
		var recoveries clustertest.RecoveryTimes
		counts := make(map[string]int)
		last := time.Now()
		for time.Now().Before(end) && clustertest.WaitProgress(t, c, jobID, last) {
			time.Sleep(time.Duration(1000+rnd.IntN(3000)) * time.Millisecond) // fault pacing, not synchronisation
			f := faults[rnd.IntN(len(faults))]
			at := time.Now()
			f.inject()
			counts[f.name]++
			recoveries.Wait(t, c, jobID, at)
			last = time.Now()
		}
		final := c.WaitJob(jobID, window+10*time.Minute)
		if final.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
			t.Fatalf("window %d: job ended %v: %s", w, final.GetJob().GetState(), final.GetJob().GetError())
		}
		lost, duplicated := job.Verify(t)
		ckP50, ckP99 := checkpointDurations(t, c, jobID)
		left := waitDeleted(t, checkpoint.NewStorage(s3.Store(t, prefix)), jobID, 2*time.Minute)
		n := 0
		var mix []string
		for name, k := range counts {
			n += k
			mix = append(mix, fmt.Sprintf("%s:%d", name, k))
		}
		slices.Sort(mix)
		fmt.Printf("soak_window=%d minutes=%.1f faults=%d lost=%d duplicated=%d recovery_p50=%.2f recovery_p99=%.2f checkpoint_ms_p50=%d checkpoint_ms_p99=%d orphaned_objects=%d mix=%s\n",
			w, time.Since(start).Minutes(), n, lost, duplicated, recoveries.Quantile(0.5), recoveries.Quantile(0.99), ckP50, ckP99, len(left), strings.Join(mix, ","))
		for _, p := range soakProcesses(c) {
			fmt.Printf("soak_window=%d process=%s pid=%d rss_mb=%d fds=%d goroutines=%d\n", w, p.name, p.pid, p.rssMB, p.fds, p.goroutines)
		}
		if lost != 0 || duplicated != 0 {
			t.Fatalf("window %d: not exactly-once: lost=%d duplicated=%d", w, lost, duplicated)
		}
		if len(left) > 0 {
			t.Fatalf("window %d: the finished job left %d objects in checkpoint storage: %s", w, len(left), strings.Join(left[:min(len(left), 20)], ", "))
		}
	}
}

// waitDeleted waits up to timeout for retention to delete every checkpoint
// object of the finished job and returns those still there.
func waitDeleted(t *testing.T, st *checkpoint.Storage, jobID string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := jobObjects(t, st, jobID)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
}

// checkpointDurations returns the median and 99th percentile duration of
// the job's completed checkpoints the jobmanager lists, in milliseconds.
func checkpointDurations(t *testing.T, c *clustertest.Cluster, jobID string) (p50, p99 int64) {
	t.Helper()
	resp, err := c.Checkpoints(jobID)
	if err != nil {
		t.Fatalf("checkpoints of %s: %v", jobID, err)
	}
	var ms []int64
	for _, ck := range resp.GetCheckpoints() {
		if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			ms = append(ms, ck.GetDurationMs())
		}
	}
	if len(ms) == 0 {
		return 0, 0
	}
	slices.Sort(ms)
	at := func(q float64) int64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	return at(0.5), at(0.99)
}

type processSample struct {
	name       string
	pid        int
	rssMB, fds int
	goroutines int
	metricsURL string
}

// soakProcesses samples the cluster's current jobmanagers and taskmanagers
// (found by the PIDs the harness started): RSS and open file descriptors
// from /proc, goroutines from their Prometheus metrics (-1 if unreadable).
func soakProcesses(c *clustertest.Cluster) []processSample {
	var out []processSample
	for i := range c.JobManagers() {
		p := c.JobManager(i)
		_, rest := c.JobManagerAddrs(i)
		out = append(out, processSample{name: fmt.Sprintf("jobmanager-%d", i), pid: p.Pid(), metricsURL: c.URL(rest) + "/metrics"})
	}
	for i, p := range c.TMs {
		out = append(out, processSample{name: fmt.Sprintf("tm-%d", i), pid: p.Pid(), metricsURL: c.URL(c.TaskManagerMetricsAddr(i)) + "/metrics"})
	}
	for i := range out {
		s := &out[i]
		s.rssMB, s.fds, s.goroutines = -1, -1, -1
		if data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.pid), "status")); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
					s.rssMB = kb / 1024
				}
			}
		}
		if fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(s.pid), "fd")); err == nil {
			s.fds = len(fds)
		}
		s.goroutines = scrapeGauge(c.HTTPClient(), s.metricsURL, "go_goroutines")
	}
	return out
}

// scrapeGauge reads one unlabelled metric from a Prometheus text endpoint
// (-1 if it cannot).
func scrapeGauge(cl *http.Client, url, name string) int {
	resp, err := cl.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return -1
}
