package testbin

import (
	"context"
	"time"

	"github.com/weirstream/weir/stream"
)

// TypeThrottle is the test-only operator "throttle": a pass-through that
// lets at most RowsPerSecond rows through per subtask, so that the process
// tests can backpressure a job (a slow sink) on purpose.
const TypeThrottle = "throttle"

// ThrottleConfig configures "throttle".
type ThrottleConfig struct {
	// RowsPerSecond each subtask passes; must be positive.
	RowsPerSecond float64 `json:"rowsPerSecond"`
}

func registerThrottle(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name: TypeThrottle,
		Kind: stream.KindTransform,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var cfg ThrottleConfig
			if err := stream.DecodeConfig(p.Config, &cfg); err != nil {
				return nil, err
			}
			if cfg.RowsPerSecond <= 0 {
				return nil, stream.ConfigErrorf("%s: rowsPerSecond must be positive, got %v", TypeThrottle, cfg.RowsPerSecond)
			}
			if len(p.Inputs) != 1 || p.Inputs[0].Schema == nil {
				return nil, stream.ConfigErrorf("%s: takes exactly one input, got %d", TypeThrottle, len(p.Inputs))
			}
			return p.Inputs[0].Schema, nil
		},
		NewOperator: func(config []byte) (stream.Operator, error) {
			t := &throttle{}
			return t, stream.DecodeConfig(config, &t.cfg)
		},
		Config: ThrottleConfig{},
		Doc:    "test operator: passes records through at most rowsPerSecond per subtask ({\"rowsPerSecond\": 1000})",
	})
}

// throttle paces its rows against a schedule that starts at Open: a batch
// goes through once the time for its rows has come.
type throttle struct {
	stream.BaseOperator
	cfg   ThrottleConfig
	start time.Time
	rows  float64
}

func (t *throttle) Open(context.Context, *stream.OperatorContext) error {
	t.start = time.Now()
	return nil
}

func (t *throttle) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	t.rows += float64(b.Len())
	due := t.start.Add(time.Duration(t.rows / t.cfg.RowsPerSecond * float64(time.Second)))
	// The pacing itself (one batch's worth at most, so a cancellation
	// waits no longer than that).
	time.Sleep(time.Until(due))
	out.Collect(b)
	return nil
}
