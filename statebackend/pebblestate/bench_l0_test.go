package pebblestate_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/pebblestate"
)

// BenchmarkValueStateGetUpdateAfterCheckpoints is BenchmarkValueStateGetUpdate
// on the LSM shape incremental checkpoints leave: 1M keys, then 60
// checkpoints each after updating a different 1 % of the keys, so that with
// the backend's defaults L0 holds about 60 sublevels (one flush per
// checkpoint) over the bottom level. "compacted" runs the same with Pebble's
// L0 thresholds (compact at 4 sublevels), the read-optimised shape.
func BenchmarkValueStateGetUpdateAfterCheckpoints(b *testing.B) {
	const (
		n      = 1_000_000
		rounds = 60
	)
	for _, shape := range []string{"defaults", "compacted"} {
		b.Run(shape, func(b *testing.B) {
			var configure func(*pebble.Options)
			if shape == "compacted" {
				configure = func(o *pebble.Options) {
					o.L0CompactionThreshold, o.L0StopWritesThreshold = 4, 12
				}
			}
			root := b.TempDir()
			keys, kgs := benchKeys(n)
			be, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, "db"), DeleteOnClose: true, Configure: configure}, full)
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			s, err := statebackend.GetValueState(be, "count", statebackend.Int64Codec)
			if err != nil {
				b.Fatal(err)
			}
			for i := range keys {
				be.SetCurrentKey(keys[i], kgs[i])
				s.Update(1)
			}
			for r := range rounds {
				for i := r; i < n; i += 100 {
					be.SetCurrentKey(keys[i], kgs[i])
					s.Update(int64(r))
				}
				dir := filepath.Join(root, fmt.Sprint("chk-", r))
				if _, err := be.Checkpoint(dir); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(dir)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := (i * 7919) % n
				be.SetCurrentKey(keys[k], kgs[k])
				v, _ := s.Value()
				s.Update(v + 1)
			}
		})
	}
}
