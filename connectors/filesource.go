package connectors

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// FileSourceConfig configures the "file" source.
//
// By default the source is bounded: it lists Path once, when the job starts,
// reads the files it found and ends. Every regular file is read, whatever
// its name.
//
// With MonitorInterval set the source is continuous: it never ends, and
// lists Path again every MonitorInterval to read the files that appeared
// since. In continuous mode:
//
//   - Path is a directory, whose files are read, or a glob whose last
//     element is matched against the names in the directories the rest
//     names (/data/in/*.jsonl, /data/*/part-*). A directory named without
//     glob characters must exist when the job is submitted and while it
//     runs; the directories a glob matches may come and go (they are
//     matched again at the start of every listing). A path naming an
//     existing regular file watches that one name.
//   - Every file is read once. The source keeps in its checkpoints the set
//     of files it has taken up (read, or being read), so a restore neither
//     reads a finished file again nor misses one that appeared while the
//     job was down. A file is identified by its path: a file replaced
//     under the name of one already taken up is not read, and a file that
//     was removed (which drops it from the set) and later added again
//     under the same path is read again.
//   - A file is taken up by one subtask, the one its path hashes to (a hash
//     of the path modulo the parallelism), so that subtasks need no
//     agreement at run time. The files being read when a checkpoint is
//     taken continue after a restore, at any parallelism, in exactly one
//     subtask, from the checkpointed offset.
//   - A file is taken up once it is complete: when two listings in a row
//     found the same size and modification time, or, with MinFileAge,
//     when its modification time is MinFileAge old. Neither rule sees a
//     writer that pauses for longer; the safe pattern is to write each file
//     elsewhere on the same file system, or in the directory under a name
//     starting with '.' or '_', and rename it into place when complete. A
//     file must not change once it has been taken up.
//   - Names starting with '.' or '_' are skipped, and so are directories
//     and symbolic links.
//   - The set of files taken up is bounded: a listing that finds more than
//     MaxMonitoredFiles matching files fails the task. Move processed files
//     out of the directory (the source then forgets them), or start a new
//     job on another directory.
//   - The source emits no watermarks, not even the final one, as it never
//     ends; event-time jobs put a watermarks operator after it.
//   - Each subtask lists the whole path, reading at most about a thousand
//     directory entries per Poll, and keeps the files it took up, in memory
//     and in its checkpoints, in a sorted front-coded list: a few bytes per
//     file more than the part of its path that differs from the one
//     before.
type FileSourceConfig struct {
	// Path is a file, a directory (all regular files in it) or a glob. In
	// bounded mode the matching files, sorted by name, are the splits;
	// split k is read by subtask k % parallelism.
	Path string `json:"path"`
	// Format is "lines" (default: one string field "line" per line) or
	// "jsonl" (each line a JSON object decoded into Fields).
	Format string `json:"format,omitempty"`
	// Fields are the JSON keys read by format jsonl. A missing key or JSON
	// null gives null; a value of another type fails the task; other keys
	// are ignored. A timestamp is an RFC3339 string or integer milliseconds.
	Fields []FileField `json:"fields,omitempty"`
	// BatchSize is the rows per batch; 0 means stream.DefaultBatchSize.
	BatchSize int `json:"batchSize,omitempty"`
	// MonitorInterval, a Go duration of at least 10ms such as "10s", makes
	// the source continuous: Path is listed again this long after the end
	// of each listing. Unset (the default): bounded.
	MonitorInterval string `json:"monitorInterval,omitempty"`
	// ProcessOnlyNew, in continuous mode, skips the files present at the
	// job's first listing (the first run's, not a restart's) and reads only
	// those that appear later. Default false: read them all.
	ProcessOnlyNew bool `json:"processOnlyNew,omitempty"`
	// MinFileAge, in continuous mode, is a Go duration such as "30s": a
	// file is taken up at the first listing that finds its modification
	// time at least this old. Unset (the default): once two listings in a
	// row found the same size and modification time.
	MinFileAge string `json:"minFileAge,omitempty"`
}

// MaxMonitoredFiles is the most files the continuous file source accepts in
// one listing of its path (over all subtasks).
const MaxMonitoredFiles = 1_000_000

// minMonitorInterval is the least MonitorInterval: each listing reads the
// whole directory.
const minMonitorInterval = 10 * time.Millisecond

// FileField is a declared JSON field of the file source.
type FileField struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// LinesSchema is the file source's schema for format "lines".
var LinesSchema = stream.MustSchema(stream.Field{Name: "line", Type: stream.TypeString})

func planFileSource(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg FileSourceConfig
	if err := stream.DecodeOperatorConfig("file source", p.Config, &cfg); err != nil {
		return nil, err
	}
	if cfg.MonitorInterval != "" {
		declareSplitState(p, fileSplitsState, fileSeenState)
	} else {
		declareSplitState(p, fileSplitsState, fileListingMarker)
	}
	schema, err := cfg.check()
	if err != nil {
		return nil, err
	}
	// Checked before anything is read, so that the planner is no oracle
	// for files outside the allowed roots.
	if err := p.Paths.Check("file source path", cfg.Path); err != nil {
		return nil, err
	}
	if cfg.MonitorInterval != "" {
		_, err := watchFor(cfg.Path)
		return schema, err
	}
	files, err := ListFiles(cfg.Path)
	if err != nil {
		return nil, err
	}
	if err := checkFiles(p.Paths, files); err != nil {
		return nil, err
	}
	return schema, nil
}

// checkFiles checks the files a source path named (a glob's matches may be
// links that lead elsewhere).
func checkFiles(paths *stream.PathPolicy, files []string) error {
	for _, f := range files {
		if err := paths.Check("file source file", f); err != nil {
			return err
		}
	}
	return nil
}

func (cfg *FileSourceConfig) check() (*stream.Schema, error) {
	if cfg.Path == "" {
		return nil, stream.ConfigErrorf("file source: missing path; set path to a file, a directory or a glob such as /data/in/*.jsonl")
	}
	if _, err := checkBatchSize("file source", cfg.BatchSize); err != nil {
		return nil, err
	}
	if _, err := cfg.monitorSettings(); err != nil {
		return nil, err
	}
	switch cfg.Format {
	case "", "lines":
		if len(cfg.Fields) > 0 {
			return nil, stream.ConfigErrorf("file source: fields are not allowed with format lines (it yields one string field \"line\"); use format jsonl to parse fields")
		}
		return LinesSchema, nil
	case "jsonl":
	default:
		return nil, stream.ConfigErrorf("file source: unknown format %q (want lines or jsonl)", cfg.Format)
	}
	if len(cfg.Fields) == 0 {
		return nil, stream.ConfigErrorf("file source: format jsonl needs fields, a list of {name, type} naming the JSON keys to read")
	}
	fields := make([]stream.Field, len(cfg.Fields))
	for i, f := range cfg.Fields {
		if f.Name == "" {
			return nil, stream.ConfigErrorf("file source: fields[%d]: missing name", i)
		}
		if f.Type == "" {
			return nil, stream.ConfigErrorf("file source: field %q: missing type (want int64, float64, string, bool or timestamp)", f.Name)
		}
		t, err := stream.ParseType(f.Type)
		if err != nil {
			return nil, stream.ConfigErrorf("file source: field %q: %v", f.Name, err)
		}
		fields[i] = stream.Field{Name: f.Name, Type: t}
	}
	schema, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("file source: fields: %v; field names must be unique", err)
	}
	return schema, nil
}

// ListFiles returns the files path names, sorted: path itself if it is a
// regular file, the regular files in it if it is a directory, else the
// regular files matching it as a glob. It is an error if there are none.
func ListFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.Mode().IsRegular():
		return []string{path}, nil
	case err == nil && st.IsDir():
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("file source: path %s: %w", path, err)
		}
		var out []string
		for _, e := range entries {
			if e.Type().IsRegular() {
				out = append(out, filepath.Join(path, e.Name()))
			}
		}
		if len(out) == 0 {
			return nil, stream.ConfigErrorf("file source: directory %s has no regular files; put input files there or point path elsewhere", path)
		}
		return out, nil // os.ReadDir sorts by name
	case err == nil:
		return nil, stream.ConfigErrorf("file source: path %s is neither a regular file nor a directory", path)
	}
	matches, gerr := filepath.Glob(path)
	if gerr != nil {
		return nil, stream.ConfigErrorf("file source: path %q: bad glob pattern: %v", path, gerr)
	}
	var out []string
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, stream.ConfigErrorf("file source: path %q matches no files; give an existing file, a directory or a glob that matches regular files", path)
	}
	sort.Strings(out)
	return out, nil
}

// FileSplit is the read position of one input file: File is the file's index
// in the sorted list of all matching files (-1 in continuous mode, where
// files are known by Path only), Offset the byte offset of the next unread
// line, and Done says the file has been read to the end.
type FileSplit struct {
	File   int    `json:"file"`
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Done   bool   `json:"done"`
}

// FileSource is one subtask of the "file" source. It reads its splits one
// after another, in file order (in continuous mode, in the order it took
// them up).
type FileSource struct {
	cfg    FileSourceConfig
	schema *stream.Schema
	batch  int

	splits   []FileSplit // this subtask's splits, in file order
	restored []FileSplit // positions set before Open
	cur      int         // index in splits of the file being read
	subtask  int
	files    int // number of files listed at Open, over all subtasks

	f    *os.File
	r    *bufio.Reader
	long []byte // accumulates a line longer than the reader's buffer

	arena arena
	json  *jsonDecoder

	mon *monitor // continuous mode (MonitorInterval set), else nil
}

var (
	_ stream.Source     = (*FileSource)(nil)
	_ stream.IdleHinter = (*FileSource)(nil)
)

// NewFileSource returns a file source for cfg, or a config error.
func NewFileSource(cfg FileSourceConfig) (*FileSource, error) {
	schema, err := cfg.check()
	if err != nil {
		return nil, err
	}
	bs, _ := checkBatchSize("file source", cfg.BatchSize)
	s := &FileSource{cfg: cfg, schema: schema, batch: bs}
	if cfg.Format == "jsonl" {
		s.json = newJSONDecoder(schema)
	}
	if cfg.MonitorInterval != "" {
		ms, _ := cfg.monitorSettings()
		s.mon = newMonitor(ms)
	}
	return s, nil
}

func newFileSource(config []byte) (stream.Source, error) {
	var cfg FileSourceConfig
	if err := stream.DecodeOperatorConfig("file source", config, &cfg); err != nil {
		return nil, err
	}
	return NewFileSource(cfg)
}

// Splits returns the position of each of this subtask's files, for a
// checkpoint; in continuous mode, of the files it is reading.
func (s *FileSource) Splits() []FileSplit {
	if s.mon != nil {
		return slices.DeleteFunc(slices.Clone(s.splits[s.cur:]), func(sp FileSplit) bool { return sp.Done })
	}
	if s.splits == nil {
		return append([]FileSplit(nil), s.restored...)
	}
	return append([]FileSplit(nil), s.splits...)
}

// SetSplits restores positions saved by Splits. Files are matched by index;
// a file of this subtask without a saved position is read from the start.
// It must be called before Open, in bounded mode only (a continuous source
// restores through RestoreState).
func (s *FileSource) SetSplits(splits []FileSplit) {
	s.restored = append([]FileSplit(nil), splits...)
}

// Position returns the file index and offset of the next unread line, or
// (-1, 0) when every file of this subtask has been read. It is for bounded
// mode: continuous files have no index.
func (s *FileSource) Position() (file int, offset int64) {
	for _, sp := range s.Splits() {
		if !sp.Done {
			return sp.File, sp.Offset
		}
	}
	return -1, 0
}

// SetPosition seeks to offset in file number file: this subtask's files
// before it count as read, and later ones are read from the start. It must be
// called before Open, in bounded mode only.
func (s *FileSource) SetPosition(file int, offset int64) {
	s.restored = []FileSplit{{File: file, Offset: offset}}
	for f := range file {
		s.restored = append(s.restored, FileSplit{File: f, Done: true})
	}
}

// Open lists the files and picks this subtask's splits. In continuous mode
// it checks the path, and the first Poll lists it.
func (s *FileSource) Open(_ context.Context, octx *stream.OperatorContext) error {
	if err := octx.Paths.Check("file source path", s.cfg.Path); err != nil {
		return err
	}
	if s.mon != nil {
		if s.restored != nil {
			return errors.New("file source: SetSplits and SetPosition are for the bounded file source; a continuous one (monitorInterval set) restores through RestoreState")
		}
		s.subtask = octx.Subtask
		s.splits = []FileSplit{}
		return s.mon.open(s.cfg.Path, octx)
	}
	files, err := ListFiles(s.cfg.Path)
	if err != nil {
		return err
	}
	if err := checkFiles(octx.Paths, files); err != nil {
		return err
	}
	p := max(1, octx.Parallelism)
	s.subtask, s.files = octx.Subtask, len(files)
	saved := make(map[int]FileSplit, len(s.restored))
	for _, sp := range s.restored {
		saved[sp.File] = sp
	}
	s.splits = []FileSplit{}
	for k := octx.Subtask; k < len(files); k += p {
		sp := FileSplit{File: k, Path: files[k]}
		if r, ok := saved[k]; ok {
			sp.Offset, sp.Done = r.Offset, r.Done
		}
		s.splits = append(s.splits, sp)
	}
	return nil
}

// readLine returns the next line of the current file without its line
// ending, its length in the file, and io.EOF when the file is exhausted. The
// slice is valid until the next call.
func (s *FileSource) readLine() ([]byte, int64, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.r.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	if err != nil && err != io.EOF {
		return nil, 0, err
	}
	if len(line) == 0 {
		return nil, 0, io.EOF
	}
	n := int64(len(line))
	if line[len(line)-1] == '\n' {
		line = line[:len(line)-1]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
	}
	return line, n, nil
}

func (s *FileSource) openSplit() error {
	sp := &s.splits[s.cur]
	f, err := os.Open(sp.Path)
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	if sp.Offset > 0 {
		if _, err := f.Seek(sp.Offset, io.SeekStart); err != nil {
			f.Close()
			return fmt.Errorf("file source: %s: seek to offset %d: %w", sp.Path, sp.Offset, err)
		}
	}
	s.f = f
	if s.r == nil {
		s.r = bufio.NewReaderSize(f, 256<<10)
	} else {
		s.r.Reset(f)
	}
	return nil
}

func (s *FileSource) closeSplit() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// Poll reads up to one batch of lines, continuing into the next file when
// one ends. A bounded source returns PollEnd once every file has been read;
// a continuous one lists its path when that is due (see FileSourceConfig)
// and returns PollIdle, with IdleFor the time to the next listing, while it
// has nothing to read.
func (s *FileSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.mon != nil {
		return s.pollContinuous(out)
	}
	rows, err := s.readBatch(out)
	switch {
	case err != nil:
		return 0, err
	case rows == 0:
		return stream.PollEnd, nil
	}
	return stream.PollEmitted, nil
}

// readBatch reads up to one batch of lines from the splits from s.cur on,
// emits it to out and returns its number of rows: 0 when every split has
// been read.
func (s *FileSource) readBatch(out stream.Collector) (int, error) {
	var b *stream.Batch
	rows := 0
	for rows < s.batch {
		if s.f == nil {
			for s.cur < len(s.splits) && s.splits[s.cur].Done {
				s.cur++
			}
			if s.cur >= len(s.splits) {
				break
			}
			if err := s.openSplit(); err != nil {
				if s.mon != nil && errors.Is(err, fs.ErrNotExist) {
					s.mon.skipRemoved(s.splits[s.cur].Path)
					s.splits[s.cur].Done = true
					continue
				}
				return 0, releaseOnError(b, err)
			}
		}
		sp := &s.splits[s.cur]
		line, n, err := s.readLine()
		if err == io.EOF {
			sp.Done = true
			s.closeSplit()
			continue
		}
		if err != nil {
			return 0, releaseOnError(b, fmt.Errorf("file source: %s: %w", sp.Path, err))
		}
		if s.json != nil && len(bytes.TrimSpace(line)) == 0 {
			sp.Offset += n
			continue
		}
		if b == nil {
			b = stream.NewBatch(s.schema, s.batch)
		}
		if s.json == nil {
			b.Cols[0].Strs = append(b.Cols[0].Strs, s.arena.str(line))
		} else if err := s.json.decode(line, b, rows, &s.arena); err != nil {
			return 0, releaseOnError(b, fmt.Errorf("file source: %s:%d: %w", sp.Path, lineNumber(sp.Path, sp.Offset), err))
		}
		sp.Offset += n
		rows++
	}
	if rows == 0 {
		return 0, nil // b is nil: it is made for the first row
	}
	b.SetLen(rows)
	out.Collect(b)
	return rows, nil
}

// releaseOnError releases b, a batch being filled (nil if none), and
// returns err.
func releaseOnError(b *stream.Batch, err error) error {
	if b != nil {
		b.Release()
	}
	return err
}

// IdleFor is the time to the next listing of a continuous source, after
// Poll returned PollIdle (stream.IdleHinter); 0 while a listing is in
// progress.
func (s *FileSource) IdleFor() time.Duration {
	if s.mon == nil {
		return 0
	}
	return s.mon.idleFor
}

// Close closes the open file, and the directory a listing is reading.
func (s *FileSource) Close() error {
	s.closeSplit()
	if s.mon != nil {
		s.mon.close()
	}
	return nil
}

// lineNumber returns the 1-based number of the line starting at offset in
// path. It rereads the file and is called only to explain an error.
func lineNumber(path string, offset int64) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	r := bufio.NewReader(io.LimitReader(f, offset))
	line := int64(1)
	for {
		b, err := r.ReadSlice('\n')
		if len(b) > 0 && b[len(b)-1] == '\n' {
			line++
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return line
		}
	}
}

// arena copies strings into large shared chunks so that a batch of strings
// costs one allocation per chunk rather than one per row. Bytes once handed
// out are never written again, so the strings stay valid as long as they are
// referenced; a chunk is freed when none of its strings is.
type arena struct{ buf []byte }

const arenaChunk = 64 << 10

func (a *arena) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaChunk/4 {
		return string(b)
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, arenaChunk)
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[start], len(b))
}
