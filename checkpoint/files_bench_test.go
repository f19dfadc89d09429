package checkpoint_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// BenchmarkIncrementalUpload builds keyed state in the Pebble backend
// (500k keys, 100-byte values, ~60 MB), uploads a first checkpoint, then
// repeatedly updates 1% of the keys, snapshots (SnapshotFiles) and uploads
// with Storage.UploadFiles to an in-memory store. It prints
// incremental_upload_ratio = bytes uploaded ÷ bytes of state changed, and
// the p50/p99 of snapshot + upload.
func BenchmarkIncrementalUpload(b *testing.B) {
	const (
		n       = 500_000
		valSize = 100
		rounds  = 10
		maxPar  = 128
	)
	kg := stream.KeyGroupRange{Start: 0, End: maxPar - 1}
	root := b.TempDir()
	be, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, "db"), DeleteOnClose: true}, kg)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	s, err := statebackend.GetValueState(be, "v", statebackend.BytesCodec)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15)
	}
	val := make([]byte, valSize)
	put := func(i int, gen uint64) {
		for j := 0; j+8 <= valSize; j += 8 {
			binary.LittleEndian.PutUint64(val[j:], (uint64(i)*31+uint64(j))*gen*0x9e3779b97f4a7c15)
		}
		be.SetCurrentKey(keys[i], i%maxPar)
		s.Update(val)
	}
	for i := range n {
		put(i, 1)
	}
	st := checkpoint.NewStorage(blobstore.NewMem())
	ctx := b.Context()
	ckpt := int64(0)
	take := func() (int64, time.Duration) {
		ckpt++
		start := time.Now()
		files, err := be.SnapshotFiles(filepath.Join(root, fmt.Sprint("chk-", ckpt)))
		if err != nil {
			b.Fatal(err)
		}
		_, up, err := st.UploadFiles(ctx, "job", ckpt, "op", 0, 1, files)
		if err != nil {
			b.Fatal(err)
		}
		return up, time.Since(start)
	}
	first, _ := take()
	var uploaded, changed int64
	var durs []time.Duration
	for b.Loop() {
		for r := range rounds {
			for i := r; i < n; i += 100 {
				put(i, uint64(2+ckpt))
				changed += int64(len(keys[i]) + valSize)
			}
			up, d := take()
			uploaded += up
			durs = append(durs, d)
		}
	}
	slices.Sort(durs)
	ratio := float64(uploaded) / float64(changed)
	b.ReportMetric(ratio, "incremental_upload_ratio")
	b.ReportMetric(float64(first)/1e6, "full_MB")
	fmt.Printf("incremental_upload_ratio=%.2f (uploaded %d B for %d B changed; first full checkpoint %d B; p50 %v p99 %v)\n",
		ratio, uploaded, changed, first, durs[len(durs)/2], durs[len(durs)*99/100])
}
