// Package statebackend owns Weir's keyed and operator state API: the typed
// state a user function works with (ValueState, ListState, MapState,
// ReducingState, AggregatingState, event-time timers, operator list and union
// state), the codecs that turn state into bytes for checkpoints, and the
// Backend interface that stores keyed state of one operator subtask,
// partitioned into key groups (see stream.KeyGroupRangeFor).
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
// Keyed state is snapshotted as opaque chunks per key group, so that a
// checkpoint taken at one parallelism restores at another: a subtask restores
// exactly the key groups it owns now. Operator list state is redistributed
// round-robin on restore and union state is given whole to every subtask
// (both by the checkpoint storage layer, see stream.RestoreContext).
//
// Nothing in this package is safe for concurrent use: one task goroutine owns
// a backend and its state handles.
//
// statebackend imports the standard library and package stream only; the
// backend implementations import it, never the other way round.
package statebackend
