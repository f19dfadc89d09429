package twophase

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/weirstream/weir/stream"
)

// TxnID names one transaction of a two-phase-commit sink. No two
// transactions ever share a TxnID: the job and operator uid keep jobs and
// sinks apart, the subtask keeps subtasks apart, and the attempt (which
// grows with every deployment, across jobmanager restarts and leader
// changes; see stream.OperatorContext.Attempt) keeps a restarted job's
// transactions apart from the ones its failed attempt left. Checkpoint is
// the checkpoint the transaction is expected to be pre-committed in: one
// more than the last checkpoint the subtask took or restored when it began
// the transaction (it may end in a later one if checkpoints are skipped).
// Seq counts the transactions the subtask began in this attempt, from 1.
type TxnID struct {
	JobID       string
	OperatorUID string
	Subtask     int
	Attempt     int64
	Checkpoint  int64
	Seq         int64
}

// Prefix is the start that Name and SubtaskPrefix share for every
// transaction of one sink: "weir.<job>.<uid>." with the job id and uid as
// Token gives them.
func Prefix(jobID, uid string) string {
	return "weir." + Token(jobID) + "." + Token(uid) + "."
}

// SubtaskPrefix is the start of the Name of every transaction of one
// subtask of a sink, whatever its attempt: a System that finds
// transactions by name (PostgreSQL's prepared transactions, say) lists
// its leftovers with it.
func SubtaskPrefix(jobID, uid string, subtask int) string {
	return Prefix(jobID, uid) + strconv.Itoa(subtask) + "."
}

// Name is a printable, unique name for the transaction:
// weir.<job>.<uid>.<subtask>.<attempt>.<checkpoint>.<seq>, at most 111
// bytes of ASCII letters, digits, '.', '_', '-' and '~'. A System may use
// it as the external system's transaction name.
func (id TxnID) Name() string {
	return SubtaskPrefix(id.JobID, id.OperatorUID, id.Subtask) +
		strconv.FormatInt(id.Attempt, 10) + "." + strconv.FormatInt(id.Checkpoint, 10) + "." + strconv.FormatInt(id.Seq, 10)
}

func (id TxnID) String() string { return id.Name() }

// maxToken is the longest job id or uid that Token keeps as it is.
const maxToken = 32

// Token returns s if it is 1 to 32 ASCII letters, digits, '_' or '-';
// otherwise "~" and 16 hex digits of its SHA-256. Plain tokens never hold
// '.' or '~', so names built from tokens and dots never collide.
func Token(s string) string {
	plain := len(s) > 0 && len(s) <= maxToken
	for i := 0; plain && i < len(s); i++ {
		c := s[i]
		plain = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if plain {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "~" + hex.EncodeToString(sum[:8])
}

// ParseName is the inverse of Name for the fields Name keeps whole: it
// returns the subtask, attempt, checkpoint and seq of a transaction name
// that starts with Prefix(jobID, uid), ok false for any other string.
func ParseName(name, jobID, uid string) (subtask int, attempt, checkpoint, seq int64, ok bool) {
	rest, found := strings.CutPrefix(name, Prefix(jobID, uid))
	if !found {
		return 0, 0, 0, 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 {
		return 0, 0, 0, 0, false
	}
	var n [4]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 || p != strconv.FormatInt(v, 10) {
			return 0, 0, 0, 0, false
		}
		n[i] = v
	}
	if n[0] > 1<<30 {
		return 0, 0, 0, 0, false
	}
	return int(n[0]), n[1], n[2], n[3], true
}

// Pending is a pre-committed transaction: its id, the checkpoint it was
// pre-committed in and the handle Txn.PreCommit returned.
type Pending struct {
	ID         TxnID
	Checkpoint int64
	Handle     []byte
}

// Recovery tells System.Recover what to clean up.
type Recovery struct {
	// Restored says the subtask restored a checkpoint; CheckpointID is its
	// id (0 on a fresh start).
	Restored     bool
	CheckpointID int64
	// RestoreJobID is the job that took the restored checkpoint: the
	// subtask's own job after a failover, another one when the job was
	// submitted from that job's checkpoint or savepoint. Its leftovers of
	// Subtasks are this subtask's to abort too. Empty on a fresh start.
	RestoreJobID string
	// Committed are the transactions this subtask has just committed from
	// the checkpoint. Other subtasks commit the checkpoint's other
	// pre-committed transactions, which Recover must not abort either: on
	// a rescale a subtask may clean an old subtask index whose pending
	// transactions went to another subtask. KeepNames holds the Name of
	// every transaction pre-committed in the restored checkpoint, by any
	// subtask.
	Committed []Pending
	KeepNames map[string]bool
	// Subtask and Parallelism are this subtask's index and the job's
	// parallelism now.
	Subtask, Parallelism int
	// Subtasks are the subtask indexes whose leftovers this subtask
	// aborts, as far as the checkpoint tells: its own and, when the job
	// now runs with fewer subtasks than the checkpoint was taken with,
	// every old index j with j mod the new parallelism equal to its own.
	// A System that can list its transactions by name (Prefix) should
	// rather abort the leftovers of every subtask index it Owns: an
	// attempt between the checkpoint and now may have run with yet
	// another parallelism. A System that must probe names one by one
	// (Kafka's transactional ids) uses Subtasks.
	Subtasks []int
	// OldParallelism is the parallelism the restored checkpoint was taken
	// with (the current one on a fresh start).
	OldParallelism int
	// Attempt is this subtask's attempt: every transaction of an earlier
	// attempt that is not kept is a leftover.
	Attempt int64
}

// Owns reports whether the leftovers of subtask index j (of any earlier
// attempt, at any parallelism) are this subtask's to abort: j mod
// Parallelism is Subtask. Every index has exactly one owner.
func (r Recovery) Owns(j int) bool {
	return j >= 0 && j%max(1, r.Parallelism) == r.Subtask
}

// System is the part of a two-phase-commit sink that talks to the
// external system. The operator calls its methods from the task
// goroutine, one at a time.
type System interface {
	// Open connects to the external system and checks what the sink
	// needs there (a table, a topic) against the input schema. It is
	// called once, before anything else; an error fails the task.
	Open(ctx context.Context, octx *stream.OperatorContext) error
	// Begin starts transaction id.
	Begin(ctx context.Context, id TxnID) (Txn, error)
	// Commit makes a pre-committed transaction visible. It may run in
	// another process than the one that pre-committed it, after any
	// failure, and more than once: a transaction that is already
	// committed is a success. A transaction the external system no
	// longer knows and cannot show committed is an error (its rows would
	// be lost), unless the System can prove it committed.
	Commit(ctx context.Context, p Pending) error
	// Recover aborts every transaction of this sink that this subtask's
	// predecessors (Recovery.Subtasks, of this job and of
	// Recovery.RestoreJobID) left open or prepared and that is not kept
	// (Recovery.KeepNames). It is called once per subtask, after the
	// restored transactions were committed, or at the start of a fresh
	// run, before the first Begin.
	Recover(ctx context.Context, r Recovery) error
	// Close releases connections. Pre-committed transactions stay as they
	// are.
	Close() error
}

// SystemState is implemented by a System that keeps checkpoint state of
// its own beside the transactions (a file sink's numbering of its files,
// say). SnapshotSystem is called at every checkpoint after the operator
// pre-committed and recorded its transactions; RestoreSystem on restore
// before any restored transaction is committed. The System declares the
// state it writes in its Plan function, beside DeclareState.
type SystemState interface {
	SnapshotSystem(c *stream.SnapshotContext) error
	RestoreSystem(c *stream.RestoreContext) error
}

// Legacy is what a LegacyState System restored from a checkpoint written
// before its sink was built on this package.
type Legacy struct {
	// Pending are the transactions given to this subtask, to commit.
	Pending []Pending
	// KeepNames are the names of every transaction pending in the
	// checkpoint, by any subtask.
	KeepNames map[string]bool
	// OldParallelism is the parallelism the checkpoint was taken with.
	OldParallelism int
}

// LegacyState is implemented by a System whose sink kept its pending
// transactions in a state format of its own before it was built on this
// package. When a restored checkpoint holds none of this package's state,
// RestoreState asks RestoreLegacy (after RestoreSystem); ok false means
// the checkpoint holds no legacy state either, which is a fresh start.
type LegacyState interface {
	RestoreLegacy(c *stream.RestoreContext) (l Legacy, ok bool, err error)
}

// Txn is one open transaction.
type Txn interface {
	// Write adds the rows of b to the transaction. b belongs to the
	// caller and is released after Write returns.
	Write(ctx context.Context, b *stream.Batch) error
	// PreCommit makes everything written durable in the external system
	// without making it visible, so that Commit can make it visible later,
	// from any process, even after this one died. It returns the handle
	// Commit is given: what the external system needs to find the
	// transaction again (a name, a producer id and epoch, a file name and
	// checksum). The transaction accepts no more writes.
	PreCommit(ctx context.Context) (handle []byte, err error)
	// Abort discards the transaction (not pre-committed).
	Abort(ctx context.Context) error
}

// ErrNotFound may be wrapped by a Commit error to say the external system
// holds no trace of the transaction, neither pending nor committed.
var ErrNotFound = errors.New("twophase: transaction not found")

// sortPending orders transactions by checkpoint, then attempt and seq.
func sortPending(p []Pending) {
	slices.SortStableFunc(p, func(a, b Pending) int {
		if a.Checkpoint != b.Checkpoint {
			return cmpInt(a.Checkpoint, b.Checkpoint)
		}
		if a.ID.Attempt != b.ID.Attempt {
			return cmpInt(a.ID.Attempt, b.ID.Attempt)
		}
		return cmpInt(a.ID.Seq, b.ID.Seq)
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// errorf formats an error of the sink subtask octx; %w wraps as in
// fmt.Errorf.
func errorf(octx *stream.OperatorContext, format string, args ...any) error {
	return fmt.Errorf("two-phase-commit sink %s (subtask %d): "+format, append([]any{octx.OperatorUID, octx.Subtask}, args...)...)
}
