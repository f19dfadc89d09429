package connectors

import (
	"errors"
	"fmt"
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
// Checkpoint state, all operator list state, written by every subtask:
//
//	"pending"  one item per pre-committed, not yet committed transaction:
//	           version=1 | varint subtask | varint parallelism |
//	           varint checkpoint id | string in-progress name | string final name
//	"counters" one item: version=1 | varint subtask | varint parallelism |
//	           varint next transaction number | varint next final seq
//
// Names are relative to the sink's path (strings are a uvarint length and
// the bytes). A restore must give each subtask its own items back, so the
// transactional sink cannot be rescaled from a checkpoint.
const (
	sinkPendingState  = "pending"
	sinkCountersState = "counters"
	inProgressSuffix  = ".inprogress"
)

// txn is a pre-committed transaction: in-progress file number id, to become
// part-<subtask>-<seq> when a checkpoint at or after checkpoint completes.
type txn struct {
	checkpoint int64
	id, seq    int64
}

// InProgressName is the hidden file that subtask writes transaction txn to.
func InProgressName(subtask int, txn int64) string {
	return ".part-" + strconv.Itoa(subtask) + "-" + strconv.FormatInt(txn, 10) + inProgressSuffix
}

// CommittedName is the visible name of subtask's committed file number seq.
func CommittedName(subtask int, seq int64) string {
	return "part-" + strconv.Itoa(subtask) + "-" + strconv.FormatInt(seq, 10)
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

// scan returns this subtask's in-progress transaction numbers and the next
// final seq not yet used in the directory.
func (s *FileSink) scan() (inProgress []int64, nextSeq int64, err error) {
	entries, err := os.ReadDir(s.cfg.Path)
	if err != nil {
		return nil, 0, fmt.Errorf("file sink: list %s: %w", s.cfg.Path, err)
	}
	ipPrefix := ".part-" + strconv.Itoa(s.subtask) + "-"
	finPrefix := "part-" + strconv.Itoa(s.subtask) + "-"
	for _, e := range entries {
		if n, ok := parseNumbered(e.Name(), ipPrefix, inProgressSuffix); ok {
			inProgress = append(inProgress, n)
		} else if n, ok := parseNumbered(e.Name(), finPrefix, ""); ok {
			nextSeq = max(nextSeq, n+1)
		}
	}
	return inProgress, nextSeq, nil
}

func (s *FileSink) openTransactional() error {
	s.txnl = true
	_, next, err := s.scan()
	if err != nil {
		return err
	}
	// A fresh start never overwrites files committed by an earlier run.
	s.nextSeq = next
	return nil
}

// cleanStale deletes this subtask's in-progress files other than those of
// pending transactions: they hold rows written after the last completed
// checkpoint, which will be replayed. It runs once, at restore or before
// the first write of a job started without a checkpoint.
func (s *FileSink) cleanStale() error {
	if s.cleaned {
		return nil
	}
	ids, _, err := s.scan()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if slices.ContainsFunc(s.pending, func(t txn) bool { return t.id == id }) {
			continue
		}
		if err := os.Remove(s.path(InProgressName(s.subtask, id))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file sink: delete stale in-progress file: %w", err)
		}
	}
	s.cleaned = true
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
	w, err := createPartWriter(s.path(InProgressName(s.subtask, s.nextTxn)), s.format, s.schema)
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
		s.w = nil
		if err == nil {
			err = syncDir(s.cfg.Path)
		}
		if err != nil {
			return fmt.Errorf("%w (pre-committing checkpoint %d)", err, c.CheckpointID)
		}
		s.pending = append(s.pending, txn{checkpoint: c.CheckpointID, id: s.cur, seq: s.nextSeq})
		s.nextSeq++
	}
	for _, t := range s.pending {
		item := s.itemHeader()
		item = appendInt(item, t.checkpoint)
		item = appendString(item, InProgressName(s.subtask, t.id))
		item = appendString(item, CommittedName(s.subtask, t.seq))
		c.AddListState(sinkPendingState, item)
	}
	item := s.itemHeader()
	item = appendInt(item, s.nextTxn)
	item = appendInt(item, s.nextSeq)
	c.AddListState(sinkCountersState, item)
	return nil
}

func (s *FileSink) itemHeader() []byte {
	item := []byte{stateVersion}
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

// commit renames t's in-progress file to its final name. If the in-progress
// file is gone and the final one exists, the commit already happened; if
// neither exists, the error wraps fs.ErrNotExist.
func (s *FileSink) commit(t txn) error {
	from, to := InProgressName(s.subtask, t.id), CommittedName(s.subtask, t.seq)
	err := os.Rename(s.path(from), s.path(to))
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return fmt.Errorf("file sink: commit checkpoint %d: %w", t.checkpoint, err)
		}
		return nil
	}
	if _, serr := os.Stat(s.path(to)); serr == nil {
		return nil // committed before a failure
	}
	return errkind.Mark(fmt.Errorf("file sink: commit checkpoint %d: neither %s nor %s exists in %s; the pre-committed file was deleted or moved by something else, and its rows are lost",
		t.checkpoint, from, to, s.cfg.Path), err)
}

// RestoreState commits the transactions pending in the checkpoint, deletes
// this subtask's other in-progress files and continues numbering after the
// restored transactions.
func (s *FileSink) RestoreState(c *stream.RestoreContext) error {
	if !s.txnl || c.State == nil {
		return nil
	}
	where := fmt.Sprintf("file sink subtask %d: checkpoint %d", s.subtask, c.CheckpointID)
	var restored []txn
	for _, name := range []string{sinkPendingState, sinkCountersState} {
		for _, item := range c.State.List[name] {
			r := newStateReader(item)
			subtask, par := r.int(), r.int()
			var t txn
			var from, to string
			if name == sinkPendingState {
				t.checkpoint, from, to = r.varint(), r.string(), r.string()
			} else {
				s.nextTxn, s.nextSeq = max(s.nextTxn, r.varint()), max(s.nextSeq, r.varint())
			}
			if err := r.done(); err != nil {
				return fmt.Errorf("%s: corrupt %s state: %w", where, name, err)
			}
			if par != s.par || subtask != s.subtask {
				return errkind.Mark(fmt.Errorf("%s: state of subtask %d of %d restored into subtask %d of %d: the transactional file sink cannot be rescaled; restore with parallelism %d",
					where, subtask, par, s.subtask, s.par, par), errRescale)
			}
			if name == sinkCountersState {
				continue
			}
			var ok1, ok2 bool
			t.id, ok1 = parseNumbered(from, ".part-"+strconv.Itoa(s.subtask)+"-", inProgressSuffix)
			t.seq, ok2 = parseNumbered(to, "part-"+strconv.Itoa(s.subtask)+"-", "")
			if !ok1 || !ok2 {
				return fmt.Errorf("%s: pending transaction names %q, %q are not this subtask's file names", where, from, to)
			}
			restored = append(restored, t)
		}
	}
	slices.SortFunc(restored, func(a, b txn) int { return int(a.seq - b.seq) })
	for _, t := range restored {
		if err := s.commit(t); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		s.nextTxn, s.nextSeq = max(s.nextTxn, t.id+1), max(s.nextSeq, t.seq+1)
	}
	if err := syncDir(s.cfg.Path); err != nil {
		return err
	}
	s.cleaned = false
	if err := s.cleanStale(); err != nil {
		return err
	}
	_, next, err := s.scan()
	s.nextSeq = max(s.nextSeq, next)
	return err
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
