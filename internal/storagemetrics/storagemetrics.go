// Package storagemetrics exports a process's checkpoint-storage request
// counts (blobstore.Counters) as Prometheus metrics; the jobmanager and the
// taskmanager both use it. It imports blobstore and the Prometheus client.
package storagemetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/blobstore"
)

// Collectors exports c as weir_storage_requests_total{kind} and
// weir_storage_bytes_total{direction}.
func Collectors(c *blobstore.Counters) []prometheus.Collector {
	counter := func(name, help, label, value string, get func(blobstore.RequestCounts) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{label: value}},
			func() float64 { return float64(get(c.Snapshot())) })
	}
	const reqs = "Object-store requests of the process's checkpoint storage, by kind as S3 bills them (list: one per page of 1000 keys)."
	const bytes = "Bytes of objects the process's checkpoint storage wrote (out) and read (in)."
	return []prometheus.Collector{
		counter("weir_storage_requests_total", reqs, "kind", blobstore.RequestPut, func(r blobstore.RequestCounts) int64 { return r.Put }),
		counter("weir_storage_requests_total", reqs, "kind", blobstore.RequestGet, func(r blobstore.RequestCounts) int64 { return r.Get }),
		counter("weir_storage_requests_total", reqs, "kind", blobstore.RequestList, func(r blobstore.RequestCounts) int64 { return r.List }),
		counter("weir_storage_requests_total", reqs, "kind", blobstore.RequestDelete, func(r blobstore.RequestCounts) int64 { return r.Delete }),
		counter("weir_storage_bytes_total", bytes, "direction", "out", func(r blobstore.RequestCounts) int64 { return r.BytesWritten }),
		counter("weir_storage_bytes_total", bytes, "direction", "in", func(r blobstore.RequestCounts) int64 { return r.BytesRead }),
	}
}
