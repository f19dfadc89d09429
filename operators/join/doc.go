// Package join owns Weir's built-in two-input keyed joins:
//
//   - "window_join": rows of input 0 and input 1 with equal keys whose event
//     times fall in the same tumbling event-time window are joined; a
//     window's pairs are emitted when the watermark passes its end, and its
//     rows are dropped then;
//   - "stream_join": a keyed streaming inner join that keeps the rows of
//     both inputs in state: a row joins with the stored rows of the other
//     input that have its key, as they arrive (a regular SQL inner join of
//     two append-only streams, such as Nexmark q3's person ⋈ auction on
//     seller = id). Rows are kept forever, or with a ttl (Config.TTL) until
//     ttl after they were stored, in processing time (idle-state retention).
//
// Both take two inputs (job spec `inputs: [left, right]`) that must be keyed
// (keyBy) by the same number of fields of matching types; rows with a null
// key field never join. The output is the fields of input 0, then those of
// input 1 (a field of input 1 whose name input 0 already uses is renamed
// with the config's rightPrefix, default "right_"), then for window_join
// window_start and window_end. Register adds both types to a
// stream.Registry.
//
// Both keep their rows (and window_join its timers) in the keyed-state
// backend the task runtime owns (stream.KeyedStateful; layout in base.go,
// encodings in row.go), which checkpoints and restores them, at any
// parallelism. Their own stream.Checkpointed state is union operator state:
// the type signature a restore checks, and window_join's watermark.
//
// join imports the standard library, package stream, statebackend and the
// value encoding of operators/internal/rowenc.
package join
