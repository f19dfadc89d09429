// Package testbin is the operator registry of the binaries the process
// tests run: the built-in operator types plus the failure-injection
// operator ("fail") and the pacing operator ("throttle"), which the shipped
// binaries do not offer. Its
// subfolders are those binaries' main packages — custom-operator binaries
// in the shape a user would write (cmd/cli's public commands around a
// registry of their own), which clustertest builds.
package testbin

import (
	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/operators/keyed"
	"github.com/weirstream/weir/stream"
)

// Registry returns the built-in operator types, "fail" and "throttle".
func Registry() *stream.Registry {
	r := builtin.Registry()
	keyed.RegisterFailureInjection(r)
	registerThrottle(r)
	return r
}
