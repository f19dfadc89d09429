// Package errkind marks an error with a kind that errors.Is and errors.As
// find, without the kind's text appearing in the message: a message stays
// as written for people, and callers still tell failures apart. It imports
// only the standard library.
package errkind

// Mark returns err marked as a failure of kind: its text is err's, and
// errors.Is and errors.As match both err's chain and kind's.
func Mark(err, kind error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, kind: kind}
}

type marked struct {
	err, kind error
}

func (e *marked) Error() string   { return e.err.Error() }
func (e *marked) Unwrap() []error { return []error{e.err, e.kind} }
