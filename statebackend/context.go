package statebackend

import (
	"fmt"

	"github.com/weirstream/weir/stream"
)

// KeyedBackend returns the keyed-state backend the task runtime opened for
// the operator of octx (stream.OperatorContext.KeyedState). It fails when
// there is none: the operator does not implement stream.KeyedStateful, or it
// runs outside a runtime that manages keyed state.
func KeyedBackend(octx *stream.OperatorContext) (Backend, error) {
	if octx == nil || octx.KeyedState == nil {
		uid := ""
		if octx != nil {
			uid = octx.OperatorUID
		}
		return nil, fmt.Errorf("statebackend: operator %q has no keyed-state backend; its type must implement stream.KeyedStateful (UsesKeyedState returning true) so that the task runtime opens one", uid)
	}
	b, ok := octx.KeyedState.(Backend)
	if !ok {
		return nil, fmt.Errorf("statebackend: operator %q: OperatorContext.KeyedState holds a %T, not a statebackend.Backend", octx.OperatorUID, octx.KeyedState)
	}
	return b, nil
}
