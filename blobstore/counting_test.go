package blobstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
)

func TestCountingConformance(t *testing.T) {
	blobstoretest.RunConformance(t, func(t *testing.T) blobstore.Store {
		return blobstore.Counting(blobstore.NewMem(), new(blobstore.Counters))
	})
}

// TestCountingCounts runs a seeded random sequence of calls through a
// counting store and checks the counters against a tally kept beside it
// from the calls' own results.
func TestCountingCounts(t *testing.T) {
	ctx := t.Context()
	var c blobstore.Counters
	s := blobstore.Counting(blobstore.NewMem(), &c)
	var want blobstore.RequestCounts
	r := rand.New(rand.NewPCG(17, 7))
	present := map[string]int{} // key → size, tracked independently
	for i := range 2000 {
		key := fmt.Sprintf("k/%d", r.IntN(50))
		switch op := r.IntN(5); op {
		case 0:
			data := make([]byte, r.IntN(300))
			if err := s.Put(ctx, key, data); err != nil {
				t.Fatal(err)
			}
			want.Put++
			want.BytesWritten += int64(len(data))
			present[key] = len(data)
		case 1:
			data := make([]byte, r.IntN(300))
			created, err := s.PutIfAbsent(ctx, key, data)
			if err != nil {
				t.Fatal(err)
			}
			if _, had := present[key]; created == had {
				t.Fatalf("op %d: PutIfAbsent(%s) created=%v with the key present=%v", i, key, created, had)
			}
			want.Put++
			if created {
				want.BytesWritten += int64(len(data))
				present[key] = len(data)
			}
		case 2:
			data, err := s.Get(ctx, key)
			size, had := present[key]
			if had != (err == nil) || had && len(data) != size {
				t.Fatalf("op %d: Get(%s) = %d bytes, %v; want present=%v size %d", i, key, len(data), err, had, size)
			}
			want.Get++
			want.BytesRead += int64(size)
		case 3:
			if err := s.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			delete(present, key)
			want.Delete++
		case 4:
			objs, err := s.List(ctx, "k/")
			if err != nil || len(objs) != len(present) {
				t.Fatalf("op %d: List = %d objects, %v; want %d", i, len(objs), err, len(present))
			}
			want.List++ // under one page
		}
	}
	if got := c.Snapshot(); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	t.Logf("counted %+v", want)
}

func TestCountingListPages(t *testing.T) {
	ctx := t.Context()
	mem := blobstore.NewMem()
	for i := range 2*blobstore.ListPageSize + 1 {
		if err := mem.Put(ctx, fmt.Sprintf("o/%05d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var c blobstore.Counters
	s := blobstore.Counting(mem, &c)
	for _, tc := range []struct {
		prefix string
		pages  int64
	}{{"o/", 3}, {"o/0000", 1}, {"none/", 1}} {
		before := c.Snapshot().List
		if _, err := s.List(ctx, tc.prefix); err != nil {
			t.Fatal(err)
		}
		if got := c.Snapshot().List - before; got != tc.pages {
			t.Errorf("List(%q): %d requests counted, want %d", tc.prefix, got, tc.pages)
		}
	}
}

func TestCountingFailures(t *testing.T) {
	var c blobstore.Counters
	s := blobstore.Counting(blobstore.NewMem(), &c)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Put(ctx, "a", []byte("xyz")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put on a done ctx: %v", err)
	}
	if _, err := s.Get(t.Context(), "missing"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v", err)
	}
	want := blobstore.RequestCounts{Put: 1, Get: 1}
	if got := c.Snapshot(); got != want {
		t.Errorf("after a failed Put and Get: %+v, want %+v (requests counted, no bytes)", got, want)
	}
}

// TestCountingContextCounters: the Counters of a context (nested with
// WithCounters) count what calls under it make, on top of the process's
// Counters, and calls under another context are not theirs.
func TestCountingContextCounters(t *testing.T) {
	var total, job, ckpt blobstore.Counters
	s := blobstore.Counting(blobstore.NewMem(), &total)
	jobCtx := blobstore.WithCounters(t.Context(), &job)
	ckCtx := blobstore.WithCounters(jobCtx, &ckpt)
	for i := range 3 {
		if err := s.Put(ckCtx, fmt.Sprintf("a/%d", i), []byte("xyz")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(jobCtx, "a/0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "a/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ckCtx, "a/"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		got  blobstore.RequestCounts
		want blobstore.RequestCounts
	}{
		{"process", total.Snapshot(), blobstore.RequestCounts{Put: 3, Get: 1, List: 1, Delete: 1, BytesWritten: 9, BytesRead: 3}},
		{"job", job.Snapshot(), blobstore.RequestCounts{Put: 3, Get: 1, List: 1, BytesWritten: 9, BytesRead: 3}},
		{"checkpoint", ckpt.Snapshot(), blobstore.RequestCounts{Put: 3, List: 1, BytesWritten: 9}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s counters %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}
