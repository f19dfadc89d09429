package taskmanager

import (
	"bytes"
	"os"
	rtmetrics "runtime/metrics"
	"strconv"

	"github.com/weirstream/weir/proto/weirpb"
)

// heapSample is the runtime metric of the Go heap's objects (live and not
// yet swept).
const heapSample = "/memory/classes/heap/objects:bytes"

// memoryUsage returns the process's memory for heartbeats.
func (tm *TaskManager) memoryUsage() *weirpb.MemoryUsage {
	s := []rtmetrics.Sample{{Name: heapSample}}
	rtmetrics.Read(s)
	var heap int64
	if s[0].Value.Kind() == rtmetrics.KindUint64 {
		heap = int64(min(s[0].Value.Uint64(), 1<<62))
	}
	x := tm.exchangeStats()
	return &weirpb.MemoryUsage{RssBytes: residentBytes(), HeapBytes: heap,
		NetworkBufferedBytes: x.BufferedBytes, NetworkMemoryBytes: tm.cfg.ExchangeMemoryBytes,
		StateCacheBytes: tm.cfg.StateCacheBytes}
}

// residentBytes returns the process's resident set from /proc/self/statm
// (its second field, in pages), or 0 where that cannot be read.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil || pages < 0 {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
