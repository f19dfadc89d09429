// Package kafka owns Weir's Kafka connector: the "kafka" source, which reads
// topic partitions exactly once, and the "kafka" sink, which writes a topic
// exactly once through Kafka transactions driven by the two-phase-commit
// framework (package stream/twophase), or at least once, or with no
// guarantee. Register adds both to a stream.Registry.
//
// # Source
//
// Every partition of the configured topics is a split. A subtask assigns its
// partitions to its consumer directly (no consumer-group rebalancing) and
// reads them with isolation level read_committed, so records of aborted
// transactions are never emitted. The Kafka client fetches in the
// background; Poll only drains what it has buffered, at most one batch, and
// never blocks.
//
// The next offset of each split (the offset after the last record emitted)
// is operator list state, so a restore resumes every partition exactly where
// the checkpoint left it, at any parallelism. Every subtask also writes one
// item of union state naming the partitions it owns, so that after a restore
// every subtask knows which partitions some subtask already reads. A
// partition that no subtask owns yet (at a fresh start, or one found by
// partition discovery, or after a restore) is taken by exactly one subtask,
// its owner by a fixed rule (Owner), and a partition discovered after the
// start is read from its earliest offset: it was created after the job
// started, so all its records are new. The consumer group, when configured,
// receives the offsets of every completed checkpoint as a convenience for
// monitoring; it is never read back for recovery.
//
// Per-partition watermarks: the source's watermark is the least, over its
// active partitions, of the largest event time seen minus
// maxOutOfOrderness minus 1 ms (the convention of the watermarks operator:
// a record maxOutOfOrderness behind the largest time is still on time). A
// partition without records for idleTimeout of processing time is idle and
// does not hold the watermark back; when every partition is idle the
// watermark stays. A watermark is emitted only when it advances.
//
// Limits: a subtask that reads no partition emits no watermark and so holds
// back event time downstream (give the source at most as many subtasks as
// partitions); a checkpointed offset that retention has deleted meanwhile
// resumes at the earliest offset left; a topic added to topics or matching
// topicPattern only at a restore is read from its earliest offset, like a
// discovered partition.
//
// # Sink
//
// exactly_once (the default when the job checkpoints) writes each
// checkpoint's rows in a Kafka transaction of its own, pre-committed
// (flushed) at the checkpoint barrier and committed when the checkpoint
// completes, from the process that pre-committed it or, after a failure,
// from any other (see txnSystem for the transactional ids and the recovery
// rules). at_least_once is an idempotent producer flushed at every
// checkpoint and at the end of input; none flushes only at the end.
//
// # Imports
//
// kafka imports the standard library, package stream, stream/twophase,
// connectors (for the JSON row decoder and encoder), internal/statecodec
// (the encoding of its state), internal/clienttls and internal/limitedfile
// (TLS and password files) and the franz-go client packages (kgo, kadm,
// kmsg, kerr, sasl). Its tests also use package checkpoint, to hand out
// state on restore exactly as the runtime does, and franz-go's in-process
// fake cluster kfake through connectors/kafka/kafkatest.
package kafka

import "github.com/weirstream/weir/stream"

// TypeName is the name of the source and sink operator types.
const TypeName = "kafka"

// Register adds the "kafka" source and sink to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:      TypeName,
		Kind:      stream.KindSource,
		Plan:      planSource,
		NewSource: func(config []byte) (stream.Source, error) { return NewSource(config) },
		Config:    SourceConfig{},
		Doc:       "reads Kafka topics exactly once (read_committed; offsets in checkpoints; raw or JSON values; per-partition watermarks)",
	})
	r.Register(stream.OperatorType{
		Name:        TypeName,
		Kind:        stream.KindSink,
		Plan:        planSink,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewSink(config) },
		Config:      SinkConfig{},
		Doc:         "writes rows to a Kafka topic as JSON or raw values; exactly once through Kafka transactions when the job checkpoints",
	})
}
