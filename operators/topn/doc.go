// Package topn owns Weir's built-in top-n window operators:
//
//   - "window_topn" keeps, per key (the input's keyBy, or the whole subtask
//     without one) and event-time window (tumbling, or sliding with slide),
//     the n rows with the largest (or smallest) value of a numeric field,
//     and emits them when the watermark passes the window's end;
//   - "window_max" is window_topn with n = 1 that keeps ties: every row
//     whose value equals the window's maximum (Nexmark q5's hottest
//     auctions and q7's highest bids).
//
// The output is the input's fields, then window_start and window_end
// (unless windowBounds is false), then the rank when rankAs names it; each
// output row carries event time window end - 1, so a second top-n with the
// same windows downstream (for example at parallelism 1 after per-subtask
// top-ns) sees each window's rows in one window. Windows follow the window
// package's alignment: starts at offset + k*slide.
//
// Ordering: rows compare by the field's value; among equal values the one
// that arrived first ranks higher. Without ties exactly min(n, rows) rows
// are emitted; with ties (withTies: true) all rows whose value is at least
// the n-th best are. Nulls never rank. Float NaN ranks above +Inf.
//
// Rows are kept per key and slide-long pane (a row is encoded only if it
// enters its pane's top n), and a sliding window merges its panes' top-n
// lists. With keyBy the panes are keyed state in the backend the task
// runtime owns (TopN implements stream.KeyedStateful), and windows fire on
// the backend's event-time timers, one per key and window, which clear a
// key's state with its last window; the runtime checkpoints that state and
// restores it at any parallelism. Without keyBy the top-n is per subtask
// and its panes are operator list state. Both keep their watermark and a
// check of the state's shape as union operator state. The layout is in
// state.go. Register adds both types to a stream.Registry.
//
// topn imports the standard library, package stream, package statebackend
// (the keyed-state API) and operators/internal/rowenc (key and value
// encoding).
package topn
