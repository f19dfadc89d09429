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

// newFactory returns a constructor of empty backends in fresh directories
// under t's temporary directory, removed on Close.
func newFactory(t testing.TB) func(kg stream.KeyGroupRange) *pebblestate.Backend {
	root := t.TempDir()
	var n atomic.Int64
	return func(kg stream.KeyGroupRange) *pebblestate.Backend {
		dir := filepath.Join(root, fmt.Sprint("db-", n.Add(1)))
		b, err := pebblestate.New(pebblestate.Options{Dir: dir, CacheBytes: 1 << 20, DeleteOnClose: true}, kg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestConformance(t *testing.T) {
	nb := newFactory(t)
	statebackendtest.RunConformance(t, func(kg stream.KeyGroupRange) statebackend.Backend {
		return nb(kg)
	})
}
