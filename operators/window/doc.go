// Package window owns Weir's built-in watermark and window operators:
//
//   - "watermarks" assigns each record's event time (Batch.Times) from a
//     timestamp field and emits bounded-out-of-orderness watermarks;
//   - "tumbling_window" and "sliding_window" aggregate keyed records into
//     event-time windows (count, sum, min, max, avg) and emit one row per key
//     and window when the watermark passes the window's end; a
//     tumbling_window with time "processing" uses windows of the task's
//     clock instead, fired by processing-time timers (proctime.go);
//   - "session_window" aggregates keyed records into event-time sessions,
//     windows [ts, ts+gap) that merge when they overlap or touch, and emits
//     one row per key and session when the watermark passes its end.
//
// Register adds the four operator types to a stream.Registry. Their Plan
// functions check a config against the input schema at submit time and return
// the output schema; the operators themselves are built per subtask by the
// task runtime.
//
// Apart from those processing-time windows (WindowConfig.Time), windows are
// event-time windows fired by the watermark: window starts are
// aligned to offset modulo slide, a window [start, end) fires when the
// watermark reaches end-1, its state is kept until the watermark reaches
// end-1+allowedLateness (a record arriving in that time re-fires the window
// with the updated result), and a record all of whose windows are past that
// point is late: it is counted (LateRecordsDropped, the
// weir_operator_late_records_dropped_total metric) and goes to the side output
// "late" (LateOutput), which a job may read (input: <uid>.late).
//
// The three window types keep their keyed state in the runtime's keyed-state
// backend (stream.KeyedStateful): the tumbling and sliding windows one
// accumulator slot per key and pane (statebackend.Slots; state.go), firing
// from an index of the panes of the keys resident in memory (all of them on
// the heap; on Pebble a working set within a memory budget, the other keys
// on event-time timers), the session window its sessions and timers
// (sessionstate.go).
// Their operator state is a signature and the watermark; the watermarks
// operator keeps its largest timestamp.
//
// The package imports the standard library, package stream, statebackend
// and operators/internal/rowenc (the encoding of key values).
package window
