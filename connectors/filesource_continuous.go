package connectors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/weirstream/weir/stream"
)

// The continuous mode of the file source (FileSourceConfig.MonitorInterval).
//
// Every subtask lists the whole path and takes up the files its path hashes
// to (fileOwner). A subtask remembers, in seen, the files it has taken up
// that were still there at its last listing; its checkpoints hold seen as
// one item of union state and the files it is reading as list state. On
// restore every subtask receives every subtask's seen set and keeps the
// paths that now hash to it, and the files being read go on in whichever
// subtask receives their split, so that with any parallelism each file is
// taken up once: by its owner, which knows whether any subtask took it up
// before.

// monitorSettings are the options of continuous mode.
type monitorSettings struct {
	interval time.Duration // 0: bounded mode
	minAge   time.Duration // 0: two listings with the same size and time
	onlyNew  bool
}

// monitorSettings parses and checks the options of continuous mode.
func (cfg *FileSourceConfig) monitorSettings() (monitorSettings, error) {
	var ms monitorSettings
	if cfg.MonitorInterval == "" {
		switch {
		case cfg.ProcessOnlyNew:
			return ms, stream.ConfigErrorf("file source: processOnlyNew needs monitorInterval (it applies to a continuous source); set monitorInterval or drop processOnlyNew")
		case cfg.MinFileAge != "":
			return ms, stream.ConfigErrorf("file source: minFileAge needs monitorInterval (it applies to a continuous source); set monitorInterval or drop minFileAge")
		}
		return ms, nil
	}
	d, err := time.ParseDuration(cfg.MonitorInterval)
	if err != nil {
		return ms, stream.ConfigErrorf("file source: monitorInterval %q is not a duration; write a Go duration such as \"10s\" or \"500ms\"", cfg.MonitorInterval)
	}
	if d < minMonitorInterval {
		return ms, stream.ConfigErrorf("file source: monitorInterval %q is too short: it must be at least %v, as every listing reads the whole directory", cfg.MonitorInterval, minMonitorInterval)
	}
	ms.interval, ms.onlyNew = d, cfg.ProcessOnlyNew
	if cfg.MinFileAge != "" {
		age, err := time.ParseDuration(cfg.MinFileAge)
		if err != nil {
			return ms, stream.ConfigErrorf("file source: minFileAge %q is not a duration; write a Go duration such as \"30s\"", cfg.MinFileAge)
		}
		if age <= 0 {
			return ms, stream.ConfigErrorf("file source: minFileAge %q must be positive; leave it unset to take up a file once two listings found it unchanged", cfg.MinFileAge)
		}
		ms.minAge = age
	}
	return ms, nil
}

// watch says which files a continuous source lists: the names in dir (a
// glob when dirGlob) that match pattern.
type watch struct {
	dir     string
	dirGlob bool
	pattern string // "": every name
	exact   bool   // pattern has no glob characters: a name equal to it
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// watchFor returns what path names in continuous mode, or a config error.
func watchFor(path string) (watch, error) {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return watch{dir: path}, nil
	case err == nil && st.Mode().IsRegular():
		return watch{dir: filepath.Dir(path), pattern: filepath.Base(path), exact: true}, nil
	case err == nil:
		return watch{}, stream.ConfigErrorf("file source: path %s is neither a regular file nor a directory", path)
	case err != nil && !hasMeta(path):
		return watch{}, stream.ConfigErrorf("file source: path %s does not exist; a continuous source (monitorInterval set) watches an existing directory (or a glob in one): create it first", path)
	}
	w := watch{dir: filepath.Dir(path), pattern: filepath.Base(path)}
	w.dirGlob, w.exact = hasMeta(w.dir), !hasMeta(w.pattern)
	if _, err := filepath.Match(path, ""); err != nil {
		return watch{}, stream.ConfigErrorf("file source: path %q: bad glob pattern: %v", path, err)
	}
	if !w.dirGlob {
		if st, err := os.Stat(w.dir); err != nil || !st.IsDir() {
			return watch{}, stream.ConfigErrorf("file source: path %s: directory %s does not exist; a continuous source (monitorInterval set) watches an existing directory: create it first", path, w.dir)
		}
	}
	return w, nil
}

func (w *watch) matches(name string) bool {
	switch {
	case w.pattern == "":
		return true
	case w.exact:
		return name == w.pattern
	}
	ok, _ := filepath.Match(w.pattern, name)
	return ok
}

// hidden reports whether a continuous source skips the file called name:
// the usual names of files still being written.
func hidden(name string) bool { return name[0] == '.' || name[0] == '_' }

// fileOwner returns the subtask, of parallelism p, that takes up the file
// at path in continuous mode. All subtasks of one run must agree on it; it
// is not part of the checkpoint format (a restore reassigns the remembered
// files by it).
func fileOwner(path string, p int) int {
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(path); i++ {
		h ^= uint64(path[i])
		h *= 1099511628211
	}
	return int(below(mix64(h), uint64(p)))
}

// listChunk is the most directory entries a Poll reads.
const listChunk = 1024

// monitor is the state of a continuous file source that is not its splits.
type monitor struct {
	monitorSettings
	// now and maxFiles are time.Now and MaxMonitoredFiles, but for tests.
	now      func() time.Time
	maxFiles int

	path                 string
	watch                watch
	subtask, parallelism int
	paths                *stream.PathPolicy
	log                  *slog.Logger

	// seen holds this subtask's files that it took up (or skipped, by
	// onlyNew) and found at its last listing; it is always sorted.
	seen pathSet
	// listed says that the job has made its first listing: set by this
	// subtask's first, or by a restored checkpoint.
	listed bool
	// pending holds this subtask's files not taken up at the last listing
	// because they may still be written.
	pending  map[string]fileStat
	item     []byte   // the "seen" item of seen and listed; nil: not made yet
	list     *listing // the listing in progress, or nil
	nextList time.Time
	idleFor  time.Duration
	buf      []byte // scratch for seen.find
}

// fileStat is a file found by a listing.
type fileStat struct {
	path  string
	size  int64
	mtime time.Time
}

// listing is one listing of the watched directories, read a chunk per Poll.
type listing struct {
	start time.Time
	dirs  []string // directories still to read
	dir   string   // the directory f reads
	f     *os.File
	total int // matching files so far, of every subtask
	// present has bit i set when seen path i was found.
	present []uint64
	found   []fileStat // this subtask's files not in seen
}

func newMonitor(ms monitorSettings) *monitor {
	return &monitor{monitorSettings: ms, now: time.Now, maxFiles: MaxMonitoredFiles}
}

func (m *monitor) open(path string, octx *stream.OperatorContext) error {
	w, err := watchFor(path)
	if err != nil {
		return err
	}
	m.path, m.watch = path, w
	m.subtask, m.parallelism = octx.Subtask, max(1, octx.Parallelism)
	m.paths, m.log = octx.Paths, octx.Logger
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return nil
}

func (m *monitor) close() {
	if m.list != nil && m.list.f != nil {
		m.list.f.Close()
		m.list.f = nil
	}
}

// skipRemoved notes that a file taken up was removed before it was read.
func (m *monitor) skipRemoved(path string) {
	m.log.Warn("file source: a file taken up for reading was removed before it was opened; skipping it", "path", path)
}

// pollContinuous advances the listing when one is due or in progress,
// takes up the files it completes with, and reads a batch.
func (s *FileSource) pollContinuous(out stream.Collector) (stream.PollStatus, error) {
	m := s.mon
	now := m.now()
	if m.list != nil || !now.Before(m.nextList) {
		taken, err := m.step(now)
		if err != nil {
			return 0, err
		}
		for _, p := range taken {
			s.splits = append(s.splits, FileSplit{File: -1, Path: p})
		}
	}
	rows, err := s.readBatch(out)
	if err != nil {
		return 0, err
	}
	// Drop the splits read to the end: they are in seen.
	if s.cur >= len(s.splits) {
		s.splits, s.cur = s.splits[:0], 0
	} else if s.cur >= 64 && s.cur >= len(s.splits)/2 {
		s.splits = slices.Delete(s.splits, 0, s.cur)
		s.cur = 0
	}
	if rows > 0 {
		return stream.PollEmitted, nil
	}
	m.idleFor = 0
	if m.list == nil {
		m.idleFor = max(0, m.nextList.Sub(now))
	}
	return stream.PollIdle, nil
}

// step reads up to listChunk entries of the listing in progress, starting
// one if there is none. When the listing completes it returns the files to
// take up, sorted.
func (m *monitor) step(now time.Time) ([]string, error) {
	if m.list == nil {
		if err := m.startListing(now); err != nil {
			return nil, err
		}
	}
	l := m.list
	for budget := listChunk; budget > 0; {
		if l.f == nil {
			if len(l.dirs) == 0 {
				return m.finishListing(now), nil
			}
			l.dir, l.dirs = l.dirs[0], l.dirs[1:]
			f, err := os.Open(l.dir)
			if err != nil {
				if m.watch.dirGlob && errors.Is(err, fs.ErrNotExist) {
					continue // a directory the glob matched went away
				}
				return nil, m.listErr(l.dir, err)
			}
			l.f = f
		}
		entries, err := l.f.ReadDir(budget)
		budget -= len(entries)
		for _, e := range entries {
			if err := m.visit(l, e); err != nil {
				return nil, err
			}
		}
		if err != nil || len(entries) == 0 {
			l.f.Close()
			l.f = nil
			if err != nil && err != io.EOF {
				return nil, m.listErr(l.dir, err)
			}
		}
	}
	return nil, nil
}

func (m *monitor) listErr(dir string, err error) error {
	return fmt.Errorf("file source: cannot list directory %s of path %s: %w; a continuous source (monitorInterval set) needs the directory while the job runs: restore it, or fix path", dir, m.path, err)
}

func (m *monitor) startListing(now time.Time) error {
	dirs := []string{m.watch.dir}
	if m.watch.dirGlob {
		matches, _ := filepath.Glob(m.watch.dir) // the pattern was checked
		dirs = dirs[:0]
		for _, d := range matches {
			if st, err := os.Stat(d); err != nil || !st.IsDir() {
				continue
			}
			// A matched directory may be a link that leads elsewhere.
			if err := m.paths.Check("file source directory", d); err != nil {
				return err
			}
			dirs = append(dirs, d)
		}
	}
	m.list = &listing{start: now, dirs: dirs, present: make([]uint64, (m.seen.n+63)/64)}
	return nil
}

// visit handles one directory entry of the listing.
func (m *monitor) visit(l *listing, e fs.DirEntry) error {
	name := e.Name()
	if !e.Type().IsRegular() || hidden(name) || !m.watch.matches(name) {
		return nil
	}
	if l.total++; l.total > m.maxFiles {
		return fmt.Errorf("file source: path %s matches more than %d files, the most a continuous source (monitorInterval set) takes: it remembers every file it has taken up while the file is there; move processed files out of the directory (or delete them), or start a new job on another directory",
			m.path, m.maxFiles)
	}
	path := filepath.Join(l.dir, name)
	if fileOwner(path, m.parallelism) != m.subtask {
		return nil
	}
	if i := m.seen.find(path, &m.buf); i >= 0 {
		l.present[i/64] |= 1 << (i % 64)
		return nil
	}
	if m.onlyNew && !m.listed {
		l.found = append(l.found, fileStat{path: path})
		return nil
	}
	info, err := e.Info()
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since the directory was read
	}
	if err != nil {
		return fmt.Errorf("file source: %s: %w", path, err)
	}
	l.found = append(l.found, fileStat{path: path, size: info.Size(), mtime: info.ModTime()})
	return nil
}

// finishListing updates seen and pending from the completed listing and
// returns the files to take up.
func (m *monitor) finishListing(now time.Time) []string {
	l := m.list
	m.list = nil
	slices.SortFunc(l.found, func(a, b fileStat) int { return strings.Compare(a.path, b.path) })
	skip := m.onlyNew && !m.listed
	var added, taken []string
	pending := make(map[string]fileStat)
	for _, f := range l.found {
		switch {
		case skip:
			added = append(added, f.path)
		case m.complete(f, l.start):
			added = append(added, f.path)
			taken = append(taken, f.path)
		default:
			pending[f.path] = f
		}
	}
	gone := false
	for i := range m.seen.n {
		if l.present[i/64]&(1<<(i%64)) == 0 {
			gone = true
			break
		}
	}
	if gone || len(added) > 0 {
		m.seen, m.item = m.seen.update(l.present, added), nil
	}
	if !m.listed {
		m.listed, m.item = true, nil
	}
	m.pending = pending
	m.nextList = now.Add(m.interval)
	return taken
}

// complete reports whether f, found by the listing started at start, is
// complete enough to be taken up.
func (m *monitor) complete(f fileStat, start time.Time) bool {
	if m.minAge > 0 {
		return start.Sub(f.mtime) >= m.minAge
	}
	prev, ok := m.pending[f.path]
	return ok && prev.size == f.size && prev.mtime.Equal(f.mtime)
}

// pathSet is an immutable sorted set of file paths, stored front-coded:
// each path as the length of the prefix it shares with the one before
// (uvarint) and the rest (uvarint length and bytes), every
// pathSetRestart-th path whole. restarts holds the offsets of those, so
// that find is a binary search over them and a scan of at most
// pathSetRestart paths. A checkpoint stores data as it is.
type pathSet struct {
	data     []byte
	restarts []int
	n        int
}

const pathSetRestart = 16

// pathSetBuilder builds a pathSet from paths added in increasing order.
type pathSetBuilder struct {
	set  pathSet
	prev []byte
}

func (b *pathSetBuilder) add(path []byte) {
	shared := 0
	if b.set.n%pathSetRestart == 0 {
		b.set.restarts = append(b.set.restarts, len(b.set.data))
	} else {
		for shared < len(path) && shared < len(b.prev) && path[shared] == b.prev[shared] {
			shared++
		}
	}
	b.set.data = binary.AppendUvarint(b.set.data, uint64(shared))
	b.set.data = binary.AppendUvarint(b.set.data, uint64(len(path)-shared))
	b.set.data = append(b.set.data, path[shared:]...)
	b.prev = append(b.prev[:0], path...)
	b.set.n++
}

func (b *pathSetBuilder) finish() pathSet { return b.set }

// next decodes the path at offset off of s.data, of which buf holds the
// path before, into buf, and returns it and the offset of the next path.
func (s *pathSet) next(off int, buf []byte) ([]byte, int) {
	shared, n := binary.Uvarint(s.data[off:])
	off += n
	l, n := binary.Uvarint(s.data[off:])
	off += n
	buf = append(buf[:shared], s.data[off:off+int(l)]...)
	return buf, off + int(l)
}

// find returns the index of path in s, or -1. buf is scratch space.
func (s *pathSet) find(path string, buf *[]byte) int {
	// The last block whose first path is at most path.
	k := sort.Search(len(s.restarts), func(k int) bool {
		first, _ := s.next(s.restarts[k], (*buf)[:0])
		*buf = first
		return string(first) > path
	}) - 1
	if k < 0 {
		return -1
	}
	off, b := s.restarts[k], (*buf)[:0]
	defer func() { *buf = b }()
	for i := k * pathSetRestart; i < min(s.n, (k+1)*pathSetRestart); i++ {
		b, off = s.next(off, b)
		switch c := strings.Compare(string(b), path); {
		case c == 0:
			return i
		case c > 0:
			return -1
		}
	}
	return -1
}

// all yields the paths of s in order; the slice is valid until the next.
func (s *pathSet) all() iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		var b []byte
		off := 0
		for i := range s.n {
			b, off = s.next(off, b)
			if !yield(i, b) {
				return
			}
		}
	}
}

// update returns the set of the paths of s whose bit is set in keep, and
// the paths of added (sorted, none in s).
func (s *pathSet) update(keep []uint64, added []string) pathSet {
	var b pathSetBuilder
	for i, p := range s.all() {
		if keep[i/64]&(1<<(i%64)) == 0 {
			continue
		}
		for len(added) > 0 && added[0] < string(p) {
			b.add([]byte(added[0]))
			added = added[1:]
		}
		b.add(p)
	}
	for _, p := range added {
		b.add([]byte(p))
	}
	return b.finish()
}
