// Package join owns Weir's built-in two-input keyed joins:
//
//   - "window_join": rows of input 0 and input 1 with equal keys whose event
//     times fall in the same tumbling event-time window are joined; a
//     window's pairs are emitted when the watermark passes its end, and its
//     rows are dropped then (Flink's tumbling window join);
//   - "stream_join": a keyed streaming inner join that keeps every row of
//     both inputs in state forever: a row joins with the stored rows of the
//     other input that have its key, as they arrive (a regular SQL inner
//     join of two append-only streams, such as Nexmark q3's
//     person ⋈ auction on seller = id).
//
// Both take two inputs (job spec `inputs: [left, right]`) that must be keyed
// (keyBy) by the same number of fields of matching types; rows with a null
// key field never join. The output is the fields of input 0, then those of
// input 1 (a field of input 1 whose name input 0 already uses is renamed
// with the config's rightPrefix, default "right_"), then for window_join
// window_start and window_end. Register adds both types to a
// stream.Registry.
//
// Both implement stream.Checkpointed and write their rows as keyed state per
// key group (formats in checkpoint.go), so they restore at any parallelism.
//
// Stored rows live in package keyrows (join/keyrows), which package topn
// shares. join imports the standard library, package stream and keyrows.
package join
