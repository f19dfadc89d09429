package twophase

import (
	"encoding/binary"
	"errors"
	"fmt"

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
	// maxHandle bounds one handle in the state (a handle is a name and a
	// few numbers, never the rows).
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
	b = appendString(b, p.ID.JobID)
	b = appendString(b, p.ID.OperatorUID)
	b = binary.AppendVarint(b, int64(p.ID.Subtask))
	b = binary.AppendVarint(b, p.ID.Attempt)
	b = binary.AppendVarint(b, p.ID.Checkpoint)
	b = binary.AppendVarint(b, p.ID.Seq)
	b = binary.AppendVarint(b, p.Checkpoint)
	return appendString(b, string(p.Handle))
}

func decodePending(item []byte) (Pending, error) {
	r := reader{b: item}
	if v := r.byte(); r.err == nil && v != pendingVersion {
		return Pending{}, fmt.Errorf("unknown version %d of a pending transaction (this Weir reads version %d); restore it with the Weir that wrote it", v, pendingVersion)
	}
	var p Pending
	p.ID.JobID = r.string()
	p.ID.OperatorUID = r.string()
	p.ID.Subtask = int(r.varint())
	p.ID.Attempt = r.varint()
	p.ID.Checkpoint = r.varint()
	p.ID.Seq = r.varint()
	p.Checkpoint = r.varint()
	p.Handle = []byte(r.string())
	if err := r.done(); err != nil {
		return Pending{}, err
	}
	if p.ID.Subtask < 0 || p.Checkpoint < 0 {
		return Pending{}, errors.New("negative subtask or checkpoint id")
	}
	return p, nil
}

func encodeWriter(subtask, parallelism int, pending []Pending) []byte {
	b := []byte{writersVersion}
	b = binary.AppendVarint(b, int64(subtask))
	b = binary.AppendVarint(b, int64(parallelism))
	b = binary.AppendUvarint(b, uint64(len(pending)))
	for _, p := range pending {
		b = appendString(b, p.ID.Name())
	}
	return b
}

func decodeWriter(item []byte) (subtask, parallelism int, names []string, err error) {
	r := reader{b: item}
	if v := r.byte(); r.err == nil && v != writersVersion {
		return 0, 0, nil, fmt.Errorf("unknown version %d of a writer item (this Weir reads version %d)", v, writersVersion)
	}
	subtask, parallelism = int(r.varint()), int(r.varint())
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		return 0, 0, nil, errTruncated
	}
	for range n {
		names = append(names, r.string())
	}
	if err := r.done(); err != nil {
		return 0, 0, nil, err
	}
	if parallelism <= 0 || subtask < 0 || subtask >= parallelism {
		return 0, 0, nil, fmt.Errorf("subtask %d of parallelism %d", subtask, parallelism)
	}
	return subtask, parallelism, names, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes an item, keeping the first error.
type reader struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated item")

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errTruncated
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	if r.err != nil {
		return ""
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > maxHandle || n > uint64(len(r.b)-k) {
		r.err = errTruncated
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d unexpected trailing bytes", len(r.b))
	}
	return r.err
}
