package stream

// Limits on the size of a job. A job's cost on the cluster grows with these
// quantities (every operator becomes a goroutine, buffers and state on every
// subtask; every name and config is copied into every deployment), so a
// small request could otherwise claim gigabytes before it processed a
// record. Plan enforces them, which holds every way of submitting a job (a
// job spec, the Builder, a gRPC submission planned again by the jobmanager)
// to the same bounds. They are generous for hand-written and generated jobs
// alike; a job that needs more should be split into several jobs.
const (
	// MaxOperators is the most vertices a JobGraph may have.
	MaxOperators = 1000

	// MaxChainLength is the most operators the jobmanager should chain into
	// one task. Plan does not enforce it, since chaining is the
	// jobmanager's decision: a longer run of chainable operators should be
	// split into several tasks rather than rejected, so that no one task
	// (one goroutine per subtask) holds the state and buffers of an
	// unbounded number of operators.
	MaxChainLength = 100

	// MaxNameLength is the longest job name, vertex Name, operator type
	// name or key field name, in bytes.
	MaxNameLength = 256

	// MaxUIDLength is the longest vertex UID, in bytes. UIDs are part of
	// every checkpoint object key, so they are held shorter than names.
	MaxUIDLength = 128

	// MaxConfigBytes is the largest vertex Config, in bytes of JSON. A
	// config says how an operator works; bulky data (lookup tables, rows)
	// belongs in a file or a source the operator reads.
	MaxConfigBytes = 64 << 10

	// MaxKeyGroups is the largest MaxParallelism, and so the largest
	// parallelism of any vertex.
	MaxKeyGroups = 32768
)
