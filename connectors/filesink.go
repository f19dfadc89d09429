package connectors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/weirstream/weir/stream"
)

// FileSinkConfig configures the "file" sink.
type FileSinkConfig struct {
	// Path is a directory, created if missing; subtask i writes
	// <path>/part-<i>, replacing any earlier file of that name.
	Path string `json:"path"`
	// Format is "jsonl" (default): one {"field": value} object per line, or
	// "csv": a header line of field names, then RFC 4180 rows with nulls as
	// empty fields. Timestamps are RFC3339 with milliseconds in both.
	Format string `json:"format,omitempty"`
}

func (cfg *FileSinkConfig) check() (rowFormat, error) {
	if cfg.Path == "" {
		return 0, configErrorf("file sink: missing path; set path to the output directory")
	}
	switch cfg.Format {
	case "", "jsonl", "json":
		return formatJSON, nil
	case "csv":
		return formatCSV, nil
	}
	return 0, configErrorf("file sink: unknown format %q (want csv or jsonl)", cfg.Format)
}

func planFileSink(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg FileSinkConfig
	if err := decodeConfig("file sink", p.Config, &cfg); err != nil {
		return nil, err
	}
	_, err := cfg.check()
	return nil, err
}

// PartFile returns the file that subtask writes under dir.
func PartFile(dir string, subtask int) string {
	return filepath.Join(dir, "part-"+strconv.Itoa(subtask))
}

// FileSink is one subtask of the "file" sink. Rows are buffered and written
// when the buffer fills and on Finish and Close.
type FileSink struct {
	stream.BaseOperator
	cfg    FileSinkConfig
	format rowFormat
	w      *partWriter
}

var _ stream.Operator = (*FileSink)(nil)

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
	if err := decodeConfig("file sink", config, &cfg); err != nil {
		return nil, err
	}
	return NewFileSink(cfg)
}

// Open creates the directory and this subtask's part file.
func (s *FileSink) Open(_ context.Context, octx *stream.OperatorContext) error {
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("file sink: want 1 input schema, got %d", len(octx.InputSchemas))
	}
	if err := os.MkdirAll(s.cfg.Path, 0o755); err != nil {
		return fmt.Errorf("file sink: create output directory: %w", err)
	}
	w, err := createPartWriter(PartFile(s.cfg.Path, octx.Subtask), s.format, octx.InputSchemas[0])
	if err != nil {
		return err
	}
	s.w = w
	return nil
}

// ProcessBatch encodes b and releases it.
func (s *FileSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	err := s.w.write(b)
	b.Release()
	return err
}

// Finish writes everything buffered.
func (s *FileSink) Finish(stream.Collector) error { return s.w.flush() }

// Close writes everything buffered and closes the file.
func (s *FileSink) Close() error {
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
	enc  *rowEncoder
	out  lineBuffer
}

func createPartWriter(path string, format rowFormat, schema *stream.Schema) (*partWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("file sink: %w", err)
	}
	w := &partWriter{path: path, f: f, enc: newRowEncoder(format, schema, ""), out: lineBuffer{w: f}}
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

// close flushes and closes the file.
func (w *partWriter) close() error {
	err := w.flush()
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("file sink: close %s: %w", w.path, cerr)
	}
	return err
}
