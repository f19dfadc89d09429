// Package connectors owns Weir's built-in sources and sinks: the datagen and
// file sources (bounded, or continuously watching a directory) and the print,
// file and discard sinks. Register adds them to a stream.Registry. The
// message and database connectors live in the subpackages kafka, postgres
// and nats; package builtin registers them too.
//
// Every connector is configured by JSON decoded with stream.DecodeConfig into
// a Config struct with camelCase tags (YAML job specs are converted to that
// JSON). Each type's Plan function validates the config at submit time and
// returns the output schema; errors name the option, the reason and what is
// allowed, and match stream.ErrConfig with errors.Is.
//
// Sources emit at most one batch per Poll and fill whole columns at a time;
// nothing on the per-record path uses reflection or JSON libraries.
//
// Checkpoints: the datagen and file sources implement stream.Checkpointed
// (their splits are operator list state and restore exactly, also with
// another parallelism; a continuous file source also keeps the set of files it
// has seen, as union state), and the file sink, when the job checkpoints, is
// a two-phase-commit sink built on stream/twophase: it claims its directory
// for one job and operator (see FileSink and ClaimFile) and may be rescaled
// on restore too.
//
// connectors imports the standard library, packages stream and
// stream/twophase, and internal/errkind and internal/statecodec (the
// encoding of its state items) only; its tests also use package
// checkpoint, to hand state out on restore exactly as the runtime does.
package connectors

import "github.com/weirstream/weir/stream"

// Register adds the built-in connectors to r: the sources "datagen" and
// "file", and the sinks "print", "file" and "discard".
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:      "datagen",
		Kind:      stream.KindSource,
		Plan:      planDatagen,
		NewSource: newDatagenSource,
		Config:    DatagenConfig{},
		Doc:       "deterministic generated rows (fields or the Nexmark-like \"bid\" preset), optionally rate-limited",
	})
	r.Register(stream.OperatorType{
		Name:      "file",
		Kind:      stream.KindSource,
		Plan:      planFileSource,
		NewSource: newFileSource,
		Config:    FileSourceConfig{},
		Doc:       "reads files (a file, a directory or a glob) as lines or JSON lines; with monitorInterval, keeps watching a directory for new files",
	})
	r.Register(stream.OperatorType{
		Name:        "print",
		Kind:        stream.KindSink,
		Plan:        planPrint,
		NewOperator: newPrintOperator,
		Config:      PrintConfig{},
		Doc:         "writes rows to stdout as text or JSON",
	})
	r.Register(stream.OperatorType{
		Name:        "file",
		Kind:        stream.KindSink,
		Plan:        planFileSink,
		NewOperator: newFileSinkOperator,
		Config:      FileSinkConfig{},
		Doc:         "writes rows to <path>/part-<subtask> as CSV or JSON lines; with checkpointing, exactly once by two-phase commit (part-<job>-<operator>-<subtask>-<seq>, one job and operator per directory)",
	})
	r.Register(stream.OperatorType{
		Name:        "discard",
		Kind:        stream.KindSink,
		Plan:        planDiscard,
		NewOperator: newDiscardOperator,
		Config:      struct{}{},
		Doc:         "drops rows, counting them (for benchmarks)",
	})
}
