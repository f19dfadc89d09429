package heap

// slab holds the values of one key group of a non-map table: entries in a
// dense slice and an index from key to position. Updating an existing key is
// a lookup (a string([]byte) map lookup does not allocate) and a store, and
// Snapshot walks the slice sequentially instead of chasing a pointer per
// entry. Deletion moves the last entry into the hole.
type slab struct {
	index map[string]int32
	slots []slot
}

type slot struct {
	key string
	v   any
}

func (s *slab) get(key []byte) (any, bool) {
	i, ok := s.index[string(key)]
	if !ok {
		return nil, false
	}
	return s.slots[i].v, true
}

// put sets key's value and reports whether the key is new.
func (s *slab) put(key []byte, v any) bool {
	if i, ok := s.index[string(key)]; ok {
		s.slots[i].v = v
		return false
	}
	s.insert(string(key), v)
	return true
}

// set is put for a key that is already a string.
func (s *slab) set(key string, v any) bool {
	if i, ok := s.index[key]; ok {
		s.slots[i].v = v
		return false
	}
	s.insert(key, v)
	return true
}

func (s *slab) insert(key string, v any) {
	if s.index == nil {
		s.index = make(map[string]int32)
	}
	s.index[key] = int32(len(s.slots))
	s.slots = append(s.slots, slot{key, v})
}

// del removes key and reports whether it was there.
func (s *slab) del(key []byte) bool {
	i, ok := s.index[string(key)]
	if !ok {
		return false
	}
	last := int32(len(s.slots) - 1)
	if i != last {
		s.slots[i] = s.slots[last]
		s.index[s.slots[i].key] = i
	}
	s.slots[last] = slot{}
	s.slots = s.slots[:last]
	delete(s.index, string(key))
	if cap(s.slots) > 64 && len(s.slots) < cap(s.slots)/4 {
		s.slots = append([]slot(nil), s.slots...)
	}
	return true
}

func (s *slab) len() int { return len(s.slots) }
