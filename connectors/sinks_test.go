package connectors

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

var sinkSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "name", Type: stream.TypeString},
	stream.Field{Name: "score", Type: stream.TypeFloat64},
	stream.Field{Name: "ok", Type: stream.TypeBool},
	stream.Field{Name: "at", Type: stream.TypeTimestamp},
)

func sinkBatch() *stream.Batch {
	b := stream.NewBatch(sinkSchema, 4)
	b.AppendRow(int64(1), "ann", 1.5, true, int64(1767225601500))
	b.AppendRow(int64(-2), `say "hi", ok`+"\n", math.NaN(), false, int64(0))
	b.AppendRow(nil, nil, nil, nil, nil)
	b.AppendRow(int64(4), "", 1e21, true, int64(-1))
	return b
}

func sinkOctx(subtask int) *stream.OperatorContext {
	return &stream.OperatorContext{OperatorUID: "out", Subtask: subtask, Parallelism: 4, InputSchemas: []*stream.Schema{sinkSchema}}
}

// writerFunc counts writes to check buffering.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) { w.writes++; return w.Buffer.Write(p) }

func TestPrintSinkText(t *testing.T) {
	var w countingWriter
	p, err := NewPrintSink(PrintConfig{}, &w)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Open(t.Context(), sinkOctx(2)); err != nil {
		t.Fatal(err)
	}
	var c collector
	p.ProcessBatch(0, sinkBatch(), &c)
	if w.Len() != 0 {
		t.Fatal("print wrote before a watermark, Finish or Close")
	}
	p.ProcessWatermark(42, &c)
	want := "out[2]> 1, ann, 1.5, true, 2026-01-01T00:00:01.500Z\n" +
		"out[2]> -2, say \"hi\", ok\n, NaN, false, 1970-01-01T00:00:00.000Z\n" +
		"out[2]> null, null, null, null, null\n" +
		"out[2]> 4, , 1e+21, true, 1969-12-31T23:59:59.999Z\n"
	if got := w.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if !reflect.DeepEqual(c.watermarks, []int64{42}) || w.writes != 1 {
		t.Fatalf("watermarks %v, writes %d", c.watermarks, w.writes)
	}
	p.ProcessBatch(0, sinkBatch(), &c)
	p.Finish(&c)
	p.Close()
	if w.writes != 2 || strings.Count(w.String(), "\n") != 10 {
		t.Fatalf("after Finish: %d writes, output %q", w.writes, w.String())
	}
}

func TestPrintSinkJSON(t *testing.T) {
	var w bytes.Buffer
	p, _ := NewPrintSink(PrintConfig{Format: "json"}, &w)
	p.Open(t.Context(), sinkOctx(0))
	p.ProcessBatch(0, sinkBatch(), nil)
	p.Close()
	lines := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	want := []map[string]any{
		{"id": 1.0, "name": "ann", "score": 1.5, "ok": true, "at": "2026-01-01T00:00:01.500Z"},
		{"id": -2.0, "name": "say \"hi\", ok\n", "score": nil, "ok": false, "at": "1970-01-01T00:00:00.000Z"},
		{"id": nil, "name": nil, "score": nil, "ok": nil, "at": nil},
		{"id": 4.0, "name": "", "score": 1e21, "ok": true, "at": "1969-12-31T23:59:59.999Z"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines: %q", len(lines), w.String())
	}
	for i, line := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("line %d: got %v, want %v", i, got, want[i])
		}
	}
	if !strings.HasPrefix(lines[0], `{"id":1,"name":"ann"`) {
		t.Fatalf("fields out of schema order: %s", lines[0])
	}
}

func TestJSONStringEscaping(t *testing.T) {
	for _, s := range []string{"plain", "quote\"back\\slash", "ctl\x00\x01\x1f\t\r\n", "üñí😀", "bad\xffutf8", ""} {
		enc := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("%q encoded as invalid JSON %s: %v", s, enc, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if got != want {
			t.Fatalf("%q round-tripped to %q", s, got)
		}
	}
}

func runFileSink(t *testing.T, cfg FileSinkConfig, subtask int) string {
	t.Helper()
	s, err := NewFileSink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(t.Context(), sinkOctx(subtask)); err != nil {
		t.Fatal(err)
	}
	if err := s.ProcessBatch(0, sinkBatch(), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(PartFile(cfg.Path, subtask))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestFileSinkCSV(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "out")
	got := runFileSink(t, FileSinkConfig{Path: dir, Format: "csv"}, 3)
	if _, err := os.Stat(filepath.Join(dir, "part-3")); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(got)).ReadAll()
	if err != nil {
		t.Fatalf("output is not valid CSV: %v\n%s", err, got)
	}
	want := [][]string{
		{"id", "name", "score", "ok", "at"},
		{"1", "ann", "1.5", "true", "2026-01-01T00:00:01.500Z"},
		{"-2", "say \"hi\", ok\n", "NaN", "false", "1970-01-01T00:00:00.000Z"},
		{"", "", "", "", ""},
		{"4", "", "1e+21", "true", "1969-12-31T23:59:59.999Z"},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Fatalf("got %q, want %q", recs, want)
	}
	if !strings.Contains(got, "\n4,\"\",1e+21") || !strings.Contains(got, "\n,,,,\n") {
		t.Fatalf("empty string and null are not told apart:\n%s", got)
	}
}

func TestFileSinkJSONL(t *testing.T) {
	dir := t.TempDir()
	got := runFileSink(t, FileSinkConfig{Path: dir, Format: "jsonl"}, 0)
	want := `{"id":1,"name":"ann","score":1.5,"ok":true,"at":"2026-01-01T00:00:01.500Z"}` + "\n" +
		`{"id":-2,"name":"say \"hi\", ok\n","score":null,"ok":false,"at":"1970-01-01T00:00:00.000Z"}` + "\n" +
		`{"id":null,"name":null,"score":null,"ok":null,"at":null}` + "\n" +
		`{"id":4,"name":"","score":1e+21,"ok":true,"at":"1969-12-31T23:59:59.999Z"}` + "\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// The jsonl the file sink writes reads back through the file source.
	cfg := FileSourceConfig{Path: dir, Format: "jsonl", Fields: []FileField{{"id", "int64"}, {"name", "string"}, {"ok", "bool"}, {"at", "timestamp"}}}
	rows, err := drain(t, openFileSource(t, cfg, 0, 1, nil), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0][3] != int64(1767225601500) || rows[1][1] != "say \"hi\", ok\n" || rows[2][0] != nil {
		t.Fatalf("read back %v", rows)
	}
}

func TestDiscardCounts(t *testing.T) {
	ResetDiscardedRows("out")
	d := &Discard{}
	d.Open(t.Context(), sinkOctx(0))
	d2 := &Discard{}
	d2.Open(t.Context(), sinkOctx(1))
	d.ProcessBatch(0, sinkBatch(), nil)
	d.ProcessBatch(0, sinkBatch(), nil)
	d2.ProcessBatch(0, sinkBatch(), nil)
	if d.Rows() != 8 || d2.Rows() != 4 || DiscardedRows("out") != 12 {
		t.Fatalf("rows %d, %d, total %d", d.Rows(), d2.Rows(), DiscardedRows("out"))
	}
}

func TestSinkPlanErrors(t *testing.T) {
	tests := []struct {
		typ, config string
		want        []string
	}{
		{"print", `{"format":"xml"}`, []string{`unknown format "xml"`, "text or json"}},
		{"file", `{"format":"csv"}`, []string{"missing path"}},
		{"file", `{"path":"/tmp/x","format":"parquet"}`, []string{`unknown format "parquet"`, "csv or jsonl"}},
		{"file", `{"path":"/tmp/x","formt":"csv"}`, []string{`unknown field "formt"`}},
		{"discard", `{"x":1}`, []string{`unknown field "x"`}},
	}
	for _, tc := range tests {
		t.Run(tc.typ+" "+tc.config, func(t *testing.T) {
			err := planSink(tc.typ, tc.config, sinkSchema)
			if err == nil || !errors.Is(err, stream.ErrConfig) {
				t.Fatalf("Plan = %v, want a config error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	for _, typ := range []string{"print", "file", "discard"} {
		cfg := `{"path":"/tmp/x"}`
		if typ != "file" {
			cfg = ""
		}
		if err := planSink(typ, cfg, sinkSchema); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
}
