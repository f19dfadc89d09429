package connectors

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/weirstream/weir/stream"
)

// PrintConfig configures the "print" sink.
type PrintConfig struct {
	// Format is "text" (default): `<uid>[<subtask>]> v1, v2, ...`, or
	// "json": one {"field": value} object per line. Timestamps print as
	// RFC3339 with milliseconds, nulls as null.
	Format string `json:"format,omitempty"`
}

func (cfg *PrintConfig) check() (rowFormat, error) {
	switch cfg.Format {
	case "", "text":
		return formatText, nil
	case "json", "jsonl":
		return formatJSON, nil
	}
	return 0, stream.ConfigErrorf("print: unknown format %q (want text or json)", cfg.Format)
}

func planPrint(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg PrintConfig
	if err := stream.DecodeOperatorConfig("print", p.Config, &cfg); err != nil {
		return nil, err
	}
	_, err := cfg.check()
	return nil, err
}

// stdout serialises writes of whole buffers from every print sink in the
// process.
var stdout = &lockedWriter{w: os.Stdout}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// PrintSink is one subtask of the "print" sink. Output is buffered and
// written on watermarks, Finish and Close (and when the buffer fills).
type PrintSink struct {
	stream.BaseOperator
	format rowFormat
	out    lineBuffer
	enc    *rowEncoder
}

var _ stream.Operator = (*PrintSink)(nil)

// NewPrintSink returns a print sink writing to w (os.Stdout when nil).
func NewPrintSink(cfg PrintConfig, w io.Writer) (*PrintSink, error) {
	format, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if w == nil {
		w = stdout
	}
	return &PrintSink{format: format, out: lineBuffer{w: w}}, nil
}

func newPrintOperator(config []byte) (stream.Operator, error) {
	var cfg PrintConfig
	if err := stream.DecodeOperatorConfig("print", config, &cfg); err != nil {
		return nil, err
	}
	return NewPrintSink(cfg, nil)
}

// Open prepares the encoder for the input schema.
func (p *PrintSink) Open(_ context.Context, octx *stream.OperatorContext) error {
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("print: want 1 input schema, got %d", len(octx.InputSchemas))
	}
	prefix := ""
	if p.format == formatText {
		prefix = octx.OperatorUID + "[" + strconv.Itoa(octx.Subtask) + "]> "
	}
	p.enc = newRowEncoder(p.format, octx.InputSchemas[0], prefix)
	return nil
}

// ProcessBatch formats b into the buffer and releases it.
func (p *PrintSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	p.out.buf = p.enc.appendBatch(p.out.buf, b)
	b.Release()
	return p.out.flushIfFull()
}

// ProcessWatermark flushes the buffer.
func (p *PrintSink) ProcessWatermark(wm int64, out stream.Collector) error {
	if err := p.out.flush(); err != nil {
		return fmt.Errorf("print: %w", err)
	}
	out.EmitWatermark(wm)
	return nil
}

// Finish flushes the buffer.
func (p *PrintSink) Finish(stream.Collector) error { return p.out.flush() }

// Close flushes the buffer.
func (p *PrintSink) Close() error { return p.out.flush() }
