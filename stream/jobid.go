package stream

import (
	"errors"
	"fmt"
)

// MaxJobIDLength is the longest job id ValidateJobID accepts, in bytes.
const MaxJobIDLength = 128

// ErrInvalidJobID is wrapped by every error of ValidateJobID.
var ErrInvalidJobID = errors.New("stream: invalid job id")

// ValidateJobID returns an error wrapping ErrInvalidJobID unless id is 1 to
// MaxJobIDLength ASCII letters, digits, '.', '_' or '-', and neither "." nor
// "..". Such an id is exactly one segment wherever it is joined into a path
// or an object key (checkpoint keys, a taskmanager's local state directory),
// so it can neither name a parent directory nor reach into another job's
// keys. Code that joins a job id it did not generate into a path calls it
// first. The error does not repeat an over-long id.
func ValidateJobID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: the id is empty", ErrInvalidJobID)
	case len(id) > MaxJobIDLength:
		return fmt.Errorf("%w: the id is %d bytes; the limit is %d bytes", ErrInvalidJobID, len(id), MaxJobIDLength)
	case id == "." || id == "..":
		return fmt.Errorf("%w %q: it would name a directory, not a job", ErrInvalidJobID, id)
	}
	for i := 0; i < len(id); i++ {
		if !jobIDByte(id[i]) {
			return fmt.Errorf("%w %q: byte %d is %q; a job id is letters, digits, '.', '_' and '-'", ErrInvalidJobID, id, i, id[i])
		}
	}
	return nil
}

func jobIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}
