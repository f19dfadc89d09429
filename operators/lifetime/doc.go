// Package lifetime owns two keyed operators for results that are decided
// when something ends, rather than at fixed window boundaries:
//
//   - "lifetime_max" joins entities that live from a start to an end time
//     (input 0, say auctions) with events about them (input 1, say bids),
//     both keyed by the entity's id, and when the watermark passes an
//     entity's end (an event-time timer at it) emits the entity's key, the
//     fields it carries and the largest value among the events whose time
//     lies within its lifetime. An entity without such events emits
//     nothing, as an inner join would. With "winner" fields it also
//     emits those fields of the winning event, the winner being the
//     largest value, then the earliest time, then the smallest winner
//     fields, whatever the arrival order. It is the winning bid of each
//     auction in Nexmark q4 (the price) and q9 (the bid).
//   - "running_avg" keeps, per key, the count and sum of a numeric field
//     and emits for every record the key, the count so far and the average
//     so far: a result that changes as records arrive, as Nexmark q4's
//     average closing price per category does.
//
// Both keep all their state in the keyed-state backend the task runtime
// opens for them (statebackend.KeyedBackend), so heap and Pebble,
// checkpoints, restores and rescaling apply unchanged.
//
// lifetime_max holds its fields as int64 (int64 or timestamp fields): the
// key (one field on each input, of the same type), the start, end, event
// time and value, and any carried and winner fields. Events that arrive before their
// entity wait in its state until the watermark passes their own time; an
// entity's state is dropped when it closes, so state is bounded by the
// entities alive and the events not yet matched.
//
// Register adds both types to a stream.Registry. The package imports the
// standard library, package stream, statebackend and
// operators/internal/rowenc (key encoding).
package lifetime
