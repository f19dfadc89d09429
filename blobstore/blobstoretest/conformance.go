// Package blobstoretest holds what every blobstore.Store implementation is
// tested with: RunConformance, the suite of behaviours the Store contract
// promises, and StartVersityGW, which runs a real S3-compatible server
// (versitygw, posix backend, loopback) for s3store tests;
// StartVersityGWServerTLS runs it over https with a certificate the test
// provides (from security.InitCerts, say).
//
// It is imported by tests only. It imports testing, blobstore and s3store.
package blobstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
)

// RunConformance runs the Store contract suite. newStore must return a new,
// empty store each time it is called (it is called once per subtest).
func RunConformance(t *testing.T, newStore func(t *testing.T) blobstore.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, s blobstore.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"EmptyObject", testEmptyObject},
		{"LargeObject", testLargeObject},
		{"Missing", testMissing},
		{"List", testList},
		{"Delete", testDelete},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutIfAbsentRace", testPutIfAbsentRace},
		{"ConcurrentPuts", testConcurrentPuts},
		{"AtomicOverwrite", testAtomicOverwrite},
		{"BadKeys", testBadKeys},
		{"Canceled", testCanceled},
		{"GetToWriterError", testGetToWriterError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f(t, newStore(t))
		})
	}
}

func mustPut(t *testing.T, s blobstore.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, data); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s blobstore.Store, key string, want []byte) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes %.32q, want %d bytes %.32q", key, len(got), got, len(want), want)
	}
	var buf bytes.Buffer
	n, err := blobstore.GetTo(t.Context(), s, key, &buf)
	if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("GetTo(%q) = %d (%d bytes written), %v; want %d bytes, the object's", key, n, buf.Len(), err, len(want))
	}
}

func mustMissing(t *testing.T, s blobstore.Store, key string) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Get(%q) = %d bytes, %v; want an error wrapping ErrNotFound", key, len(got), err)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("Get(%q) error %q does not name the key", key, err)
	}
	var buf bytes.Buffer
	if _, err := blobstore.GetTo(t.Context(), s, key, &buf); !errors.Is(err, blobstore.ErrNotFound) || !strings.Contains(err.Error(), key) || buf.Len() > 0 {
		t.Fatalf("GetTo(%q) wrote %d bytes, error %v; want none, and an error wrapping ErrNotFound that names the key", key, buf.Len(), err)
	}
}

// failingWriter accepts limit bytes, then fails.
type failingWriter struct{ limit int }

var errWriter = errors.New("the writer is full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.limit {
		n := w.limit
		w.limit = 0
		return n, errWriter
	}
	w.limit -= len(p)
	return len(p), nil
}

// testGetToWriterError: GetTo returns its writer's error, wrapped, and
// stops there.
func testGetToWriterError(t *testing.T, s blobstore.Store) {
	data := randomBytes(rand.New(rand.NewPCG(5, 6)), 3<<20)
	mustPut(t, s, "w/object", data)
	n, err := blobstore.GetTo(t.Context(), s, "w/object", &failingWriter{limit: 1000})
	if !errors.Is(err, errWriter) || n > 1000 {
		t.Fatalf("GetTo into a writer that fails after 1000 bytes = %d, %v; want at most 1000 and an error wrapping the writer's", n, err)
	}
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testRoundTrip(t *testing.T, s blobstore.Store) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := map[string][]byte{
		"a":                       []byte("hello"),
		"dir/b":                   randomBytes(r, 1000),
		"job-1/chk-3/op/0-a1":     randomBytes(r, 4096),
		"x/y/z/deeply/nested/obj": {0, 1, 2, 0xff},
		"names with spaces/é":     []byte("utf8"),
	}
	for k, v := range cases {
		in := slices.Clone(v)
		mustPut(t, s, k, in)
		clear(in) // the store must not keep the caller's slice
	}
	for k, v := range cases {
		mustGet(t, s, k, v)
		got, _ := s.Get(t.Context(), k)
		clear(got) // nor hand out its own
		mustGet(t, s, k, v)
	}
}

func testOverwrite(t *testing.T, s blobstore.Store) {
	mustPut(t, s, "k/v", []byte("first version, longer"))
	mustPut(t, s, "k/v", []byte("second"))
	mustGet(t, s, "k/v", []byte("second"))
	infos, err := s.List(t.Context(), "k/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Size != int64(len("second")) {
		t.Fatalf("List after overwrite = %+v, want one object of 6 bytes", infos)
	}
}

func testEmptyObject(t *testing.T, s blobstore.Store) {
	mustPut(t, s, "empty", nil)
	got, err := s.Get(t.Context(), "empty")
	if err != nil || len(got) != 0 {
		t.Fatalf("Get(empty) = %q, %v; want no bytes, nil", got, err)
	}
	infos, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != "empty" || infos[0].Size != 0 {
		t.Fatalf("List = %+v, want [empty (0 bytes)]", infos)
	}
}

func testLargeObject(t *testing.T, s blobstore.Store) {
	data := randomBytes(rand.New(rand.NewPCG(3, 4)), 8<<20+123)
	mustPut(t, s, "big/object", data)
	mustGet(t, s, "big/object", data)
}

func testMissing(t *testing.T, s blobstore.Store) {
	mustMissing(t, s, "nope")
	mustMissing(t, s, "no/such/dir/obj")
	mustPut(t, s, "dir/obj", []byte("x"))
	mustMissing(t, s, "dir/other")
	mustMissing(t, s, "dir") // a "directory" is not an object
}

func testList(t *testing.T, s blobstore.Store) {
	before := time.Now().Add(-time.Hour)
	keys := []string{
		"a", "a.b", "ab/c", "b/1", "b/10", "b/2", "b/sub/x", "b/sub/y/z",
		"b-c/1", "chk-1/op/0", "chk-10/op/0", "chk-2/_manifest", "z",
	}
	sizes := map[string]int{}
	for i, k := range slices.Backward(keys) { // write out of order
		sizes[k] = i * 3
		mustPut(t, s, k, bytes.Repeat([]byte{'x'}, i*3))
	}
	for _, prefix := range []string{"", "a", "a.", "ab/", "b", "b/", "b/1", "b/sub/", "b/sub/y/", "chk-1", "chk-1/", "chk-", "nothing", "nothing/", "z"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			var want []string
			for _, k := range keys {
				if strings.HasPrefix(k, prefix) {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			infos, err := s.List(t.Context(), prefix)
			if err != nil {
				t.Fatalf("List(%q): %v", prefix, err)
			}
			var got []string
			for _, info := range infos {
				got = append(got, info.Key)
				if info.Size != int64(sizes[info.Key]) {
					t.Errorf("List(%q): %s has size %d, want %d", prefix, info.Key, info.Size, sizes[info.Key])
				}
				if info.ModTime.Before(before) || info.ModTime.After(time.Now().Add(time.Hour)) {
					t.Errorf("List(%q): %s has ModTime %v, want about now", prefix, info.Key, info.ModTime)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("List(%q) = %q, want %q", prefix, got, want)
			}
		})
	}
}

func testDelete(t *testing.T, s blobstore.Store) {
	ctx := t.Context()
	mustPut(t, s, "d/1", []byte("1"))
	mustPut(t, s, "d/2", []byte("2"))
	mustPut(t, s, "d/sub/3", []byte("3"))
	for range 2 { // idempotent
		if err := s.Delete(ctx, "d/sub/3"); err != nil {
			t.Fatalf("Delete(d/sub/3): %v", err)
		}
	}
	if err := s.Delete(ctx, "never/existed"); err != nil {
		t.Fatalf("Delete(never/existed): %v", err)
	}
	mustMissing(t, s, "d/sub/3")
	mustGet(t, s, "d/1", []byte("1"))
	infos, err := s.List(ctx, "d/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Key != "d/1" || infos[1].Key != "d/2" {
		t.Fatalf("List(d/) after delete = %+v, want d/1, d/2", infos)
	}
	// A deleted key can be written again.
	mustPut(t, s, "d/sub/3", []byte("again"))
	mustGet(t, s, "d/sub/3", []byte("again"))
}

func testPutIfAbsent(t *testing.T, s blobstore.Store) {
	ctx := t.Context()
	created, err := s.PutIfAbsent(ctx, "p/k", []byte("first"))
	if err != nil || !created {
		t.Fatalf("PutIfAbsent(new) = %v, %v; want true, nil", created, err)
	}
	created, err = s.PutIfAbsent(ctx, "p/k", []byte("second"))
	if err != nil || created {
		t.Fatalf("PutIfAbsent(existing) = %v, %v; want false, nil", created, err)
	}
	mustGet(t, s, "p/k", []byte("first"))
	if err := s.Delete(ctx, "p/k"); err != nil {
		t.Fatal(err)
	}
	created, err = s.PutIfAbsent(ctx, "p/k", []byte("third"))
	if err != nil || !created {
		t.Fatalf("PutIfAbsent(after delete) = %v, %v; want true, nil", created, err)
	}
	mustGet(t, s, "p/k", []byte("third"))
	infos, err := s.List(ctx, "p/")
	if err != nil || len(infos) != 1 {
		t.Fatalf("List(p/) = %+v, %v; want one object", infos, err)
	}
}

func testPutIfAbsentRace(t *testing.T, s blobstore.Store) {
	const n = 8
	var wg sync.WaitGroup
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			created[i], errs[i] = s.PutIfAbsent(t.Context(), "race/k", fmt.Appendf(nil, "writer %d", i))
		})
	}
	wg.Wait()
	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("PutIfAbsent writer %d: %v", i, errs[i])
		}
		if created[i] {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both created the object", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no writer created the object")
	}
	mustGet(t, s, "race/k", fmt.Appendf(nil, "writer %d", winner))
}

func testConcurrentPuts(t *testing.T, s blobstore.Store) {
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Put(t.Context(), fmt.Sprintf("c/%d/obj", i), fmt.Appendf(nil, "value %d", i))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	infos, err := s.List(t.Context(), "c/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != n {
		t.Fatalf("List(c/) has %d objects, want %d", len(infos), n)
	}
	for i := range n {
		mustGet(t, s, fmt.Sprintf("c/%d/obj", i), fmt.Appendf(nil, "value %d", i))
	}
}

// testAtomicOverwrite checks that readers racing with overwrites see one of
// the whole versions, never a mix or a prefix.
func testAtomicOverwrite(t *testing.T, s blobstore.Store) {
	versions := [][]byte{bytes.Repeat([]byte{'a'}, 64<<10), bytes.Repeat([]byte{'b'}, 32<<10), bytes.Repeat([]byte{'c'}, 96<<10)}
	mustPut(t, s, "atomic", versions[0])
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	wg.Go(func() {
		defer cancel()
		for i := range 20 {
			if err := s.Put(ctx, "atomic", versions[i%len(versions)]); err != nil {
				fail(err)
				return
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				got, err := s.Get(ctx, "atomic")
				if err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					return
				}
				if !slices.ContainsFunc(versions, func(v []byte) bool { return bytes.Equal(v, got) }) {
					fail(fmt.Errorf("get returned %d bytes that are none of the written versions", len(got)))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func testBadKeys(t *testing.T, s blobstore.Store) {
	ctx := t.Context()
	bad := []string{"", "/a", "a/", "a//b", "..", "../a", "a/../b", "a/..", ".", "./a", "a/./b", "a\x00b", "a\\b", strings.Repeat("k", 1025), "\xff"}
	for _, key := range bad {
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, blobstore.ErrBadKey) {
				t.Errorf("%s(%q) = %v, want an error wrapping ErrBadKey", op, key, err)
			}
		}
		check("Put", s.Put(ctx, key, []byte("x")))
		_, err := s.PutIfAbsent(ctx, key, []byte("x"))
		check("PutIfAbsent", err)
		_, err = s.Get(ctx, key)
		check("Get", err)
		check("Delete", s.Delete(ctx, key))
	}
	for _, prefix := range []string{"/", "/a", "../", "a//", "a/../"} {
		if _, err := s.List(ctx, prefix); !errors.Is(err, blobstore.ErrBadKey) {
			t.Errorf("List(%q) = %v, want an error wrapping ErrBadKey", prefix, err)
		}
	}
	infos, err := s.List(ctx, "")
	if err != nil || len(infos) != 0 {
		t.Fatalf("after rejected writes List = %+v, %v; want nothing", infos, err)
	}
}

func testCanceled(t *testing.T, s blobstore.Store) {
	mustPut(t, s, "k", []byte("v"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context = %v, want an error wrapping context.Canceled", op, err)
		}
	}
	check("Put", s.Put(ctx, "k2", []byte("v")))
	_, err := s.PutIfAbsent(ctx, "k3", []byte("v"))
	check("PutIfAbsent", err)
	_, err = s.Get(ctx, "k")
	check("Get", err)
	_, err = s.List(ctx, "")
	check("List", err)
	check("Delete", s.Delete(ctx, "k"))
	// Nothing happened.
	mustGet(t, s, "k", []byte("v"))
	mustMissing(t, s, "k2")
	mustMissing(t, s, "k3")
}
