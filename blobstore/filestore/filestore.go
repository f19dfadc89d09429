// Package filestore is the blobstore.Store on a file system (file:// storage
// URIs): each object is one file under a root directory, its key the file's
// path relative to the root.
//
// Put writes a temporary file in the object's directory, fsyncs it and
// renames it over the object, then fsyncs the directory, so readers see the
// old or the whole new object and a completed Put survives a crash.
// PutIfAbsent hard-links the synced temporary file to the object's name,
// which fails if the name exists, so exactly one of racing callers creates
// it, even across processes sharing the file system. Directories are created
// as needed and empty ones are removed by Delete.
//
// Temporary files are named ".weirtmp-*"; keys with a segment starting with
// ".weirtmp-" are rejected. A key cannot also be a directory of other keys
// ("a" and "a/b"); such a Put fails.
//
// filestore imports the standard library and blobstore/internal/blob only.
package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/weirstream/weir/blobstore/internal/blob"
)

const tmpPrefix = ".weirtmp-"

// Store is a blobstore.Store on a directory. It is safe for concurrent use,
// also by several processes on one file system.
type Store struct {
	root string
}

var _ blob.Store = (*Store)(nil)

// New returns a store rooted at the absolute directory root, creating it if
// it does not exist.
func New(root string) (*Store, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("filestore: root %q: must be an absolute path", root)
	}
	root = filepath.Clean(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("filestore: root %q: %w; check that the path is a writable directory", root, err)
	}
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("filestore: root %q: %w", root, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("filestore: root %q: not a directory", root)
	}
	return &Store{root: root}, nil
}

// Root returns the store's root directory.
func (s *Store) Root() string { return s.root }

func (s *Store) String() string { return "file://" + s.root }

// path checks ctx and key and returns the object's file name.
func (s *Store) path(ctx context.Context, op, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("filestore: %s %q: %w", op, key, err)
	}
	if err := blob.ValidateKey(key); err != nil {
		return "", fmt.Errorf("filestore: %s: %w", op, err)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if strings.HasPrefix(seg, tmpPrefix) {
			return "", fmt.Errorf("filestore: %s: %w %q: segments starting with %q are reserved for temporary files", op, blob.ErrBadKey, key, tmpPrefix)
		}
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// writeTemp writes data to a synced temporary file in dir, creating dir if
// needed, and returns its name. It retries when a concurrent Delete removes
// the (empty) directory between creating it and creating the file.
func writeTemp(dir string, data []byte) (string, error) {
	var f *os.File
	var err error
	for range 10 {
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		f, err = os.CreateTemp(dir, tmpPrefix+"*")
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	name := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Put implements blobstore.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	path, err := s.path(ctx, "put", key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := writeTemp(dir, data)
	if err != nil {
		return fmt.Errorf("filestore: put %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("filestore: put %q: %w", key, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("filestore: put %q: %w", key, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("filestore: put %q: sync directory: %w", key, err)
	}
	return nil
}

// PutIfAbsent implements blobstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	path, err := s.path(ctx, "put", key)
	if err != nil {
		return false, err
	}
	if _, err := os.Lstat(path); err == nil {
		return false, nil
	}
	dir := filepath.Dir(path)
	tmp, err := writeTemp(dir, data)
	if err != nil {
		return false, fmt.Errorf("filestore: put %q: %w", key, err)
	}
	defer os.Remove(tmp)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("filestore: put %q: %w", key, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("filestore: put %q: %w", key, err)
	}
	if err := syncDir(dir); err != nil {
		return true, fmt.Errorf("filestore: put %q: sync directory: %w", key, err)
	}
	return true, nil
}

// notFound reports whether err from opening or reading path means that
// there is no object there.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// Get implements blobstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	path, err := s.path(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("filestore: get %q: %w", key, blob.ErrNotFound)
		}
		return nil, fmt.Errorf("filestore: get %q: %w", key, err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// GetTo implements blobstore.Streamer.
func (s *Store) GetTo(ctx context.Context, key string, w io.Writer) (int64, error) {
	path, err := s.path(ctx, "get", key)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		if notFound(err) {
			return 0, fmt.Errorf("filestore: get %q: %w", key, blob.ErrNotFound)
		}
		return 0, fmt.Errorf("filestore: get %q: %w", key, err)
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	switch {
	case n == 0 && notFound(err): // a directory opens, but does not read
		return 0, fmt.Errorf("filestore: get %q: %w", key, blob.ErrNotFound)
	case err != nil:
		return n, fmt.Errorf("filestore: get %q: %w", key, err)
	}
	return n, nil
}

// List implements blobstore.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("filestore: list %q: %w", prefix, err)
	}
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("filestore: list: %w", err)
	}
	// Walk only the deepest directory that every matching key is under.
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
	}
	start := filepath.Join(s.root, filepath.FromSlash(base))
	var out []blob.ObjectInfo
	err := filepath.WalkDir(start, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed concurrently, or the prefix has no objects
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(s.root, path)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if path == start {
				return nil
			}
			// Descend only if keys under it can match the prefix.
			dirKey := key + "/"
			if strings.HasPrefix(dirKey, prefix) || strings.HasPrefix(prefix, dirKey) {
				return nil
			}
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), tmpPrefix) || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		out = append(out, blob.ObjectInfo{Key: key, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("filestore: list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b blob.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete implements blobstore.Store. It also removes the object's
// directories up to the root as far as they are left empty.
func (s *Store) Delete(ctx context.Context, key string) error {
	path, err := s.path(ctx, "delete", key)
	if err != nil {
		return err
	}
	st, err := os.Lstat(path)
	if err != nil {
		if notFound(err) {
			return nil
		}
		return fmt.Errorf("filestore: delete %q: %w", key, err)
	}
	if st.IsDir() {
		return nil // a directory of other keys, not an object
	}
	if err := os.Remove(path); err != nil && !notFound(err) {
		return fmt.Errorf("filestore: delete %q: %w", key, err)
	}
	for dir := filepath.Dir(path); dir != s.root && strings.HasPrefix(dir, s.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty (or gone): stop
		}
	}
	return nil
}
