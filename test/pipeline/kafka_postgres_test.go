package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/connectors/kafka/kafkatest"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// The reference pipeline: a Kafka topic → event-time sliding window per
// key → PostgreSQL, exactly once, on three taskmanagers and two
// jobmanagers (HA on etcd), through taskmanager SIGKILLs and a SIGKILL of
// the leading jobmanager.
const pipelineSpec = `name: kafka-window-postgres
parallelism: 3
checkpointing:
  interval: 500ms
  storage: %q
restartStrategy:
  type: fixed-delay
  attempts: 100000
  delay: 200ms
operators:
  - uid: events
    type: kafka
    parallelism: 2
    config:
      bootstrapServers: [%s]
      topics: [%s]
      startFrom: earliest
      format: json
      fields:
        - {name: key, type: string}
        - {name: v, type: int64}
        - {name: ts, type: timestamp}
      watermark: {field: ts, maxOutOfOrderness: 0s, idleTimeout: 10m}
  - uid: windows
    type: sliding_window
    keyBy: [key]
    config:
      size: 2s
      slide: 1s
      aggregates:
        - {fn: count, as: n}
        - {fn: sum, field: v, as: total}
  - uid: out
    type: postgres
    config:
      dsn: %q
      table: windows
`

const (
	pipelinePartitions = 4
	pipelineKeys       = 13
	// Event time advances 10 ms per record: a second of event time is
	// 100 records, each window of 2 s up to 200 records over 13 keys.
	pipelineStepMillis = 10
	pipelineBase       = int64(1_700_000_000_000)
	// flushKey is the key of the records that end the input: one per
	// partition, far ahead in event time, so that every partition's
	// watermark passes every window of the real records.
	flushKey = "flush"
)

func pipelineKills() int {
	if k, err := strconv.Atoi(os.Getenv("WEIR_PIPELINE_KILLS")); err == nil && k > 0 {
		return k
	}
	return 3
}

type windowKey struct {
	key   string
	start int64
}

type windowAgg struct{ n, total int64 }

// expectedWindows computes the sliding windows (2 s every 1 s) of records
// 0..n-1 as the producer makes them.
func expectedWindows(n int) map[windowKey]windowAgg {
	want := make(map[windowKey]windowAgg)
	for i := range n {
		key, v, ts := pipelineRecord(i)
		first := ts - ts%1000 - 1000
		for start := first; start <= ts; start += 1000 {
			if start+2000 > ts {
				a := want[windowKey{key, start}]
				a.n++
				a.total += v
				want[windowKey{key, start}] = a
			}
		}
	}
	return want
}

func pipelineRecord(i int) (key string, v, ts int64) {
	return "k" + strconv.Itoa(i%pipelineKeys), int64(i % 97), pipelineBase + int64(i)*pipelineStepMillis
}

// producer writes records 0..n-1 of the pipeline to the topic, partition
// i mod 4 (so each partition's event time only grows), at about rate per
// second, then the flush records.
func produce(ctx context.Context, t *testing.T, brokers []string, topic string, n, rate int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	const chunk = 50
	tick := time.NewTicker(time.Second * chunk / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i += chunk {
		var recs []*kgo.Record
		for j := i; j < min(i+chunk, n); j++ {
			key, v, ts := pipelineRecord(j)
			value := fmt.Sprintf(`{"key":%q,"v":%d,"ts":%q}`, key, v, time.UnixMilli(ts).UTC().Format(time.RFC3339Nano))
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(j % pipelinePartitions), Value: []byte(value)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	var recs []*kgo.Record
	for p := range int32(pipelinePartitions) {
		ts := time.UnixMilli(pipelineBase + int64(n)*pipelineStepMillis + 1_000_000).UTC().Format(time.RFC3339Nano)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, `{"key":%q,"v":0,"ts":%q}`, flushKey, ts)})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// readWindows reads the sink's table: every row, so that a window written
// twice counts as a duplicate.
func readWindows(ctx context.Context, dsn string) (map[windowKey][]windowAgg, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT key, window_start, n, total FROM windows WHERE key <> $1`, flushKey)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make(map[windowKey][]windowAgg)
	for rows.Next() {
		var (
			key      string
			start    time.Time
			n, total int64
		)
		if err := rows.Scan(&key, &start, &n, &total); err != nil {
			return nil, err
		}
		k := windowKey{key, start.UnixMilli()}
		got[k] = append(got[k], windowAgg{n, total})
	}
	return got, rows.Err()
}

// compare counts windows missing or wrong (lost) and rows beyond one per
// window (duplicated) against want.
func compare(want map[windowKey]windowAgg, got map[windowKey][]windowAgg) (lost, duplicated, wrong int) {
	for k, w := range want {
		rows := got[k]
		switch {
		case len(rows) == 0:
			lost++
		default:
			duplicated += len(rows) - 1
			if rows[0] != w {
				wrong++
			}
		}
	}
	for k, rows := range got {
		if _, ok := want[k]; !ok {
			duplicated += len(rows)
		}
	}
	return lost, duplicated, wrong
}

func completedSince(c *clustertest.Cluster, jobID string, since time.Time) int {
	resp, err := c.Checkpoints(jobID)
	if err != nil {
		return 0
	}
	n := 0
	for _, cp := range resp.GetCheckpoints() {
		if cp.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && cp.GetTriggerTimeMs() > since.UnixMilli() {
			n++
		}
	}
	return n
}

func waitCheckpoints(t *testing.T, c *clustertest.Cluster, jobID string, since time.Time, n int, what string) {
	t.Helper()
	polltest.Eventually(t, 3*time.Minute, fmt.Sprintf("%d checkpoints %s", n, what), func() bool {
		return completedSince(c, jobID, since) >= n
	})
}

// TestPipelineKafkaWindowPostgres is the reference pipeline through faults:
// records stream into Kafka while the job runs; taskmanagers are SIGKILLed
// (and restarted) WEIR_PIPELINE_KILLS times (default 3) and the leading
// jobmanager once; then the table must hold every window of the input
// exactly once, with the right count and sum.
func TestPipelineKafkaWindowPostgres(t *testing.T) {
	kills := pipelineKills()
	topic := kafkatest.Topic("bids")
	brokers := kafkatest.Start(t, map[string]int32{topic: pipelinePartitions})
	pg := pgtest.Start(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE windows (key text NOT NULL, window_start timestamptz NOT NULL, window_end timestamptz NOT NULL, n bigint NOT NULL, total bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	c := clustertest.Start(t, clustertest.Options{
		TLS:               true,
		JobManagers:       2,
		TaskManagers:      3,
		Slots:             2,
		HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout:  3 * time.Second,
		SlotWaitTimeout:   2 * time.Minute,
		LogLevel:          "info",
		HA:                &clustertest.HA{LeaseTTL: 3 * time.Second},
	})
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	quoted := make([]string, len(brokers))
	for i, b := range brokers {
		quoted[i] = strconv.Quote(b)
	}
	body := fmt.Sprintf(pipelineSpec, "file://"+filepath.Join(dir, "ckpt"), strings.Join(quoted, ", "), topic, pg.DSN())
	if err := os.WriteFile(spec, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	// About 10 s of records per fault plus a tail.
	const rate = 400
	records := rate * (12*(kills+1) + 10)
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var wg sync.WaitGroup
	var prodErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		prodErr = produce(prodCtx, t, brokers, topic, records, rate)
	}()

	out, err := c.Weir("submit", spec)
	if err != nil {
		t.Fatalf("weir submit: %v\n%s", err, out)
	}
	fields := strings.Fields(out)
	jobID := fields[len(fields)-1]
	started := time.Now()
	waitCheckpoints(t, c, jobID, started, 2, "before the first fault")

	for k := range kills {
		i := k % len(c.TMs)
		c.KillTaskManager(i)
		killed := time.Now()
		c.RestartTaskManager(i)
		waitCheckpoints(t, c, jobID, killed, 2, fmt.Sprintf("after taskmanager kill %d", k+1))
	}
	restarts := restartsOf(c, jobID)
	leader, epoch := c.WaitLeader(0)
	c.KillJobManager(leader)
	killed := time.Now()
	c.WaitLeader(epoch)
	waitCheckpoints(t, c, jobID, killed, 2, "after the leading jobmanager was killed")

	wg.Wait()
	if prodErr != nil {
		t.Fatalf("producing the input: %v", prodErr)
	}
	want := expectedWindows(records)
	var got map[windowKey][]windowAgg
	polltest.NoError(t, 5*time.Minute, "every window in the table", func() error {
		if st := jobState(c, jobID); st != weirpb.JobState_JOB_STATE_RUNNING {
			t.Fatalf("job %s is %v, want RUNNING", jobID, st)
		}
		var err error
		if got, err = readWindows(ctx, pg.DSN()); err != nil {
			return err
		}
		if n := len(got); n < len(want) {
			return fmt.Errorf("%d of %d windows", n, len(want))
		}
		return nil
	})
	// Two more checkpoints: anything that would be committed twice is.
	waitCheckpoints(t, c, jobID, time.Now(), 2, "after the last window arrived")
	got, err = readWindows(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	lost, duplicated, wrong := compare(want, got)
	fmt.Printf("pipeline=kafka-window-postgres kills=%d records=%d windows=%d restarts=%d lost=%d duplicated=%d wrong=%d\n",
		kills+1, records, len(want), restarts, lost, duplicated, wrong)
	if lost != 0 || duplicated != 0 || wrong != 0 {
		t.Fatalf("not exactly once: lost=%d duplicated=%d wrong=%d of %d windows", lost, duplicated, wrong, len(want))
	}
	if restarts < kills {
		t.Errorf("the job restarted %d times before the jobmanager kill, want at least %d (one per taskmanager kill)", restarts, kills)
	}
	if _, err := c.Weir("jobs", "cancel", jobID); err != nil {
		t.Fatalf("weir cancel: %v", err)
	}
}

func jobState(c *clustertest.Cluster, jobID string) weirpb.JobState {
	resp, err := c.Job(jobID)
	if err != nil {
		return weirpb.JobState_JOB_STATE_RUNNING // a takeover in progress: ask again
	}
	return resp.GetJob().GetState()
}
