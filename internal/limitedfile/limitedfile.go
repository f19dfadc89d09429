// Package limitedfile reads small files named in configuration (secrets,
// connection strings, PEM material) without trusting their size: a path
// that names a large file by mistake fails at once instead of being read
// into memory.
//
// limitedfile imports the standard library and internal/errkind only.
package limitedfile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/weirstream/weir/internal/errkind"
)

// ErrTooLarge marks the error of a file larger than the limit; the
// error's text names the file and the limit, not this sentinel, so that a
// caller may add what the file should hold.
var ErrTooLarge = errors.New("limitedfile: file too large")

// Read reads the file at path, which must hold at most limit bytes: a
// larger file is an error marked ErrTooLarge ("<path> is larger than
// <limit> bytes"), read no further than limit+1 bytes. Other errors are
// os.Open's and the read's. Errors never quote the file's content.
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errkind.Mark(fmt.Errorf("%s is larger than %d bytes", path, limit), ErrTooLarge)
	}
	return b, nil
}
