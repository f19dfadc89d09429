// Package nats owns Weir's NATS JetStream connectors: the "nats" source,
// which reads one stream exactly once by replaying it from checkpointed
// stream sequences, and the "nats" sink, which publishes rows with
// deterministic message ids so that the stream's de-duplication drops
// what a restore publishes again. Register adds both to a
// stream.Registry.
//
// Both are configured by JSON with camelCase keys (SourceConfig,
// SinkConfig, sharing ConnConfig for servers, credentials and TLS),
// decoded with stream.DecodeOperatorConfig; their Plan functions check
// everything that can be checked before the job runs, including the
// files they name against the path policy. At run time an unreachable
// server, a missing stream or a JetStream that is not enabled fails the
// task with one error naming the servers and the fix; the job's restart
// strategy retries.
//
// Delivery: the source is exactly once (see Source). The sink is exactly
// once within the stream's duplicate window when its input replays
// identically after a restore, and at least once otherwise (see Sink).
//
// Subpackage natstest runs a real NATS server for tests.
//
// nats imports the standard library, packages stream, stream/twophase
// (for the shape of names) and connectors (the JSON row codecs),
// internal/statecodec (the encoding of its state), internal/clienttls and
// internal/limitedfile (TLS and secret files), and the NATS client
// (github.com/nats-io/nats.go and its jetstream package). Its
// tests also use natstest, goleak, and packages checkpoint, blobstore and
// proto/weirpb, to hand state out on restore as the runtime does.
package nats

import "github.com/weirstream/weir/stream"

// Register adds the "nats" source and the "nats" sink to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:      "nats",
		Kind:      stream.KindSource,
		Plan:      planSource,
		NewSource: newSource,
		Config:    SourceConfig{},
		Doc:       "reads a NATS JetStream stream (raw messages or JSON), exactly once by stream sequence; optionally bounded (stopAtEnd)",
	})
	r.Register(stream.OperatorType{
		Name:        "nats",
		Kind:        stream.KindSink,
		Plan:        planSink,
		NewOperator: newSink,
		Config:      SinkConfig{},
		Doc:         "publishes rows to NATS JetStream (JSON or raw) with deterministic Nats-Msg-Id headers: exactly once within the stream's duplicate window for inputs that replay identically",
	})
}
