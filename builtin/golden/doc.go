// Package golden holds the golden checkpoint fixtures of Weir's stateful
// built-in operators and the tests that restore them; it has no code of its
// own.
//
// For each operator type in its table (running_count, sequence_check,
// stream_join, window_join, window_topn, window_max, tumbling_window,
// sliding_window, session_window) testdata/<type>.snap is the state one
// subtask wrote at a checkpoint taken after a prefix of a fixed input: the
// operator snapshot blob the task runtime uploads
// (checkpoint.EncodeSnapshot, format "WEIRSNAP" version 1), holding the
// keyed state as chunks per key group (the "WKG" format of
// statebackend/internal/chunk, version 1) and the operator's own union and
// list state. The tests restore every fixture into a new operator on the
// heap backend, on the Pebble backend and into two subtasks that split the
// key groups, feed the rest of the input and compare the output with an
// uninterrupted run and with a computation of the expected output written
// in the test. So a change that stops Weir from reading checkpoints it wrote
// before fails here. The tests also check the errors of a restore that
// cannot succeed: an unknown format version, a damaged chunk, a chunk filed
// under a key group it does not hold, and a state of another kind. And
// they check that every state a fixture holds is one its operator type
// declares at planning (stream.PlanContext.DeclareState), which restores
// are checked against.
//
// go test ./builtin/golden -update -run 'TestGolden/<type>' rewrites one
// fixture. Do that only for a new entry, or for a change of an operator's
// state that is meant to break restoring its old checkpoints; otherwise a
// failure here is a compatibility bug to fix, not a fixture to refresh.
//
// golden's tests import builtin, checkpoint, dataflow/dataflowtest,
// statebackend, statebackend/backends and stream.
package golden
