package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/proto/weirpb"
)

// A savepoint is a self-contained copy of one completed checkpoint in a
// directory (a blob store root, file:///path or s3://bucket/prefix) that
// the user owns: Weir never deletes it on its own, and it can be moved to
// another bucket or cluster and a job started from it. Its layout is the
// checkpoint's, with the job id's leading segment dropped from every key:
//
//	chk-<n>/<operator-uid>/<subtask>-a<attempt>   snapshots (and their .files/)
//	shared/<sha256>                               shared files of incremental snapshots
//	_metadata                                     the metadata, written last
//
// The metadata is the checkpoint's manifest (same encoding and version,
// same job and checkpoint id) with every key rewritten relative to the
// savepoint's directory, so that a Storage opened on the directory restores
// from the metadata's handles as they are. A savepoint is complete once its
// metadata exists.

// SavepointMetadataKey is the key, relative to a savepoint's directory, of
// the savepoint's metadata. WriteSavepoint writes it last, so its presence
// means the savepoint is complete.
const SavepointMetadataKey = "_metadata"

// maxSavepointObjects bounds the distinct objects of one savepoint, and so
// the memory and time that copying, reading or disposing of one may take.
// It is a variable so that tests can lower it.
var maxSavepointObjects = 1_000_000

// ErrSavepointExists is wrapped by the error of WriteSavepoint when the
// directory already holds a complete savepoint: savepoints are never
// overwritten.
var ErrSavepointExists = errors.New("checkpoint: savepoint exists")

// savepointObject is one object a savepoint copies: from src (a key in
// checkpoint storage) to dst (the key in the savepoint), with the size and
// hex SHA-256 its handle or file records.
type savepointObject struct {
	src, dst string
	size     int64
	sha      string
}

// WriteSavepoint copies the completed checkpoint that m (a manifest read
// from src) describes into dst, a savepoint directory, and writes its
// metadata (see SavepointMetadataKey). It returns the metadata, as
// ReadSavepoint would return it, and the bytes written: objects and
// metadata.
//
// Every object the handles of m name (each handle's key and each of its
// files' keys) is copied once, however many handles name it, to its key
// without the leading "<job id>/" ("J/chk-7/op/0-a1" to "chk-7/op/0-a1",
// "J/shared/<sha256>" to "shared/<sha256>"). A key outside the job's
// directory is refused before anything is copied. Each object's size and
// SHA-256 are checked against what its handle records before it is
// written; a mismatch fails the call with an error naming the object and
// wrapping ErrCorrupt, a missing object with one wrapping
// blobstore.ErrNotFound.
//
// The caller keeps the checkpoint from being deleted until WriteSavepoint
// returns, and nobody else writes to dst meanwhile. If dst already holds a
// savepoint's metadata the call fails with an error wrapping
// ErrSavepointExists and writes nothing; objects that an earlier, failed
// call left in dst are overwritten. A failed call leaves no metadata, so
// what it copied is not a savepoint.
//
// Objects are copied in parallel, each held in memory whole. progress, if
// not nil, is called with the object bytes copied so far and their total:
// once before copying starts and after each object. Calls never overlap,
// but may come from different goroutines; progress should return quickly,
// since copying waits for it.
func WriteSavepoint(ctx context.Context, src *Storage, m *weirpb.Manifest, dst blobstore.Store,
	progress func(done, total int64)) (meta *weirpb.Manifest, bytes int64, err error) {
	if err := validSegment("job id", m.GetJobId()); err != nil {
		return nil, 0, fmt.Errorf("savepoint: %w", err)
	}
	what := fmt.Sprintf("savepoint of checkpoint %d of job %s", m.GetCheckpointId(), m.GetJobId())
	if m.GetCheckpointId() < 0 {
		return nil, 0, fmt.Errorf("%s: negative checkpoint id", what)
	}
	meta, objs, total, err := savepointOf(m)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	meta, data, err := encodeManifest(meta, what)
	if err != nil {
		return nil, 0, err
	}
	if _, err := validateSavepoint(meta); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	if err := refuseExisting(ctx, dst, what); err != nil {
		return nil, 0, err
	}

	var mu sync.Mutex // serializes progress calls
	var done int64
	if progress != nil {
		progress(0, total)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchParallelism)
	for _, o := range objs {
		g.Go(func() error {
			if err := copyObject(gctx, src.store, dst, o, what); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			done += o.size
			if progress != nil {
				progress(done, total)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, 0, err
	}

	created, err := dst.PutIfAbsent(ctx, SavepointMetadataKey, data)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: write %s: %w", what, SavepointMetadataKey, err)
	}
	if !created {
		return nil, 0, errkind.Mark(fmt.Errorf("%s: another savepoint was completed in the directory while this one was copied; "+
			"its objects may have been overwritten: dispose of it and take both savepoints again, into separate directories", what), ErrSavepointExists)
	}
	return meta, total + int64(len(data)), nil
}

// savepointOf returns a clone of m with every key made relative to the
// savepoint, the distinct objects to copy and their total size.
func savepointOf(m *weirpb.Manifest) (*weirpb.Manifest, []savepointObject, int64, error) {
	jobID := m.GetJobId()
	meta := proto.CloneOf(m)
	seen := map[string]savepointObject{}
	var objs []savepointObject
	var total int64
	add := func(key *string, size int64, sha string) error {
		src := *key
		rel, ok := strings.CutPrefix(src, jobID+"/")
		if !ok {
			return fmt.Errorf("object %q is not under the job's directory %s/; a savepoint copies only its job's objects", src, jobID)
		}
		if size < 0 {
			return fmt.Errorf("object %s: negative size %d in the manifest: %w", src, size, ErrCorrupt)
		}
		*key = rel
		o := savepointObject{src: src, dst: rel, size: size, sha: sha}
		if prev, ok := seen[src]; ok {
			if prev != o {
				return fmt.Errorf("object %s: the manifest records it twice with different sizes or checksums (%d bytes sha256 %s, %d bytes sha256 %s): %w",
					src, prev.size, prev.sha, size, sha, ErrCorrupt)
			}
			return nil
		}
		if len(objs) == maxSavepointObjects {
			return fmt.Errorf("the checkpoint has more than %d objects, more than a savepoint may hold", maxSavepointObjects)
		}
		seen[src] = o
		objs = append(objs, o)
		total += size
		return nil
	}
	for _, op := range meta.GetOperators() {
		for _, h := range op.GetHandles() {
			if IsInline(h) { // travels in the manifest
				continue
			}
			if err := add(&h.Key, h.GetSize(), h.GetSha256()); err != nil {
				return nil, nil, 0, err
			}
			for _, f := range h.GetFiles() {
				if err := add(&f.Key, f.GetSize(), f.GetSha256()); err != nil {
					return nil, nil, 0, err
				}
			}
		}
	}
	return meta, objs, total, nil
}

// refuseExisting fails if dst holds a savepoint's metadata.
func refuseExisting(ctx context.Context, dst blobstore.Store, what string) error {
	data, err := dst.Get(ctx, SavepointMetadataKey)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("%s: checking the directory for an existing savepoint: %w", what, err)
	}
	holds := "a savepoint"
	if old, err := decodeManifest(data, "savepoint", SavepointMetadataKey); err == nil {
		holds = fmt.Sprintf("a savepoint of checkpoint %d of job %s", old.GetCheckpointId(), old.GetJobId())
	}
	return errkind.Mark(fmt.Errorf("%s: the directory already holds %s (it has %s); savepoints are never overwritten: choose another directory or dispose of that savepoint",
		what, holds, SavepointMetadataKey), ErrSavepointExists)
}

// copyObject copies o from src to dst, checking its size and SHA-256.
func copyObject(ctx context.Context, src, dst blobstore.Store, o savepointObject, what string) error {
	data, err := src.Get(ctx, o.src)
	if err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return fmt.Errorf("%s: object %s: missing; the checkpoint is incomplete or was deleted: %w", what, o.src, err)
		}
		return fmt.Errorf("%s: object %s: %w", what, o.src, err)
	}
	if int64(len(data)) != o.size {
		return fmt.Errorf("%s: object %s: size mismatch (want %d bytes, got %d); the object was truncated or modified: %w",
			what, o.src, o.size, len(data), ErrCorrupt)
	}
	if got := sha256Hex(data); got != o.sha {
		return fmt.Errorf("%s: object %s: checksum mismatch (want sha256 %s, got %s); the object was modified or truncated: %w",
			what, o.src, o.sha, got, ErrCorrupt)
	}
	if err := dst.Put(ctx, o.dst, data); err != nil {
		return fmt.Errorf("%s: write %s: %w", what, o.dst, err)
	}
	return nil
}

// ReadSavepoint reads the metadata of the savepoint in dst. If dst has no
// metadata the error wraps blobstore.ErrNotFound: the directory is not a
// savepoint, or its writing never completed. Metadata that cannot be decoded,
// or that names a key that is not a plain relative key inside the savepoint
// (a leading '/', a ".." segment, …), is rejected with an error wrapping
// ErrCorrupt, and one of an unknown version with one wrapping ErrVersion.
// Restoring from the returned handles thus reads only inside dst.
func ReadSavepoint(ctx context.Context, dst blobstore.Store) (*weirpb.Manifest, error) {
	m, _, err := readSavepoint(ctx, dst)
	return m, err
}

// readSavepoint is ReadSavepoint, also returning the distinct keys of the
// objects the metadata names.
func readSavepoint(ctx context.Context, dst blobstore.Store) (*weirpb.Manifest, []string, error) {
	data, err := dst.Get(ctx, SavepointMetadataKey)
	if err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, nil, fmt.Errorf("savepoint: no %s: the URI does not name a savepoint, or names one whose writing did not complete: %w", SavepointMetadataKey, err)
		}
		return nil, nil, fmt.Errorf("savepoint: read %s: %w", SavepointMetadataKey, err)
	}
	m, err := decodeManifest(data, "savepoint", SavepointMetadataKey)
	if err != nil {
		return nil, nil, err
	}
	keys, err := validateSavepoint(m)
	if err != nil {
		return nil, nil, fmt.Errorf("savepoint: %s: %w; the metadata is corrupt or was not written by Weir: %w", SavepointMetadataKey, err, ErrCorrupt)
	}
	return m, keys, nil
}

// validateSavepoint checks what restoring from and disposing of savepoint
// metadata m rely on: a job id and checkpoint id, at most
// maxSavepointObjects distinct objects, keys relative to the savepoint's
// directory and plain file names. It returns the distinct keys.
func validateSavepoint(m *weirpb.Manifest) ([]string, error) {
	if err := validSegment("job id", m.GetJobId()); err != nil {
		return nil, err
	}
	if m.GetCheckpointId() < 0 {
		return nil, fmt.Errorf("negative checkpoint id %d", m.GetCheckpointId())
	}
	seen := map[string]bool{}
	var keys []string
	add := func(key string) error {
		if seen[key] {
			return nil
		}
		if err := validSavepointKey(key); err != nil {
			return err
		}
		if len(keys) == maxSavepointObjects {
			return fmt.Errorf("more than %d objects", maxSavepointObjects)
		}
		seen[key] = true
		keys = append(keys, key)
		return nil
	}
	for _, op := range m.GetOperators() {
		for _, h := range op.GetHandles() {
			if !IsInline(h) {
				if err := add(h.GetKey()); err != nil {
					return nil, err
				}
			}
			for _, f := range h.GetFiles() {
				if err := add(f.GetKey()); err != nil {
					return nil, err
				}
				if err := validSegment("snapshot file name", f.GetName()); err != nil {
					return nil, err
				}
			}
		}
	}
	return keys, nil
}

// validSavepointKey checks that key names an object inside a savepoint's
// directory other than its metadata.
func validSavepointKey(key string) error {
	if err := blobstore.ValidateKey(key); err != nil {
		return fmt.Errorf("object key %q: %w; a savepoint's keys must be relative to its directory", key, err)
	}
	if key == SavepointMetadataKey || strings.HasPrefix(key, SavepointMetadataKey+"/") {
		return fmt.Errorf("object key %q: names the savepoint's metadata", key)
	}
	return nil
}

// DisposeSavepoint deletes the savepoint in dst: every object its metadata
// names, then the metadata, and returns the number of objects deleted
// (objects already gone count too). Disposing again after an interrupted
// dispose finishes it, as long as the metadata is left.
//
// Without metadata it deletes nothing and fails with an error wrapping
// blobstore.ErrNotFound, so that a wrong URI never deletes objects that are
// not a savepoint's; the error says whether dst holds objects that look
// like a savepoint's (left by a failed WriteSavepoint, or by a dispose
// interrupted after it deleted the metadata), which then must be deleted
// by hand. Metadata that ReadSavepoint rejects is not followed either.
func DisposeSavepoint(ctx context.Context, dst blobstore.Store) (deleted int, err error) {
	m, keys, err := readSavepoint(ctx, dst)
	if err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return 0, noSavepointError(ctx, dst, err)
		}
		return 0, fmt.Errorf("%w; nothing was deleted", err)
	}
	what := fmt.Sprintf("savepoint of checkpoint %d of job %s", m.GetCheckpointId(), m.GetJobId())
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchParallelism)
	for _, key := range keys {
		g.Go(func() error { return dst.Delete(gctx, key) })
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("%s: dispose: %w; its metadata is kept, so disposing again finishes the job", what, err)
	}
	if err := dst.Delete(ctx, SavepointMetadataKey); err != nil {
		return len(keys), fmt.Errorf("%s: dispose: its objects are deleted, but not its metadata: %w", what, err)
	}
	return len(keys) + 1, nil
}

// noSavepointError explains a dispose of a directory without metadata
// (notFound is ReadSavepoint's error), saying whether it holds objects laid
// out like a savepoint's.
func noSavepointError(ctx context.Context, dst blobstore.Store, notFound error) error {
	n := 0
	for _, prefix := range []string{"chk-", "shared/"} {
		infos, err := dst.List(ctx, prefix)
		if err != nil {
			return fmt.Errorf("savepoint: dispose: %w; nothing was deleted", notFound)
		}
		n += len(infos)
	}
	if n == 0 {
		return fmt.Errorf("savepoint: dispose: nothing to dispose of (no %s, no savepoint objects): the URI is wrong or the savepoint was already disposed of: %w",
			SavepointMetadataKey, blobstore.ErrNotFound)
	}
	return fmt.Errorf("savepoint: dispose: no %s, but %d objects under chk-* and shared/; nothing was deleted: they are left by a savepoint that failed "+
		"or whose dispose was interrupted, or the URI does not name a savepoint at all; check and delete them by hand: %w",
		SavepointMetadataKey, n, blobstore.ErrNotFound)
}
