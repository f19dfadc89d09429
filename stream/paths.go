package stream

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrPathNotAllowed marks a file path outside the roots a PathPolicy
// allows.
var ErrPathNotAllowed = errors.New("path not allowed")

// PathPolicy confines the files a process lets jobs read and write — file
// sources, file sinks, file:// checkpoint storage — to root directories
// its operator configured. A path is checked after it is made absolute
// and cleaned and after symbolic links in its existing part are resolved,
// so that neither ".." nor a link leads out of a root. A nil *PathPolicy
// allows every path (planning in a client, unit tests).
type PathPolicy struct {
	roots []string // absolute, cleaned, links resolved
}

// NewPathPolicy returns the policy allowing the directories roots and
// everything under them. Each root must be an absolute path.
func NewPathPolicy(roots []string) (*PathPolicy, error) {
	if len(roots) == 0 {
		return nil, errors.New("no allowed path roots; give at least one directory (jobs may read and write files only under them)")
	}
	p := &PathPolicy{}
	for _, r := range roots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("allowed path root %q is not absolute; give an absolute directory", r)
		}
		p.roots = append(p.roots, resolve(filepath.Clean(r)))
	}
	return p, nil
}

// Roots returns the allowed roots, links resolved.
func (p *PathPolicy) Roots() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.roots...)
}

// Check returns nil if path is allowed, else an error wrapping
// ErrPathNotAllowed that names what (the setting, for example "file source
// path"), the path, the roots and the fix. A path with glob characters is
// checked up to its first one (the directory the pattern reads); callers
// check the files a pattern matches as well.
func (p *PathPolicy) Check(what, path string) error {
	if p == nil {
		return nil
	}
	if !filepath.IsAbs(path) {
		return ConfigErrorf("%s %s is not absolute; give an absolute path under one of the allowed roots %v", what, path, p.roots)
	}
	clean := filepath.Clean(path)
	if i := strings.IndexAny(clean, `*?[\`); i >= 0 {
		clean = filepath.Dir(clean[:i+1])
	}
	real := resolve(clean)
	for _, r := range p.roots {
		if real == r || strings.HasPrefix(real, r+string(filepath.Separator)) || r == string(filepath.Separator) {
			return nil
		}
	}
	return fmt.Errorf("%s %s is outside the allowed roots %v: %w; put the files under one of them, or add their directory to allowedPaths (--allowed-paths) of the jobmanager and every taskmanager",
		what, path, p.roots, ErrPathNotAllowed)
}

// dangling is what resolve returns for a path through a dangling symbolic
// link; it is not absolute, so no root contains it.
const dangling = "dangling symbolic link"

// resolve returns path with the symbolic links of its longest existing
// prefix resolved and the rest appended, so that a path that does not
// exist yet (a sink's output) is checked where it will be created.
func resolve(path string) string {
	rest := ""
	for cur := path; ; {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest)
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
			return path
		}
		if st, lerr := os.Lstat(cur); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			// A dangling link: where it leads would be created by a
			// write, wherever that is. No root contains it.
			return dangling
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return path
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
