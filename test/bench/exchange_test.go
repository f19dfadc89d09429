package bench

import (
	"bufio"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
)

// BenchmarkExchangeRemoteVsLocal runs one job, the q1 bids (datagen →
// rebalance → map → filter → discard) at parallelism 2, on two clusters:
// one taskmanager with 2 slots, where the rebalance runs over in-memory
// channels, and two taskmanagers with 1 slot each, where half of the rows
// cross the network exchange. The rounds of the two alternate so both see
// the same machine; the best round of each counts (of
// WEIR_BENCH_EXCHANGE_ROUNDS, default 5: on a noisy machine the best of
// three still varied by a tenth).
//
// exchange_remote_vs_local is the remote cluster's throughput over the
// local one's: 1.0 would mean the network costs nothing. It compares two
// figures of one run; the absolute rates depend on the machine and on what
// else runs on it. exchange_remote_bytes_per_sec is what the taskmanagers'
// exchanges sent to each other (weir_exchange_sent_bytes_total, the
// encoded frames, without gRPC's and TCP's framing) over the remote job's
// wall time. A third cluster like the second compresses the batches it
// sends (--exchange-compression zstd): its bytes per event show what the
// compression saves on a network, its CPU what it costs. A fourth sends
// each batch as it comes (--exchange-coalesce-rows 0):
// exchange_remote_uncoalesced_vs_local against exchange_remote_vs_local is
// what gathering batches gains, in the same run.
//
// Each cluster has the machine's CPUs: the one taskmanager of the first
// all of them, each of the two of the others half of them (--cpu-cores,
// as `weir local` gives them), so that both sides have a CPU per slot. A
// fifth cluster's two taskmanagers each schedule for every CPU, as they
// do when nobody gives them a share: exchange_remote_all_cpus_vs_local
// against exchange_remote_vs_local is what sharing the CPUs gains.
func BenchmarkExchangeRemoteVsLocal(b *testing.B) {
	events := envInt("WEIR_BENCH_EXCHANGE_EVENTS", 20_000_000)
	rounds := envInt("WEIR_BENCH_EXCHANGE_ROUNDS", 5)
	share := strconv.Itoa(max(1, runtime.NumCPU()/2))
	local := clustertest.Start(b, clustertest.Options{TaskManagers: 1, Slots: 2, LogLevel: "info"})
	remote := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 1, LogLevel: "info",
		TaskManagerArgs: []string{"--cpu-cores", share}})
	zstd := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 1, LogLevel: "info",
		TaskManagerArgs: []string{"--cpu-cores", share, "--exchange-compression", "zstd"}})
	uncoalesced := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 1, LogLevel: "info",
		TaskManagerArgs: []string{"--cpu-cores", share, "--exchange-coalesce-rows", "0"}})
	allCPUs := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 1, LogLevel: "info"})
	type result struct {
		el    time.Duration
		cpuNs int64
		sent  float64
	}
	run := func(c *clustertest.Cluster, wantTMs int) result {
		g := q1Graph(b, events, 2)
		g.Edges[0].Partitioning = stream.Rebalance
		sent0 := exchangeSentBytes(b, c)
		cpu0 := taskManagersCPU(c)
		id := c.Submit(g)
		job := c.WaitJob(id, 10*time.Minute)
		if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
			b.Fatalf("job %s: %v %s", id, job.GetJob().GetState(), job.GetJob().GetError())
		}
		tms := map[string]bool{}
		var in int64
		for _, t := range job.GetTasks() {
			tms[t.GetTaskmanagerId()] = true
			if t.GetId().GetVertexId() != 0 {
				in += t.GetRecordsIn()
			}
		}
		if len(tms) != wantTMs {
			b.Fatalf("job ran on %d taskmanagers, want %d", len(tms), wantTMs)
		}
		if in != events {
			b.Fatalf("the tasks after the rebalance received %d rows, want %d (lost %d)", in, events, events-in)
		}
		return result{
			el:    time.Duration(job.GetJob().GetEndTimeMs()-job.GetJob().GetStartTimeMs()) * time.Millisecond,
			cpuNs: taskManagersCPU(c) - cpu0,
			sent:  exchangeSentBytes(b, c) - sent0,
		}
	}
	var bestLocal, bestRemote, bestZstd, bestUncoalesced, bestAllCPUs result
	for i := 0; i < b.N; i++ {
		for range rounds {
			if r := run(local, 1); bestLocal.el == 0 || r.el < bestLocal.el {
				bestLocal = r
			}
			if r := run(remote, 2); bestRemote.el == 0 || r.el < bestRemote.el {
				bestRemote = r
			}
			if r := run(zstd, 2); bestZstd.el == 0 || r.el < bestZstd.el {
				bestZstd = r
			}
			if r := run(uncoalesced, 2); bestUncoalesced.el == 0 || r.el < bestUncoalesced.el {
				bestUncoalesced = r
			}
			if r := run(allCPUs, 2); bestAllCPUs.el == 0 || r.el < bestAllCPUs.el {
				bestAllCPUs = r
			}
		}
	}
	if bestLocal.sent != 0 {
		b.Fatalf("the one-taskmanager cluster sent %.0f bytes over the network, want 0", bestLocal.sent)
	}
	if bestRemote.sent == 0 {
		b.Fatalf("the two-taskmanager cluster sent nothing over the network")
	}
	fmt.Printf("exchange_events=%d\n", events)
	fmt.Printf("exchange_local_seconds=%.3f\n", bestLocal.el.Seconds())
	fmt.Printf("exchange_remote_seconds=%.3f\n", bestRemote.el.Seconds())
	fmt.Printf("exchange_local_events_per_sec=%.0f\n", float64(events)/bestLocal.el.Seconds())
	fmt.Printf("exchange_remote_events_per_sec=%.0f\n", float64(events)/bestRemote.el.Seconds())
	fmt.Printf("exchange_remote_vs_local=%.2f\n", bestLocal.el.Seconds()/bestRemote.el.Seconds())
	fmt.Printf("exchange_remote_bytes_per_sec=%.0f\n", bestRemote.sent/bestRemote.el.Seconds())
	fmt.Printf("exchange_remote_bytes_per_event_crossing=%.1f\n", bestRemote.sent/float64(events/2))
	fmt.Printf("exchange_remote_uncoalesced_vs_local=%.2f\n", bestLocal.el.Seconds()/bestUncoalesced.el.Seconds())
	fmt.Printf("exchange_remote_uncoalesced_bytes_per_event_crossing=%.1f\n", bestUncoalesced.sent/float64(events/2))
	fmt.Printf("exchange_remote_all_cpus_vs_local=%.2f\n", bestLocal.el.Seconds()/bestAllCPUs.el.Seconds())
	fmt.Printf("exchange_remote_zstd_events_per_sec=%.0f\n", float64(events)/bestZstd.el.Seconds())
	fmt.Printf("exchange_remote_zstd_bytes_per_event_crossing=%.1f\n", bestZstd.sent/float64(events/2))
	if bestLocal.cpuNs > 0 && bestRemote.cpuNs > 0 && bestZstd.cpuNs > 0 && bestUncoalesced.cpuNs > 0 && bestAllCPUs.cpuNs > 0 {
		fmt.Printf("exchange_remote_all_cpus_cpu_ns_per_event=%.0f\n", float64(bestAllCPUs.cpuNs)/float64(events))
		fmt.Printf("exchange_remote_uncoalesced_cpu_ns_per_event=%.0f\n", float64(bestUncoalesced.cpuNs)/float64(events))
		fmt.Printf("exchange_remote_zstd_cpu_ns_per_event=%.0f\n", float64(bestZstd.cpuNs)/float64(events))
		fmt.Printf("exchange_local_cpu_ns_per_event=%.0f\n", float64(bestLocal.cpuNs)/float64(events))
		fmt.Printf("exchange_remote_cpu_ns_per_event=%.0f\n", float64(bestRemote.cpuNs)/float64(events))
	}
}

// exchangeSentBytes adds up weir_exchange_sent_bytes_total over the
// cluster's taskmanagers.
func exchangeSentBytes(tb testing.TB, c *clustertest.Cluster) float64 {
	tb.Helper()
	var total float64
	for i := range c.TMs {
		resp, err := c.HTTPClient().Get(c.URL(c.TaskManagerMetricsAddr(i)) + "/metrics")
		if err != nil {
			tb.Fatal(err)
		}
		found := false
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), " ")
			if !ok || name != "weir_exchange_sent_bytes_total" {
				continue
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				tb.Fatalf("metric %s: %v", name, err)
			}
			total += v
			found = true
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			tb.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !found {
			tb.Fatalf("taskmanager %d metrics: status %d, weir_exchange_sent_bytes_total found: %v", i, resp.StatusCode, found)
		}
	}
	return total
}
