package statebackend

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/stream"
)

// Errors common to all backends; inspect with errors.Is.
var (
	// ErrClosed is returned by a backend used after Close.
	ErrClosed = errors.New("statebackend: closed")
	// ErrConflict is returned by Backend.Table when a name is already used
	// with a different kind or codec.
	ErrConflict = errors.New("statebackend: conflicting state descriptor")
	// ErrCorrupt is returned by Restore when a snapshot chunk cannot be
	// decoded.
	ErrCorrupt = errors.New("statebackend: corrupt state")
)

// Backend holds the keyed state of one operator subtask, partitioned by key
// group. It is not safe for concurrent use: one task goroutine uses it, and
// the Tables, TimerService and typed state obtained from it.
type Backend interface {
	// SetCurrentKey selects the key (its encoded bytes) and key group that
	// state calls operate on until the next SetCurrentKey. keyGroup must be
	// in KeyGroups() (a backend panics otherwise: it is a routing bug). The
	// backend does not copy key: the caller must not modify it while it is
	// current.
	SetCurrentKey(key []byte, keyGroup int)
	// CurrentKey returns what SetCurrentKey selected (nil, and the first key
	// group of the range, before any call).
	CurrentKey() (key []byte, keyGroup int)
	// KeyGroups is the range of key groups this backend owns.
	KeyGroups() stream.KeyGroupRange

	// Table returns the state table described by d, creating it on first
	// use. Asking again for the same name with a different kind or codec
	// fails with ErrConflict. Tables restored by Restore but not yet asked
	// for keep their state in serialised form; asking for one decodes it
	// with d's codecs (an error then names the table and key).
	Table(d Descriptor) (Table, error)
	// Timers returns the timer service of this backend: its event-time and
	// processing-time timers.
	Timers() TimerService

	// Snapshot writes all state (every table, every key, and the timers of
	// both domains, but not the watermark) into c as chunks per key group
	// (c.WriteKeyGroup), one or more per non-empty key group. The chunks do
	// not alias live state: state may change as soon as Snapshot returns.
	// c.KeyGroups must contain KeyGroups().
	Snapshot(c *stream.SnapshotContext) error
	// Restore loads keyed state from c.State.Keyed: the chunks of key groups
	// in KeyGroups(), which may come from snapshots of several subtasks with
	// other ranges; chunks of other key groups are ignored. Call it once, on
	// an empty backend. A chunk that cannot be decoded fails with an error
	// wrapping ErrCorrupt; the backend's state is then unchanged.
	Restore(c *stream.RestoreContext) error

	// Keys calls fn for every key that has state in the named table and key
	// group, until fn returns false (in no particular order). It is how an
	// operator scans its state, for example after a restore. fn owns the key
	// slice it is given; it may call SetCurrentKey and read or change state
	// of the keys it is given, but must not add state under new keys. fn may
	// also delete state of other keys of the table (TTL state does, see
	// TTLConfig.CleanupPerAccess): a key whose state is deleted before its
	// turn may or may not be given, and no key is given twice. An unknown
	// table has no keys.
	Keys(table string, keyGroup int, fn func(key []byte) bool)
	// SizeBytes estimates the memory (or disk) the state takes, for
	// metrics. It is cheap: O(1) or close.
	SizeBytes() int64

	// Close releases the state. Calls after Close, on the backend or its
	// tables, fail with ErrClosed or do nothing.
	Close() error
}

// KeyScanner is implemented by a backend that lists a table's keys in all
// its key groups faster in one pass than Keys does key group by key group
// (Pebble: one iterator instead of one per key group and page of keys).
// ScanKeys calls fn with every key that has state in the named table and
// the key's key group, key group by key group, until fn returns false. fn
// must not call the backend or its tables (the scan may hold an iterator
// open), and the key slice is valid only during the call. An unknown table
// has no keys.
type KeyScanner interface {
	ScanKeys(table string, fn func(key []byte, keyGroup int) bool)
}

// Kind is the kind of a state table. The values are stable: they are written
// into snapshots.
type Kind uint8

const (
	// KindValue holds one value per key.
	KindValue Kind = iota + 1
	// KindList holds a list per key, stored as one value (see ListCodec for
	// its encoding).
	KindList
	// KindMap holds a map per key: values are addressed by key and user key.
	KindMap
	// KindReducing holds one accumulated value per key.
	KindReducing
	// KindAggregating holds one accumulator per key.
	KindAggregating
)

func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindList:
		return "list"
	case KindMap:
		return "map"
	case KindReducing:
		return "reducing"
	case KindAggregating:
		return "aggregating"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindValue && k <= KindAggregating }

// Descriptor describes a state table. It is what typed state hands a backend.
type Descriptor struct {
	// Name identifies the table within the operator; snapshots refer to it.
	Name string
	Kind Kind
	// Codec serialises the table's values (for KindMap, the value under one
	// user key; for KindList, the whole list).
	Codec ValueCodec
	// UserKeyCodec is the codec of KindMap's user keys (nil for other
	// kinds). Tables hand user keys to backends already encoded; backends
	// use it only to check descriptors and to validate restored user keys.
	UserKeyCodec ValueCodec
	// SnapshotFilter, if set, says what of a value a snapshot needs: it
	// returns the value to write in its place (v itself, or a new value
	// with parts removed) and false if nothing is to be written. Typed
	// state with TTL sets it to leave out expired values and list elements
	// (see TTLConfig). A backend MAY call it in Snapshot for every value
	// it writes (KindMap: the value of one user key; other kinds: the
	// key's value, for KindList the whole list); it leaves the live state
	// alone. It must not modify v. The heap and Pebble backends honour it
	// in Snapshot, and the Pebble backend, whose SnapshotFiles and
	// Checkpoint are its database files, also applies it to its live state,
	// a bounded number of values per such snapshot
	// (pebblestate.Options.SnapshotCleanupEntries), which is sound because
	// what it drops (expired TTL state) is never returned by reads.
	// Compatible ignores it, and a backend keeps the filter of the
	// descriptor a table was first asked for with.
	SnapshotFilter func(v any) (any, bool)
}

// Validate reports a descriptor that no backend can accept.
func (d Descriptor) Validate() error {
	switch {
	case d.Name == "":
		return fmt.Errorf("statebackend: state descriptor without a name; give every state a name unique within the operator")
	case !d.Kind.Valid():
		return fmt.Errorf("statebackend: state %q: invalid kind %d", d.Name, d.Kind)
	case d.Codec == nil:
		return fmt.Errorf("statebackend: state %q: no codec; pass one of the statebackend codecs or your own", d.Name)
	case d.Kind == KindMap && d.UserKeyCodec == nil:
		return fmt.Errorf("statebackend: map state %q: no user-key codec", d.Name)
	case d.Kind != KindMap && d.UserKeyCodec != nil:
		return fmt.Errorf("statebackend: %s state %q: a user-key codec is only for map state", d.Kind, d.Name)
	}
	return nil
}

// Compatible returns nil if a table registered as d may be asked for again
// as e, and otherwise an error wrapping ErrConflict that names both.
func (d Descriptor) Compatible(e Descriptor) error {
	if d.Kind == e.Kind && d.Codec.ID() == e.Codec.ID() && codecID(d.UserKeyCodec) == codecID(e.UserKeyCodec) {
		return nil
	}
	return fmt.Errorf("%w: state %q is registered as %s and requested as %s; use another name for the new state",
		ErrConflict, d.Name, d.describe(), e.describe())
}

func (d Descriptor) describe() string {
	if d.Kind == KindMap {
		return fmt.Sprintf("map state (keys %s, values %s)", codecID(d.UserKeyCodec), codecID(d.Codec))
	}
	return fmt.Sprintf("%s state (codec %s)", d.Kind, codecID(d.Codec))
}

func codecID(c ValueCodec) string {
	if c == nil {
		return "none"
	}
	return c.ID()
}

// ValueCodec is an untyped codec: the form of Codec that backends see.
type ValueCodec interface {
	// ID names the codec and the type it encodes (for example "int64" or
	// "json:main.Event"); two codecs with the same ID must be
	// interchangeable. Backends compare IDs to detect conflicting
	// descriptors.
	ID() string
	// AppendValue appends the encoding of v (of the codec's type) to dst.
	AppendValue(dst []byte, v any) ([]byte, error)
	// DecodeValue decodes exactly src. The result must not alias src.
	DecodeValue(src []byte) (any, error)
}

// Table is one named piece of keyed state of a backend. Every call operates
// on the backend's current key (Backend.SetCurrentKey). For KindMap tables,
// userKey is the encoded user key; other kinds ignore it and hold at most
// one value per key.
//
// Values are the typed values of the descriptor's codec (for KindList, a
// slice of elements). A backend may keep the value given to Put and return it
// from Get (the heap backend does), so callers must treat values as
// immutable once Put, and must not change what Get returns.
type Table interface {
	Descriptor() Descriptor
	Get(userKey []byte) (any, bool)
	Put(userKey []byte, v any)
	// Delete removes the value (KindMap: the value under userKey).
	Delete(userKey []byte)
	// Range calls fn for every value of the current key (KindMap: every
	// user key, in no particular order; other kinds: the value, with a nil
	// user key) until fn returns false. The userKey slice is valid only
	// during the call. fn may Delete the entry it is given or Put a new
	// value under its user key, but must not Put new user keys.
	Range(fn func(userKey []byte, v any) bool)
	// Clear removes all state of the current key in this table.
	Clear()
}

// TimerService holds the timers of a backend's keys, in two domains:
// event-time timers fire as the watermark passes them (AdvanceWatermark),
// processing-time timers as the wall clock does (AdvanceProcessingTime,
// which the operator calls from stream.ProcessingTimeAware's
// OnProcessingTime). A timer belongs to the current key (and its key group)
// when it is registered; registering the same (key, timestamp) twice in one
// domain keeps one timer, while the same (key, timestamp) in both domains
// is two timers. Timers of both domains are part of Backend.Snapshot.
type TimerService interface {
	// RegisterEventTimeTimer registers a timer at ts (Unix ms, or whatever
	// unit event time has) for the current key. A timer at or below the
	// current watermark fires at the next AdvanceWatermark.
	RegisterEventTimeTimer(ts int64)
	// DeleteEventTimeTimer removes the current key's timer at ts, if any.
	DeleteEventTimeTimer(ts int64)
	// CurrentWatermark is the highest watermark passed to AdvanceWatermark
	// (stream.MinWatermark before the first call and after a restore).
	CurrentWatermark() int64
	// AdvanceWatermark raises the watermark to wm (it never goes down) and
	// fires, in timestamp order, every timer at or below it: it removes the
	// timer, sets the current key to the timer's key and calls fire. Timers
	// registered by fire at or below the watermark fire in the same call.
	// The key slice is valid only during the call. If fire returns an error,
	// AdvanceWatermark stops and returns it; the timers not yet fired stay.
	// The current key is restored when AdvanceWatermark returns.
	AdvanceWatermark(wm int64, fire func(key []byte, keyGroup int, ts int64) error) error

	// RegisterProcessingTimeTimer registers a processing-time timer at ts
	// (Unix ms of the task's clock) for the current key. It fires at the
	// first AdvanceProcessingTime whose time is at or above ts, so a timer
	// registered in the past fires at the next one.
	RegisterProcessingTimeTimer(ts int64)
	// DeleteProcessingTimeTimer removes the current key's processing-time
	// timer at ts, if any.
	DeleteProcessingTimeTimer(ts int64)
	// NextProcessingTime returns the timestamp of the earliest
	// processing-time timer, and false if there is none. The task runtime
	// asks it after every batch to know when to call the operator, so it
	// is cheap: O(1) or close, except that a backend may read the first
	// timers of its key groups from disk once after it was opened from a
	// checkpoint.
	NextProcessingTime() (ts int64, ok bool)
	// AdvanceProcessingTime fires every processing-time timer at or below
	// now, in (timestamp, key group, key) order, with the contract of
	// AdvanceWatermark: it removes the timer, sets the current key to the
	// timer's key and calls fire; timers registered by fire at or below
	// now fire in the same call; the key slice is valid only during the
	// call; an error from fire stops it and is returned, the timers not yet
	// fired staying; the current key is restored when it returns. Unlike
	// the watermark, processing time is not kept: a call with an earlier
	// now than the last one just fires nothing more.
	AdvanceProcessingTime(now int64, fire func(key []byte, keyGroup int, ts int64) error) error
}
