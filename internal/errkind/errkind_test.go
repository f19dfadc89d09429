package errkind

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestMark(t *testing.T) {
	kind := errors.New("kind text")
	inner := &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}
	err := Mark(fmt.Errorf("reading x: %w", inner), kind)
	if err.Error() != "reading x: open x: file does not exist" {
		t.Errorf("text %q: the kind's text must not appear", err.Error())
	}
	if !errors.Is(err, kind) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is finds the kind %v and the wrapped error %v; want both", errors.Is(err, kind), errors.Is(err, fs.ErrNotExist))
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe != inner {
		t.Errorf("errors.As does not find the wrapped *fs.PathError")
	}
	if Mark(nil, kind) != nil {
		t.Errorf("Mark(nil) is not nil")
	}
}
