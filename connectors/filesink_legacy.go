package connectors

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// RestoreLegacy reads the state of a checkpoint written before the file
// sink was built on package twophase ("pending", "writers" and "counters";
// the format is in filesink_txn.go): the pending transactions given to
// this subtask become framework transactions with file handles, every
// transaction pending in the checkpoint is kept, and the numbering of the
// old subtask of this subtask's index continues. RestoreSystem ran before
// it.
func (s *fileSystem) RestoreLegacy(c *stream.RestoreContext) (twophase.Legacy, bool, error) {
	items, writers, counters := c.State.List[sinkPendingState], c.State.Union[sinkWritersState], c.State.List[sinkCountersState]
	if len(items)+len(writers)+len(counters) == 0 {
		return twophase.Legacy{}, false, nil
	}
	where := s.where(c)
	l := twophase.Legacy{KeepNames: make(map[string]bool)}
	oldPar, err := s.restoreLegacyWriters(where, writers, l.KeepNames)
	if err != nil {
		return twophase.Legacy{}, false, err
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
	restoredIdent := sinkIdentity(s.restoreJob, s.uid)
	for _, item := range items {
		r := statecodec.NewReader(item)
		version := r.Version(sinkPendingVersion)
		subtask, par := r.Int(), r.Int()
		checkpoint := r.Varint()
		h := fileHandle{subtask: subtask}
		var from, to string
		switch version {
		case 1:
			from, to, h.size = r.String(statecodec.MaxString), r.String(statecodec.MaxString), -1
		case 2:
			h.ident = restoredIdent
			h.id, h.seq, h.size, h.crc = r.Varint(), r.Varint(), r.Varint(), r.Uint32()
		default:
			h.ident = r.String(statecodec.MaxString)
			h.id, h.seq, h.size, h.crc = r.Varint(), r.Varint(), r.Varint(), r.Uint32()
		}
		if err := r.Done(); err != nil {
			return twophase.Legacy{}, false, fmt.Errorf("%s: corrupt %s state: %w", where, sinkPendingState, err)
		}
		if err := checkWriter(sinkPendingState, subtask, par); err != nil {
			return twophase.Legacy{}, false, err
		}
		if version == 1 {
			var ok1, ok2 bool
			h.id, ok1 = parseNumbered(from, ".part-"+strconv.Itoa(subtask)+"-", inProgressSuffix)
			h.seq, ok2 = parseNumbered(to, "part-"+strconv.Itoa(subtask)+"-", "")
			if !ok1 || !ok2 {
				return twophase.Legacy{}, false, fmt.Errorf("%s: pending transaction names %q, %q are not file names of subtask %d, which wrote them", where, from, to, subtask)
			}
		} else {
			if h.id < 0 || h.seq < 0 || h.size < 0 {
				return twophase.Legacy{}, false, fmt.Errorf("%s: corrupt %s state: negative transaction number, seq or size", where, sinkPendingState)
			}
			if !validIdentity(h.ident) {
				// Not quoted: it is not a name this sink makes.
				return twophase.Legacy{}, false, fmt.Errorf("%s: corrupt %s state: a transaction's job and operator identity is not one that file names can carry", where, sinkPendingState)
			}
		}
		l.Pending = append(l.Pending, twophase.Pending{ID: s.legacyID(h.ident, subtask, h.id), Checkpoint: checkpoint, Handle: h.encode()})
		if subtask == s.subtask {
			s.nextSeq = max(s.nextSeq, h.seq+1)
		}
	}
	for _, item := range counters {
		r := statecodec.NewReader(item)
		r.Version(stateVersion)
		subtask, par := r.Int(), r.Int()
		r.Varint() // the next in-progress number: attempts number them now
		nextSeq := r.Varint()
		if err := r.Done(); err != nil {
			return twophase.Legacy{}, false, fmt.Errorf("%s: corrupt %s state: %w", where, sinkCountersState, err)
		}
		if err := checkWriter(sinkCountersState, subtask, par); err != nil {
			return twophase.Legacy{}, false, err
		}
		if subtask == s.subtask {
			s.nextSeq = max(s.nextSeq, nextSeq)
		}
	}
	// Without "writers", checkWriter accepted only items of this subtask
	// at the current parallelism.
	l.OldParallelism = cmp.Or(oldPar, s.par)
	return l, true, nil
}

// restoreLegacyWriters reads the "writers" items of a legacy checkpoint:
// it continues the numbering of the old subtask of this subtask's index,
// adds the names of the checkpoint's pending transactions to keep, and
// returns the parallelism the checkpoint was taken with, or 0 if it has no
// such items (it was written before they existed).
func (s *fileSystem) restoreLegacyWriters(where string, items [][]byte, keep map[string]bool) (int, error) {
	corrupt := func(why string) error {
		return fmt.Errorf("%s: corrupt %s state: %s", where, sinkWritersState, why)
	}
	oldPar := 0
	for _, item := range items {
		r := statecodec.NewReader(item)
		r.Version(sinkWritersVersion)
		subtask, par := r.Int(), r.Int()
		ident := r.String(statecodec.MaxString)
		r.Varint() // the next in-progress number: attempts number them now
		nextSeq := r.Varint()
		n := r.Count(2) // each pending file takes at least 2 bytes
		pending := make([]inProgressFile, 0, n)
		for range n {
			f := inProgressFile{subtask: subtask}
			f.ident = r.String(statecodec.MaxString)
			f.id = r.Varint()
			pending = append(pending, f)
		}
		if err := r.Done(); err != nil {
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
		if nextSeq < 0 || slices.ContainsFunc(pending, func(f inProgressFile) bool { return f.id < 0 }) {
			return 0, corrupt("negative transaction number or seq")
		}
		oldPar = par
		for _, f := range pending {
			keep[s.legacyID(f.ident, f.subtask, f.id).Name()] = true
		}
		if subtask == s.subtask {
			s.nextSeq = max(s.nextSeq, nextSeq)
		}
	}
	return oldPar, nil
}

// legacyID returns the TxnID of in-progress file number id of subtask of
// the sink identified by ident, from a legacy checkpoint: that of
// txnNumber, under the job of this sink or of the restored checkpoint
// whose identity it is, so that Recover finds the file by the name.
// Files of other identities (or of the names of version 1 state) get a
// name of their own that Recover never looks for: it deletes only files of
// those two jobs.
func (s *fileSystem) legacyID(ident string, subtask int, id int64) twophase.TxnID {
	job := "~" + ident // not a job whose files Recover deletes
	for _, j := range []string{s.restoreJob, s.jobID} {
		if ident == sinkIdentity(j, s.uid) {
			job = j
		}
	}
	attempt, seq := txnOf(id)
	return twophase.TxnID{JobID: job, OperatorUID: s.uid, Subtask: subtask, Attempt: attempt, Seq: seq}
}

// checkOwner fails unless state item of subtask at parallelism par, from a
// legacy checkpoint without "writers" state, is this subtask's own.
func (s *fileSystem) checkOwner(where string, subtask, par int) error {
	if par == s.par && subtask == s.subtask {
		return nil
	}
	return errkind.Mark(fmt.Errorf("%s: state of subtask %d of %d restored into subtask %d of %d: the checkpoint was written by a Weir whose transactional file sink cannot be rescaled; restore it with parallelism %d, then take a checkpoint or savepoint and rescale from that",
		where, subtask, par, s.subtask, s.par, par), errRescale)
}
