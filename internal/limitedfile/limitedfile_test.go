package limitedfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("s", n)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		path  string
		limit int64
		n     int    // bytes read
		is    error  // errors.Is target of the error, or nil
		text  string // the error's text, "" for none
	}{
		{"empty", file("empty", 0), 4, 0, nil, ""},
		{"at the limit", file("at", 4), 4, 4, nil, ""},
		{"over the limit", file("over", 5), 4, 0, ErrTooLarge, filepath.Join(dir, "over") + " is larger than 4 bytes"},
		{"missing", filepath.Join(dir, "missing"), 4, 0, fs.ErrNotExist, "open " + filepath.Join(dir, "missing") + ": no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Read(tc.path, tc.limit)
			if tc.text == "" {
				if err != nil || len(b) != tc.n {
					t.Fatalf("read %d bytes, %v; want %d", len(b), err, tc.n)
				}
				return
			}
			if err == nil || err.Error() != tc.text || !errors.Is(err, tc.is) || b != nil {
				t.Fatalf("read %d bytes, error %v; want error %q that is %v", len(b), err, tc.text, tc.is)
			}
		})
	}
}
