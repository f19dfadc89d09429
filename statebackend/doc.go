// Package statebackend owns Weir's keyed and operator state API: the typed
// state a user function works with (ValueState, ListState, MapState,
// ReducingState, AggregatingState, event-time and processing-time timers,
// operator list and union state), the codecs that turn state into bytes for
// checkpoints, and the Backend interface that stores keyed state of one
// operator subtask, partitioned into key groups (see
// stream.KeyGroupRangeFor).
//
// The layers are:
//
//   - Typed state (GetValueState, GetListState, ...) is generic and holds no
//     data: every call goes to a Table of the Backend, for the key the task
//     selected with Backend.SetCurrentKey.
//   - Table and Descriptor are the service-provider interface between typed
//     state and backends: untyped values (any) plus a ValueCodec that a
//     backend uses when it must serialise (heap: only at Snapshot; an
//     on-disk backend: on every write).
//   - Backends: package statebackend/heap (the default: Go maps, full
//     snapshots). Every backend must pass statebackend/statebackendtest's
//     conformance suite.
//
// Timers (TimerService) belong to keys and come in two separate domains.
// Event-time timers fire as the operator advances the backend's watermark
// from ProcessWatermark. Processing-time timers are Unix milliseconds of
// the task's clock (stream.OperatorContext.ProcessingTime); the task
// runtime asks the backend for the earliest one (NextProcessingTime),
// wakes when it is due and calls the operator's OnProcessingTime
// (stream.ProcessingTimeAware), which fires them with
// AdvanceProcessingTime. Timers of both domains are keyed state: they are
// in every snapshot and move with their key groups on rescaling.
//
// Keyed state is snapshotted as opaque chunks per key group, so that a
// checkpoint taken at one parallelism restores at another: a subtask restores
// exactly the key groups it owns now. Operator list state is redistributed
// round-robin on restore and union state is given whole to every subtask
// (both by the checkpoint storage layer, see stream.RestoreContext).
//
// State time-to-live (WithTTL, TTLConfig) is part of the typed-state layer, so
// every backend has it: a TTL state's table holds each value, list element or
// map entry together with the processing time (TTLConfig.Clock) of its last
// write, or last read or write with UpdateOnReadAndWrite, under a codec of its
// own ("ttl(...)"), and the handles never return a value whose TTL has run
// out. Expired state is removed when it is read, by incremental cleanup (each
// access of the state checks a few other keys of its table, with a cursor over
// Backend.Keys), and from the snapshots of backends that honour
// Descriptor.SnapshotFilter (heap); TTLConfig says what stays. Only
// NeverReturnExpired visibility is supported, and TTL cannot be switched on or
// off for restored state.
//
// Nothing in this package is safe for concurrent use: one task goroutine owns
// a backend and its state handles.
//
// statebackend imports the standard library and package stream only; the
// backend implementations import it, never the other way round.
package statebackend
