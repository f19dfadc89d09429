package dataflowtest

import (
	"io"
	"os"

	"github.com/weirstream/weir/stream"
)

// ReadForUpload reads snap as the runtime's upload would, for benchmarks
// that count what checkpoints upload: every keyed chunk and item of
// operator state, and every file, except a shared file whose content
// (SHA256) is in seen, which a previous snapshot uploaded. It adds the
// shared files it reads to seen and returns the bytes read.
func ReadForUpload(snap *stream.OperatorSnapshot, seen map[string]bool) (int64, error) {
	var n int64
	for _, chunks := range snap.Keyed {
		for _, c := range chunks {
			n += int64(len(c))
		}
	}
	for _, m := range []map[string][][]byte{snap.List, snap.Union} {
		for _, items := range m {
			for _, it := range items {
				n += int64(len(it))
			}
		}
	}
	for _, f := range snap.Files {
		if f.Shared {
			if seen[f.SHA256] {
				continue
			}
			seen[f.SHA256] = true
		}
		r, err := os.Open(f.Path)
		if err != nil {
			return 0, err
		}
		m, err := io.Copy(io.Discard, r)
		r.Close()
		if err != nil {
			return 0, err
		}
		n += m
	}
	return n, nil
}
