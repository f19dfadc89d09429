package connectors

import (
	"cmp"
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
	"github.com/weirstream/weir/stream"
)

// This file is the two-phase-commit half of FileSink (checkpointing on).
//
// Checkpoint state, written by every subtask:
//
//	"pending"  operator list state, one item per pre-committed, not yet
//	           committed transaction:
//	           version=3 | varint subtask | varint parallelism |
//	           varint checkpoint id | string identity |
//	           varint transaction number | varint seq | varint size |
//	           uvarint CRC-32C
//	"writers"  union state, one item per subtask:
//	           version=1 | varint subtask | varint parallelism |
//	           string identity | varint next transaction number |
//	           varint next final seq | uvarint n |
//	           n × (string identity | varint transaction number)
//
// Strings are a uvarint length and the bytes. A pending transaction's file
// names follow from its identity (sinkIdentity: the job id and operator uid
// of the sink that wrote it), the subtask that wrote it, its transaction
// number and seq. The identity is recorded because it need not be the
// restoring job's: a job submitted from another job's checkpoint commits
// that job's pending transactions under that job's names. Size and CRC-32C
// describe the pre-committed file: they are the record that lets a commit
// whose in-progress file is gone tell its own committed file (committed
// before a failure) from anything else under that name.
//
// A "writers" item describes the subtask that wrote it: its identity, the
// numbers its next transaction and committed file would have had, and the
// in-progress files it had pending (n of them, by identity and
// transaction number). Every subtask receives all of them, so every subtask
// knows the parallelism the checkpoint was taken with, which in-progress
// files anyone must commit, and which transaction and seq numbers the
// subtask of its own index had used.
//
// Rescaling: the runtime gives each pending item to exactly one subtask of
// the restoring job, with unchanged parallelism the subtask that wrote it.
// That subtask commits it under the writer's names. Subtask k of q also
// deletes the stale in-progress files (neither pending in the checkpoint
// nor committed) of every subtask index j with j mod q = k below the old
// parallelism, of this sink's identity and that of the job that took the
// checkpoint: its own index and, when the parallelism shrank, those of old
// subtasks that no longer exist. Pending files are never deleted, whoever
// commits them and when, and new files of subtask k are numbered after
// everything old subtask k used, so nothing committed is ever replaced.
//
// Checkpoints written before "writers" existed hold, instead, list state
// "counters": one item per subtask, version=1 | varint subtask |
// varint parallelism | varint next transaction number | varint next final
// seq. Their subtasks do not know each other's pending files, so they
// restore only with the parallelism they were taken with, each subtask its
// own items.
//
// Version 2 pending items are version 3 ones without the identity, which is
// then that of the job that took the checkpoint (RestoreContext.JobID) and
// the restoring operator's uid:
//
//	version=2 | varint subtask | varint parallelism | varint checkpoint id |
//	varint transaction number | varint seq | varint size | uvarint CRC-32C
//
// Version 1 pending items, written before file names carried the identity,
// hold the names instead:
//
//	version=1 | varint subtask | varint parallelism | varint checkpoint id |
//	string in-progress name | string final name
//
// They are committed under those names; lacking a size and checksum, a
// final file present under the recorded name counts as committed, as it did
// when they were written.
//
// RestoreState commits every restored transaction, so the transactions that
// later snapshots record as pending are the restoring sink's own; the
// format does not depend on that.
const (
	sinkPendingState   = "pending"
	sinkWritersState   = "writers"
	sinkCountersState  = "counters"
	sinkPendingVersion = 3
	sinkWritersVersion = 1
	inProgressSuffix   = ".inprogress"
)

// txn is a pre-committed transaction: in-progress file number id of the
// sink identified by ident, to become committed file number seq when a
// checkpoint at or after checkpoint completes.
type txn struct {
	checkpoint int64
	ident      string // sinkIdentity of the job and operator that wrote it; "" in version 1 state
	subtask    int    // the subtask that wrote it
	id, seq    int64
	from, to   string // the in-progress and committed names, relative to the sink's path
	size       int64  // the bytes in the pre-committed file, -1 if unknown (version 1 state)
	crc        uint32 // their CRC-32C
}

// InProgressName is the hidden file that subtask of operator uid of job
// jobID writes transaction txn to.
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

// parseNumbered returns n if name is prefix+n+suffix for a decimal n ≥ 0.
func parseNumbered(name, prefix, suffix string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	if rest, ok = strings.CutSuffix(rest, suffix); !ok || rest == "" || rest[0] == '+' || rest[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil
}

func (s *FileSink) path(name string) string { return filepath.Join(s.cfg.Path, name) }

// inProgressFile names an in-progress file: its sink identity, subtask and
// transaction number.
type inProgressFile struct {
	ident   string
	subtask int
	id      int64
}

// scan returns the in-progress transaction numbers of subtask of the sink
// identified by ident (a job and operator: sinkIdentity) and the next final
// seq that subtask has not used in the directory. Files of other jobs,
// operators or subtasks never match: see sinkIdentity.
func (s *FileSink) scan(ident string, subtask int) (inProgress []int64, nextSeq int64, err error) {
	entries, err := os.ReadDir(s.cfg.Path)
	if err != nil {
		return nil, 0, fmt.Errorf("file sink: list %s: %w", s.cfg.Path, err)
	}
	ipPrefix, finPrefix := inProgressPrefix(ident, subtask), committedPrefix(ident, subtask)
	for _, e := range entries {
		if n, ok := parseNumbered(e.Name(), ipPrefix, inProgressSuffix); ok {
			inProgress = append(inProgress, n)
		} else if n, ok := parseNumbered(e.Name(), finPrefix, ""); ok {
			nextSeq = max(nextSeq, n+1)
		}
	}
	return inProgress, nextSeq, nil
}

func (s *FileSink) openTransactional(jobID, uid, restoreJobID string) error {
	s.txnl = true
	if err := claimDir(s.cfg.Path, jobID, uid, restoreJobID); err != nil {
		return err
	}
	s.jobID, s.uid, s.restoreJob = jobID, uid, restoreJobID
	s.ident = sinkIdentity(jobID, uid)
	_, next, err := s.scan(s.ident, s.subtask)
	if err != nil {
		return err
	}
	// A fresh start never overwrites files committed by an earlier run.
	s.nextSeq = next
	return nil
}

// cleanStale deletes the in-progress files of the subtask indexes this
// subtask cleans (its own, and after a restore s.cleanSubtasks, which adds
// old subtasks beyond the new parallelism) other than those of pending
// transactions (this sink's, or the checkpoint's in s.keep), of this sink's
// identity and, after a restore from another job's checkpoint, of that
// job's: they hold rows written after the restored (or, for a fresh start,
// any) checkpoint, which will be replayed. It runs once, at restore or
// before the first write of a job started without a checkpoint.
func (s *FileSink) cleanStale() error {
	if s.cleaned {
		return nil
	}
	idents := []string{s.ident}
	if s.restoredIdent != "" && s.restoredIdent != s.ident {
		idents = append(idents, s.restoredIdent)
	}
	subtasks := s.cleanSubtasks
	if subtasks == nil {
		subtasks = []int{s.subtask}
	}
	for _, ident := range idents {
		for _, sub := range subtasks {
			ids, _, err := s.scan(ident, sub)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if s.keep[inProgressFile{ident, sub, id}] ||
					slices.ContainsFunc(s.pending, func(t txn) bool { return t.ident == ident && t.subtask == sub && t.id == id }) {
					continue
				}
				if err := os.Remove(s.path(inProgressName(ident, sub, id))); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("file sink: delete stale in-progress file: %w", err)
				}
			}
		}
	}
	s.cleaned, s.keep = true, nil
	return nil
}

// beginTxn opens the in-progress file of a new transaction unless one is
// open.
func (s *FileSink) beginTxn() error {
	if s.w != nil {
		return nil
	}
	if err := s.cleanStale(); err != nil {
		return err
	}
	// Each deployment attempt numbers its transactions from attempt<<32, so
	// that a stale attempt still running somewhere (a paused taskmanager
	// that resumed) never writes into a file of the current attempt; it
	// cannot commit either, since only current attempts are notified.
	s.nextTxn = max(s.nextTxn, s.attempt<<32)
	w, err := createPartWriter(s.path(inProgressName(s.ident, s.subtask, s.nextTxn)), s.format, s.schema)
	if err != nil {
		return err
	}
	s.w, s.cur = w, s.nextTxn
	s.nextTxn++
	return nil
}

// SnapshotState pre-commits the open transaction (flush, fsync, close) for
// checkpoint c.CheckpointID and records every pending transaction.
func (s *FileSink) SnapshotState(c *stream.SnapshotContext) error {
	if !s.txnl {
		return nil
	}
	if err := s.cleanStale(); err != nil {
		return err
	}
	if s.w != nil {
		err := s.w.sync()
		if cerr := s.w.close(); err == nil {
			err = cerr
		}
		size, crc := s.w.sum.n, s.w.sum.crc
		s.w = nil
		if err == nil {
			err = syncDir(s.cfg.Path)
		}
		if err != nil {
			return fmt.Errorf("%w (pre-committing checkpoint %d)", err, c.CheckpointID)
		}
		s.pending = append(s.pending, txn{
			checkpoint: c.CheckpointID, ident: s.ident, subtask: s.subtask, id: s.cur, seq: s.nextSeq,
			from: inProgressName(s.ident, s.subtask, s.cur), to: committedName(s.ident, s.subtask, s.nextSeq),
			size: size, crc: crc,
		})
		s.nextSeq++
	}
	for _, t := range s.pending {
		item := s.itemHeader(sinkPendingVersion)
		item = appendInt(item, t.checkpoint)
		item = appendString(item, t.ident)
		item = appendInt(item, t.id)
		item = appendInt(item, t.seq)
		item = appendInt(item, t.size)
		item = appendUint(item, uint64(t.crc))
		c.AddListState(sinkPendingState, item)
	}
	item := s.itemHeader(sinkWritersVersion)
	item = appendString(item, s.ident)
	item = appendInt(item, s.nextTxn)
	item = appendInt(item, s.nextSeq)
	item = appendUint(item, uint64(len(s.pending)))
	for _, t := range s.pending {
		item = appendString(item, t.ident)
		item = appendInt(item, t.id)
	}
	c.AddUnionState(sinkWritersState, item)
	return nil
}

func (s *FileSink) itemHeader(version byte) []byte {
	item := []byte{version}
	item = appendInt(item, int64(s.subtask))
	return appendInt(item, int64(s.par))
}

// NotifyCheckpointComplete commits every transaction pre-committed for a
// checkpoint up to id.
func (s *FileSink) NotifyCheckpointComplete(id int64) error {
	if !s.txnl {
		return nil
	}
	n := 0
	for _, t := range s.pending {
		if t.checkpoint > id {
			break
		}
		if err := s.commit(t); err != nil {
			s.pending = s.pending[n:]
			return err
		}
		n++
	}
	s.pending = slices.Delete(s.pending, 0, n)
	if n == 0 {
		return nil
	}
	return syncDir(s.cfg.Path)
}

// NotifyCheckpointAborted keeps the checkpoint's transactions pending: a
// later completed checkpoint commits them.
func (s *FileSink) NotifyCheckpointAborted(int64) error { return nil }

// commit renames t's in-progress file to its committed name, never
// replacing a file. When the in-progress file is gone, t was committed
// before (by this sink before a failure, or by a stale attempt that was
// being notified at the same time) only if the committed file holds exactly
// the bytes t pre-committed; a file that merely has the name is not enough.
// The error wraps fs.ErrNotExist if neither file exists and fs.ErrExist if
// the committed name holds something else.
func (s *FileSink) commit(t txn) error {
	from, to := s.path(t.from), s.path(t.to)
	_, err := os.Lstat(to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = os.Rename(from, to)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file sink: commit checkpoint %d: %w", t.checkpoint, err)
		}
	case err != nil:
		return fmt.Errorf("file sink: commit checkpoint %d: %w", t.checkpoint, err)
	default:
		_, err := os.Lstat(from)
		if err == nil {
			return errkind.Mark(fmt.Errorf("file sink: commit checkpoint %d: %s cannot become %s in %s, which exists already: something other than this sink wrote it; move it away and restart the job",
				t.checkpoint, t.from, t.to, s.cfg.Path), fs.ErrExist)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file sink: commit checkpoint %d: %w", t.checkpoint, err)
		}
	}
	return s.checkCommitted(t)
}

// checkCommitted returns nil if t's committed file holds what t
// pre-committed, for a transaction whose in-progress file is gone.
func (s *FileSink) checkCommitted(t txn) error {
	to := s.path(t.to)
	fi, err := os.Stat(to)
	if errors.Is(err, fs.ErrNotExist) {
		return errkind.Mark(fmt.Errorf("file sink: commit checkpoint %d: neither %s nor %s exists in %s; the pre-committed file was deleted or moved by something else, and its rows are lost",
			t.checkpoint, t.from, t.to, s.cfg.Path), err)
	}
	if err != nil {
		return fmt.Errorf("file sink: commit checkpoint %d: %w", t.checkpoint, err)
	}
	if t.size < 0 {
		return nil // version 1 state: the recorded name is all there is to go by
	}
	var differs string
	if fi.Size() != t.size {
		differs = fmt.Sprintf("%d bytes, want %d", fi.Size(), t.size)
	} else {
		size, crc, err := fileChecksum(to)
		if err != nil {
			return fmt.Errorf("file sink: commit checkpoint %d: %w", t.checkpoint, err)
		}
		if size != t.size || crc != t.crc {
			differs = fmt.Sprintf("%d bytes with CRC-32C %08x, want %d with %08x", size, crc, t.size, t.crc)
		}
	}
	if differs == "" {
		return nil
	}
	return errkind.Mark(fmt.Errorf("file sink: commit checkpoint %d: %s is gone and %s in %s is not the file it pre-committed (%s): something other than this sink deleted the one and wrote the other, and the transaction's rows are lost",
		t.checkpoint, t.from, t.to, s.cfg.Path, differs), fs.ErrExist)
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

// RestoreState commits the transactions pending in the checkpoint that this
// subtask received, whichever subtask wrote them, deletes the stale
// in-progress files it is responsible for (its own subtask's and, after the
// parallelism shrank, those of some old subtasks: see the state format
// above), of its own job and of the job that took the checkpoint, and
// continues numbering after everything its subtask index used.
func (s *FileSink) RestoreState(c *stream.RestoreContext) error {
	if !s.txnl || c.State == nil {
		return nil
	}
	job := cmp.Or(c.JobID, s.restoreJob, s.jobID)
	where := fmt.Sprintf("file sink subtask %d: checkpoint %d", s.subtask, c.CheckpointID)
	if job != s.jobID {
		where += fmt.Sprintf(" of job %q", job)
	}
	s.restoredIdent = sinkIdentity(job, s.uid)
	oldPar, err := s.restoreWriters(where, c.State.Union[sinkWritersState])
	if err != nil {
		return err
	}
	// checkWriter checks that an item of subtask of par may be restored
	// here.
	checkWriter := func(state string, subtask, par int) error {
		if oldPar == 0 {
			return s.checkOwner(where, subtask, par)
		}
		if par != oldPar || subtask < 0 || subtask >= par {
			return fmt.Errorf("%s: corrupt %s state: an item of subtask %d of %d in a checkpoint taken with parallelism %d", where, state, subtask, par, oldPar)
		}
		return nil
	}
	var restored []txn
	for _, item := range c.State.List[sinkPendingState] {
		r := newVersionedStateReader(item, sinkPendingVersion)
		subtask, par := r.int(), r.int()
		t := txn{checkpoint: r.varint(), subtask: subtask}
		switch r.version {
		case 1:
			t.from, t.to, t.size = r.string(), r.string(), -1
		case 2:
			t.ident = s.restoredIdent
			t.id, t.seq, t.size, t.crc = r.varint(), r.varint(), r.varint(), r.uint32()
		default:
			t.ident = r.string()
			t.id, t.seq, t.size, t.crc = r.varint(), r.varint(), r.varint(), r.uint32()
		}
		if err := r.done(); err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", where, sinkPendingState, err)
		}
		if err := checkWriter(sinkPendingState, subtask, par); err != nil {
			return err
		}
		if r.version == 1 {
			var ok1, ok2 bool
			t.id, ok1 = parseNumbered(t.from, ".part-"+strconv.Itoa(t.subtask)+"-", inProgressSuffix)
			t.seq, ok2 = parseNumbered(t.to, "part-"+strconv.Itoa(t.subtask)+"-", "")
			if !ok1 || !ok2 {
				return fmt.Errorf("%s: pending transaction names %q, %q are not file names of subtask %d, which wrote them", where, t.from, t.to, t.subtask)
			}
		} else {
			if t.id < 0 || t.seq < 0 || t.size < 0 {
				return fmt.Errorf("%s: corrupt %s state: negative transaction number, seq or size", where, sinkPendingState)
			}
			if !validIdentity(t.ident) {
				// Not quoted: it is not a name this sink makes.
				return fmt.Errorf("%s: corrupt %s state: a transaction's job and operator identity is not one that file names can carry", where, sinkPendingState)
			}
			t.from, t.to = inProgressName(t.ident, t.subtask, t.id), committedName(t.ident, t.subtask, t.seq)
		}
		restored = append(restored, t)
	}
	for _, item := range c.State.List[sinkCountersState] {
		r := newStateReader(item)
		subtask, par := r.int(), r.int()
		nextTxn, nextSeq := r.varint(), r.varint()
		if err := r.done(); err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", where, sinkCountersState, err)
		}
		if err := checkWriter(sinkCountersState, subtask, par); err != nil {
			return err
		}
		if subtask == s.subtask {
			s.nextTxn, s.nextSeq = max(s.nextTxn, nextTxn), max(s.nextSeq, nextSeq)
		}
	}
	slices.SortFunc(restored, func(a, b txn) int { return cmp.Or(cmp.Compare(a.subtask, b.subtask), cmp.Compare(a.seq, b.seq)) })
	for _, t := range restored {
		if err := s.commit(t); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if t.subtask == s.subtask {
			s.nextTxn, s.nextSeq = max(s.nextTxn, t.id+1), max(s.nextSeq, t.seq+1)
		}
	}
	if err := syncDir(s.cfg.Path); err != nil {
		return err
	}
	s.cleaned = false
	if err := s.cleanStale(); err != nil {
		return err
	}
	_, next, err := s.scan(s.ident, s.subtask)
	s.nextSeq = max(s.nextSeq, next)
	return err
}

// restoreWriters reads the "writers" items of a checkpoint: it continues
// the numbering of the old subtask of this subtask's index, records the
// checkpoint's pending files in s.keep and the subtask indexes whose stale
// files this subtask deletes in s.cleanSubtasks, and returns the
// parallelism the checkpoint was taken with, or 0 if it has no such items
// (it was written before they existed).
func (s *FileSink) restoreWriters(where string, items [][]byte) (int, error) {
	s.keep, s.cleanSubtasks = nil, nil
	corrupt := func(why string) error {
		return fmt.Errorf("%s: corrupt %s state: %s", where, sinkWritersState, why)
	}
	oldPar := 0
	for _, item := range items {
		r := newVersionedStateReader(item, sinkWritersVersion)
		subtask, par := r.int(), r.int()
		ident := r.string()
		nextTxn, nextSeq := r.varint(), r.varint()
		n := r.uvarint()
		if r.err == nil && n > uint64(len(r.b))/2 {
			r.err = errTruncated // each pending file takes at least 2 bytes
		}
		pending := make([]inProgressFile, 0, n)
		for range n {
			f := inProgressFile{subtask: subtask}
			f.ident = r.string()
			f.id = r.varint()
			pending = append(pending, f)
		}
		if err := r.done(); err != nil {
			return 0, fmt.Errorf("%s: corrupt %s state: %w", where, sinkWritersState, err)
		}
		if par <= 0 || subtask < 0 || subtask >= par || oldPar != 0 && par != oldPar {
			return 0, corrupt(fmt.Sprintf("subtask %d of %d in a checkpoint of parallelism %d", subtask, par, cmp.Or(oldPar, par)))
		}
		// Not quoted: an identity that is not valid is not a name this
		// sink makes.
		if !validIdentity(ident) || slices.ContainsFunc(pending, func(f inProgressFile) bool { return !validIdentity(f.ident) }) {
			return 0, corrupt("a job and operator identity is not one that file names can carry")
		}
		if nextTxn < 0 || nextSeq < 0 || slices.ContainsFunc(pending, func(f inProgressFile) bool { return f.id < 0 }) {
			return 0, corrupt("negative transaction number or seq")
		}
		oldPar = par
		for _, f := range pending {
			if s.keep == nil {
				s.keep = make(map[inProgressFile]bool)
			}
			s.keep[f] = true
		}
		if subtask == s.subtask {
			s.nextTxn, s.nextSeq = max(s.nextTxn, nextTxn), max(s.nextSeq, nextSeq)
		}
	}
	if oldPar > 0 {
		for j := s.subtask; j < max(oldPar, s.par); j += s.par {
			s.cleanSubtasks = append(s.cleanSubtasks, j)
		}
	}
	return oldPar, nil
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

// checkOwner fails unless state item of subtask at parallelism par, from a
// checkpoint without "writers" state, is this subtask's own.
func (s *FileSink) checkOwner(where string, subtask, par int) error {
	if par == s.par && subtask == s.subtask {
		return nil
	}
	return errkind.Mark(fmt.Errorf("%s: state of subtask %d of %d restored into subtask %d of %d: the checkpoint was written by a Weir whose transactional file sink cannot be rescaled; restore it with parallelism %d, then take a checkpoint or savepoint and rescale from that",
		where, subtask, par, s.subtask, s.par, par), errRescale)
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
