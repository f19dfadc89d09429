package connectors

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/stream"
)

// File sources and sinks touch files only under the allowed roots: the
// plan refuses a path outside (so the planner is no oracle for other
// files), and so does Open, in the process that would touch them.
func TestFileConnectorsConfinedToRoots(t *testing.T) {
	root, other := t.TempDir(), t.TempDir()
	for _, dir := range []string{root, other} {
		if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("a\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(other, "in.txt"), filepath.Join(root, "link.txt")); err != nil {
		t.Fatal(err)
	}
	paths, err := stream.NewPathPolicy([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	source := func(path string) []byte { return []byte(`{"path":"` + path + `","format":"lines"}`) }
	sink := func(path string) []byte { return []byte(`{"path":"` + path + `","format":"csv"}`) }
	for _, tc := range []struct {
		name   string
		plan   func(*stream.PlanContext) (*stream.Schema, error)
		config []byte
		ok     bool
	}{
		{"source inside", planFileSource, source(filepath.Join(root, "in.txt")), true},
		{"source outside", planFileSource, source(filepath.Join(other, "in.txt")), false},
		{"source through ..", planFileSource, source(filepath.Join(root, "..", filepath.Base(other), "in.txt")), false},
		{"source glob matching a link out", planFileSource, source(filepath.Join(root, "*.txt")), false},
		{"source /etc/passwd", planFileSource, source("/etc/passwd"), false},
		{"sink inside", planFileSink, sink(filepath.Join(root, "out")), true},
		{"sink outside", planFileSink, sink(filepath.Join(other, "out")), false},
	} {
		_, err := tc.plan(&stream.PlanContext{UID: "x", Config: tc.config, Parallelism: 1, Paths: paths})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, stream.ErrPathNotAllowed)) {
			t.Errorf("plan %s: %v, want allowed=%v", tc.name, err, tc.ok)
		}
	}
	// Open checks again: a spec planned elsewhere (or before a link was
	// planted) is refused where the files are.
	octx := &stream.OperatorContext{OperatorUID: "x", Parallelism: 1, Paths: paths,
		InputSchemas: []*stream.Schema{stream.MustSchema(stream.Field{Name: "line", Type: stream.TypeString})}}
	src, err := newFileSource(source(filepath.Join(other, "in.txt")))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(context.Background(), octx); !errors.Is(err, stream.ErrPathNotAllowed) {
		t.Errorf("source Open outside: %v", err)
	}
	op, err := newFileSinkOperator(sink(filepath.Join(other, "out")))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Open(context.Background(), octx); !errors.Is(err, stream.ErrPathNotAllowed) {
		t.Errorf("sink Open outside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "out")); !os.IsNotExist(err) {
		t.Errorf("the refused sink created its directory: %v", err)
	}
}
