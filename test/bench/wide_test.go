package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// wideRate is the total rate of the wide job's source, rows/s over all
// its subtasks.
const wideRate = 20_000

// wideGraph is a keyed tumbling-window count at parallelism par with
// checkpoints every second to local files under dir: datagen (wideRate
// rows/s in all; event time runs 20 times faster than the wall clock, so
// that a 20 s window closes about once a second) → watermarks (chained to
// the source) → keyBy key → tumbling_window count → discard (chained to
// the window). At parallelism p the keyBy is p × p channels.
func wideGraph(tb testing.TB, par int, dir string) *stream.JobGraph {
	tb.Helper()
	wmConfig := map[string]any{"timestampField": "ts", "maxOutOfOrderness": "50ms"}
	if v := os.Getenv("WEIR_BENCH_WIDE_WATERMARK_INTERVAL"); v != "" {
		wmConfig["autoWatermarkInterval"] = v
	}
	b := stream.NewBuilder(fmt.Sprintf("wide-p%d", par)).Parallelism(par).MaxParallelism(max(stream.DefaultMaxParallelism, par))
	b.Source("events", "datagen", map[string]any{"rows": 0, "seed": 11, "ratePerSecond": wideRate, "fields": []map[string]any{
		{"name": "key", "kind": "key", "cardinality": 10000, "type": "int64"},
		{"name": "ts", "kind": "timestamp", "stepMillis": 1, "jitterMillis": 3},
	}}).
		Then("stamped", "watermarks", wmConfig).
		KeyBy("key").
		Then("counts", "tumbling_window", map[string]any{"size": "20s", "aggregates": []map[string]any{{"fn": "count", "as": "n"}}}).
		Then("sink", "discard", nil)
	g, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	interval := time.Second
	if v := os.Getenv("WEIR_BENCH_WIDE_CHECKPOINT_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			tb.Fatalf("WEIR_BENCH_WIDE_CHECKPOINT_INTERVAL=%q: %v", v, err)
		}
		interval = d
	}
	g.Checkpoint = stream.CheckpointConfig{Interval: interval, Mode: stream.ExactlyOnce, Storage: "file://" + filepath.Join(dir, "ckpt")}
	if err := stream.Plan(g, builtin.Registry()); err != nil {
		tb.Fatal(err)
	}
	return g
}

// wideSample is what BenchmarkWideJob measures of one job over its window.
type wideSample struct {
	subtasks      int
	checkpointP50 time.Duration
	checkpoints   int     // completed during the window
	cpuCores      float64 // both taskmanagers together
	rssBytes      int64   // both taskmanagers together, the largest sample
	rows          int64   // rows into the window tasks during the window
}

// BenchmarkWideJob measures what a wide job costs when it does little
// work: a keyed tumbling-window count at a total of 20,000 rows/s with 1 s
// checkpoints, at parallelism 8, 64 and 256 on two taskmanager processes
// (at 256 the keyBy has 65,536 channels). Each size runs on a fresh
// cluster; after a warm-up it samples for a fixed span the median
// duration of the checkpoints completed in it (from the jobmanager's
// checkpoint history), the CPU the taskmanagers used (/proc/PID/stat) and
// their resident memory (/proc/PID/status VmRSS, the largest of the
// samples) per subtask (the operator subtasks the job runs: 4 per unit of
// parallelism). WEIR_BENCH_WIDE_PARALLELISM (e.g. "8,64") picks the sizes;
// WEIR_BENCH_WIDE_WINDOW_S the sampled span (default 20);
// WEIR_BENCH_WIDE_WATERMARK_INTERVAL the watermarks operator's
// autoWatermarkInterval (default: the operator's; "0s" emits after every
// batch, as before periodic watermarks). With
// WEIR_BENCH_WIDE_PERF set to a directory, each taskmanager is profiled
// with perf(1) during the span into <dir>/p<par>[-all-cpus]-tm<i>.data
// (read them with perf report -i).
//
// The two taskmanagers share the machine's CPUs: each schedules for half
// of them (--cpu-cores), as `weir local` starts them and as a container's
// CPU limit sets a taskmanager's Go runtime. The largest size then runs
// once more with taskmanagers that each schedule for every CPU, as they do
// when nobody gives them a share: wide_p<n>_all_cpus_cpu_cores against
// wide_p<n>_cpu_cores is what sharing the CPUs saves (idle processors
// that the runtime wakes for every goroutine readied, and the threads'
// context switches).
func BenchmarkWideJob(b *testing.B) {
	sizes := []int{8, 64, 256}
	if v := os.Getenv("WEIR_BENCH_WIDE_PARALLELISM"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 || n%2 != 0 {
				b.Fatalf("WEIR_BENCH_WIDE_PARALLELISM=%q: want even parallelisms of at least 2, comma-separated", v)
			}
			sizes = append(sizes, n)
		}
	}
	window := time.Duration(envInt("WEIR_BENCH_WIDE_WINDOW_S", 20)) * time.Second
	share := []string{"--cpu-cores", strconv.Itoa(max(1, runtime.NumCPU()/2))}
	for i := 0; i < b.N; i++ {
		for _, par := range sizes {
			s := runWide(b, par, window, share)
			fmt.Printf("wide_p%d_subtasks=%d\n", par, s.subtasks)
			fmt.Printf("wide_p%d_rows_per_sec=%.0f\n", par, float64(s.rows)/window.Seconds())
			fmt.Printf("wide_p%d_checkpoints=%d\n", par, s.checkpoints)
			fmt.Printf("wide_p%d_checkpoint_p50_ms=%d\n", par, s.checkpointP50.Milliseconds())
			fmt.Printf("wide_p%d_cpu_cores=%.3f\n", par, s.cpuCores)
			fmt.Printf("wide_p%d_rss_bytes_per_subtask=%d\n", par, s.rssBytes/int64(s.subtasks))
		}
		par := slices.Max(sizes)
		s := runWide(b, par, window, nil)
		fmt.Printf("wide_p%d_all_cpus_checkpoint_p50_ms=%d\n", par, s.checkpointP50.Milliseconds())
		fmt.Printf("wide_p%d_all_cpus_cpu_cores=%.3f\n", par, s.cpuCores)
		fmt.Printf("wide_p%d_all_cpus_rss_bytes_per_subtask=%d\n", par, s.rssBytes/int64(s.subtasks))
	}
}

// runWide runs the wide job at parallelism par on a fresh cluster of two
// taskmanagers, started with the extra arguments tmArgs, and samples it
// for window after a warm-up.
func runWide(b *testing.B, par int, window time.Duration, tmArgs []string) wideSample {
	dir := b.TempDir()
	c := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: par / 2, LogLevel: "warn",
		HeartbeatTimeout: time.Minute, SlotWaitTimeout: 5 * time.Minute, TaskManagerArgs: tmArgs})
	g := wideGraph(b, par, dir)
	id := c.Submit(g)
	running := func() *weirpb.GetJobResponse {
		resp, err := c.Job(id)
		if err != nil {
			b.Fatal(err)
		}
		if s := resp.GetJob().GetState(); s != weirpb.JobState_JOB_STATE_RUNNING {
			b.Fatalf("job %s is %v: %s", id, s, resp.GetJob().GetError())
		}
		return resp
	}
	// Wait until the job runs and a first checkpoint completed, so that
	// every task is deployed and the channels are connected.
	polltest.Eventually(b, 10*time.Minute, fmt.Sprintf("wide job at parallelism %d runs and completes a checkpoint", par), func() bool {
		resp, err := c.Job(id)
		if err != nil || resp.GetJob().GetState() != weirpb.JobState_JOB_STATE_RUNNING {
			if s := resp.GetJob().GetState(); s == weirpb.JobState_JOB_STATE_FAILED || s == weirpb.JobState_JOB_STATE_CANCELED {
				b.Fatalf("job %s is %v: %s", id, s, resp.GetJob().GetError())
			}
			return false
		}
		ck, err := c.Checkpoints(id)
		return err == nil && ck.GetCompleted() > 0
	})
	time.Sleep(10 * time.Second) // benchmark warm-up, not synchronisation
	rowsIn := func(resp *weirpb.GetJobResponse) int64 {
		var n int64
		for _, t := range resp.GetTasks() {
			if t.GetId().GetVertexId() == 2 { // the window task
				n += t.GetRecordsIn()
			}
		}
		return n
	}
	first := running()
	var s wideSample
	for _, t := range first.GetTasks() {
		if t.GetId().GetVertexId() == 2 {
			s.subtasks++
		}
	}
	if s.subtasks != par {
		b.Fatalf("job has %d window subtasks, want %d", s.subtasks, par)
	}
	s.subtasks = len(g.Vertices) * par
	rows0 := rowsIn(first)
	name := fmt.Sprintf("p%d", par)
	if tmArgs == nil {
		name += "-all-cpus"
	}
	stopPerf := startPerf(b, c, name, window)
	start, cpu0 := time.Now(), taskManagersCPU(c)
	var rss int64
	for time.Since(start) < window {
		time.Sleep(time.Second) // sampling interval
		rss = max(rss, taskManagersRSS(c))
	}
	cpu1, end := taskManagersCPU(c), time.Now()
	stopPerf()
	last := running()
	s.rows = rowsIn(last) - rows0
	if s.rows <= 0 {
		b.Fatalf("no rows reached the window tasks in %v", window)
	}
	if cpu0 >= 0 && cpu1 >= 0 {
		s.cpuCores = float64(cpu1-cpu0) / float64(end.Sub(start))
	}
	s.rssBytes = rss
	ck, err := c.Checkpoints(id)
	if err != nil {
		b.Fatal(err)
	}
	var durs []time.Duration
	for _, info := range ck.GetCheckpoints() {
		trig := time.UnixMilli(info.GetTriggerTimeMs())
		if info.GetStatus() != weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED || info.GetSavepoint() ||
			trig.Before(start) || trig.After(end) {
			continue
		}
		durs = append(durs, time.Duration(info.GetDurationMs())*time.Millisecond)
		fmt.Printf("wide p%d checkpoint %d: %d ms, %d tasks, last ack from %s at %d ms\n", par, info.GetCheckpointId(),
			info.GetDurationMs(), info.GetTotalTasks(), info.GetSlowestTask(), info.GetSlowestTaskMs())
	}
	if len(durs) == 0 {
		b.Fatalf("no checkpoint completed within the %v window (history: %d checkpoints, %d completed, %d failed)",
			window, len(ck.GetCheckpoints()), ck.GetCompleted(), ck.GetFailed())
	}
	slices.Sort(durs)
	s.checkpoints = len(durs)
	s.checkpointP50 = durs[(len(durs)-1)/2]
	if out, err := c.Weir("jobs", "cancel", id); err != nil {
		b.Fatalf("cancel: %v %s", err, out)
	}
	c.WaitJob(id, 5*time.Minute)
	return s
}

// taskManagersRSS is the resident memory (bytes) of the cluster's
// taskmanager processes together, from /proc; -1 where that cannot be read.
func taskManagersRSS(c *clustertest.Cluster) int64 {
	var total int64
	for _, p := range c.TMs {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		if err != nil {
			return -1
		}
		i := bytes.Index(data, []byte("\nVmRSS:"))
		if i < 0 {
			return -1
		}
		f := strings.Fields(string(data[i+len("\nVmRSS:"):]))
		if len(f) < 2 || f[1] != "kB" {
			return -1
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		total += kb << 10
	}
	return total
}

// startPerf starts perf record on each taskmanager for span when
// WEIR_BENCH_WIDE_PERF names a directory, and returns a function that waits
// for the recordings to end.
func startPerf(b *testing.B, c *clustertest.Cluster, name string, span time.Duration) (wait func()) {
	dir := os.Getenv("WEIR_BENCH_WIDE_PERF")
	if dir == "" {
		return func() {}
	}
	var cmds []*exec.Cmd
	for i, p := range c.TMs {
		out := filepath.Join(dir, fmt.Sprintf("%s-tm%d.data", name, i))
		cmd := exec.Command("perf", "record", "-F", "199", "-g", "-p", strconv.Itoa(p.Pid()), "-o", out,
			"--", "sleep", strconv.Itoa(int(span.Seconds())))
		if err := cmd.Start(); err != nil {
			b.Fatalf("perf record: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	return func() {
		for _, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				b.Logf("perf record: %v", err)
			}
		}
	}
}
