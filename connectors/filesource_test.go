package connectors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func openFileSource(t *testing.T, cfg FileSourceConfig, subtask, parallelism int, restore func(*FileSource)) *FileSource {
	t.Helper()
	s, err := NewFileSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if restore != nil {
		restore(s)
	}
	if err := s.Open(t.Context(), octxFor(subtask, parallelism)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestFileSourceLines(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "one\r\ntwo\n\nfour")
	writeFile(t, filepath.Join(dir, "b.txt"), "five\n"+strings.Repeat("x", 300<<10)+"\n")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	s := openFileSource(t, FileSourceConfig{Path: dir, BatchSize: 2}, 0, 1, nil)
	rows, err := drain(t, s, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]any{{"one"}, {"two"}, {""}, {"four"}, {"five"}, {strings.Repeat("x", 300<<10)}}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got %d rows %.200v", len(rows), rows)
	}
	if f, _ := s.Position(); f != -1 {
		t.Fatalf("Position after the end = %d, want -1", f)
	}
}

func TestFileSourceJSONL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	writeFile(t, path, `{"user":"ann","amount":1.5,"n":3,"ok":true,"ts":"2026-01-01T00:00:01.5Z","extra":{"deep":[1,"}",{"a":null}]}}
{"user":null,"amount":2}

  {"n":-7, "user":"b\"\u00e9\n\ud83d\ude00", "ts": 1000, "ok": false}
{}
`)
	cfg := FileSourceConfig{Path: path, Format: "jsonl", Fields: []FileField{
		{"user", "string"}, {"amount", "float64"}, {"n", "int64"}, {"ok", "bool"}, {"ts", "timestamp"},
	}}
	rows, err := drain(t, openFileSource(t, cfg, 0, 1, nil), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]any{
		{"ann", 1.5, int64(3), true, int64(1767225601500)},
		{nil, 2.0, nil, nil, nil},
		{"b\"é\n😀", nil, int64(-7), false, int64(1000)},
		{nil, nil, nil, nil, nil},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got  %v\nwant %v", rows, want)
	}
}

func TestFileSourceJSONLErrors(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
		hide       string // a data value the error must not show
	}{
		{"wrong type", "{\"n\":1}\n\n{\"n\":\"s3cr3t\"}\n", []string{"in.jsonl:3:", `field "n"`, "want int64", "got a string"}, "s3cr3t"},
		{"float for int", "{\"n\":1.5}\n", []string{"in.jsonl:1:", `field "n"`, "got a number that is not a whole number"}, "1.5"},
		{"object", "{\"n\":1}\n{\"n\":{}}\n", []string{"in.jsonl:2:", "got an object"}, ""},
		{"syntax", "{\"n\":1}\n{\"n\" 1}\n", []string{"in.jsonl:2:", "invalid JSON", "':'"}, ""},
		{"not object", "[1]\n", []string{"in.jsonl:1:", "want a JSON object"}, ""},
		{"trailing", "{\"n\":1} x\n", []string{"in.jsonl:1:", "end of line"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.jsonl")
			writeFile(t, path, tc.data)
			cfg := FileSourceConfig{Path: path, Format: "jsonl", Fields: []FileField{{"n", "int64"}}}
			_, err := drain(t, openFileSource(t, cfg, 0, 1, nil), 10)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if tc.hide != "" && strings.Contains(err.Error(), tc.hide) {
				t.Errorf("error %q shows the data value %q", err, tc.hide)
			}
		})
	}
}

// makeFiles writes files f0..f(n-1), file k holding lines "k:0".."k:(k+2)".
func makeFiles(t *testing.T, n int) (string, map[string]int) {
	dir := t.TempDir()
	lines := map[string]int{}
	for k := range n {
		var b strings.Builder
		for j := range k + 3 {
			fmt.Fprintf(&b, "%d:%d\n", k, j)
			lines[fmt.Sprintf("%d:%d", k, j)] = k
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%02d.log", k)), b.String())
	}
	writeFile(t, filepath.Join(dir, "skip.txt"), "not matched\n")
	return dir, lines
}

func TestFileSourceSplitsAcrossSubtasks(t *testing.T) {
	dir, lines := makeFiles(t, 7)
	cfg := FileSourceConfig{Path: filepath.Join(dir, "*.log"), BatchSize: 4}
	const p = 3
	seen := map[string]bool{}
	for i := range p {
		rows, err := drain(t, openFileSource(t, cfg, i, p, nil), 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			line := r[0].(string)
			k, ok := lines[line]
			if !ok || seen[line] {
				t.Fatalf("unexpected or repeated line %q", line)
			}
			if k%p != i {
				t.Fatalf("line %q of file %d read by subtask %d, want %d", line, k, i, k%p)
			}
			seen[line] = true
		}
	}
	if len(seen) != len(lines) {
		t.Fatalf("read %d lines, want %d", len(seen), len(lines))
	}
}

func TestFileSourceResume(t *testing.T) {
	dir, _ := makeFiles(t, 5)
	cfg := FileSourceConfig{Path: filepath.Join(dir, "*.log"), BatchSize: 3}
	full, err := drain(t, openFileSource(t, cfg, 1, 2, nil), 100) // files 1 and 3
	if err != nil {
		t.Fatal(err)
	}
	// Read batch by batch, checkpointing the splits after every Poll, and
	// resume from each checkpoint in a fresh source.
	s := openFileSource(t, cfg, 1, 2, nil)
	var c collector
	for {
		splits := s.Splits()
		file, off := s.Position()
		done := len(c.rows())
		for _, restore := range []func(*FileSource){
			func(r *FileSource) { r.SetSplits(splits) },
			func(r *FileSource) {
				if file >= 0 {
					r.SetPosition(file, off)
				} else {
					r.SetSplits(splits)
				}
			},
		} {
			tail, err := drain(t, openFileSource(t, cfg, 1, 2, restore), 100)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(append(c.rows(), tail...), full) && !(done == len(full) && len(tail) == 0) {
				t.Fatalf("resume after %d rows at file %d offset %d: got tail %v, want %v", done, file, off, tail, full[done:])
			}
		}
		st, err := s.Poll(t.Context(), &c)
		if err != nil {
			t.Fatal(err)
		}
		if st == stream.PollEnd {
			break
		}
	}
}

func TestFileSourcePlanErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "x.jsonl"), "{}\n")
	empty := t.TempDir()
	tests := []struct {
		name, config string
		want         []string
	}{
		{"no path", `{}`, []string{"missing path"}},
		{"nothing matches", `{"path":"` + dir + `/*.csv"}`, []string{"matches no files"}},
		{"missing file", `{"path":"` + dir + `/nope.txt"}`, []string{"matches no files"}},
		{"empty dir", `{"path":"` + empty + `"}`, []string{"has no regular files"}},
		{"unknown format", `{"path":"` + dir + `","format":"csv"}`, []string{`unknown format "csv"`, "lines or jsonl"}},
		{"fields for lines", `{"path":"` + dir + `","format":"lines","fields":[{"name":"a","type":"string"}]}`, []string{"fields are not allowed with format lines"}},
		{"jsonl without fields", `{"path":"` + dir + `","format":"jsonl"}`, []string{"needs fields"}},
		{"bad type", `{"path":"` + dir + `","format":"jsonl","fields":[{"name":"a","type":"decimal"}]}`, []string{`field "a"`, `unknown type "decimal"`}},
		{"no name", `{"path":"` + dir + `","format":"jsonl","fields":[{"type":"string"}]}`, []string{"fields[0]: missing name"}},
		{"duplicate", `{"path":"` + dir + `","format":"jsonl","fields":[{"name":"a","type":"string"},{"name":"a","type":"int"}]}`, []string{`"a" appears twice`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := planSource("file", tc.config)
			if err == nil {
				t.Fatal("Plan accepted a bad config")
			}
			if !errors.Is(err, stream.ErrConfig) {
				t.Errorf("error %q is not a stream.ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	s, err := planSource("file", `{"path":"`+dir+`/*.jsonl","format":"jsonl","fields":[{"name":"a","type":"string"},{"name":"t","type":"timestamp"}]}`)
	if err != nil || s.String() != "(a string, t timestamp)" {
		t.Fatalf("Plan = %v, %v", s, err)
	}
}

func BenchmarkFileSourceJSONL(b *testing.B) {
	path := filepath.Join(b.TempDir(), "in.jsonl")
	var sb strings.Builder
	const lines = 100000
	for i := range lines {
		fmt.Fprintf(&sb, `{"auction":%d,"bidder":%d,"price":%d,"channel":"Google","url":"https://www.nexmark.com/abc/item.htm?query=1","dateTime":"2026-01-01T00:00:00.%03dZ","extra":"xyz"}`+"\n", i, i*7, i%1000, i%1000)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := FileSourceConfig{Path: path, Format: "jsonl", Fields: []FileField{
		{"auction", "int64"}, {"bidder", "int64"}, {"price", "int64"}, {"channel", "string"}, {"url", "string"}, {"dateTime", "timestamp"},
	}}
	var rows int64
	b.ReportAllocs()
	for b.Loop() {
		s, _ := NewFileSource(cfg)
		s.Open(b.Context(), octxFor(0, 1))
		for {
			st, err := s.Poll(b.Context(), releaser{rows: &rows})
			if err != nil {
				b.Fatal(err)
			}
			if st == stream.PollEnd {
				break
			}
		}
		s.Close()
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}
