package blobstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Mem is an in-memory Store for unit tests of the layers above blobstore.
// It follows the Store contract (it passes the conformance suite) but keeps
// nothing across processes. The zero value is not usable; call NewMem.
type Mem struct {
	mu struct {
		sync.Mutex
		objects map[string]memObject
	}
}

type memObject struct {
	data    []byte
	modTime time.Time
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem {
	m := &Mem{}
	m.mu.objects = make(map[string]memObject)
	return m
}

func memCheck(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("blobstore: %s %q: %w", op, key, err)
	}
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("blobstore: %s: %w", op, err)
	}
	return nil
}

// Put implements Store.
func (m *Mem) Put(ctx context.Context, key string, data []byte) error {
	if err := memCheck(ctx, "put", key); err != nil {
		return err
	}
	obj := memObject{data: slices.Clone(data), modTime: time.Now()}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.objects[key] = obj
	return nil
}

// PutIfAbsent implements Store.
func (m *Mem) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	if err := memCheck(ctx, "put", key); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mu.objects[key]; ok {
		return false, nil
	}
	m.mu.objects[key] = memObject{data: slices.Clone(data), modTime: time.Now()}
	return true, nil
}

// Get implements Store.
func (m *Mem) Get(ctx context.Context, key string) ([]byte, error) {
	if err := memCheck(ctx, "get", key); err != nil {
		return nil, err
	}
	m.mu.Lock()
	obj, ok := m.mu.objects[key]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("blobstore: get %q: %w", key, ErrNotFound)
	}
	if obj.data == nil {
		return []byte{}, nil
	}
	return slices.Clone(obj.data), nil
}

// List implements Store.
func (m *Mem) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("blobstore: list %q: %w", prefix, err)
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("blobstore: list: %w", err)
	}
	m.mu.Lock()
	var out []ObjectInfo
	for k, obj := range m.mu.objects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, ObjectInfo{Key: k, Size: int64(len(obj.data)), ModTime: obj.modTime})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete implements Store.
func (m *Mem) Delete(ctx context.Context, key string) error {
	if err := memCheck(ctx, "delete", key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mu.objects, key)
	return nil
}
