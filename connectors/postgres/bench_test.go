package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// BenchmarkPostgresSink writes 200,000 rows (five columns, 1024-row
// batches, a checkpoint every 51,200 rows) into a table, exactly once and
// by upsert into a table keyed by seq, and prints the exactly-once rate
// in rows committed per second (checked by count(*)) and its ratio to the
// upsert rate.
func BenchmarkPostgresSink(b *testing.B) {
	server(b)
	const rows, batch, perCheckpoint = 200_000, 1024, 50
	rate := func(mode string) float64 {
		cols, cfg := eventCols, Config{DSN: srv.DSN(), Mode: mode}
		if mode == ModeUpsert {
			cols += ", PRIMARY KEY (seq)"
			cfg.KeyColumns = []string{"seq"}
		}
		cfg.Table = newTable(b, cols)
		k := openSink(b, cfg, octx(newJob("bench-"+mode), "s", 0, 1, 1, true, eventSchema), 0, nil, "")
		var batches []*stream.Batch
		for lo := int64(0); lo < rows; lo += batch {
			batches = append(batches, events(lo, min(lo+batch, rows)))
		}
		ckp := int64(0)
		start := time.Now()
		for i, in := range batches {
			if err := k.ProcessBatch(0, in, nil); err != nil {
				b.Fatal(err)
			}
			if (i+1)%perCheckpoint == 0 || i == len(batches)-1 {
				ckp++
				snapshot(b, k, ckp)
				must(b, k.NotifyCheckpointComplete(ckp))
			}
		}
		must(b, k.Finish(nil))
		elapsed := time.Since(start)
		must(b, k.Close())
		var n, distinct int64
		must(b, dbConn(b).QueryRow(testCtx(b), "SELECT count(*), count(DISTINCT seq) FROM "+cfg.Table).Scan(&n, &distinct))
		if n != rows || distinct != rows {
			b.Fatalf("%s: %d rows (%d distinct) in the table, want %d", mode, n, distinct, rows)
		}
		mustExec(b, "DROP TABLE "+cfg.Table)
		return rows / elapsed.Seconds()
	}
	var exactly, upsert float64
	for b.Loop() {
		exactly = rate(ModeExactlyOnce)
		upsert = rate(ModeUpsert)
	}
	b.ReportMetric(exactly, "rows/s")
	fmt.Printf("postgres_sink_rows_per_sec=%.0f\n", exactly)
	fmt.Printf("postgres_upsert_rows_per_sec=%.0f\n", upsert)
	fmt.Printf("postgres_exactly_once_vs_upsert=%.3f\n", exactly/upsert)
}
