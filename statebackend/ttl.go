package statebackend

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// State time-to-live (TTL). It lives entirely in the typed-state layer, so it
// works on every backend: a TTL state's table holds the user's values wrapped
// with the time they were last written (or read), and the handles hide what
// has expired.

// TTLUpdate says which accesses restart a value's time to live.
type TTLUpdate uint8

const (
	// UpdateOnCreateAndWrite restarts it when the value is written
	// (ValueState.Update, ListState.Add, MapState.Put, ReducingState.Add,
	// ...). The default.
	UpdateOnCreateAndWrite TTLUpdate = iota
	// UpdateOnReadAndWrite also restarts it when the value is read
	// (Value, Get, Contains, Range, but not IsEmpty).
	UpdateOnReadAndWrite
)

func (u TTLUpdate) String() string {
	switch u {
	case UpdateOnCreateAndWrite:
		return "on create and write"
	case UpdateOnReadAndWrite:
		return "on read and write"
	}
	return fmt.Sprintf("TTLUpdate(%d)", uint8(u))
}

// TTLVisibility says whether expired values that are still stored may be
// returned.
type TTLVisibility uint8

const (
	// NeverReturnExpired hides a value as soon as it has expired, whether
	// or not it has been removed yet. It is the only visibility Weir
	// supports: returning expired values until cleanup removes them is not
	// offered, because what that returns would depend on the backend and on
	// when cleanup ran.
	NeverReturnExpired TTLVisibility = iota
)

// DefaultCleanupPerAccess is the CleanupPerAccess of DefaultTTLConfig. A few
// keys keep the cost of an access small and bounded; since an access touches
// one key, checking more than one lets cleanup keep up with a stream of ever
// new keys.
const DefaultCleanupPerAccess = 5

// TTLConfig configures state time-to-live; pass it to a Get...State function
// with WithTTL. A value (a list element, a map entry) expires TTL after it
// was last written, or, with UpdateOnReadAndWrite, last read or written; from
// then on it is never returned, as if it had been removed. Time is the
// processing time of the task (Clock), never event time.
//
// Expired state is removed:
//   - when it is read (lazily): a read that finds an expired value deletes
//     it (for a list, the expired elements);
//   - incrementally: every access of the state also checks up to
//     CleanupPerAccess keys of the same state table for expired state and
//     removes it, with a cursor that goes round all keys of the subtask's key
//     groups. State of keys that are never touched again is removed this way
//     over time, as long as the state is accessed at all;
//   - from snapshots, by backends that honour Descriptor.SnapshotFilter:
//     both leave expired values out of full snapshots (not removing them
//     from the live state), and the Pebble backend also removes them from
//     its live state and incremental snapshots, a bounded number of values
//     per snapshot (pebblestate.Options.SnapshotCleanupEntries).
//
// Nothing else removes it: the state of a table that is no longer accessed
// at all stays (on the heap backend, until the job restores a checkpoint
// taken after it expired).
//
// The configuration belongs to the handle and is not stored with the state:
// a job may restore with another TTL, which then applies to the restored
// values from the time they were last accessed. Switching TTL on or off for
// a state is not possible on restore (see WithTTL).
type TTLConfig struct {
	// TTL is how long a value lives after its last access (see Update);
	// it is used in whole milliseconds and must be at least 1ms.
	TTL time.Duration
	// Update says which accesses restart the TTL. Default (zero):
	// UpdateOnCreateAndWrite.
	Update TTLUpdate
	// Visibility must be NeverReturnExpired (the zero value).
	Visibility TTLVisibility
	// Clock returns the current processing time in Unix milliseconds. nil
	// means the system clock (time.Now). Tests inject a manual clock; it
	// should not go backwards, or expired values may come back to life.
	Clock func() int64
	// CleanupPerAccess is how many keys of the state table every access
	// of the state checks for expired state (incremental cleanup); 0
	// disables it. Each key counts once, whatever its state (for map
	// state, all its entries), and so does each key group visited. A
	// backend's keys are listed one key group at a time (Backend.Keys), so
	// the work is CleanupPerAccess keys per access on average, and the
	// access that starts a key group lists all its keys. DefaultTTLConfig
	// sets DefaultCleanupPerAccess.
	CleanupPerAccess int
}

// DefaultTTLConfig returns a configuration with the given TTL, updates on
// create and write, the system clock and DefaultCleanupPerAccess.
func DefaultTTLConfig(ttl time.Duration) TTLConfig {
	return TTLConfig{TTL: ttl, CleanupPerAccess: DefaultCleanupPerAccess}
}

// Validate reports a configuration that cannot be used.
func (c TTLConfig) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("statebackend: %w", err)
	}
	return nil
}

func (c TTLConfig) validate() error {
	switch {
	case c.TTL < time.Millisecond:
		return fmt.Errorf("TTL %v is below the resolution of 1ms; give a TTL of at least 1ms", c.TTL)
	case c.Update != UpdateOnCreateAndWrite && c.Update != UpdateOnReadAndWrite:
		return fmt.Errorf("unknown TTL update type %d; use UpdateOnCreateAndWrite or UpdateOnReadAndWrite", c.Update)
	case c.Visibility != NeverReturnExpired:
		return fmt.Errorf("TTL visibility %d is not supported; only NeverReturnExpired is", c.Visibility)
	case c.CleanupPerAccess < 0:
		return fmt.Errorf("TTL CleanupPerAccess %d is negative; use 0 to disable incremental cleanup", c.CleanupPerAccess)
	}
	return nil
}

// StateOption changes how a Get...State function makes its state; see
// WithTTL.
type StateOption func(*stateOptions)

type stateOptions struct {
	ttl *TTLConfig
}

// WithTTL gives the state a time to live (see TTLConfig). Its table then
// stores every value (list element, map value) as the byte 0xf7, the time
// of its last access as 8 bytes big endian (Unix ms), and the codec's
// encoding of the value, under a codec whose ID is "ttl(" + the codec's ID +
// ")" (for a list, "list:ttl(...)"). So a state name is either TTL state or
// not:
//   - in one backend, asking for it the other way fails with ErrConflict;
//   - asking with WithTTL for state restored from a checkpoint where it had
//     no TTL fails with an error that wraps ErrConflict and names the state;
//   - asking without WithTTL for restored TTL state fails, with an error
//     naming the state, only if the codec rejects the TTL encoding: every
//     built-in codec does except StringCodec and BytesCodec, which accept any
//     bytes and would return the header as part of the value. Snapshot
//     chunks do not record codec IDs, so the backend cannot tell.
//
// To switch TTL on or off for existing state, give the state a new name.
func WithTTL(cfg TTLConfig) StateOption {
	return func(o *stateOptions) { o.ttl = &cfg }
}

func applyOptions(kind Kind, name string, opts []StateOption) (stateOptions, error) {
	var o stateOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.ttl != nil {
		if err := o.ttl.validate(); err != nil {
			return o, fmt.Errorf("statebackend: %s state %q: %w", kind, name, err)
		}
	}
	return o, nil
}

// ttlEntry is a value of TTL state as its table holds it: the user's value
// and the time of its last access that counts (see TTLUpdate), in Unix ms.
type ttlEntry[T any] struct {
	v  T
	ts int64
}

// ttlTag starts the encoding of every TTL value. 0xf7 never starts valid
// UTF-8, so it never starts a JSON or (UTF-8) string encoding, which makes
// non-TTL state restored as TTL state fail to decode.
const ttlTag = 0xf7

// ttlCodec encodes a ttlEntry as the tag byte 0xf7, the timestamp as 8 bytes
// big endian (two's complement), and the inner codec's encoding of the
// value.
type ttlCodec[T any] struct {
	inner Codec[T]
	id    string
}

func newTTLCodec[T any](c Codec[T]) ttlCodec[T] {
	return ttlCodec[T]{inner: c, id: "ttl(" + typedCodecID(c) + ")"}
}

func (c ttlCodec[T]) ID() string { return c.id }

func (c ttlCodec[T]) Append(dst []byte, e ttlEntry[T]) []byte {
	dst = append(dst, ttlTag)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ts))
	return c.inner.Append(dst, e.v)
}

// TryAppend makes ttlCodec a CheckedCodec whatever its inner codec is.
func (c ttlCodec[T]) TryAppend(dst []byte, e ttlEntry[T]) ([]byte, error) {
	cc, ok := c.inner.(CheckedCodec[T])
	if !ok {
		return c.Append(dst, e), nil
	}
	at := len(dst)
	dst = append(dst, ttlTag)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ts))
	out, err := cc.TryAppend(dst, e.v)
	if err != nil {
		return dst[:at], err
	}
	return out, nil
}

// errNotTTL is wrapped by the decode error of a value without the TTL
// encoding.
var errNotTTL = fmt.Errorf("%w: the state was written without TTL; ask for it without WithTTL, or use a new name for the TTL state", ErrConflict)

func (c ttlCodec[T]) Decode(src []byte) (ttlEntry[T], error) {
	if len(src) < 9 || src[0] != ttlTag {
		return ttlEntry[T]{}, fmt.Errorf("%s codec: no TTL header in %d bytes: %w", c.id, len(src), errNotTTL)
	}
	v, err := c.inner.Decode(src[9:])
	if err != nil {
		return ttlEntry[T]{}, fmt.Errorf("%s codec: %w", c.id, err)
	}
	return ttlEntry[T]{v: v, ts: int64(binary.BigEndian.Uint64(src[1:9]))}, nil
}

// ttlCore is what every TTL state handle has: its table, the configuration
// and the cleanup cursor.
type ttlCore struct {
	t         Table
	ttl       int64 // ms, > 0
	onRead    bool  // reads restart the TTL
	clock     func() int64
	cleanup   ttlCleanup
	purgeFunc func(now int64) // removes the current key's expired state
}

func systemClock() int64 { return time.Now().UnixMilli() }

// openTTL asks b for the table of d (whose codec must be a ttlCodec or a
// list of one), with a snapshot filter built from filter, and returns the
// core of a handle. purge removes the current key's expired state of the
// table.
func openTTL(b Backend, cfg *TTLConfig, d Descriptor,
	filter func(c *ttlCore, v any, now int64) (any, bool),
	purge func(c *ttlCore, now int64),
) (*ttlCore, error) {
	c := &ttlCore{
		ttl:    cfg.TTL.Milliseconds(),
		onRead: cfg.Update == UpdateOnReadAndWrite,
		clock:  cfg.Clock,
	}
	if c.clock == nil {
		c.clock = systemClock
	}
	d.SnapshotFilter = func(v any) (any, bool) { return filter(c, v, c.clock()) }
	t, err := b.Table(d)
	if err != nil {
		return nil, err
	}
	c.t = t
	c.purgeFunc = func(now int64) { purge(c, now) }
	c.cleanup = ttlCleanup{b: b, name: d.Name, per: cfg.CleanupPerAccess}
	return c, nil
}

// expired reports whether a value last accessed at ts has expired at now:
// when ts+TTL (saturating) is at or before now.
func (c *ttlCore) expired(ts, now int64) bool {
	exp := ts + c.ttl
	if exp < ts {
		exp = math.MaxInt64
	}
	return exp <= now
}

// access is called first by every method of a TTL handle: it reads the
// clock and runs incremental cleanup.
func (c *ttlCore) access() int64 {
	now := c.clock()
	c.cleanup.run(now, c.purgeFunc)
	return now
}

// ttlGet returns the live value under uk of the current key: it deletes an
// expired one and restamps a live one if reads restart the TTL.
func ttlGet[T any](c *ttlCore, uk []byte, now int64) (T, bool) {
	v, ok := c.t.Get(uk)
	if !ok {
		var zero T
		return zero, false
	}
	e := v.(ttlEntry[T])
	if c.expired(e.ts, now) {
		c.t.Delete(uk)
		var zero T
		return zero, false
	}
	if c.onRead && e.ts != now {
		c.t.Put(uk, ttlEntry[T]{e.v, now})
	}
	return e.v, true
}

// filterEntry is the snapshot filter of a single-value or map table.
func filterEntry[T any](c *ttlCore, v any, now int64) (any, bool) {
	return v, !c.expired(v.(ttlEntry[T]).ts, now)
}

// filterList is the snapshot filter of a list table: the live elements.
func filterList[T any](c *ttlCore, v any, now int64) (any, bool) {
	live, _ := liveElements(c, v.([]ttlEntry[T]), now, false)
	return live, len(live) > 0
}

// liveElements returns the live elements of l, restamped with now if
// restamp, and whether that changed anything: l itself if not, else a new
// slice.
func liveElements[T any](c *ttlCore, l []ttlEntry[T], now int64, restamp bool) ([]ttlEntry[T], bool) {
	var out []ttlEntry[T] // nil while l is unchanged
	for i, e := range l {
		dead := c.expired(e.ts, now)
		if out == nil && (dead || restamp && e.ts != now) {
			out = make([]ttlEntry[T], i, len(l))
			copy(out, l[:i])
			if restamp {
				for j := range out {
					out[j].ts = now
				}
			}
		}
		if out != nil && !dead {
			if restamp {
				e.ts = now
			}
			out = append(out, e)
		}
	}
	if out == nil {
		return l, false
	}
	return out, true
}

// purgeEntry removes the current key's value if it has expired.
func purgeEntry[T any](c *ttlCore, now int64) {
	if v, ok := c.t.Get(nil); ok && c.expired(v.(ttlEntry[T]).ts, now) {
		c.t.Delete(nil)
	}
}

// purgeList removes the expired elements of the current key's list.
func purgeList[T any](c *ttlCore, now int64) {
	v, ok := c.t.Get(nil)
	if !ok {
		return
	}
	live, changed := liveElements(c, v.([]ttlEntry[T]), now, false)
	switch {
	case len(live) == 0:
		c.t.Delete(nil)
	case changed:
		c.t.Put(nil, live)
	}
}

// purgeMap removes the expired entries of the current key's map.
func purgeMap[V any](c *ttlCore, now int64) {
	c.t.Range(func(uk []byte, v any) bool {
		if c.expired(v.(ttlEntry[V]).ts, now) {
			c.t.Delete(uk)
		}
		return true
	})
}

// ttlCleanup is the incremental cleanup of one handle: a cursor over the
// keys of the table, key group by key group round the backend's range.
// Backend.Keys cannot resume, so the keys of the cursor's key group are
// listed in one go and then checked a few per access. A unit of work is a
// key checked or a key group listed.
type ttlCleanup struct {
	b       Backend
	name    string
	per     int      // units of work per access
	kg      int      // key group of keys
	started bool     // kg is set
	keys    [][]byte // keys of kg not checked yet, checked from the end
}

// run does up to per units of work, calling purge with each key to check
// made current, and then restores the current key. It skips the current
// key: its own accesses clean it, and it may be in the middle of a Range.
func (c *ttlCleanup) run(now int64, purge func(now int64)) {
	if c.per <= 0 {
		return
	}
	cur, curKG := c.b.CurrentKey()
	moved := false
	for range c.per {
		if len(c.keys) == 0 {
			c.next()
			continue
		}
		k := c.keys[len(c.keys)-1]
		c.keys[len(c.keys)-1] = nil
		c.keys = c.keys[:len(c.keys)-1]
		if c.kg == curKG && bytes.Equal(k, cur) {
			continue
		}
		c.b.SetCurrentKey(k, c.kg)
		moved = true
		purge(now)
	}
	if moved {
		c.b.SetCurrentKey(cur, curKG)
	}
}

// next moves the cursor to the next key group and lists its keys.
func (c *ttlCleanup) next() {
	r := c.b.KeyGroups()
	if !c.started || c.kg >= r.End {
		c.kg, c.started = r.Start, true
	} else {
		c.kg++
	}
	if cap(c.keys) > 1024 {
		c.keys = nil // a large key group was listed: let it go
	}
	c.b.Keys(c.name, c.kg, func(k []byte) bool {
		c.keys = append(c.keys, k)
		return true
	})
}

// The TTL state handles. Each method calls access first.

type ttlValueState[T any] struct{ c *ttlCore }

func (s ttlValueState[T]) Value() (T, bool) {
	now := s.c.access()
	return ttlGet[T](s.c, nil, now)
}

func (s ttlValueState[T]) Update(v T) {
	now := s.c.access()
	s.c.t.Put(nil, ttlEntry[T]{v, now})
}

func (s ttlValueState[T]) Clear() {
	s.c.access()
	s.c.t.Delete(nil)
}

// ttlListState holds []ttlEntry[T]: every element has its own TTL.
type ttlListState[T any] struct{ c *ttlCore }

func (s ttlListState[T]) stored() []ttlEntry[T] {
	v, ok := s.c.t.Get(nil)
	if !ok {
		return nil
	}
	return v.([]ttlEntry[T])
}

// Get returns a new slice of the live elements, and writes back the list
// if it dropped expired elements or restamped live ones.
func (s ttlListState[T]) Get() []T {
	now := s.c.access()
	l := s.stored()
	live, changed := liveElements(s.c, l, now, s.c.onRead)
	switch {
	case len(live) == 0:
		if len(l) > 0 {
			s.c.t.Delete(nil)
		}
		return nil
	case changed:
		s.c.t.Put(nil, live)
	}
	out := make([]T, len(live))
	for i, e := range live {
		out[i] = e.v
	}
	return out
}

// Add appends in place when the stored slice has spare capacity: the
// stored slice is never handed out (Get copies the values), and new slices
// are written whole. Expired elements stay until a read or cleanup.
func (s ttlListState[T]) Add(v T) {
	now := s.c.access()
	s.c.t.Put(nil, append(s.stored(), ttlEntry[T]{v, now}))
}

func (s ttlListState[T]) AddAll(vs []T) {
	now := s.c.access()
	if len(vs) == 0 {
		return
	}
	l := s.stored()
	for _, v := range vs {
		l = append(l, ttlEntry[T]{v, now})
	}
	s.c.t.Put(nil, l)
}

func (s ttlListState[T]) Update(vs []T) {
	now := s.c.access()
	if len(vs) == 0 {
		s.c.t.Delete(nil)
		return
	}
	l := make([]ttlEntry[T], len(vs))
	for i, v := range vs {
		l[i] = ttlEntry[T]{v, now}
	}
	s.c.t.Put(nil, l)
}

func (s ttlListState[T]) Clear() {
	s.c.access()
	s.c.t.Delete(nil)
}

// ttlMapState holds a ttlEntry[V] per user key: every entry has its own
// TTL.
type ttlMapState[K comparable, V any] struct {
	c       *ttlCore
	kc      Codec[K]
	scratch []byte
}

func (s *ttlMapState[K, V]) key(k K) []byte {
	s.scratch = s.kc.Append(s.scratch[:0], k)
	return s.scratch
}

func (s *ttlMapState[K, V]) Get(k K) (V, bool) {
	now := s.c.access()
	return ttlGet[V](s.c, s.key(k), now)
}

func (s *ttlMapState[K, V]) Put(k K, v V) {
	now := s.c.access()
	s.c.t.Put(s.key(k), ttlEntry[V]{v, now})
}

func (s *ttlMapState[K, V]) Remove(k K) {
	s.c.access()
	s.c.t.Delete(s.key(k))
}

// Contains is a read: with UpdateOnReadAndWrite it restarts the entry's TTL.
func (s *ttlMapState[K, V]) Contains(k K) bool {
	now := s.c.access()
	_, ok := ttlGet[V](s.c, s.key(k), now)
	return ok
}

func (s *ttlMapState[K, V]) Clear() {
	s.c.access()
	s.c.t.Clear()
}

// IsEmpty deletes the expired entries it meets before the first live one;
// it is not a read of that entry.
func (s *ttlMapState[K, V]) IsEmpty() bool {
	now := s.c.access()
	empty := true
	s.c.t.Range(func(uk []byte, v any) bool {
		if s.c.expired(v.(ttlEntry[V]).ts, now) {
			s.c.t.Delete(uk)
			return true
		}
		empty = false
		return false
	})
	return empty
}

// Range deletes the expired entries and, with UpdateOnReadAndWrite,
// restamps the live ones it hands to fn. It panics if a user key does not
// decode, as MapState.Range does.
func (s *ttlMapState[K, V]) Range(fn func(K, V) bool) {
	now := s.c.access()
	s.c.t.Range(func(uk []byte, v any) bool {
		e := v.(ttlEntry[V])
		if s.c.expired(e.ts, now) {
			s.c.t.Delete(uk)
			return true
		}
		if s.c.onRead && e.ts != now {
			s.c.t.Put(uk, ttlEntry[V]{e.v, now})
		}
		k, err := s.kc.Decode(uk)
		if err != nil {
			panic(fmt.Sprintf("statebackend: map state %q: user key does not decode: %v", s.c.t.Descriptor().Name, err))
		}
		return fn(k, e.v)
	})
}

type ttlReducingState[T any] struct {
	c      *ttlCore
	reduce func(a, b T) T
}

func (s ttlReducingState[T]) Get() (T, bool) {
	now := s.c.access()
	return ttlGet[T](s.c, nil, now)
}

// Add reduces v into the live value; an expired one is dropped, as if it
// had been cleared.
func (s ttlReducingState[T]) Add(v T) {
	now := s.c.access()
	if cur, ok := s.c.t.Get(nil); ok {
		if e := cur.(ttlEntry[T]); !s.c.expired(e.ts, now) {
			v = s.reduce(e.v, v)
		}
	}
	s.c.t.Put(nil, ttlEntry[T]{v, now})
}

func (s ttlReducingState[T]) Clear() {
	s.c.access()
	s.c.t.Delete(nil)
}

type ttlAggregatingState[IN, ACC, OUT any] struct {
	c   *ttlCore
	agg AggregateFunction[IN, ACC, OUT]
}

func (s ttlAggregatingState[IN, ACC, OUT]) Get() (OUT, bool) {
	now := s.c.access()
	acc, ok := ttlGet[ACC](s.c, nil, now)
	if !ok {
		var zero OUT
		return zero, false
	}
	return s.agg.Result(acc), true
}

// Add adds v to the live accumulator; an expired one is dropped and a new
// one created, as if it had been cleared.
func (s ttlAggregatingState[IN, ACC, OUT]) Add(v IN) {
	now := s.c.access()
	var acc ACC
	if cur, ok := s.c.t.Get(nil); ok && !s.c.expired(cur.(ttlEntry[ACC]).ts, now) {
		acc = cur.(ttlEntry[ACC]).v
	} else {
		acc = s.agg.CreateAccumulator()
	}
	s.c.t.Put(nil, ttlEntry[ACC]{s.agg.Add(v, acc), now})
}

func (s ttlAggregatingState[IN, ACC, OUT]) Clear() {
	s.c.access()
	s.c.t.Delete(nil)
}

// Compile-time checks that the TTL handles implement the state interfaces.
var (
	_ ValueState[int]             = ttlValueState[int]{}
	_ ListState[int]              = ttlListState[int]{}
	_ MapState[int, int]          = (*ttlMapState[int, int])(nil)
	_ ReducingState[int]          = ttlReducingState[int]{}
	_ AggregatingState[int, int]  = ttlAggregatingState[int, int, int]{}
	_ CheckedCodec[ttlEntry[int]] = ttlCodec[int]{}
	_ Identified                  = ttlCodec[int]{}
)
