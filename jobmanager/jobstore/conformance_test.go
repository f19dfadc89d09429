package jobstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/jobmanager/jobstore"
)

// opener opens a new, empty store for one test. reopen closes it and opens
// its data again, as a restarted jobmanager (Dir) or a newly elected
// leader (etcd) does; the store it returns replaces the first.
type opener func(t *testing.T) (s jobstore.Store, reopen func() jobstore.Store)

// runConformance runs the Store contract suite against the stores open
// returns.
func runConformance(t *testing.T, open opener) {
	tests := []struct {
		name string
		f    func(t *testing.T, s jobstore.Store, reopen func() jobstore.Store)
	}{
		{"Jobs", testJobs},
		{"UnknownJob", testUnknownJob},
		{"CheckpointPointer", testCheckpointPointer},
		{"Counters", testCounters},
		{"ConcurrentCheckpointIDs", testConcurrentCheckpointIDs},
		{"PutJobKeepsCheckpoints", testPutJobKeepsCheckpoints},
		{"Delete", testDelete},
		{"Reopen", testReopen},
		{"BadInput", testBadInput},
		{"Confirm", testConfirm},
		{"Canceled", testCanceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, reopen := open(t)
			tt.f(t, s, reopen)
		})
	}
}

func TestDirConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) (jobstore.Store, func() jobstore.Store) {
		path := filepath.Join(t.TempDir(), "data")
		d := openDir(t, path, nil)
		return d, func() jobstore.Store {
			if err := d.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			d = openDir(t, path, nil)
			return d
		}
	})
}

// TestEtcdConformance runs the suite against the etcd store of a leader;
// each test has its own prefix in one etcd, and reopening hands the
// leadership to a new client.
func TestEtcdConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	n := 0
	runConformance(t, func(t *testing.T) (jobstore.Store, func() jobstore.Store) {
		n++
		cfg := ha.DefaultConfig()
		cfg.Endpoints = srv.Endpoints()
		cfg.Prefix = fmt.Sprintf("/conformance-%d", n)
		cfg.LeaseTTL = 5 * time.Second
		cfg.DialTimeout = 2 * time.Second
		cfg.Logger = slog.New(slog.DiscardHandler)
		lead := func() (*ha.Client, *ha.Leadership) {
			t.Helper()
			c, err := ha.Connect(t.Context(), cfg)
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			l, err := c.Campaign(ctx, "jm", "jm.example:6123")
			if err != nil {
				c.Close()
				t.Fatalf("Campaign: %v", err)
			}
			return c, l
		}
		c, l := lead()
		t.Cleanup(func() { c.Close() })
		return l.Store(), func() jobstore.Store {
			if err := l.Resign(t.Context()); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			c.Close()
			c, l = lead()
			return l.Store()
		}
	})
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// ptr is a valid pointer to checkpoint id.
func ptr(id int64) jobstore.Pointer {
	key := fmt.Sprintf("job/chk-%d/_manifest", id)
	p := jobstore.Pointer{ID: id, ManifestKey: key, ManifestSHA256: sum(key)}
	if id > 1 {
		p.Retained = []int64{id - 1, id} // round-trips with the rest
	}
	return p
}

func putJob(t *testing.T, s jobstore.Store, id, graph, status string) {
	t.Helper()
	if err := s.PutJob(t.Context(), id, []byte(graph), []byte(status)); err != nil {
		t.Fatalf("PutJob %s: %v", id, err)
	}
}

func nextID(t *testing.T, s jobstore.Store, job string) int64 {
	t.Helper()
	id, err := s.NextCheckpointID(t.Context(), job)
	if err != nil {
		t.Fatalf("NextCheckpointID %s: %v", job, err)
	}
	return id
}

func nextTerm(t *testing.T, s jobstore.Store) int64 {
	t.Helper()
	term, err := s.NextTerm(t.Context())
	if err != nil {
		t.Fatalf("NextTerm: %v", err)
	}
	return term
}

func putPointer(t *testing.T, s jobstore.Store, job string, p jobstore.Pointer) {
	t.Helper()
	if err := s.PutLatestCheckpoint(t.Context(), job, p); err != nil {
		t.Fatalf("PutLatestCheckpoint %s %d: %v", job, p.ID, err)
	}
}

// model is what a store should hold, kept independently of it.
type model map[string]*jobstore.JobRecord

func (m model) put(id, graph, status string) {
	r, ok := m[id]
	if !ok {
		r = &jobstore.JobRecord{ID: id}
		m[id] = r
	}
	r.Graph, r.Status = []byte(graph), []byte(status)
}

// check fails the test unless ListJobs returns exactly m, ordered by id.
func (m model) check(t *testing.T, s jobstore.Store) {
	t.Helper()
	got, err := s.ListJobs(t.Context())
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	var want []jobstore.JobRecord
	for _, r := range m {
		want = append(want, *r)
	}
	slices.SortFunc(want, func(a, b jobstore.JobRecord) int { return strings.Compare(a.ID, b.ID) })
	if !slices.EqualFunc(got, want, sameRecord) {
		t.Fatalf("ListJobs =\n%s\nwant\n%s", describe(got), describe(want))
	}
}

func sameRecord(a, b jobstore.JobRecord) bool {
	return a.ID == b.ID && bytes.Equal(a.Graph, b.Graph) && bytes.Equal(a.Status, b.Status) &&
		(a.Latest == nil) == (b.Latest == nil) && (a.Latest == nil || bytes.Equal(jobstore.EncodePointer(*a.Latest), jobstore.EncodePointer(*b.Latest))) &&
		a.LastCheckpointID == b.LastCheckpointID
}

func describe(rs []jobstore.JobRecord) string {
	var b strings.Builder
	for _, r := range rs {
		latest := "none"
		if r.Latest != nil {
			latest = fmt.Sprint(r.Latest.ID)
		}
		fmt.Fprintf(&b, "  %s: graph %q status %q latest %s last id %d\n", r.ID, r.Graph, r.Status, latest, r.LastCheckpointID)
	}
	return b.String()
}

func testJobs(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	m := model{}
	m.check(t, s)
	// Ids where one is a prefix of another, followed by bytes that sort
	// below and above '/': ListJobs orders by id all the same.
	for _, id := range []string{"job-b", "job", "job0", "job.x", "job-2", "a", "job_"} {
		putJob(t, s, id, "graph-"+id, "CREATED")
		m.put(id, "graph-"+id, "CREATED")
	}
	m.check(t, s)

	putJob(t, s, "job", "graph-job-2", "SCHEDULED") // replace
	m.put("job", "graph-job-2", "SCHEDULED")
	if err := s.PutJobStatus(t.Context(), "job-b", []byte("RUNNING")); err != nil {
		t.Fatalf("PutJobStatus: %v", err)
	}
	m["job-b"].Status = []byte("RUNNING")
	m.check(t, s)

	// The store keeps no slice it is given and hands out its own copies.
	graph, status := []byte("graph-c"), []byte("RUNNING")
	if err := s.PutJob(t.Context(), "job-c", graph, status); err != nil {
		t.Fatalf("PutJob: %v", err)
	}
	clear(graph)
	clear(status)
	m.put("job-c", "graph-c", "RUNNING")
	got, err := s.ListJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		clear(r.Graph)
		clear(r.Status)
	}
	m.check(t, s)
}

func testUnknownJob(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	ctx := t.Context()
	putJob(t, s, "other", "g", "s")
	for name, err := range map[string]error{
		"PutJobStatus":        s.PutJobStatus(ctx, "job", []byte("x")),
		"PutLatestCheckpoint": s.PutLatestCheckpoint(ctx, "job", ptr(9)),
		"LatestCheckpoint":    func() error { _, err := s.LatestCheckpoint(ctx, "job"); return err }(),
		"NextCheckpointID":    func() error { _, err := s.NextCheckpointID(ctx, "job"); return err }(),
	} {
		if !errors.Is(err, jobstore.ErrNotFound) || !errors.Is(err, ha.ErrNotFound) {
			t.Errorf("%s of an unknown job = %v, want an error wrapping ErrNotFound", name, err)
		} else if !strings.Contains(err.Error(), "job") {
			t.Errorf("%s of an unknown job: error %q does not name the job", name, err)
		}
	}
	if err := s.DeleteJob(ctx, "job"); err != nil {
		t.Errorf("DeleteJob of an unknown job: %v", err)
	}
	m := model{}
	m.put("other", "g", "s")
	m.check(t, s)
}

func testCheckpointPointer(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	ctx := t.Context()
	putJob(t, s, "job", "g", "s")
	if _, err := s.LatestCheckpoint(ctx, "job"); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("LatestCheckpoint before any = %v, want ErrNotFound", err)
	}
	putPointer(t, s, "job", ptr(1))
	putPointer(t, s, "job", ptr(3)) // ids may be skipped
	putPointer(t, s, "job", ptr(3)) // the same pointer again: a no-op

	other := ptr(3)
	other.ManifestKey = "elsewhere"
	for name, p := range map[string]jobstore.Pointer{"older": ptr(2), "first": ptr(1), "another checkpoint 3": other} {
		err := s.PutLatestCheckpoint(ctx, "job", p)
		if !errors.Is(err, jobstore.ErrStaleCheckpoint) || !errors.Is(err, ha.ErrStaleCheckpoint) {
			t.Errorf("PutLatestCheckpoint of the %s pointer = %v, want ErrStaleCheckpoint", name, err)
		}
	}
	if p, err := s.LatestCheckpoint(ctx, "job"); err != nil || !reflect.DeepEqual(p, ptr(3)) {
		t.Fatalf("LatestCheckpoint = %+v, %v; want %+v", p, err, ptr(3))
	}
	putPointer(t, s, "job", ptr(4))
	m := model{}
	m.put("job", "g", "s")
	p4 := ptr(4)
	m["job"].Latest = &p4
	m.check(t, s)
}

func testCounters(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	putJob(t, s, "j1", "g", "s")
	putJob(t, s, "j2", "g", "s")
	for want := int64(1); want <= 3; want++ {
		if got := nextID(t, s, "j1"); got != want {
			t.Fatalf("NextCheckpointID j1 = %d, want %d", got, want)
		}
	}
	if got := nextID(t, s, "j2"); got != 1 {
		t.Fatalf("first NextCheckpointID of another job = %d, want 1", got)
	}
	for want := int64(1); want <= 3; want++ {
		if got := nextTerm(t, s); got != want {
			t.Fatalf("NextTerm = %d, want %d", got, want)
		}
	}
	m := model{}
	m.put("j1", "g", "s")
	m.put("j2", "g", "s")
	m["j1"].LastCheckpointID, m["j2"].LastCheckpointID = 3, 1
	m.check(t, s)
}

func testConcurrentCheckpointIDs(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	putJob(t, s, "job", "g", "s")
	const workers, each = 4, 5
	var mu sync.Mutex
	var ids, terms []int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				id, err := s.NextCheckpointID(t.Context(), "job")
				if err != nil {
					t.Errorf("NextCheckpointID: %v", err)
					return
				}
				term, err := s.NextTerm(t.Context())
				if err != nil {
					t.Errorf("NextTerm: %v", err)
					return
				}
				mu.Lock()
				ids, terms = append(ids, id), append(terms, term)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var want []int64
	for i := range int64(workers * each) {
		want = append(want, i+1)
	}
	slices.Sort(ids)
	slices.Sort(terms)
	if !slices.Equal(ids, want) || !slices.Equal(terms, want) {
		t.Fatalf("concurrent allocations: ids %v, terms %v; want each of 1..%d once", ids, terms, workers*each)
	}
}

func testPutJobKeepsCheckpoints(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	putJob(t, s, "job", "g1", "RUNNING")
	putPointer(t, s, "job", ptr(2))
	nextID(t, s, "job")
	nextID(t, s, "job")
	putJob(t, s, "job", "g2", "RUNNING")
	m := model{}
	m.put("job", "g2", "RUNNING")
	p2 := ptr(2)
	m["job"].Latest, m["job"].LastCheckpointID = &p2, 2
	m.check(t, s)
	if got := nextID(t, s, "job"); got != 3 {
		t.Fatalf("NextCheckpointID after PutJob = %d, want 3", got)
	}
}

func testDelete(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	ctx := t.Context()
	for _, id := range []string{"job", "job-2"} {
		putJob(t, s, id, "g", "s")
		putPointer(t, s, id, ptr(5))
		nextID(t, s, id)
	}
	if err := s.DeleteJob(ctx, "job"); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}
	if err := s.DeleteJob(ctx, "job"); err != nil {
		t.Fatalf("DeleteJob twice: %v", err)
	}
	m := model{}
	m.put("job-2", "g", "s")
	p5 := ptr(5)
	m["job-2"].Latest, m["job-2"].LastCheckpointID = &p5, 1
	m.check(t, s)

	// A new job of the same id starts afresh.
	putJob(t, s, "job", "g-new", "s")
	if _, err := s.LatestCheckpoint(ctx, "job"); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("LatestCheckpoint of a recreated job = %v, want ErrNotFound", err)
	}
	if got := nextID(t, s, "job"); got != 1 {
		t.Fatalf("NextCheckpointID of a recreated job = %d, want 1", got)
	}
	m.put("job", "g-new", "s")
	m["job"].LastCheckpointID = 1
	m.check(t, s)
}

func testReopen(t *testing.T, s jobstore.Store, reopen func() jobstore.Store) {
	m := model{}
	for _, id := range []string{"a", "b", "c"} {
		putJob(t, s, id, "graph-"+id, "RUNNING")
		m.put(id, "graph-"+id, "RUNNING")
	}
	putPointer(t, s, "a", ptr(7))
	p7 := ptr(7)
	m["a"].Latest = &p7
	for range 7 {
		nextID(t, s, "a")
	}
	m["a"].LastCheckpointID = 7
	nextID(t, s, "b")
	m["b"].LastCheckpointID = 1
	nextTerm(t, s)
	nextTerm(t, s)
	if err := s.DeleteJob(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	delete(m, "c")

	s = reopen()
	m.check(t, s)
	if p, err := s.LatestCheckpoint(t.Context(), "a"); err != nil || !reflect.DeepEqual(p, p7) {
		t.Fatalf("LatestCheckpoint after reopening = %+v, %v; want %+v", p, err, p7)
	}
	if got := nextID(t, s, "a"); got != 8 {
		t.Fatalf("NextCheckpointID after reopening = %d, want 8", got)
	}
	if got := nextTerm(t, s); got != 3 {
		t.Fatalf("NextTerm after reopening = %d, want 3", got)
	}
}

func testBadInput(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	ctx := t.Context()
	putJob(t, s, "j", "g", "s")
	huge := make([]byte, jobstore.MaxValueSize+1)
	tests := []struct {
		name, want string
		err        error
	}{
		{"empty id", "job id", s.PutJob(ctx, "", nil, nil)},
		{"slash in id", "a/b", s.PutJob(ctx, "a/b", nil, nil)},
		{"space in id", "a b", s.PutJobStatus(ctx, "a b", nil)},
		{"slash in id of a pointer", "x/y", s.PutLatestCheckpoint(ctx, "x/y", ptr(1))},
		{"huge graph", "store it in checkpoint storage", s.PutJob(ctx, "k", huge, nil)},
		{"huge status", "store it in checkpoint storage", s.PutJob(ctx, "k", nil, huge)},
		{"huge status update", "store it in checkpoint storage", s.PutJobStatus(ctx, "j", huge)},
		{"zero pointer", "not positive", s.PutLatestCheckpoint(ctx, "j", jobstore.Pointer{})},
		{"short sha", "64 lowercase hex", s.PutLatestCheckpoint(ctx, "j", jobstore.Pointer{ID: 1, ManifestKey: "k", ManifestSHA256: "abc"})},
		{"upper sha", "64 lowercase hex", s.PutLatestCheckpoint(ctx, "j", jobstore.Pointer{ID: 1, ManifestKey: "k", ManifestSHA256: strings.ToUpper(sum("k"))})},
		{"not hex", "not hex", s.PutLatestCheckpoint(ctx, "j", jobstore.Pointer{ID: 1, ManifestKey: "k", ManifestSHA256: strings.Repeat("g", 64)})},
		{"empty manifest key", "empty manifest key", s.PutLatestCheckpoint(ctx, "j", jobstore.Pointer{ID: 1, ManifestSHA256: sum("k")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", tt.err, tt.want)
			}
			if errors.Is(tt.err, jobstore.ErrNotFound) {
				t.Fatalf("error %v wraps ErrNotFound; bad input is checked first", tt.err)
			}
		})
	}
	m := model{}
	m.put("j", "g", "s")
	m.check(t, s)
	if _, err := s.LatestCheckpoint(ctx, "j"); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("LatestCheckpoint after rejected pointers = %v, want ErrNotFound", err)
	}
}

func testConfirm(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	if err := s.Confirm(t.Context(), "delete checkpoint files"); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
}

func testCanceled(t *testing.T, s jobstore.Store, _ func() jobstore.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.PutJob(ctx, "job", []byte("g"), []byte("s")); err == nil {
		t.Fatalf("PutJob with a canceled context succeeded")
	}
	if _, err := s.ListJobs(ctx); err == nil {
		t.Fatalf("ListJobs with a canceled context succeeded")
	}
	model{}.check(t, s)
}
