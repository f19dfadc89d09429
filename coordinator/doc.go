// Package coordinator will hold the checkpoint coordinator: a deterministic
// state machine (no goroutines, clock or I/O) that the jobmanager drives with
// ticks and task acknowledgements and that returns the actions to carry out
// (trigger, abort, complete, notify), in the shape of etcd-raft's Step/Ready.
//
// It is the next milestone (barrier checkpoints); until then Weir runs jobs
// without checkpoints and this package is empty. It may import the standard
// library only.
package coordinator
