package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
)

// The scale curve's job: row seq has key seq % scaleKeys and event time
// scaleEpochMillis + seq ms, so that a tumbling window of scaleWindowRows
// ms holds scaleWindowRows rows, scaleWindowRows/scaleKeys of each key.
const (
	scaleKeys        = 1000
	scaleWindowRows  = 1_000_000
	scaleEpochMillis = 1_700_000_000_000 // a multiple of the window size
)

// scaleGraph is the scale curve's keyed job at parallelism par: datagen of
// rows rows → watermarks (chained to the source) → keyBy key →
// tumbling_window count → file sink (chained to the window) writing CSV
// under out. The windows' output is small (scaleKeys rows per
// scaleWindowRows input rows); it is what checkScaleOutput reads.
func scaleGraph(tb testing.TB, rows int64, par int, out string) *stream.JobGraph {
	tb.Helper()
	b := stream.NewBuilder(fmt.Sprintf("scale-p%d", par)).Parallelism(par)
	b.Source("events", "datagen", map[string]any{"rows": rows, "fields": []map[string]any{
		{"name": "key", "kind": "sequence", "modulo": scaleKeys},
		{"name": "ts", "kind": "timestamp", "start": scaleEpochMillis, "stepMillis": 1},
	}}).Then("stamped", "watermarks", map[string]any{"timestampField": "ts"}).
		KeyBy("key").
		Then("counts", "tumbling_window", map[string]any{
			"size": (scaleWindowRows * time.Millisecond).String(), "aggregates": []map[string]any{{"fn": "count", "as": "n"}}}).
		Then("out", "file", connectors.FileSinkConfig{Path: out, Format: "csv"})
	g, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	if err := stream.Plan(g, builtin.Registry()); err != nil {
		tb.Fatal(err)
	}
	return g
}

// checkScaleOutput checks the windows the job wrote under out (part-0 ..
// part-<par-1>): one row per key and window, each counting
// scaleWindowRows/scaleKeys rows, rows/scaleWindowRows windows, and so
// rows counted in all. A row lost or counted twice anywhere on the way,
// the exchange between the taskmanagers included, fails it.
func checkScaleOutput(tb testing.TB, out string, par int, rows int64) {
	tb.Helper()
	type keyWindow struct{ key, start string }
	seen := map[keyWindow]bool{}
	var total int64
	for i := range par {
		f, err := os.Open(connectors.PartFile(out, i))
		if err != nil {
			tb.Fatalf("scale p%d: %v", par, err)
		}
		r := csv.NewReader(f)
		header, err := r.Read()
		if err != nil {
			tb.Fatalf("scale p%d: %s: header: %v", par, f.Name(), err)
		}
		col := map[string]int{}
		for j, h := range header {
			col[h] = j
		}
		for _, h := range []string{"key", "window_start", "n"} {
			if _, ok := col[h]; !ok {
				tb.Fatalf("scale p%d: %s has no %q column: %v", par, f.Name(), h, header)
			}
		}
		for {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				tb.Fatalf("scale p%d: %s: %v", par, f.Name(), err)
			}
			kw := keyWindow{rec[col["key"]], rec[col["window_start"]]}
			if seen[kw] {
				tb.Fatalf("scale p%d: key %s window %s written twice", par, kw.key, kw.start)
			}
			seen[kw] = true
			n, err := strconv.ParseInt(rec[col["n"]], 10, 64)
			if err != nil || n != scaleWindowRows/scaleKeys {
				tb.Fatalf("scale p%d: key %s window %s counted %q rows, want %d", par, kw.key, kw.start, rec[col["n"]], scaleWindowRows/scaleKeys)
			}
			total += n
		}
		f.Close()
	}
	if want := rows / scaleWindowRows * scaleKeys; int64(len(seen)) != want || total != rows {
		tb.Fatalf("scale p%d: %d key windows counting %d rows, want %d counting the %d rows generated", par, len(seen), total, want, rows)
	}
}

// allowedCPUs lists the CPUs this process may run on (Cpus_allowed_list
// of /proc/self/status, e.g. "0-3,8"), or 0 .. NumCPU-1 where that cannot
// be read.
func allowedCPUs() []int {
	if cpus, ok := procAllowedCPUs(); ok {
		return cpus
	}
	cpus := make([]int, runtime.NumCPU())
	for c := range cpus {
		cpus[c] = c
	}
	return cpus
}

func procAllowedCPUs() ([]int, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		list, ok := strings.CutPrefix(line, "Cpus_allowed_list:")
		if !ok {
			continue
		}
		var cpus []int
		for _, r := range strings.Split(strings.TrimSpace(list), ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, false
			}
			for c := a; c <= b; c++ {
				cpus = append(cpus, c)
			}
		}
		return cpus, len(cpus) > 0
	}
	return nil, false
}

// coreShares divides cpus among n taskmanagers: with n ≤ len(cpus) each
// gets its own len(cpus)/n of them (the rest stay unused), with more
// taskmanagers than CPUs taskmanager i gets CPU i mod len(cpus) alone.
func coreShares(cpus []int, n int) [][]int {
	shares := make([][]int, n)
	for i := range shares {
		if n <= len(cpus) {
			per := len(cpus) / n
			shares[i] = cpus[i*per : (i+1)*per]
		} else {
			shares[i] = []int{cpus[i%len(cpus)]}
		}
	}
	return shares
}

// scaleRun is one run of the scale curve's job.
type scaleRun struct {
	eventsPerSec float64
	cpuCores     float64 // taskmanager CPU time over the job's wall time
}

func (r scaleRun) perCore() float64 { return r.eventsPerSec / r.cpuCores }

// BenchmarkScaleCurve runs the same keyed job (datagen → watermarks →
// keyBy → tumbling-window count → file sink, see scaleGraph) at
// parallelism 1 on one taskmanager, 2 on two and 4 on four, one slot
// each, and reports for each its events/s, the CPU cores its
// taskmanagers kept busy and events/s per core, and the per-core figure
// at 2 and 4 over that at 1 (scale_efficiency_p2, _p4): how much of a
// core's work the exchange between taskmanagers and the wider job take.
//
// The taskmanagers share the machine's CPUs between them (coreShares):
// each runs under taskset on its share where taskset is on PATH, with
// GOMAXPROCS its number of CPUs. The configurations run twice,
// interleaved; each keeps the run with the most events/s per core (on a
// shared machine, the one least disturbed by others) and reports all its
// figures. Every run's output is checked against the rows generated.
// WEIR_BENCH_SCALE_ROWS sets the rows (default 40 million, about 4 s at
// parallelism 1 on two cores; rounded up to whole windows).
func BenchmarkScaleCurve(b *testing.B) {
	rows := envInt("WEIR_BENCH_SCALE_ROWS", 40_000_000)
	rows = (rows + scaleWindowRows - 1) / scaleWindowRows * scaleWindowRows
	pars := []int{1, 2, 4}
	cpus := allowedCPUs()
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		fmt.Printf("scale curve: taskset (util-linux) not on PATH: taskmanagers not pinned to CPUs, GOMAXPROCS set only\n")
		taskset = ""
	}
	clusters := map[int]*clustertest.Cluster{}
	for _, par := range pars {
		shares := coreShares(cpus, par)
		opts := clustertest.Options{TaskManagers: par, Slots: 1, LogLevel: "warn",
			TaskManagerEnv: func(i int) []string { return []string{"GOMAXPROCS=" + strconv.Itoa(len(shares[i]))} }}
		if taskset != "" {
			opts.TaskManagerWrapper = func(i int) []string {
				list := make([]string, len(shares[i]))
				for j, c := range shares[i] {
					list[j] = strconv.Itoa(c)
				}
				return []string{taskset, "-c", strings.Join(list, ",")}
			}
		}
		fmt.Printf("scale curve: p%d: taskmanagers' CPUs %v (pinned: %t), GOMAXPROCS = their number\n", par, shares, taskset != "")
		clusters[par] = clustertest.Start(b, opts)
	}
	run := func(par int) scaleRun {
		c := clusters[par]
		out := filepath.Join(b.TempDir(), "out")
		g := scaleGraph(b, rows, par, out)
		cpu0 := taskManagersCPU(c)
		id := c.Submit(g)
		job := c.WaitJob(id, 10*time.Minute)
		cpu1 := taskManagersCPU(c)
		if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
			b.Fatalf("scale p%d: job %s: %v %s", par, id, job.GetJob().GetState(), job.GetJob().GetError())
		}
		tms := map[string]bool{}
		for _, t := range job.GetTasks() {
			tms[t.GetTaskmanagerId()] = true
		}
		if len(tms) != par {
			b.Fatalf("scale p%d: job ran on %d taskmanagers, want %d", par, len(tms), par)
		}
		checkScaleOutput(b, out, par, rows)
		if err := os.RemoveAll(out); err != nil {
			b.Fatal(err)
		}
		el := time.Duration(job.GetJob().GetEndTimeMs()-job.GetJob().GetStartTimeMs()) * time.Millisecond
		if cpu0 < 0 || cpu1 < 0 || el <= 0 {
			b.Fatalf("scale p%d: no taskmanager CPU time (/proc unreadable) or no wall time (%v)", par, el)
		}
		return scaleRun{eventsPerSec: float64(rows) / el.Seconds(), cpuCores: float64(cpu1-cpu0) / float64(el)}
	}
	best := map[int]scaleRun{}
	for i := 0; i < b.N; i++ {
		for round := 0; round < 2; round++ {
			for _, par := range pars {
				r := run(par)
				fmt.Printf("scale curve: p%d round %d: %.0f events/s, %.2f cores, %.0f events/s/core\n", par, round+1, r.eventsPerSec, r.cpuCores, r.perCore())
				if old, ok := best[par]; !ok || r.perCore() > old.perCore() {
					best[par] = r
				}
			}
		}
	}
	fmt.Printf("scale_events=%d\n", rows)
	for _, par := range pars {
		r := best[par]
		fmt.Printf("scale_p%d_events_per_sec=%.0f\n", par, r.eventsPerSec)
		fmt.Printf("scale_p%d_cpu_cores=%.2f\n", par, r.cpuCores)
		fmt.Printf("scale_p%d_events_per_sec_per_core=%.0f\n", par, r.perCore())
	}
	for _, par := range pars[1:] {
		fmt.Printf("scale_efficiency_p%d=%.2f\n", par, best[par].perCore()/best[1].perCore())
	}
}
