package postgres

import (
	"fmt"
	"testing"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/stream"
)

func registry() *stream.Registry {
	r := stream.NewRegistry()
	connectors.Register(r)
	Register(r)
	return r
}

// TestExampleSpecPlans: examples/datagen-to-postgres.yaml loads and plans.
func TestExampleSpecPlans(t *testing.T) {
	r := registry()
	g, err := jobspec.Load("../../examples/datagen-to-postgres.yaml", r)
	must(t, err)
	must(t, stream.Plan(g, r))
}

// TestRunGraphDatagenToPostgres runs datagen into the sink on the real
// task runtime, two subtasks each (without checkpointing there, so
// exactly_once commits at the end of the input): every generated row is
// in the table once. The runtime runs every job as "dataflowtest", so the
// sink's uid differs between runs against the same server.
func TestRunGraphDatagenToPostgres(t *testing.T) {
	server(t)
	table := newTable(t, "seq bigint NOT NULL, customer text, amount double precision, express boolean, ordered_at timestamptz")
	const rows = 5000
	spec := fmt.Sprintf(`name: datagen-to-postgres-test
parallelism: 2
operators:
  - uid: orders
    type: datagen
    config:
      rows: %d
      seed: 11
      batchSize: 300
      fields:
        - {name: seq, kind: sequence}
        - {name: customer, kind: key, cardinality: 100, prefix: c}
        - {name: amount, kind: random, type: float64, min: 1, max: 500}
        - {name: express, kind: random, type: bool}
        - {name: ts, kind: timestamp, stepMillis: 10}
  - uid: sink%d
    type: postgres
    config: {dsn: %q, table: %s, mode: exactly_once, columns: {ts: ordered_at}, batchRows: 700}
`, rows, tableSeq.Add(1), srv.DSN(), table)
	r := registry()
	g, err := jobspec.Parse("spec.yaml", []byte(spec), r)
	must(t, err)
	must(t, stream.Plan(g, r))
	must(t, dataflowtest.RunGraph(testCtx(t), g, r))
	var n, distinct, lo, hi, stamped int64
	must(t, dbConn(t).QueryRow(testCtx(t), `SELECT count(*), count(DISTINCT seq), min(seq), max(seq), count(ordered_at) FROM `+table).
		Scan(&n, &distinct, &lo, &hi, &stamped))
	if n != rows || distinct != rows || lo != 0 || hi != rows-1 || stamped != rows {
		t.Fatalf("table holds %d rows, %d distinct seqs from %d to %d, %d with ordered_at; want seqs 0-%d once each, all stamped", n, distinct, lo, hi, stamped, rows-1)
	}
}
