package connectors

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// FileSinkConfig configures the "file" sink.
type FileSinkConfig struct {
	// Path is a directory, created if missing. Without checkpointing,
	// subtask i writes <path>/part-<i>, replacing any earlier file of that
	// name. With checkpointing, subtask i writes files
	// part-<job>-<operator>-<i>-<seq> that appear (atomically, by rename)
	// when the checkpoint covering their rows completes, and the directory
	// belongs to one job and operator (see ClaimFile and FileSink).
	Path string `json:"path"`
	// Format is "jsonl" (default): one {"field": value} object per line, or
	// "csv": a header line of field names, then RFC 4180 rows with nulls as
	// empty fields. Timestamps are RFC3339 with milliseconds in both.
	Format string `json:"format,omitempty"`
}

func (cfg *FileSinkConfig) check() (rowFormat, error) {
	if cfg.Path == "" {
		return 0, stream.ConfigErrorf("file sink: missing path; set path to the output directory")
	}
	switch cfg.Format {
	case "", "jsonl", "json":
		return formatJSON, nil
	case "csv":
		return formatCSV, nil
	}
	return 0, stream.ConfigErrorf("file sink: unknown format %q (want csv or jsonl)", cfg.Format)
}

func planFileSink(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg FileSinkConfig
	if err := stream.DecodeOperatorConfig("file sink", p.Config, &cfg); err != nil {
		return nil, err
	}
	if _, err := cfg.check(); err != nil {
		return nil, err
	}
	twophase.DeclareState(p)
	p.DeclareState(stream.StateDecl{Name: sinkNextSeqState, Kind: stream.StateUnion})
	// The state of checkpoints written before the sink was built on
	// package twophase, which it still restores (see filesink_txn.go).
	p.DeclareState(stream.StateDecl{Name: sinkPendingState, Kind: stream.StateOperatorList})
	p.DeclareState(stream.StateDecl{Name: sinkWritersState, Kind: stream.StateUnion})
	p.DeclareState(stream.StateDecl{Name: sinkCountersState, Kind: stream.StateOperatorList})
	return nil, p.Paths.Check("file sink path", cfg.Path)
}

// PartFile returns the file that subtask writes under dir when the job does
// not checkpoint.
func PartFile(dir string, subtask int) string {
	return filepath.Join(dir, "part-"+strconv.Itoa(subtask))
}

// FileSink is one subtask of the "file" sink. It has two modes, chosen at
// Open by OperatorContext.Checkpointing:
//
//   - Without checkpointing it writes <path>/part-<subtask> directly, buffered,
//     and flushes at Finish and Close.
//   - With checkpointing it is a two-phase-commit sink: a twophase.Operator
//     driving the sink directory's transactions (see filesink_txn.go). Open
//     claims the directory for the job and operator (ClaimFile), failing
//     with ErrSinkDirClaimed if another job or operator holds it; a claim of
//     the same operator of the job whose checkpoint this job restores
//     (OperatorContext.RestoreJobID) passes to this job. Each transaction
//     is a hidden in-progress file
//     <path>/.part-<job>-<operator>-<subtask>-<number>.inprogress (see
//     InProgressName; the number is made of the attempt and the
//     transaction's count in it), begun on the first row after a
//     checkpoint. SnapshotState(n) flushes and fsyncs it and records it in
//     the checkpoint as pending for checkpoint n, with its size and
//     checksum, under its final name part-<job>-<operator>-<subtask>-<seq>
//     (see CommittedName; seq counts this subtask's non-empty transactions).
//     NotifyCheckpointComplete(n) renames every pending file of checkpoints
//     up to n to its final name; an aborted checkpoint's files stay pending
//     until a later checkpoint completes. RestoreState commits exactly the
//     transactions pending in the checkpoint that it received, under the
//     names of the job and subtask that wrote them (idempotently: one whose
//     in-progress file is gone counts as committed only if its final file
//     holds the recorded bytes), and deletes every other in-progress file of
//     the subtask indexes it owns, of its own job and of the job that took
//     the checkpoint: their rows will be replayed. Subtask k of q owns the
//     indexes j with j mod q = k: its own, and those that no subtask has
//     now because the parallelism shrank. A fresh start deletes those of
//     its own job. The restore may have another parallelism: then each
//     pending transaction is committed by the
//     subtask that received it; files pending in the checkpoint are never
//     deleted, and subtask k numbers its files after everything old subtask
//     k used (see the state format in filesink_txn.go). Files of other jobs
//     and operators are never touched. A reader that ignores dot-files
//     therefore sees each row exactly once and never a partial file, also
//     when a job submitted from another job's checkpoint carries on that
//     job's output (under its own names). Rows written after the last
//     checkpoint become visible only when a checkpoint taken after Finish
//     completes.
//
// Each file (either mode) starts with a header line in format csv.
type FileSink struct {
	stream.BaseOperator
	cfg    FileSinkConfig
	format rowFormat
	w      *partWriter // without checkpointing: the part file

	// With checkpointing: the two-phase-commit operator and its system.
	txn *twophase.Operator
	sys *fileSystem
}

var (
	_ stream.Operator           = (*FileSink)(nil)
	_ stream.Checkpointed       = (*FileSink)(nil)
	_ stream.CheckpointListener = (*FileSink)(nil)
)

// NewFileSink returns a file sink for cfg, or a config error.
func NewFileSink(cfg FileSinkConfig) (*FileSink, error) {
	format, err := cfg.check()
	if err != nil {
		return nil, err
	}
	return &FileSink{cfg: cfg, format: format}, nil
}

func newFileSinkOperator(config []byte) (stream.Operator, error) {
	var cfg FileSinkConfig
	if err := stream.DecodeOperatorConfig("file sink", config, &cfg); err != nil {
		return nil, err
	}
	return NewFileSink(cfg)
}

// Open creates the directory and, without checkpointing, this subtask's part
// file; with checkpointing it claims the directory.
func (s *FileSink) Open(ctx context.Context, octx *stream.OperatorContext) error {
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("file sink: want 1 input schema, got %d", len(octx.InputSchemas))
	}
	if err := octx.Paths.Check("file sink path", s.cfg.Path); err != nil {
		return err
	}
	if err := os.MkdirAll(s.cfg.Path, 0o755); err != nil {
		return fmt.Errorf("file sink: create output directory: %w", err)
	}
	if octx.Checkpointing {
		s.sys = &fileSystem{dir: s.cfg.Path, format: s.format}
		s.txn = twophase.NewOperator(s.sys)
		return s.txn.Open(ctx, octx)
	}
	w, err := createPartWriter(PartFile(s.cfg.Path, octx.Subtask), false, s.format, octx.InputSchemas[0])
	if err != nil {
		return err
	}
	s.w = w
	return nil
}

// ProcessBatch encodes b and releases it.
func (s *FileSink) ProcessBatch(input int, b *stream.Batch, out stream.Collector) error {
	if s.txn != nil {
		return s.txn.ProcessBatch(input, b, out)
	}
	defer b.Release()
	return s.w.write(b)
}

// Finish writes everything buffered. With checkpointing the rows stay in
// the in-progress file until a checkpoint commits them.
func (s *FileSink) Finish(out stream.Collector) error {
	if s.txn != nil {
		if err := s.txn.Finish(out); err != nil {
			return err
		}
		return s.sys.flush()
	}
	if s.w == nil {
		return nil
	}
	return s.w.flush()
}

// SnapshotState pre-commits the open transaction for checkpoint
// c.CheckpointID and records every pending one (with checkpointing).
func (s *FileSink) SnapshotState(c *stream.SnapshotContext) error {
	if s.txn == nil {
		return nil
	}
	return s.txn.SnapshotState(c)
}

// RestoreState commits the transactions of the checkpoint given to this
// subtask and deletes the in-progress files of transactions that will be
// replayed (with checkpointing).
func (s *FileSink) RestoreState(c *stream.RestoreContext) error {
	if s.txn == nil {
		return nil
	}
	return s.txn.RestoreState(c)
}

// NotifyCheckpointComplete commits every transaction pre-committed for a
// checkpoint up to id.
func (s *FileSink) NotifyCheckpointComplete(id int64) error {
	if s.txn == nil {
		return nil
	}
	return s.txn.NotifyCheckpointComplete(id)
}

// NotifyCheckpointAborted keeps the checkpoint's transactions pending: a
// later completed checkpoint commits them.
func (s *FileSink) NotifyCheckpointAborted(id int64) error {
	if s.txn == nil {
		return nil
	}
	return s.txn.NotifyCheckpointAborted(id)
}

// Close, without checkpointing, writes everything buffered and closes the
// part file. With checkpointing it commits nothing: it deletes the open
// transaction's in-progress file, whose rows no checkpoint holds. Calling
// it again does nothing.
func (s *FileSink) Close() error {
	if s.txn != nil {
		txn := s.txn
		s.txn = nil
		return txn.Close()
	}
	if s.w == nil {
		return nil
	}
	err := s.w.close()
	s.w = nil
	return err
}

// partWriter writes encoded rows to one file. It is the reusable core of the
// file sink: a transactional sink writes to a temporary file with it and
// renames on commit.
type partWriter struct {
	path string
	f    *os.File
	sum  checksumWriter // writes to f
	enc  *rowEncoder
	out  lineBuffer // writes to sum
}

// createPartWriter creates the file at path, replacing any file of that
// name unless exclusive (then the error wraps fs.ErrExist).
func createPartWriter(path string, exclusive bool, format rowFormat, schema *stream.Schema) (*partWriter, error) {
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if exclusive {
		flag |= os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o666)
	if err != nil {
		return nil, fmt.Errorf("file sink: %w", err)
	}
	w := &partWriter{path: path, f: f, sum: checksumWriter{w: f}, enc: newRowEncoder(format, schema, "")}
	w.out.w = &w.sum
	if format == formatCSV {
		w.out.buf = w.enc.appendHeader(w.out.buf)
	}
	return w, nil
}

func (w *partWriter) write(b *stream.Batch) error {
	w.out.buf = w.enc.appendBatch(w.out.buf, b)
	if err := w.out.flushIfFull(); err != nil {
		return fmt.Errorf("file sink: write %s: %w", w.path, err)
	}
	return nil
}

func (w *partWriter) flush() error {
	if err := w.out.flush(); err != nil {
		return fmt.Errorf("file sink: write %s: %w", w.path, err)
	}
	return nil
}

// sync flushes the file and makes it durable.
func (w *partWriter) sync() error {
	if err := w.flush(); err != nil {
		return err
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("file sink: fsync %s: %w", w.path, err)
	}
	return nil
}

// close flushes and closes the file.
func (w *partWriter) close() error {
	err := w.flush()
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("file sink: close %s: %w", w.path, cerr)
	}
	return err
}

// discard closes the file without writing what is buffered and deletes
// it.
func (w *partWriter) discard() error {
	w.f.Close() // the error of a file about to be deleted tells nothing
	if err := os.Remove(w.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file sink: delete %s: %w", w.path, err)
	}
	return nil
}

// castagnoli is the CRC-32C table: the checksum of committed files.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksumWriter passes writes to w and keeps the count and CRC-32C of the
// bytes written, so that a commit can later recognise the file.
type checksumWriter struct {
	w   io.Writer
	n   int64
	crc uint32
}

func (c *checksumWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	return n, err
}
