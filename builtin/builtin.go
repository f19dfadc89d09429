// Package builtin assembles the registry of Weir's built-in operator types:
// the connectors (datagen, file, print, discard, and kafka, postgres and
// nats), the row transforms (map,
// filter, project), the event-time operators (watermarks, windows) and the
// keyed operators (running_count, sequence_check, and fail for failure
// tests), the Nexmark sources, joins and per-window top-n.
//
// A custom taskmanager binary starts from Registry() and registers its own
// types on top (see stream.Registry).
package builtin

import (
	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/connectors/kafka"
	"github.com/weirstream/weir/connectors/nats"
	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/connectors/postgres"
	"github.com/weirstream/weir/operators"
	"github.com/weirstream/weir/operators/join"
	"github.com/weirstream/weir/operators/keyed"
	"github.com/weirstream/weir/operators/lifetime"
	"github.com/weirstream/weir/operators/topn"
	"github.com/weirstream/weir/operators/window"
	"github.com/weirstream/weir/stream"
)

// Registry returns a new registry holding every built-in operator type.
func Registry() *stream.Registry {
	r := stream.NewRegistry()
	connectors.Register(r)
	kafka.Register(r)
	postgres.Register(r)
	nats.Register(r)
	operators.Register(r)
	window.Register(r)
	keyed.Register(r)
	nexmark.Register(r)
	join.Register(r)
	topn.Register(r)
	lifetime.Register(r)
	return r
}
