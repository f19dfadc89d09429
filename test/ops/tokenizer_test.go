package ops

import (
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`weir_jobs{state="FAILED"}`, []string{"weir_jobs"}},
		{`rate(weir_task_records_in_total{job=~"$job", task!="x"}[$__rate_interval])`, []string{"weir_task_records_in_total"}},
		{`sum by (job, task) (rate(a_total[5m])) / ignoring(le) group_left(instance) b`, []string{"a_total", "b"}},
		{`sum(rate(a[1h30m] offset 5m)) without (instance, job) > bool 3`, []string{"a"}},
		{`histogram_quantile(0.95, sum by (job, le) (rate(weir_checkpoint_duration_seconds_bucket{job=~"${job:regex}"}[$__rate_interval])))`,
			[]string{"weir_checkpoint_duration_seconds_bucket"}},
		{"weir_checkpoint_last_completed_age_seconds\n  > on (job) (3 * weir_checkpoint_interval_seconds) # stalled",
			[]string{"weir_checkpoint_last_completed_age_seconds", "weir_checkpoint_interval_seconds"}},
		{`(max(weir_jobmanager_leader) or vector(0)) < 1`, []string{"weir_jobmanager_leader"}},
		{`a and b unless c or on() d`, []string{"a", "b", "c", "d"}},
		{`topk(5, x) + count_values("value", y) + quantile(0.9, z)`, []string{"x", "y", "z"}},
		{`{__name__="by_name", job="j"} + {__name__='other'}`, []string{"by_name", "other"}},
		{`max_over_time(weir_taskmanagers_live[15m:30s]) - weir_taskmanagers_live @ end()`, []string{"weir_taskmanagers_live"}},
		{`x > Inf or y < -NaN or z > 1e-3 or w > 0x1F`, []string{"x", "y", "z", "w"}},
		{`level:metric:rate5m * 2`, []string{"level:metric:rate5m"}},
		{`rate(x[[[interval]]])`, []string{"x"}},
		{`label_replace(a, "dst", "$1", "src", "(.*)")`, []string{"a"}},
		{`sum by(job)(a) / sum(b) by (job)`, []string{"a", "b"}},
		{`a{job="with } brace"} + b`, []string{"a", "b"}},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := metricNames(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

func TestMetricNamesErrors(t *testing.T) {
	for _, expr := range []string{`a{job="x"`, `rate(a[5m)`, `a{job="unterminated}`, `sum by (job`, `a ; b`, `${job`} {
		if got, err := metricNames(expr); err == nil {
			t.Errorf("metricNames(%q) = %q, want an error", expr, got)
		}
	}
}

func TestFamilyOf(t *testing.T) {
	families := map[string]dto.MetricType{
		"weir_checkpoint_duration_seconds":  dto.MetricType_HISTOGRAM,
		"rpc_latency_seconds":               dto.MetricType_SUMMARY,
		"weir_checkpoints_completed_total":  dto.MetricType_COUNTER,
		"weir_task_records_in_total":        dto.MetricType_COUNTER,
		"weir_exchange_buffered_bytes":      dto.MetricType_GAUGE,
		"weir_exchange_buffered_bytes_peak": dto.MetricType_GAUGE,
	}
	for name, want := range map[string]string{
		"weir_checkpoint_duration_seconds_bucket": "weir_checkpoint_duration_seconds",
		"weir_checkpoint_duration_seconds_sum":    "weir_checkpoint_duration_seconds",
		"weir_checkpoint_duration_seconds_count":  "weir_checkpoint_duration_seconds",
		"weir_checkpoint_duration_seconds":        "weir_checkpoint_duration_seconds",
		"rpc_latency_seconds_count":               "rpc_latency_seconds",
		"rpc_latency_seconds_bucket":              "", // a summary has no buckets
		"weir_checkpoints_completed_total":        "weir_checkpoints_completed_total",
		"weir_checkpoints_completed":              "",
		"weir_checkpoints_completed_total_count":  "", // a counter has no _count series
		"weir_exchange_buffered_bytes_peak":       "weir_exchange_buffered_bytes_peak",
		"weir_no_such_metric":                     "",
	} {
		got, ok := familyOf(name, families)
		if ok != (want != "") || got != want {
			t.Errorf("familyOf(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
