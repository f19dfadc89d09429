package connectors

import (
	"github.com/weirstream/weir/stream"
)

// maxBatchSize bounds the batchSize option of sources.
const maxBatchSize = 1 << 20

func checkBatchSize(op string, n int) (int, error) {
	switch {
	case n < 0 || n > maxBatchSize:
		return 0, stream.ConfigErrorf("%s: batchSize %d: must be between 1 and %d (0 or unset means %d)", op, n, maxBatchSize, stream.DefaultBatchSize)
	case n == 0:
		return stream.DefaultBatchSize, nil
	}
	return n, nil
}
