package connectors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// This file is the two-phase-commit half of FileSink (checkpointing on):
// fileSystem, the twophase.System of a sink directory. A transaction is an
// in-progress file, pre-committed by fsync, committed by renaming it to its
// final name.
//
// Checkpoint state:
//
//	"twophase-pending"  package twophase's operator list state, one item
//	                    per pre-committed transaction; its handle is a
//	                    file handle (below)
//	"twophase-writers"  package twophase's union state, one item per
//	                    subtask: the names (TxnID.Name) of its pending
//	                    transactions
//	"next-seq"          union state, one item per subtask:
//	                    version=1 | varint subtask | varint parallelism |
//	                    varint next final seq
//
// A file handle is
//
//	version=1 | string identity | varint subtask |
//	varint in-progress number | varint seq | varint size | uvarint CRC-32C
//
// Strings are a uvarint length and the bytes. The file names follow from
// the identity (sinkIdentity: the job id and operator uid of the sink that
// wrote the file), the subtask that wrote it, its in-progress number and
// seq. The identity is recorded because it need not be the restoring
// job's: a job submitted from another job's checkpoint commits that job's
// pending transactions under that job's names. An empty identity means
// the names from before names carried one (.part-<subtask>-<number>.inprogress
// and part-<subtask>-<seq>), and a size of -1 that the size and checksum
// are unknown: both come only from version 1 legacy state (below). Size
// and CRC-32C describe the pre-committed file: they are the record that
// lets a commit whose in-progress file is gone tell its own committed file
// (committed before a failure) from anything else under that name.
//
// The in-progress number of transaction TxnID{Attempt: a, Seq: s} is
// (a-1)<<32 + s-1 (txnNumber), so that a file name and a transaction name
// translate into each other: Recover finds the in-progress files that the
// checkpoint keeps (Recovery.KeepNames) by name, and attempts never share
// a file, also when a stale attempt still runs somewhere (a paused
// taskmanager that resumed); it cannot commit either, since only current
// attempts are notified.
//
// A "next-seq" item gives the number the subtask's next committed file
// would have had. Every subtask receives all of them, and subtask k
// numbers its files after what old subtask k used and after every
// committed file of its own in the directory, so that a rescaled restore
// never reuses a name even while another subtask has yet to commit a
// pending file of old subtask k. Recover deletes the stale in-progress
// files (neither pending in the checkpoint nor committed) of every subtask
// index it owns (Recovery.Owns: j mod the parallelism is its index), of
// this sink's identity and of the job that took the checkpoint. Pending
// files are never deleted, whoever commits them and when.
//
// Legacy state, from checkpoints written before the sink was built on
// package twophase, is still restored (RestoreLegacy). Its pending items
// become framework transactions (the TxnID is made from the in-progress
// number, with checkpoint 0) with the handle above:
//
//	"pending"   operator list state, one item per pre-committed
//	            transaction:
//	            version=3 | varint subtask | varint parallelism |
//	            varint checkpoint id | string identity |
//	            varint in-progress number | varint seq | varint size |
//	            uvarint CRC-32C
//	"writers"   union state, one item per subtask:
//	            version=1 | varint subtask | varint parallelism |
//	            string identity | varint next in-progress number |
//	            varint next final seq | uvarint n |
//	            n × (string identity | varint in-progress number)
//	"counters"  list state of checkpoints written before "writers"
//	            existed, one item per subtask: version=1 |
//	            varint subtask | varint parallelism |
//	            varint next in-progress number | varint next final seq
//
// A "writers" item's pending files are kept by Recover, and its next final
// seq continues the numbering (its next in-progress number is not needed
// any more). Without "writers" the subtasks do not know each other's
// pending files, so such a checkpoint restores only with the parallelism
// it was taken with, each subtask its own items. Version 2 pending items
// are version 3 ones without the identity, which is then that of the job
// that took the checkpoint (RestoreContext.JobID) and the restoring
// operator's uid. Version 1 pending items, written before file names
// carried the identity, hold the names instead:
//
//	version=1 | varint subtask | varint parallelism | varint checkpoint id |
//	string in-progress name | string final name
//
// They are committed under those names; lacking a size and checksum, a
// final file present under the recorded name counts as committed, as it did
// when they were written.
const (
	sinkNextSeqState   = "next-seq"
	sinkNextSeqVersion = 1
	fileHandleVersion  = 1
	// maxFileHandle bounds a handle: an identity of at most
	// 2*maxNameToken+1 bytes and six numbers.
	maxFileHandle    = 256
	inProgressSuffix = ".inprogress"

	// Legacy state.
	sinkPendingState   = "pending"
	sinkWritersState   = "writers"
	sinkCountersState  = "counters"
	sinkPendingVersion = 3
	sinkWritersVersion = 1
)

// InProgressName is the hidden file that subtask of operator uid of job
// jobID writes transaction number txn to:
// .part-<job>-<uid>-<subtask>-<txn>.inprogress, where txn is
// (attempt-1)<<32 plus the count of the transactions the attempt began
// before it.
func InProgressName(jobID, uid string, subtask int, txn int64) string {
	return inProgressName(sinkIdentity(jobID, uid), subtask, txn)
}

// CommittedName is the visible name of committed file number seq of subtask
// of operator uid of job jobID: part-<job>-<uid>-<subtask>-<seq>, where a job
// id or uid that is long or has characters other than ASCII letters, digits,
// '_', '.' (and '-' in a uid) is replaced by '~' and a hash of it.
func CommittedName(jobID, uid string, subtask int, seq int64) string {
	return committedName(sinkIdentity(jobID, uid), subtask, seq)
}

func inProgressName(ident string, subtask int, txn int64) string {
	return inProgressPrefix(ident, subtask) + strconv.FormatInt(txn, 10) + inProgressSuffix
}

func committedName(ident string, subtask int, seq int64) string {
	return committedPrefix(ident, subtask) + strconv.FormatInt(seq, 10)
}

func inProgressPrefix(ident string, subtask int) string { return "." + committedPrefix(ident, subtask) }

func committedPrefix(ident string, subtask int) string {
	return "part-" + ident + "-" + strconv.Itoa(subtask) + "-"
}

// parseNumbered returns n if name is prefix+n+suffix for a decimal n ≥ 0
// written as strconv.FormatInt writes it.
func parseNumbered(name, prefix, suffix string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	if rest, ok = strings.CutSuffix(rest, suffix); !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil && n >= 0 && rest == strconv.FormatInt(n, 10)
}

// parseInProgress returns the subtask and in-progress number of name if it
// is an in-progress file of the sink identified by ident. Names of other
// identities never match: an identity that starts with ident and a '-'
// puts at least one more '-' between the prefix and the suffix.
func parseInProgress(name, ident string) (subtask int, n int64, ok bool) {
	rest, ok := strings.CutPrefix(name, ".part-"+ident+"-")
	if !ok {
		return 0, 0, false
	}
	sub, num, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	s, ok := parseNumbered(sub, "", "")
	if !ok || s > 1<<30 {
		return 0, 0, false
	}
	n, ok = parseNumbered(num, "", inProgressSuffix)
	return int(s), n, ok
}

// txnSeqBits is how many low bits of an in-progress number count the
// transactions of one attempt.
const txnSeqBits = 32

// txnNumber returns the in-progress number of the transaction with
// TxnID.Attempt attempt and TxnID.Seq seq: (attempt-1)<<32 + seq-1, with
// attempt 0 (a test's context) taken as 1. ok is false for numbers that do
// not fit.
func txnNumber(attempt, seq int64) (n int64, ok bool) {
	attempt = max(attempt, 1)
	if seq < 1 || seq > 1<<txnSeqBits || attempt > 1<<(63-txnSeqBits) {
		return 0, false
	}
	return (attempt-1)<<txnSeqBits | (seq - 1), true
}

// txnOf is the inverse of txnNumber, for n ≥ 0.
func txnOf(n int64) (attempt, seq int64) {
	return n>>txnSeqBits + 1, n&(1<<txnSeqBits-1) + 1
}

// inProgressFile names an in-progress file: its sink identity, subtask and
// in-progress number.
type inProgressFile struct {
	ident   string
	subtask int
	id      int64
}

// fileHandle is what the commit of a pre-committed transaction needs: the
// names of its files and what the in-progress one held.
type fileHandle struct {
	ident   string // sinkIdentity of the job and operator that wrote it; "" for the names of version 1 legacy state
	subtask int    // the subtask that wrote it
	id      int64  // the in-progress number
	seq     int64  // the committed file's number
	size    int64  // the bytes in the pre-committed file, -1 if unknown (version 1 legacy state)
	crc     uint32 // their CRC-32C
}

// names returns the in-progress and committed names, relative to the
// sink's directory.
func (h fileHandle) names() (from, to string) {
	if h.ident == "" {
		sub := strconv.Itoa(h.subtask)
		return ".part-" + sub + "-" + strconv.FormatInt(h.id, 10) + inProgressSuffix, "part-" + sub + "-" + strconv.FormatInt(h.seq, 10)
	}
	return inProgressName(h.ident, h.subtask, h.id), committedName(h.ident, h.subtask, h.seq)
}

func (h fileHandle) encode() []byte {
	b := []byte{fileHandleVersion}
	b = statecodec.AppendString(b, h.ident)
	b = statecodec.AppendVarint(b, int64(h.subtask))
	b = statecodec.AppendVarint(b, h.id)
	b = statecodec.AppendVarint(b, h.seq)
	b = statecodec.AppendVarint(b, h.size)
	return statecodec.AppendUvarint(b, uint64(h.crc))
}

// decodeFileHandle decodes and checks a handle. Its errors never quote
// the handle: it is not one this sink makes.
func decodeFileHandle(b []byte) (fileHandle, error) {
	if len(b) > maxFileHandle {
		return fileHandle{}, fmt.Errorf("a handle of %d bytes (at most %d)", len(b), maxFileHandle)
	}
	r := statecodec.NewReader(b)
	r.Version(fileHandleVersion)
	var h fileHandle
	h.ident = r.String(statecodec.MaxString)
	h.subtask = r.Int()
	h.id, h.seq, h.size = r.Varint(), r.Varint(), r.Varint()
	h.crc = r.Uint32()
	if err := r.Done(); err != nil {
		return fileHandle{}, err
	}
	switch {
	case h.subtask < 0 || h.subtask > 1<<30 || h.id < 0 || h.seq < 0 || h.size < -1:
		return fileHandle{}, errors.New("a handle with a negative subtask, number, seq or size")
	case h.ident != "" && !validIdentity(h.ident):
		return fileHandle{}, errors.New("a handle whose job and operator identity is not one that file names can carry")
	}
	return h, nil
}

// fileSystem is the twophase.System of a transactional file sink: one
// subtask's transactions in its directory. The twophase.Operator calls it
// from the task goroutine only.
type fileSystem struct {
	dir    string
	format rowFormat
	schema *stream.Schema

	jobID, uid string // OperatorContext.JobID and OperatorUID
	subtask    int
	par        int
	ident      string // the job and operator in file names (sinkIdentity)
	// octxRestoreJob is OperatorContext.RestoreJobID; restoreJob the job
	// whose checkpoint RestoreSystem restored (if any): its stale
	// in-progress files of the subtask indexes this subtask owns are this
	// sink's to delete too.
	octxRestoreJob, restoreJob string

	nextSeq int64    // the next committed file's number
	cur     *fileTxn // the open transaction, if any
}

var (
	_ twophase.System      = (*fileSystem)(nil)
	_ twophase.SystemState = (*fileSystem)(nil)
	_ twophase.LegacyState = (*fileSystem)(nil)
	_ twophase.Txn         = (*fileTxn)(nil)
)

// Open claims the directory for the job and operator (see claimDir).
func (s *fileSystem) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.schema = octx.InputSchemas[0]
	s.jobID, s.uid, s.octxRestoreJob = octx.JobID, octx.OperatorUID, octx.RestoreJobID
	s.subtask, s.par = octx.Subtask, max(1, octx.Parallelism)
	s.ident = sinkIdentity(s.jobID, s.uid)
	return claimDir(s.dir, s.jobID, s.uid, s.octxRestoreJob)
}

// Begin creates the in-progress file of transaction id. It never replaces
// a file: attempts never share a name, and one that exists was written by
// something else.
func (s *fileSystem) Begin(_ context.Context, id twophase.TxnID) (twophase.Txn, error) {
	n, ok := txnNumber(id.Attempt, id.Seq)
	if !ok {
		return nil, fmt.Errorf("file sink: attempt %d or transaction count %d is too large for a file name", id.Attempt, id.Seq)
	}
	name := inProgressName(s.ident, s.subtask, n)
	w, err := createPartWriter(s.path(name), true, s.format, s.schema)
	if errors.Is(err, fs.ErrExist) {
		return nil, errkind.Mark(fmt.Errorf("file sink: in-progress file %s exists already in %s, although attempt %d of subtask %d has not written it: something other than this sink wrote it; move it away and restart the job",
			name, s.dir, id.Attempt, s.subtask), fs.ErrExist)
	}
	if err != nil {
		return nil, err
	}
	s.cur = &fileTxn{sys: s, id: n, w: w}
	return s.cur, nil
}

// flush writes what the open transaction buffered to its file.
func (s *fileSystem) flush() error {
	if s.cur == nil {
		return nil
	}
	return s.cur.w.flush()
}

func (s *fileSystem) path(name string) string { return filepath.Join(s.dir, name) }

// fileTxn is an open transaction: an in-progress file.
type fileTxn struct {
	sys          *fileSystem
	id           int64 // the in-progress number
	w            *partWriter
	preCommitted bool
}

// Write encodes the rows of b into the file.
func (t *fileTxn) Write(_ context.Context, b *stream.Batch) error { return t.w.write(b) }

// PreCommit flushes, fsyncs and closes the file, makes its name durable,
// and returns its handle, which gives it the subtask's next committed
// file number.
func (t *fileTxn) PreCommit(context.Context) ([]byte, error) {
	s := t.sys
	s.cur = nil
	err := t.w.sync()
	if cerr := t.w.close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		return nil, err
	}
	t.preCommitted = true
	h := fileHandle{ident: s.ident, subtask: s.subtask, id: t.id, seq: s.nextSeq, size: t.w.sum.n, crc: t.w.sum.crc}
	s.nextSeq++
	return h.encode(), nil
}

// Abort deletes the file of a transaction that was not pre-committed.
func (t *fileTxn) Abort(context.Context) error {
	if t.sys.cur == t {
		t.sys.cur = nil
	}
	if t.preCommitted {
		return nil
	}
	return t.w.discard()
}

// Commit renames the transaction's in-progress file to its committed name
// and makes the rename durable; see commitFile.
func (s *fileSystem) Commit(_ context.Context, p twophase.Pending) error {
	h, err := decodeFileHandle(p.Handle)
	if err != nil {
		return fmt.Errorf("file sink: commit checkpoint %d: corrupt state: %w", p.Checkpoint, err)
	}
	if err := s.commitFile(p.Checkpoint, h); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// commitFile renames h's in-progress file to its committed name, never
// replacing a file. When the in-progress file is gone, h was committed
// before (by this sink before a failure, or by a stale attempt that was
// being notified at the same time) only if the committed file holds exactly
// the bytes h pre-committed; a file that merely has the name is not enough.
// The error wraps fs.ErrNotExist and twophase.ErrNotFound if neither file
// exists, and fs.ErrExist if the committed name holds something else.
func (s *fileSystem) commitFile(checkpoint int64, h fileHandle) error {
	fromName, toName := h.names()
	from, to := s.path(fromName), s.path(toName)
	_, err := os.Lstat(to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = os.Rename(from, to)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file sink: commit checkpoint %d: %w", checkpoint, err)
		}
	case err != nil:
		return fmt.Errorf("file sink: commit checkpoint %d: %w", checkpoint, err)
	default:
		_, err := os.Lstat(from)
		if err == nil {
			return errkind.Mark(fmt.Errorf("file sink: commit checkpoint %d: %s cannot become %s in %s, which exists already: something other than this sink wrote it; move it away and restart the job",
				checkpoint, fromName, toName, s.dir), fs.ErrExist)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file sink: commit checkpoint %d: %w", checkpoint, err)
		}
	}
	return s.checkCommitted(checkpoint, h)
}

// checkCommitted returns nil if h's committed file holds what h
// pre-committed, for a transaction whose in-progress file is gone.
func (s *fileSystem) checkCommitted(checkpoint int64, h fileHandle) error {
	fromName, toName := h.names()
	to := s.path(toName)
	fi, err := os.Stat(to)
	if errors.Is(err, fs.ErrNotExist) {
		return errkind.Mark(fmt.Errorf("file sink: commit checkpoint %d: neither %s nor %s exists in %s; the pre-committed file was deleted or moved by something else, and its rows are lost: %w",
			checkpoint, fromName, toName, s.dir, twophase.ErrNotFound), err)
	}
	if err != nil {
		return fmt.Errorf("file sink: commit checkpoint %d: %w", checkpoint, err)
	}
	if h.size < 0 {
		return nil // version 1 legacy state: the recorded name is all there is to go by
	}
	var differs string
	if fi.Size() != h.size {
		differs = fmt.Sprintf("%d bytes, want %d", fi.Size(), h.size)
	} else {
		size, crc, err := fileChecksum(to)
		if err != nil {
			return fmt.Errorf("file sink: commit checkpoint %d: %w", checkpoint, err)
		}
		if size != h.size || crc != h.crc {
			differs = fmt.Sprintf("%d bytes with CRC-32C %08x, want %d with %08x", size, crc, h.size, h.crc)
		}
	}
	if differs == "" {
		return nil
	}
	return errkind.Mark(fmt.Errorf("file sink: commit checkpoint %d: %s is gone and %s in %s is not the file it pre-committed (%s): something other than this sink deleted the one and wrote the other, and the transaction's rows are lost",
		checkpoint, fromName, toName, s.dir, differs), fs.ErrExist)
}

// fileChecksum returns the size and CRC-32C of the file at path.
func fileChecksum(path string) (int64, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", path, err)
	}
	return n, h.Sum32(), nil
}

// Recover deletes the stale in-progress files of every subtask index this
// subtask owns (r.Owns), of this sink's identity and of the job that took
// the restored checkpoint, except those of transactions pending in the
// checkpoint (r.KeepNames): their rows were written after the restored
// checkpoint (or, on a fresh start, any) and will be replayed. It also
// numbers the subtask's next committed file after every one of its own in
// the directory, so that a fresh start never replaces files committed by
// an earlier run.
func (s *fileSystem) Recover(_ context.Context, r twophase.Recovery) error {
	jobs := []string{s.jobID}
	for _, job := range []string{r.RestoreJobID, s.restoreJob} {
		if job != "" && !slices.Contains(jobs, job) {
			jobs = append(jobs, job)
		}
	}
	keep := make(map[inProgressFile]bool)
	for name := range r.KeepNames {
		for _, job := range jobs {
			if sub, attempt, _, seq, ok := twophase.ParseName(name, job, s.uid); ok {
				if n, ok := txnNumber(attempt, seq); ok {
					keep[inProgressFile{sinkIdentity(job, s.uid), sub, n}] = true
				}
			}
		}
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("file sink: list %s: %w", s.dir, err)
	}
	own := committedPrefix(s.ident, s.subtask)
	for _, e := range entries {
		name := e.Name()
		if n, ok := parseNumbered(name, own, ""); ok {
			s.nextSeq = max(s.nextSeq, n+1)
			continue
		}
		for _, job := range jobs {
			ident := sinkIdentity(job, s.uid)
			sub, n, ok := parseInProgress(name, ident)
			if !ok || !r.Owns(sub) || keep[inProgressFile{ident, sub, n}] {
				continue
			}
			if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("file sink: delete stale in-progress file: %w", err)
			}
		}
	}
	return nil
}

// Close releases nothing: the open transaction's file was aborted or
// pre-committed before.
func (s *fileSystem) Close() error { return nil }

// SnapshotSystem records the number of the subtask's next committed file.
func (s *fileSystem) SnapshotSystem(c *stream.SnapshotContext) error {
	item := []byte{sinkNextSeqVersion}
	item = statecodec.AppendVarint(item, int64(s.subtask))
	item = statecodec.AppendVarint(item, int64(s.par))
	item = statecodec.AppendVarint(item, s.nextSeq)
	c.AddUnionState(sinkNextSeqState, item)
	return nil
}

// RestoreSystem continues the numbering of the old subtask of this
// subtask's index and notes the job that took the checkpoint.
func (s *fileSystem) RestoreSystem(c *stream.RestoreContext) error {
	s.restoreJob = cmp.Or(c.JobID, s.octxRestoreJob, s.jobID)
	oldPar := 0
	for _, item := range c.State.Union[sinkNextSeqState] {
		r := statecodec.NewReader(item)
		r.Version(sinkNextSeqVersion)
		subtask, par, next := r.Int(), r.Int(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", s.where(c), sinkNextSeqState, err)
		}
		if par <= 0 || subtask < 0 || subtask >= par || oldPar != 0 && par != oldPar || next < 0 {
			return fmt.Errorf("%s: corrupt %s state: seq %d of subtask %d of %d in a checkpoint of parallelism %d", s.where(c), sinkNextSeqState, next, subtask, par, cmp.Or(oldPar, par))
		}
		oldPar = par
		if subtask == s.subtask {
			s.nextSeq = max(s.nextSeq, next)
		}
	}
	return nil
}

// where names the restore of checkpoint c in errors.
func (s *fileSystem) where(c *stream.RestoreContext) string {
	w := fmt.Sprintf("file sink subtask %d: checkpoint %d", s.subtask, c.CheckpointID)
	if s.restoreJob != s.jobID {
		w += fmt.Sprintf(" of job %q", s.restoreJob)
	}
	return w
}

// validIdentity reports whether ident can be a sinkIdentity: the characters
// of name tokens and at most two tokens' worth of them, so that it is safe
// in a file name.
func validIdentity(ident string) bool {
	if !strings.Contains(ident, "-") || len(ident) > 2*maxNameToken+1 {
		return false
	}
	for i := range len(ident) {
		c := ident[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-' || c == '~') {
			return false
		}
	}
	return true
}

// syncDir makes renames and new files in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("file sink: fsync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("file sink: fsync directory %s: %w", dir, err)
	}
	return nil
}
