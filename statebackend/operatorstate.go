package statebackend

import (
	"slices"

	"github.com/weirstream/weir/stream"
)

// OperatorStateStore holds an operator's non-keyed state: named lists of
// opaque items that survive rescaling, such as a source's split positions.
// List state is split among the subtasks on restore (round-robin, by the
// checkpoint storage layer); union state is given whole to every subtask.
// List and union state have separate name spaces.
//
// The zero value is ready to use. It is not safe for concurrent use.
type OperatorStateStore struct {
	lists  map[string]*OperatorListState
	unions map[string]*OperatorListState
}

// NewOperatorStateStore returns an empty store.
func NewOperatorStateStore() *OperatorStateStore { return &OperatorStateStore{} }

// ListState returns the list state called name, creating it on first use.
func (s *OperatorStateStore) ListState(name string) *OperatorListState {
	return getOrCreate(&s.lists, name)
}

// UnionListState returns the union list state called name, creating it on
// first use.
func (s *OperatorStateStore) UnionListState(name string) *OperatorListState {
	return getOrCreate(&s.unions, name)
}

func getOrCreate(m *map[string]*OperatorListState, name string) *OperatorListState {
	if *m == nil {
		*m = make(map[string]*OperatorListState)
	}
	l := (*m)[name]
	if l == nil {
		l = &OperatorListState{}
		(*m)[name] = l
	}
	return l
}

// Snapshot adds copies of every list's items to c (c.AddListState and
// c.AddUnionState). Empty lists are not written.
func (s *OperatorStateStore) Snapshot(c *stream.SnapshotContext) error {
	for name, l := range s.lists {
		if len(l.items) > 0 {
			c.AddListState(name, cloneItems(l.items)...)
		}
	}
	for name, l := range s.unions {
		if len(l.items) > 0 {
			c.AddUnionState(name, cloneItems(l.items)...)
		}
	}
	return nil
}

// Restore replaces the lists named in c.State with copies of their items.
// Lists not in c keep their contents.
func (s *OperatorStateStore) Restore(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	for name, items := range c.State.List {
		s.ListState(name).items = cloneItems(items)
	}
	for name, items := range c.State.Union {
		s.UnionListState(name).items = cloneItems(items)
	}
	return nil
}

func cloneItems(items [][]byte) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = slices.Clone(it)
		if out[i] == nil {
			out[i] = []byte{}
		}
	}
	return out
}

// OperatorListState is a list of opaque items. Items passed in belong to the
// state from then on; items handed out must not be modified.
type OperatorListState struct {
	items [][]byte
}

// Get returns the items. The slice may be appended to without affecting the
// state.
func (l *OperatorListState) Get() [][]byte { return l.items[:len(l.items):len(l.items)] }

// Add appends item.
func (l *OperatorListState) Add(item []byte) { l.items = append(l.items, item) }

// Update replaces the items with those of items (the slice is copied, the
// items are not).
func (l *OperatorListState) Update(items [][]byte) { l.items = slices.Clone(items) }

// Clear removes every item.
func (l *OperatorListState) Clear() { l.items = nil }
