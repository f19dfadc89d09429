package statebackend

import "fmt"

// ValueState holds one value per key. Obtain it with GetValueState; it acts
// on the backend's current key.
type ValueState[T any] interface {
	// Value returns the key's value and whether it has one.
	Value() (T, bool)
	// Update sets the key's value.
	Update(v T)
	// Clear removes the key's value.
	Clear()
}

// ListState holds a list per key.
type ListState[T any] interface {
	// Get returns the key's list (nil if empty). The slice belongs to the
	// state: do not modify its elements. Appending to it is safe (its
	// capacity is its length) and does not change the state.
	Get() []T
	Add(v T)
	AddAll(vs []T)
	// Update replaces the list with a copy of vs; an empty vs clears it.
	Update(vs []T)
	Clear()
}

// MapState holds a map per key.
type MapState[K comparable, V any] interface {
	Get(k K) (V, bool)
	Put(k K, v V)
	Remove(k K)
	Contains(k K) bool
	// Range calls fn for every entry, in no particular order, until fn
	// returns false. fn may Remove the entry it is given.
	Range(fn func(K, V) bool)
	IsEmpty() bool
	Clear()
}

// ReducingState folds every added value into one with a reduce function.
type ReducingState[T any] interface {
	// Get returns the reduction of the values added since the last Clear,
	// and false if there were none.
	Get() (T, bool)
	Add(v T)
	Clear()
}

// AggregatingState folds added values into an accumulator with an
// AggregateFunction.
type AggregatingState[IN, OUT any] interface {
	// Get returns the result of the accumulator, and false if nothing was
	// added since the last Clear.
	Get() (OUT, bool)
	Add(v IN)
	Clear()
}

// AggregateFunction is the accumulator logic of AggregatingState (and of
// window aggregations). Add and Merge may modify and return their
// accumulator arguments.
type AggregateFunction[IN, ACC, OUT any] interface {
	CreateAccumulator() ACC
	Add(v IN, acc ACC) ACC
	Result(acc ACC) OUT
	Merge(a, b ACC) ACC
}

// The state handles below hold no data: they are a typed view of a Table.
// Table values are stored as the typed values themselves (T, []T, ACC), so a
// type assertion is all a read costs on the heap backend. State with TTL
// (WithTTL) stores them wrapped with a timestamp: see ttl.go.

// GetValueState returns the value state called name of b. Options: WithTTL.
func GetValueState[T any](b Backend, name string, c Codec[T], opts ...StateOption) (ValueState[T], error) {
	o, err := applyOptions(KindValue, name, opts)
	if err != nil {
		return nil, err
	}
	if o.ttl != nil {
		tc, err := openTTL(b, o.ttl, Descriptor{Name: name, Kind: KindValue, Codec: Untyped[ttlEntry[T]](newTTLCodec(c))},
			filterEntry[T], purgeEntry[T])
		if err != nil {
			return nil, err
		}
		return ttlValueState[T]{tc}, nil
	}
	t, err := b.Table(Descriptor{Name: name, Kind: KindValue, Codec: Untyped(c)})
	if err != nil {
		return nil, err
	}
	if et, ok := t.(EncodedTable); ok && isScalar[T]() {
		return &encodedValueState[T]{t: et, c: c}, nil
	}
	return valueState[T]{t}, nil
}

// EncodedTable is implemented by a Table that keeps values encoded and,
// for fixed-width scalars (int64, float64, bool), decodes them on every
// Get instead of keeping them decoded (the Pebble backend): value state of
// such a type reads and writes the encodings itself with its typed codec,
// which spares boxing each value in an interface on both Get and Put.
type EncodedTable interface {
	Table
	// GetEncoded returns the current key's encoded value (value state),
	// valid until the next call on the backend.
	GetEncoded() ([]byte, bool)
	// PutEncoded sets the current key's value (value state) to enc, which
	// the table's codec wrote.
	PutEncoded(enc []byte)
}

// isScalar reports whether T is a fixed-width scalar that an EncodedTable
// does not keep decoded.
func isScalar[T any]() bool {
	switch any(*new(T)).(type) {
	case int64, float64, bool:
		return true
	}
	return false
}

// encodedValueState is value state of a scalar on an EncodedTable.
type encodedValueState[T any] struct {
	t   EncodedTable
	c   Codec[T]
	buf []byte
}

func (s *encodedValueState[T]) Value() (T, bool) {
	enc, ok := s.t.GetEncoded()
	if !ok {
		var zero T
		return zero, false
	}
	v, err := s.c.Decode(enc)
	if err != nil {
		// The table checked its stored values against this codec when it
		// was asked for, and writes only the codec's encodings.
		panic(fmt.Sprintf("statebackend: value state %q: stored value does not decode: %v", s.t.Descriptor().Name, err))
	}
	return v, true
}

func (s *encodedValueState[T]) Update(v T) {
	s.buf = s.c.Append(s.buf[:0], v)
	s.t.PutEncoded(s.buf)
}

func (s *encodedValueState[T]) Clear() { s.t.Delete(nil) }

type valueState[T any] struct{ t Table }

func (s valueState[T]) Value() (T, bool) {
	v, ok := s.t.Get(nil)
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}
func (s valueState[T]) Update(v T) { s.t.Put(nil, v) }
func (s valueState[T]) Clear()     { s.t.Delete(nil) }

// GetListState returns the list state called name of b; c encodes one
// element. Options: WithTTL (each element expires on its own).
func GetListState[T any](b Backend, name string, c Codec[T], opts ...StateOption) (ListState[T], error) {
	o, err := applyOptions(KindList, name, opts)
	if err != nil {
		return nil, err
	}
	if o.ttl != nil {
		tc, err := openTTL(b, o.ttl, Descriptor{Name: name, Kind: KindList, Codec: ListCodec[ttlEntry[T]](newTTLCodec(c))},
			filterList[T], purgeList[T])
		if err != nil {
			return nil, err
		}
		return ttlListState[T]{tc}, nil
	}
	t, err := b.Table(Descriptor{Name: name, Kind: KindList, Codec: ListCodec(c)})
	if err != nil {
		return nil, err
	}
	return listState[T]{t}, nil
}

type listState[T any] struct{ t Table }

func (s listState[T]) list() []T {
	v, ok := s.t.Get(nil)
	if !ok {
		return nil
	}
	return v.([]T)
}

func (s listState[T]) Get() []T {
	l := s.list()
	return l[:len(l):len(l)]
}

// Add appends in place when the stored slice has spare capacity: every slice
// handed out by Get has its capacity cut to its length, so no caller sees
// the new element appear.
func (s listState[T]) Add(v T) { s.t.Put(nil, append(s.list(), v)) }

func (s listState[T]) AddAll(vs []T) {
	if len(vs) == 0 {
		return
	}
	s.t.Put(nil, append(s.list(), vs...))
}

func (s listState[T]) Update(vs []T) {
	if len(vs) == 0 {
		s.t.Delete(nil)
		return
	}
	s.t.Put(nil, append([]T(nil), vs...))
}

func (s listState[T]) Clear() { s.t.Delete(nil) }

// GetMapState returns the map state called name of b. Options: WithTTL
// (each entry expires on its own).
func GetMapState[K comparable, V any](b Backend, name string, kc Codec[K], vc Codec[V], opts ...StateOption) (MapState[K, V], error) {
	o, err := applyOptions(KindMap, name, opts)
	if err != nil {
		return nil, err
	}
	if o.ttl != nil {
		tc, err := openTTL(b, o.ttl, Descriptor{Name: name, Kind: KindMap, Codec: Untyped[ttlEntry[V]](newTTLCodec(vc)), UserKeyCodec: Untyped(kc)},
			filterEntry[V], purgeMap[V])
		if err != nil {
			return nil, err
		}
		return &ttlMapState[K, V]{c: tc, kc: kc}, nil
	}
	t, err := b.Table(Descriptor{Name: name, Kind: KindMap, Codec: Untyped(vc), UserKeyCodec: Untyped(kc)})
	if err != nil {
		return nil, err
	}
	return &mapState[K, V]{t: t, kc: kc}, nil
}

type mapState[K comparable, V any] struct {
	t       Table
	kc      Codec[K]
	scratch []byte // encoded user key of the current call
}

func (s *mapState[K, V]) key(k K) []byte {
	s.scratch = s.kc.Append(s.scratch[:0], k)
	return s.scratch
}

func (s *mapState[K, V]) Get(k K) (V, bool) {
	v, ok := s.t.Get(s.key(k))
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

func (s *mapState[K, V]) Put(k K, v V)      { s.t.Put(s.key(k), v) }
func (s *mapState[K, V]) Remove(k K)        { s.t.Delete(s.key(k)) }
func (s *mapState[K, V]) Contains(k K) bool { _, ok := s.t.Get(s.key(k)); return ok }
func (s *mapState[K, V]) Clear()            { s.t.Clear() }

func (s *mapState[K, V]) IsEmpty() bool {
	empty := true
	s.t.Range(func([]byte, any) bool { empty = false; return false })
	return empty
}

// Range panics if a stored user key does not decode: user keys are written
// by this codec, and restored ones are validated when the table is first
// asked for, so that is a bug in the codec.
func (s *mapState[K, V]) Range(fn func(K, V) bool) {
	s.t.Range(func(uk []byte, v any) bool {
		k, err := s.kc.Decode(uk)
		if err != nil {
			panic(fmt.Sprintf("statebackend: map state %q: user key does not decode: %v", s.t.Descriptor().Name, err))
		}
		return fn(k, v.(V))
	})
}

// GetReducingState returns the reducing state called name of b. Options:
// WithTTL.
func GetReducingState[T any](b Backend, name string, c Codec[T], reduce func(a, b T) T, opts ...StateOption) (ReducingState[T], error) {
	if reduce == nil {
		return nil, fmt.Errorf("statebackend: reducing state %q: nil reduce function", name)
	}
	o, err := applyOptions(KindReducing, name, opts)
	if err != nil {
		return nil, err
	}
	if o.ttl != nil {
		tc, err := openTTL(b, o.ttl, Descriptor{Name: name, Kind: KindReducing, Codec: Untyped[ttlEntry[T]](newTTLCodec(c))},
			filterEntry[T], purgeEntry[T])
		if err != nil {
			return nil, err
		}
		return ttlReducingState[T]{c: tc, reduce: reduce}, nil
	}
	t, err := b.Table(Descriptor{Name: name, Kind: KindReducing, Codec: Untyped(c)})
	if err != nil {
		return nil, err
	}
	return reducingState[T]{t: t, reduce: reduce}, nil
}

type reducingState[T any] struct {
	t      Table
	reduce func(a, b T) T
}

func (s reducingState[T]) Get() (T, bool) {
	v, ok := s.t.Get(nil)
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}

func (s reducingState[T]) Add(v T) {
	if cur, ok := s.t.Get(nil); ok {
		v = s.reduce(cur.(T), v)
	}
	s.t.Put(nil, v)
}

func (s reducingState[T]) Clear() { s.t.Delete(nil) }

// GetAggregatingState returns the aggregating state called name of b; c
// encodes the accumulator. Options: WithTTL.
func GetAggregatingState[IN, ACC, OUT any](b Backend, name string, c Codec[ACC], agg AggregateFunction[IN, ACC, OUT], opts ...StateOption) (AggregatingState[IN, OUT], error) {
	if agg == nil {
		return nil, fmt.Errorf("statebackend: aggregating state %q: nil aggregate function", name)
	}
	o, err := applyOptions(KindAggregating, name, opts)
	if err != nil {
		return nil, err
	}
	if o.ttl != nil {
		tc, err := openTTL(b, o.ttl, Descriptor{Name: name, Kind: KindAggregating, Codec: Untyped[ttlEntry[ACC]](newTTLCodec(c))},
			filterEntry[ACC], purgeEntry[ACC])
		if err != nil {
			return nil, err
		}
		return ttlAggregatingState[IN, ACC, OUT]{c: tc, agg: agg}, nil
	}
	t, err := b.Table(Descriptor{Name: name, Kind: KindAggregating, Codec: Untyped(c)})
	if err != nil {
		return nil, err
	}
	return aggregatingState[IN, ACC, OUT]{t: t, agg: agg}, nil
}

type aggregatingState[IN, ACC, OUT any] struct {
	t   Table
	agg AggregateFunction[IN, ACC, OUT]
}

func (s aggregatingState[IN, ACC, OUT]) Get() (OUT, bool) {
	v, ok := s.t.Get(nil)
	if !ok {
		var zero OUT
		return zero, false
	}
	return s.agg.Result(v.(ACC)), true
}

func (s aggregatingState[IN, ACC, OUT]) Add(v IN) {
	var acc ACC
	if cur, ok := s.t.Get(nil); ok {
		acc = cur.(ACC)
	} else {
		acc = s.agg.CreateAccumulator()
	}
	s.t.Put(nil, s.agg.Add(v, acc))
}

func (s aggregatingState[IN, ACC, OUT]) Clear() { s.t.Delete(nil) }
