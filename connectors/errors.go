package connectors

import (
	"fmt"

	"github.com/weirstream/weir/stream"
)

// configError is a planning-time config error. Its message is the user's
// explanation alone; errors.Is(err, stream.ErrConfig) reports true.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return stream.ErrConfig }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// decodeConfig decodes raw into v and marks a failure as a config error.
func decodeConfig(op string, raw []byte, v any) error {
	if err := stream.DecodeConfig(raw, v); err != nil {
		return configErrorf("%s: %v", op, err)
	}
	return nil
}

// maxBatchSize bounds the batchSize option of sources.
const maxBatchSize = 1 << 20

func checkBatchSize(op string, n int) (int, error) {
	switch {
	case n < 0 || n > maxBatchSize:
		return 0, configErrorf("%s: batchSize %d: must be between 1 and %d (0 or unset means %d)", op, n, maxBatchSize, stream.DefaultBatchSize)
	case n == 0:
		return stream.DefaultBatchSize, nil
	}
	return n, nil
}
