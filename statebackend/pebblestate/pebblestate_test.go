package pebblestate_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/statebackend/statebackendtest"
	"github.com/weirstream/weir/stream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Value cache sizes the tests run with: the default (0), one byte (every
// entry is written back and evicted as soon as the call that touched it
// returns) and a few entries' worth, so that hits, misses, negative entries
// and evictions of dirty entries interleave.
var testCacheSizes = []int64{0, 1, 4 << 10}

// newFactory returns a constructor of empty backends in fresh directories
// under t's temporary directory, removed on Close, with a value cache of
// cacheBytes (0: the default).
func newFactory(t testing.TB, cacheBytes int64) func(kg stream.KeyGroupRange) *pebblestate.Backend {
	return newFactoryOpts(t, pebblestate.Options{ValueCacheBytes: cacheBytes})
}

// newFactoryOpts is newFactory with options o (Dir, CacheBytes and
// DeleteOnClose set by the factory).
func newFactoryOpts(t testing.TB, o pebblestate.Options) func(kg stream.KeyGroupRange) *pebblestate.Backend {
	root := t.TempDir()
	var n atomic.Int64
	return func(kg stream.KeyGroupRange) *pebblestate.Backend {
		o := o
		o.Dir = filepath.Join(root, fmt.Sprint("db-", n.Add(1)))
		o.CacheBytes, o.DeleteOnClose = 1<<20, true
		b, err := pebblestate.New(o, kg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestConformance(t *testing.T) {
	// The differential test covers the third value cache size. The one-byte
	// caches hold one timer per key group, one state entry in all.
	for _, o := range []pebblestate.Options{{}, {ValueCacheBytes: 1, TimerCacheBytes: 1}} {
		t.Run(fmt.Sprintf("valuecache=%d/timercache=%d", o.ValueCacheBytes, o.TimerCacheBytes), func(t *testing.T) {
			nb := newFactoryOpts(t, o)
			statebackendtest.RunConformance(t, func(kg stream.KeyGroupRange) statebackend.Backend {
				return nb(kg)
			})
		})
	}
}

func TestTTL(t *testing.T) {
	// As in TestConformance: values served from the cache, and from Pebble.
	for _, cache := range testCacheSizes[:2] {
		t.Run(fmt.Sprint("valuecache=", cache), func(t *testing.T) {
			nb := newFactory(t, cache)
			statebackendtest.RunTTL(t, func(kg stream.KeyGroupRange) statebackend.Backend {
				return nb(kg)
			})
		})
	}
}
