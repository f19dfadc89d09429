package blobstore

import (
	"context"
	"io"
	"sync/atomic"
)

// Request kinds counted by Counting, as the Prometheus label kind of
// weir_storage_requests_total reads them.
const (
	RequestPut    = "put"    // Put and PutIfAbsent: one PUT each
	RequestGet    = "get"    // Get: one GET
	RequestList   = "list"   // List: one LIST per page of ListPageSize keys
	RequestDelete = "delete" // Delete: one DELETE
)

// ListPageSize is how many keys one LIST request returns at most (S3's
// ListObjectsV2 default): a List of n objects costs max(1, ⌈n ÷
// ListPageSize⌉) requests.
const ListPageSize = 1000

// RequestCounts are the requests and bytes a Counters has seen.
type RequestCounts struct {
	Put, Get, List, Delete int64
	// BytesWritten is the size of the objects written (Put and created
	// PutIfAbsent), BytesRead that of the objects read (Get).
	BytesWritten, BytesRead int64
}

// Counters counts the requests and bytes of the stores that Counting
// wraps with it. It is safe for concurrent use; the zero value is ready.
// One process keeps one Counters for all its stores.
type Counters struct {
	put, get, list, del atomic.Int64
	written, read       atomic.Int64
}

// Snapshot returns the counts so far.
func (c *Counters) Snapshot() RequestCounts {
	return RequestCounts{Put: c.put.Load(), Get: c.get.Load(), List: c.list.Load(), Delete: c.del.Load(),
		BytesWritten: c.written.Load(), BytesRead: c.read.Load()}
}

// Add adds counts that were made elsewhere (another process's report).
func (c *Counters) Add(r RequestCounts) {
	c.put.Add(r.Put)
	c.get.Add(r.Get)
	c.list.Add(r.List)
	c.del.Add(r.Delete)
	c.written.Add(r.BytesWritten)
	c.read.Add(r.BytesRead)
}

// Counting returns a Store that forwards every call to s and counts it in
// c. It counts the requests a call makes to an object store as the kind of
// request S3 bills for: every call is counted, also one that fails (the
// service bills those too) and one refused before it left the process (an
// invalid key, a done ctx), so the counts are an upper bound; a retry
// inside s (s3store retries a conflicting PutIfAbsent) is not seen. The
// s3store writes every object with one PUT (never multipart), so there are
// no part uploads to count. Bytes count only data that was transferred: a
// successful write, a successful read.
func Counting(s Store, c *Counters) Store { return &counting{s: s, c: c} }

type counting struct {
	s Store
	c *Counters
}

var _ Store = (*counting)(nil)

// WithCounters returns a context under which the stores Counting wraps
// also count each call in c: the requests one piece of work makes (a
// checkpoint's upload, a job's manifest writes), on top of the process's
// totals. Contexts nest: every Counters on the chain counts.
func WithCounters(ctx context.Context, c *Counters) context.Context {
	return context.WithValue(ctx, countersKey{}, &ctxCounters{c: c, parent: ctxCountersOf(ctx)})
}

type countersKey struct{}

type ctxCounters struct {
	c      *Counters
	parent *ctxCounters
}

func ctxCountersOf(ctx context.Context) *ctxCounters {
	cc, _ := ctx.Value(countersKey{}).(*ctxCounters)
	return cc
}

// each calls f with the process's Counters and every Counters of ctx.
func (w *counting) each(ctx context.Context, f func(*Counters)) {
	f(w.c)
	for cc := ctxCountersOf(ctx); cc != nil; cc = cc.parent {
		f(cc.c)
	}
}

func (w *counting) Put(ctx context.Context, key string, data []byte) error {
	w.each(ctx, func(c *Counters) { c.put.Add(1) })
	err := w.s.Put(ctx, key, data)
	if err == nil {
		w.each(ctx, func(c *Counters) { c.written.Add(int64(len(data))) })
	}
	return err
}

func (w *counting) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	w.each(ctx, func(c *Counters) { c.put.Add(1) })
	created, err := w.s.PutIfAbsent(ctx, key, data)
	if created {
		w.each(ctx, func(c *Counters) { c.written.Add(int64(len(data))) })
	}
	return created, err
}

func (w *counting) Get(ctx context.Context, key string) ([]byte, error) {
	w.each(ctx, func(c *Counters) { c.get.Add(1) })
	data, err := w.s.Get(ctx, key)
	w.each(ctx, func(c *Counters) { c.read.Add(int64(len(data))) })
	return data, err
}

// GetTo implements Streamer, counted as Get.
func (w *counting) GetTo(ctx context.Context, key string, dst io.Writer) (int64, error) {
	w.each(ctx, func(c *Counters) { c.get.Add(1) })
	n, err := GetTo(ctx, w.s, key, dst)
	if err == nil {
		w.each(ctx, func(c *Counters) { c.read.Add(n) })
	}
	return n, err
}

func (w *counting) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	objs, err := w.s.List(ctx, prefix)
	pages := int64(max(1, (len(objs)+ListPageSize-1)/ListPageSize))
	w.each(ctx, func(c *Counters) { c.list.Add(pages) })
	return objs, err
}

func (w *counting) Delete(ctx context.Context, key string) error {
	w.each(ctx, func(c *Counters) { c.del.Add(1) })
	return w.s.Delete(ctx, key)
}
