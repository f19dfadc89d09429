package twophase

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
)

// Checkpoint state of a two-phase-commit sink:
//
//	"twophase-pending"  operator list state, one item per pre-committed,
//	                    not yet committed transaction:
//	                    version=1 | string job | string uid |
//	                    varint subtask | varint attempt |
//	                    varint expected checkpoint | varint seq |
//	                    varint pre-commit checkpoint | bytes handle
//	"twophase-writers"  union state, one item per subtask:
//	                    version=1 | varint subtask | varint parallelism |
//	                    uvarint n | n × string name
//
// where the names are the TxnID.Name of the subtask's pending
// transactions: every subtask receives all of them, so that a subtask
// cleaning up after an old subtask index on a rescale never aborts a
// transaction of the checkpoint that another subtask commits.
// Strings and bytes are a uvarint length and the bytes. The job and uid
// are the writer's: a job submitted from another job's checkpoint commits
// that job's transactions under their own names.
const (
	PendingState   = "twophase-pending"
	WritersState   = "twophase-writers"
	pendingVersion = 1
	writersVersion = 1
	// maxHandle bounds one handle, and every other string, in the state
	// (a handle is a name and a few numbers, never the rows).
	maxHandle = 1 << 20
)

// DeclareState declares the framework's state; the Plan function of a
// sink built on NewOperator calls it.
func DeclareState(p *stream.PlanContext) {
	p.DeclareState(stream.StateDecl{Name: PendingState, Kind: stream.StateOperatorList})
	p.DeclareState(stream.StateDecl{Name: WritersState, Kind: stream.StateUnion})
}

func encodePending(p Pending) []byte {
	b := []byte{pendingVersion}
	b = statecodec.AppendString(b, p.ID.JobID)
	b = statecodec.AppendString(b, p.ID.OperatorUID)
	b = statecodec.AppendVarint(b, int64(p.ID.Subtask))
	b = statecodec.AppendVarint(b, p.ID.Attempt)
	b = statecodec.AppendVarint(b, p.ID.Checkpoint)
	b = statecodec.AppendVarint(b, p.ID.Seq)
	b = statecodec.AppendVarint(b, p.Checkpoint)
	return statecodec.AppendString(b, string(p.Handle))
}

func decodePending(item []byte) (Pending, error) {
	r := statecodec.NewReader(item)
	if v := r.Byte(); r.Err() == nil && v != pendingVersion {
		return Pending{}, fmt.Errorf("unknown version %d of a pending transaction (this Weir reads version %d); restore it with the Weir that wrote it", v, pendingVersion)
	}
	var p Pending
	p.ID.JobID = r.String(maxHandle)
	p.ID.OperatorUID = r.String(maxHandle)
	p.ID.Subtask = r.Int()
	p.ID.Attempt = r.Varint()
	p.ID.Checkpoint = r.Varint()
	p.ID.Seq = r.Varint()
	p.Checkpoint = r.Varint()
	p.Handle = []byte(r.String(maxHandle))
	if err := r.Done(); err != nil {
		return Pending{}, err
	}
	if p.ID.Subtask < 0 || p.Checkpoint < 0 {
		return Pending{}, errors.New("negative subtask or checkpoint id")
	}
	return p, nil
}

func encodeWriter(subtask, parallelism int, pending []Pending) []byte {
	b := []byte{writersVersion}
	b = statecodec.AppendVarint(b, int64(subtask))
	b = statecodec.AppendVarint(b, int64(parallelism))
	b = statecodec.AppendUvarint(b, uint64(len(pending)))
	for _, p := range pending {
		b = statecodec.AppendString(b, p.ID.Name())
	}
	return b
}

func decodeWriter(item []byte) (subtask, parallelism int, names []string, err error) {
	r := statecodec.NewReader(item)
	if v := r.Byte(); r.Err() == nil && v != writersVersion {
		return 0, 0, nil, fmt.Errorf("unknown version %d of a writer item (this Weir reads version %d)", v, writersVersion)
	}
	subtask, parallelism = r.Int(), r.Int()
	for range r.Count(1) {
		names = append(names, r.String(maxHandle))
	}
	if err := r.Done(); err != nil {
		return 0, 0, nil, err
	}
	if parallelism <= 0 || subtask < 0 || subtask >= parallelism {
		return 0, 0, nil, fmt.Errorf("subtask %d of parallelism %d", subtask, parallelism)
	}
	return subtask, parallelism, names, nil
}
