package stream

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPathPolicy(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "in"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	link(outside, "escape")                             // a link out of the root
	link(filepath.Join(root, "in"), "inner")            // a link within it
	link(filepath.Join(base, "nowhere", "x"), "dangle") // dangling, pointing out
	p, err := NewPathPolicy([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	for path, ok := range map[string]bool{
		root:                                      true,
		filepath.Join(root, "in", "a.jsonl"):      true,
		filepath.Join(root, "in", "*.jsonl"):      true,
		filepath.Join(root, "new", "out"):         true, // does not exist yet
		filepath.Join(root, "inner", "a.jsonl"):   true,
		filepath.Join(root, "..", "outside", "a"): false,
		filepath.Join(root, "escape", "a"):        false,
		filepath.Join(root, "escape", "*.jsonl"):  false,
		filepath.Join(root, "dangle", "out"):      false,
		root + "x":                                false, // a sibling sharing the prefix
		"/etc/passwd":                             false,
		"/proc/self/environ":                      false,
		"relative/path":                           false,
	} {
		err := p.Check("file source path", path)
		if (err == nil) != ok {
			t.Errorf("%s: %v, want allowed=%v", path, err, ok)
		}
		if err != nil && filepath.IsAbs(path) && !errors.Is(err, ErrPathNotAllowed) {
			t.Errorf("%s: %v does not wrap ErrPathNotAllowed", path, err)
		}
	}
	var none *PathPolicy
	if err := none.Check("x", "/etc/passwd"); err != nil {
		t.Errorf("nil policy: %v", err)
	}
	if _, err := NewPathPolicy([]string{"rel"}); err == nil {
		t.Error("relative root accepted")
	}
	if _, err := NewPathPolicy(nil); err == nil {
		t.Error("no roots accepted")
	}
}
