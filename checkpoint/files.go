package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// SharedPrefix returns the key prefix, ending in '/', of job jobID's shared
// (content-addressed) snapshot files.
func SharedPrefix(jobID string) string { return jobID + "/shared/" }

// SharedKey returns the key of the shared file with hex SHA-256 sum.
func SharedKey(jobID, sum string) string { return SharedPrefix(jobID) + sum }

// UploadFiles uploads the local files of an incremental snapshot of an
// operator subtask, in parallel: a shared file to SharedKey(jobID, its
// SHA-256) only if storage does not hold it yet, any other to
// SnapshotKey(...).files/<name> under the checkpoint. It returns the files
// for the StateHandle and the bytes it actually wrote.
//
// Which shared files storage holds is learnt from one listing of
// SharedPrefix(jobID) (when files has a shared file whose hash is known),
// so a file already stored is neither read nor sent again; the others are
// written with PutIfAbsent, which settles races with other uploaders. (A
// conditional PUT of a large body that the server rejects may also be cut
// off by the server before the body is sent, which clients report as a
// reset connection rather than as the rejection.)
func (s *Storage) UploadFiles(ctx context.Context, jobID string, checkpointID int64, operatorUID string,
	subtask int, attempt int64, files []stream.SnapshotFile) ([]*weirpb.StateFile, int64, error) {
	if err := validSegment("job id", jobID); err != nil {
		return nil, 0, err
	}
	stored, err := s.storedShared(ctx, jobID, files)
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %d: listing the shared files of job %s for %s subtask %d: %w", checkpointID, jobID, operatorUID, subtask, err)
	}
	out := make([]*weirpb.StateFile, len(files))
	var written atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchParallelism)
	for i, f := range files {
		if err := validSegment("snapshot file name", f.Name); err != nil {
			return nil, 0, err
		}
		if f.Shared && f.SHA256 != "" {
			if size, ok := stored[SharedKey(jobID, f.SHA256)]; ok && size == f.Size {
				out[i] = &weirpb.StateFile{Name: f.Name, Size: f.Size, Sha256: f.SHA256, Shared: true, Key: SharedKey(jobID, f.SHA256)}
				continue
			}
		}
		g.Go(func() error {
			data, err := os.ReadFile(f.Path)
			if err != nil {
				return fmt.Errorf("checkpoint %d: snapshot file of %s subtask %d: %w", checkpointID, operatorUID, subtask, err)
			}
			sum := sha256Hex(data)
			if int64(len(data)) != f.Size || (f.SHA256 != "" && sum != f.SHA256) {
				return fmt.Errorf("checkpoint %d: snapshot file %s of %s subtask %d changed after the snapshot (size %d, want %d); a state backend must not modify its checkpoint files: %w",
					checkpointID, f.Path, operatorUID, subtask, len(data), f.Size, ErrCorrupt)
			}
			sf := &weirpb.StateFile{Name: f.Name, Size: f.Size, Sha256: sum, Shared: f.Shared}
			if f.Shared {
				sf.Key = SharedKey(jobID, sum)
				created, err := s.store.PutIfAbsent(gctx, sf.Key, data)
				if err != nil {
					return fmt.Errorf("checkpoint %d: upload shared file %s of %s subtask %d: %w", checkpointID, f.Name, operatorUID, subtask, err)
				}
				if created {
					written.Add(int64(len(data)))
				}
			} else {
				sf.Key = SnapshotKey(jobID, checkpointID, operatorUID, subtask, attempt) + ".files/" + f.Name
				if err := s.store.Put(gctx, sf.Key, data); err != nil {
					return fmt.Errorf("checkpoint %d: upload file %s of %s subtask %d: %w", checkpointID, f.Name, operatorUID, subtask, err)
				}
				written.Add(int64(len(data)))
			}
			out[i] = sf
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, 0, err
	}
	return out, written.Load(), nil
}

// storedShared returns the sizes of the shared files of jobID in storage,
// by key, if any of files is a shared file with a known hash (nil
// otherwise).
func (s *Storage) storedShared(ctx context.Context, jobID string, files []stream.SnapshotFile) (map[string]int64, error) {
	if !slices.ContainsFunc(files, func(f stream.SnapshotFile) bool { return f.Shared && f.SHA256 != "" }) {
		return nil, nil
	}
	objs, err := s.store.List(ctx, SharedPrefix(jobID))
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(objs))
	for _, o := range objs {
		out[o.Key] = o.Size
	}
	return out, nil
}

// DownloadOptions are DownloadFiles's choices per file.
type DownloadOptions struct {
	// Reuse names a file on the local disk ("" for none) that, if it has
	// the same size and SHA-256, is copied (hard-linked where it can be)
	// instead of downloading the object: local recovery.
	Reuse func(name string) string
	// Stream reports whether a file that is not reused is left in storage
	// and read by its consumer through SnapshotFile.Fetch instead, as a
	// Pebble restore reads its changelog segments: they are replayed once,
	// and so never need to be on the local disk.
	Stream func(name string) bool
}

// DownloadFiles fetches the files of one handle into dir (created if
// needed), in parallel, verifying each file's size and SHA-256, and returns
// them as local snapshot files (opts: local recovery, and files streamed
// later rather than downloaded). It returns the bytes downloaded, counting
// the streamed files, which will be. The restore progress callback
// (WithRestoreProgress) counts the files reused and downloaded now, and a
// streamed file once its Fetch has read it.
func (s *Storage) DownloadFiles(ctx context.Context, files []*weirpb.StateFile, dir string, opts DownloadOptions) ([]stream.SnapshotFile, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("checkpoint: restore directory %s: %w; check its permissions or the taskmanager's --state-dir", dir, err)
	}
	// Every name is checked before any download starts, so that a bad one
	// never leaves goroutines writing into dir after the call returned.
	for _, f := range files {
		if err := validSegment("snapshot file name", f.GetName()); err != nil {
			return nil, 0, err
		}
	}
	out := make([]stream.SnapshotFile, len(files))
	var fetched atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchParallelism)
	for i, f := range files {
		g.Go(func() error {
			dst := filepath.Join(dir, f.GetName())
			out[i] = stream.SnapshotFile{Path: dst, Name: f.GetName(), Size: f.GetSize(), SHA256: f.GetSha256(), Shared: f.GetShared()}
			if opts.Reuse != nil {
				if src := opts.Reuse(f.GetName()); src != "" {
					if sum, n, err := hashFile(src); err == nil && n == f.GetSize() && sum == f.GetSha256() {
						if err := linkOrCopy(src, dst); err == nil {
							s.reportRestored(n)
							return nil
						}
					}
				}
			}
			if opts.Stream != nil && opts.Stream(f.GetName()) {
				// The consumer reads it within the task's lifetime, which
				// ctx (not gctx, done when this call returns) spans.
				out[i].Fetch = func(w io.Writer) (int64, error) {
					n, err := s.readObject(ctx, f, w)
					if err == nil {
						s.reportRestored(n)
					}
					return n, err
				}
				fetched.Add(f.GetSize())
				return nil
			}
			n, err := s.fetchFile(gctx, f, dst)
			if err != nil {
				return err
			}
			fetched.Add(n)
			s.reportRestored(n)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, 0, err
	}
	return out, fetched.Load(), nil
}

// readObject reads the object of f into w, a buffer at a time, checking its
// size and SHA-256 on the way: an object of hundreds of megabytes is never
// held whole, however many are read at once. It returns the bytes written.
func (s *Storage) readObject(ctx context.Context, f *weirpb.StateFile, w io.Writer) (int64, error) {
	h := sha256.New()
	n, err := blobstore.GetTo(ctx, s.store, f.GetKey(), &boundedWriter{w: io.MultiWriter(w, h), left: f.GetSize()})
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return n, fmt.Errorf("%s: missing; the checkpoint is incomplete or its shared files were deleted: %w", f.GetKey(), err)
	case errors.Is(err, errTooLong), err == nil && (n != f.GetSize() || hex.EncodeToString(h.Sum(nil)) != f.GetSha256()):
		return n, fmt.Errorf("%s: size or checksum mismatch (want %d bytes, sha256 %s); the object was modified or truncated: %w",
			f.GetKey(), f.GetSize(), f.GetSha256(), ErrCorrupt)
	case err != nil:
		return n, fmt.Errorf("%s: %w", f.GetKey(), err)
	}
	return n, nil
}

// fetchFile downloads the object of f into the file dst through a
// temporary file (readObject). It returns the bytes written.
func (s *Storage) fetchFile(ctx context.Context, f *weirpb.StateFile, dst string) (int64, error) {
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: restore file %s: %w", dst, err)
	}
	n, err := s.readObject(ctx, f, out)
	if cerr := out.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("checkpoint: restore file %s: %w", dst, cerr)
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return n, nil
}

// boundedWriter passes at most left bytes to w and fails with errTooLong
// on more: an object longer than its manifest says is corrupt, and is not
// written out past that.
type boundedWriter struct {
	w    io.Writer
	left int64
}

var errTooLong = errors.New("longer than expected")

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, errTooLong
	}
	b.left -= int64(len(p))
	return b.w.Write(p)
}

// ReferencedSharedFiles returns the keys of the shared files the handles of
// m refer to.
func ReferencedSharedFiles(m *weirpb.Manifest, into map[string]bool) {
	for _, op := range m.GetOperators() {
		for _, h := range op.GetHandles() {
			for _, f := range h.GetFiles() {
				if f.GetShared() {
					into[f.GetKey()] = true
				}
			}
		}
	}
}

// IsSharedKey reports whether key is a shared file of job jobID.
func IsSharedKey(jobID, key string) bool {
	rest, ok := strings.CutPrefix(key, SharedPrefix(jobID))
	return ok && rest != "" && !strings.Contains(rest, "/")
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// linkOrCopy makes dst a hard link to src, or a copy where links fail.
func linkOrCopy(src, dst string) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
