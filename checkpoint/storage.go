package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/storeuri"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// fetchParallelism bounds concurrent object reads and deletes.
const fetchParallelism = 16

// Storage reads and writes checkpoints under one storage root. It is safe
// for concurrent use; it holds no state besides its store and its restore
// progress callback.
type Storage struct {
	store blobstore.Store
	// restored, if not nil, is told the size of every object a restore
	// has in place (WithRestoreProgress).
	restored func(n int64)
	// inline is the size up to which snapshots are not written as objects
	// but carried in their handles (WithInlineThreshold).
	inline int
}

// NewStorage returns a Storage on store.
func NewStorage(store blobstore.Store) *Storage { return &Storage{store: store} }

// OpenStorage opens the blob store that uri names (see storeuri.Open:
// file:///abs/path or s3://bucket/prefix) and returns a Storage on it.
func OpenStorage(ctx context.Context, uri string) (*Storage, error) {
	store, err := storeuri.Open(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage: %w", err)
	}
	return NewStorage(store), nil
}

// Store returns the underlying blob store.
func (s *Storage) Store() blobstore.Store { return s.store }

// WithRestoreProgress returns a Storage on the same store whose
// LoadOperatorState and DownloadFiles call restored with the size of each
// object once it is in place: fetched and verified, or a file reused from
// the local disk. Restoring a subtask from handles thus reports, in all,
// exactly RestoreSize(handles, kg) bytes when it succeeds. restored may be
// called concurrently from several goroutines and must return quickly.
func (s *Storage) WithRestoreProgress(restored func(n int64)) *Storage {
	c := *s
	c.restored = restored
	return &c
}

// reportRestored passes n restored bytes to the progress callback.
func (s *Storage) reportRestored(n int64) {
	if s.restored != nil {
		s.restored(n)
	}
}

// RestoreSize returns the bytes a subtask that owns key groups kg has in
// place once it restored from handles (the handles of every operator of
// its chain): every handle's object, which LoadOperatorState reads whole,
// and the files of each handle for which RestoresFiles holds.
func RestoreSize(handles []*weirpb.StateHandle, kg stream.KeyGroupRange) int64 {
	var n int64
	for _, h := range handles {
		n += h.GetSize()
		if RestoresFiles(h, kg) {
			for _, f := range h.GetFiles() {
				n += f.GetSize()
			}
		}
	}
	return n
}

// RestoresFiles reports whether a subtask that owns key groups kg
// downloads the files of h, an incremental snapshot's handle: only when h
// has files and its key-group range overlaps kg.
func RestoresFiles(h *weirpb.StateHandle, kg stream.KeyGroupRange) bool {
	return len(h.GetFiles()) > 0 && int(h.GetKeyGroupEnd()) >= kg.Start && int(h.GetKeyGroupStart()) <= kg.End
}

// validSegment checks a job id or operator uid used as one key segment.
func validSegment(what, v string) error {
	if v == "" || strings.Contains(v, "/") {
		return fmt.Errorf("checkpoint: %s %q: must be non-empty and contain no '/'", what, v)
	}
	if err := blobstore.ValidateKey(v); err != nil {
		return fmt.Errorf("checkpoint: %s %q: %w", what, v, err)
	}
	return nil
}

// CheckpointPrefix returns the key prefix, ending in '/', of every object of
// checkpoint id of job jobID.
func CheckpointPrefix(jobID string, id int64) string {
	return jobID + "/chk-" + strconv.FormatInt(id, 10) + "/"
}

// CheckpointOf returns the checkpoint id whose objects key (of job jobID)
// is under, and whether it is under one (CheckpointPrefix) at all.
func CheckpointOf(jobID, key string) (id int64, ok bool) {
	prefix := jobID + "/chk-"
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(num, 10, 64)
	if err != nil || id < 0 || strconv.FormatInt(id, 10) != num {
		return 0, false // not a checkpoint directory of ours
	}
	return id, true
}

// SnapshotKey returns the key of an operator subtask's snapshot.
func SnapshotKey(jobID string, id int64, operatorUID string, subtask int, attempt int64) string {
	return CheckpointPrefix(jobID, id) + operatorUID + "/" + strconv.Itoa(subtask) + "-a" + strconv.FormatInt(attempt, 10)
}

// ManifestKey returns the key of a checkpoint's manifest.
func ManifestKey(jobID string, id int64) string { return CheckpointPrefix(jobID, id) + "_manifest" }

// PointerKey returns the key of a job's completed-checkpoint pointer.
func PointerKey(jobID string) string { return jobID + "/_completed" }

// checkpointIDOf extracts n from a key "<job>/chk-<n>/...", or returns -1.
func checkpointIDOf(key string) int64 {
	_, rest, ok := strings.Cut(key, "/chk-")
	if !ok {
		return -1
	}
	num, _, _ := strings.Cut(rest, "/")
	id, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return -1
	}
	return id
}

// objectPrefix is the start of an error message about the object key.
func objectPrefix(key string) string {
	if id := checkpointIDOf(key); id >= 0 {
		return fmt.Sprintf("checkpoint %d: object %s", id, key)
	}
	return "checkpoint: object " + key
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// UploadSnapshot stores the encoded snapshot data (from EncodeSnapshot) of
// subtask (of parallelism subtasks, in attempt attempt, owning key groups
// kg) of operator operatorUID for checkpoint checkpointID, and returns the
// handle that the acknowledgement and the manifest carry. data is not kept.
func (s *Storage) UploadSnapshot(ctx context.Context, jobID string, checkpointID int64, operatorUID string,
	subtask, parallelism int, attempt int64, kg stream.KeyGroupRange, data []byte) (*weirpb.StateHandle, error) {
	if err := validSegment("job id", jobID); err != nil {
		return nil, err
	}
	if err := validSegment("operator uid", operatorUID); err != nil {
		return nil, err
	}
	if checkpointID < 0 || subtask < 0 || parallelism <= 0 || subtask >= parallelism || attempt < 0 {
		return nil, fmt.Errorf("checkpoint %d: upload snapshot of %s subtask %d/%d attempt %d: invalid arguments",
			checkpointID, operatorUID, subtask, parallelism, attempt)
	}
	key := SnapshotKey(jobID, checkpointID, operatorUID, subtask, attempt)
	return s.upload(ctx, key, checkpointID, operatorUID, subtask, parallelism, kg, data)
}

// UploadUnionSnapshot is UploadSnapshot for a snapshot that holds only union
// list state: its handle is marked union_only, so that a restore gives it to
// every subtask.
func (s *Storage) UploadUnionSnapshot(ctx context.Context, jobID string, checkpointID int64, operatorUID string,
	subtask, parallelism int, attempt int64, kg stream.KeyGroupRange, data []byte) (*weirpb.StateHandle, error) {
	if err := validSegment("job id", jobID); err != nil {
		return nil, err
	}
	if err := validSegment("operator uid", operatorUID); err != nil {
		return nil, err
	}
	if checkpointID < 0 || subtask < 0 || parallelism <= 0 || subtask >= parallelism || attempt < 0 {
		return nil, fmt.Errorf("checkpoint %d: upload union state of %s subtask %d/%d attempt %d: invalid arguments",
			checkpointID, operatorUID, subtask, parallelism, attempt)
	}
	key := SnapshotKey(jobID, checkpointID, operatorUID, subtask, attempt) + ".union"
	h, err := s.upload(ctx, key, checkpointID, operatorUID, subtask, parallelism, kg, data)
	if h != nil {
		h.UnionOnly = true
	}
	return h, err
}

// DefaultInlineThreshold is the size up to which the taskmanagers'
// snapshots travel inside their handles (StateHandle.inline_data: in the
// acknowledgement and the manifest) instead of as objects of their own
// (Storage.WithInlineThreshold). A wide job's many small snapshots (a
// source's position, a window subtask's few keys) then cost no object each
// per checkpoint; Flink's state.storage.fs.memory-threshold is the same
// idea. Keyed state in files (incremental snapshots) is never inline.
const DefaultInlineThreshold = 4 << 10

// WithInlineThreshold makes snapshots of at most n bytes travel inside
// their handles; 0 (the default of NewStorage) writes every snapshot as an
// object. It returns a Storage like s with that threshold.
func (s *Storage) WithInlineThreshold(n int) *Storage {
	c := *s
	c.inline = n
	return &c
}

func (s *Storage) upload(ctx context.Context, key string, checkpointID int64, operatorUID string,
	subtask, parallelism int, kg stream.KeyGroupRange, data []byte) (*weirpb.StateHandle, error) {
	h := &weirpb.StateHandle{
		OperatorUid:   operatorUID,
		Subtask:       int32(subtask),
		Parallelism:   int32(parallelism),
		Key:           key,
		Size:          int64(len(data)),
		Sha256:        sha256Hex(data),
		KeyGroupStart: int32(kg.Start),
		KeyGroupEnd:   int32(kg.End),
	}
	if len(data) > 0 && len(data) <= s.inline {
		h.Key, h.InlineData = "", bytes.Clone(data)
		return h, nil
	}
	if err := s.store.Put(ctx, key, data); err != nil {
		return nil, fmt.Errorf("checkpoint %d: upload snapshot of %s subtask %d: %w", checkpointID, operatorUID, subtask, err)
	}
	return h, nil
}

// IsInline reports whether h carries its snapshot itself (no object). A
// handle with neither a key nor inline data is not inline but corrupt.
func IsInline(h *weirpb.StateHandle) bool { return h.GetKey() == "" && len(h.GetInlineData()) > 0 }

// handleName names h's snapshot in messages.
func handleName(h *weirpb.StateHandle) string {
	if IsInline(h) {
		return fmt.Sprintf("the inline snapshot of %s subtask %d", h.GetOperatorUid(), h.GetSubtask())
	}
	return objectPrefix(h.GetKey())
}

// fetch reads the object a handle names and checks its size and SHA-256.
func (s *Storage) fetch(ctx context.Context, h *weirpb.StateHandle) ([]byte, error) {
	var data []byte
	if IsInline(h) {
		data = h.GetInlineData()
	} else {
		var err error
		key := h.GetKey()
		if data, err = s.store.Get(ctx, key); err != nil {
			if errors.Is(err, blobstore.ErrNotFound) {
				return nil, fmt.Errorf("%s: missing; the checkpoint is incomplete or was deleted: %w", objectPrefix(key), err)
			}
			return nil, fmt.Errorf("%s: %w", objectPrefix(key), err)
		}
	}
	if int64(len(data)) != h.GetSize() {
		return nil, fmt.Errorf("%s: size mismatch (want %d bytes, got %d); it was truncated or modified: %w",
			handleName(h), h.GetSize(), len(data), ErrCorrupt)
	}
	if got := sha256Hex(data); got != h.GetSha256() {
		return nil, fmt.Errorf("%s: checksum mismatch (want sha256 %s, got %s); it was modified or truncated: %w",
			handleName(h), h.GetSha256(), got, ErrCorrupt)
	}
	return data, nil
}

func handleRange(h *weirpb.StateHandle) stream.KeyGroupRange {
	return stream.KeyGroupRange{Start: int(h.GetKeyGroupStart()), End: int(h.GetKeyGroupEnd())}
}

func intersect(a, b stream.KeyGroupRange) stream.KeyGroupRange {
	return stream.KeyGroupRange{Start: max(a.Start, b.Start), End: min(a.End, b.End)}
}

// LoadOperatorState restores the state of subtask (of parallelism subtasks,
// owning key groups kg) of one operator from the handles of its snapshotted
// subtasks, as the manifest lists them. It fetches every handle in parallel
// and verifies its size and SHA-256; a missing, modified or truncated object
// fails the whole load with an error naming the object (wrapping
// blobstore.ErrNotFound or ErrCorrupt).
//
// The result holds:
//   - keyed state: the chunks of the key groups in kg, from every handle
//     whose key-group range intersects kg, in handle order;
//   - list state: this subtask's share. If parallelism equals the
//     snapshotted parallelism of every handle, each subtask gets back
//     exactly its own items in order. Otherwise, per state name, the items
//     of all handles are numbered i = 0, 1, … in handle order and item i
//     goes to subtask i % parallelism, so every item is restored exactly
//     once across the new subtasks;
//   - union state: all items of all handles, concatenated in handle order.
//
// Handle order is by snapshotted subtask, then key.
func (s *Storage) LoadOperatorState(ctx context.Context, handles []*weirpb.StateHandle, kg stream.KeyGroupRange,
	subtask, parallelism int) (*stream.OperatorSnapshot, error) {
	if parallelism <= 0 || subtask < 0 || subtask >= parallelism {
		return nil, fmt.Errorf("checkpoint: load operator state for subtask %d of %d: invalid subtask", subtask, parallelism)
	}
	hs := slices.Clone(handles)
	slices.SortStableFunc(hs, func(a, b *weirpb.StateHandle) int {
		if a.GetSubtask() != b.GetSubtask() {
			return int(a.GetSubtask()) - int(b.GetSubtask())
		}
		return strings.Compare(a.GetKey(), b.GetKey())
	})

	decoded := make([]*stream.OperatorSnapshot, len(hs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchParallelism)
	for i, h := range hs {
		g.Go(func() error {
			data, err := s.fetch(gctx, h)
			if err != nil {
				return err
			}
			snap, err := DecodeSnapshot(data, intersect(kg, handleRange(h)))
			if err != nil {
				return fmt.Errorf("%s: %w; it was written by an incompatible Weir or damaged before its checksum was taken", handleName(h), err)
			}
			decoded[i] = snap
			s.reportRestored(int64(len(data)))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	sameParallelism := true
	for _, h := range hs {
		if int(h.GetParallelism()) != parallelism {
			sameParallelism = false
		}
	}
	out := &stream.OperatorSnapshot{}
	next := map[string]int{} // per list-state name, the global index of the next item
	for i, snap := range decoded {
		for group, chunks := range snap.Keyed {
			if out.Keyed == nil {
				out.Keyed = make(map[int][][]byte)
			}
			out.Keyed[group] = append(out.Keyed[group], chunks...)
		}
		for _, name := range sortedNames(snap.List) {
			items := snap.List[name]
			for _, it := range items {
				idx := next[name]
				next[name]++
				mine := idx%parallelism == subtask
				if sameParallelism {
					mine = int(hs[i].GetSubtask()) == subtask
				}
				if mine {
					if out.List == nil {
						out.List = make(map[string][][]byte)
					}
					out.List[name] = append(out.List[name], it)
				}
			}
		}
		for name, items := range snap.Union {
			if out.Union == nil {
				out.Union = make(map[string][][]byte)
			}
			out.Union[name] = append(out.Union[name], items...)
		}
	}
	return out, nil
}

func sortedNames(m map[string][][]byte) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
