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

// longTests: see pebblestate.LongTests (WEIR_LONG_TESTS=1).
var longTests = pebblestate.LongTests

// conformanceSizes and ttlSizes are how much the long tests of the shared
// suites do against Pebble. Under -race every restore opens Pebble
// databases and every key scan opens iterators that record stacks, so the
// suites' full sizes (kept for WEIR_LONG_TESTS=1) take minutes. The seeds
// are chosen so that the conformance model starts with one, two and three
// backends, and the TTL model runs each of its cleanup settings (none, one
// and the default number of entries per access).
func conformanceSizes() statebackendtest.Sizes {
	if longTests() {
		return statebackendtest.Sizes{}
	}
	return statebackendtest.Sizes{ModelSeeds: []uint64{1, 2, 7}, ModelSteps: 1000}
}

func ttlSizes() statebackendtest.Sizes {
	if longTests() {
		return statebackendtest.Sizes{}
	}
	return statebackendtest.Sizes{ModelSeeds: []uint64{2, 4, 5}, ModelSteps: 1000, CleanupTTLs: 8}
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
// DeleteOnClose set by the factory), on pebblestate.NoSync's file system.
func newFactoryOpts(t testing.TB, o pebblestate.Options) func(kg stream.KeyGroupRange) *pebblestate.Backend {
	root := t.TempDir()
	var n atomic.Int64
	return func(kg stream.KeyGroupRange) *pebblestate.Backend {
		o := o
		o.Dir = filepath.Join(root, fmt.Sprint("db-", n.Add(1)))
		o.CacheBytes, o.DeleteOnClose = 1<<20, true
		b, err := pebblestate.New(pebblestate.NoSync(o), kg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestConformance(t *testing.T) {
	// The differential test covers the third value cache size. The one-byte
	// caches hold one timer per key group, one state entry in all.
	// The two run in parallel: each has its own directories.
	t.Parallel()
	for _, o := range []pebblestate.Options{{}, {ValueCacheBytes: 1, TimerCacheBytes: 1}} {
		t.Run(fmt.Sprintf("valuecache=%d/timercache=%d", o.ValueCacheBytes, o.TimerCacheBytes), func(t *testing.T) {
			t.Parallel()
			nb := newFactoryOpts(t, o)
			statebackendtest.RunConformanceSized(t, func(kg stream.KeyGroupRange) statebackend.Backend {
				return nb(kg)
			}, conformanceSizes())
		})
	}
}

func TestTTL(t *testing.T) {
	// As in TestConformance: values served from the cache, and from Pebble.
	t.Parallel()
	for _, cache := range testCacheSizes[:2] {
		t.Run(fmt.Sprint("valuecache=", cache), func(t *testing.T) {
			t.Parallel()
			nb := newFactory(t, cache)
			statebackendtest.RunTTLSized(t, func(kg stream.KeyGroupRange) statebackend.Backend {
				return nb(kg)
			}, ttlSizes())
		})
	}
}
