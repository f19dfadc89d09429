package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"

	"github.com/weirstream/weir/test/polltest"
)

// rssBytes returns the resident memory of process pid.
func rssBytes(pid int) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// rateMeter turns the per-task record counters of the running_count vertex
// (which restart from zero with every new attempt) into records/s.
type rateMeter struct {
	c    *clustertest.Cluster
	id   string
	prev map[[2]int64]int64
	at   time.Time
}

func (m *rateMeter) sample(tb testing.TB) float64 {
	resp, err := m.c.Job(m.id)
	if err != nil {
		return 0
	}
	now := time.Now()
	var delta int64
	cur := make(map[[2]int64]int64)
	for _, t := range resp.GetTasks() {
		if t.GetId().GetVertexId() != 1 {
			continue
		}
		k := [2]int64{int64(t.GetId().GetSubtask()), t.GetId().GetAttempt()}
		cur[k] = t.GetRecordsIn()
		delta += t.GetRecordsIn() - m.prev[k] // a new attempt starts from 0
	}
	rate := 0.0
	if !m.at.IsZero() {
		rate = float64(delta) / now.Sub(m.at).Seconds()
	}
	m.prev, m.at = cur, now
	return rate
}

// BenchmarkRecoveryAfterTaskManagerKill measures how long a keyed count
// holding a few million keys of heap state takes, after SIGKILL of one of
// three taskmanagers, to get back to 90 % of its record rate before the kill.
// The restart delay is 1ms (zero means "the default" in a restart config).
func BenchmarkRecoveryAfterTaskManagerKill(b *testing.B) {
	keys := envInt("WEIR_BENCH_RECOVERY_KEYS", 3_000_000)
	dir := b.TempDir()
	c := clustertest.Start(b, clustertest.Options{TaskManagers: 3, Slots: 2, LogLevel: "warn",
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: 5 * time.Second})
	rssBefore := int64(0)
	for _, tm := range c.TMs {
		rssBefore += rssBytes(tm.Pid())
	}
	bld := stream.NewBuilder("recovery").Parallelism(4)
	bld.Source("events", "datagen", map[string]any{"rows": 0, "ratePerSecond": 4_000_000, "fields": []map[string]any{
		{"name": "key", "kind": "sequence", "modulo": keys},
	}}).SetParallelism(2).KeyBy("key").Then("counts", "running_count", nil).Then("sink", "discard", nil)
	g, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	g.Checkpoint = stream.CheckpointConfig{Interval: 2 * time.Second, Storage: "file://" + filepath.Join(dir, "ckpt")}
	g.Restart = stream.RestartConfig{Type: "fixed-delay", Attempts: 1000, Delay: time.Millisecond}
	id := c.Submit(g)
	m := &rateMeter{c: c, id: id}

	// Build the state: every key counted at least once, then a checkpoint
	// that holds it all.
	polltest.Eventually(b, 5*time.Minute, "every key counted", func() bool {
		resp, err := c.Job(id)
		if err != nil {
			return false
		}
		var n int64
		for _, t := range resp.GetTasks() {
			if t.GetId().GetVertexId() == 1 {
				n += t.GetRecordsIn()
			}
		}
		return n > 2*keys
	})
	var stateBytes int64
	var since = time.Now().UnixMilli()
	polltest.Eventually(b, 2*time.Minute, "a checkpoint of the full state", func() bool {
		resp, err := c.Checkpoints(id)
		if err != nil {
			return false
		}
		for _, ck := range resp.GetCheckpoints() {
			if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && ck.GetTriggerTimeMs() > since {
				stateBytes = ck.GetSizeBytes()
				return true
			}
		}
		return false
	})
	rssAfter := int64(0)
	for _, tm := range c.TMs {
		rssAfter += rssBytes(tm.Pid())
	}

	m.sample(b)
	var before float64
	for i := 0; i < 6; i++ {
		time.Sleep(500 * time.Millisecond) // measurement window, not synchronisation
		before += m.sample(b) / 6
	}
	kill := time.Now()
	c.KillTaskManager(0)
	c.RestartTaskManager(0)
	var recovered time.Duration
	polltest.Eventually(b, 3*time.Minute, "the record rate back to 90%", func() bool {
		time.Sleep(250 * time.Millisecond) // measurement window
		if m.sample(b) >= 0.9*before {
			recovered = time.Since(kill)
			return true
		}
		return false
	})
	fmt.Printf("recovery_keys=%d\n", keys)
	fmt.Printf("recovery_checkpoint_bytes=%d\n", stateBytes)
	fmt.Printf("recovery_state_rss_bytes=%d\n", rssAfter-rssBefore)
	fmt.Printf("recovery_rate_before=%.0f\n", before)
	fmt.Printf("recovery_seconds=%.2f\n", recovered.Seconds())
}
