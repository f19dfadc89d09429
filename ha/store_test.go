package ha

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/internal/syncbuf"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func ptr(id int64) Pointer {
	key := fmt.Sprintf("job/chk-%d/_manifest", id)
	return Pointer{ID: id, ManifestKey: key, ManifestSHA256: sum(key)}
}

func TestStoreJobs(t *testing.T) {
	srv := etcdtest.Start(t)
	c := connect(t, testConfig(srv, 5*time.Second, nil))
	l := waitCampaign(t, campaignAsync(t.Context(), c, "jm"), 5*time.Second)
	s := l.Store()
	ctx := t.Context()

	// What we expect etcd to hold, kept independently of the store.
	want := map[string]*JobRecord{}
	put := func(id, graph, status string) {
		t.Helper()
		if err := s.PutJob(ctx, id, []byte(graph), []byte(status)); err != nil {
			t.Fatalf("PutJob %s: %v", id, err)
		}
		r, ok := want[id]
		if !ok {
			r = &JobRecord{ID: id}
			want[id] = r
		}
		r.Graph, r.Status = []byte(graph), []byte(status)
	}
	check := func() {
		t.Helper()
		got, err := s.ListJobs(ctx)
		if err != nil {
			t.Fatalf("ListJobs: %v", err)
		}
		var exp []JobRecord
		for _, r := range want {
			exp = append(exp, *r)
		}
		slices.SortFunc(exp, func(a, b JobRecord) int { return strings.Compare(a.ID, b.ID) })
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("ListJobs =\n%+v\nwant\n%+v", got, exp)
		}
	}

	check()
	put("job-b", "graph-b", "CREATED")
	put("job-a", "graph-a", "CREATED")
	// A job whose id is a prefix of another's stays separate.
	put("job-a1", "graph-a1", "RUNNING")
	put("job-a", "graph-a2", "SCHEDULED") // replace
	check()

	if err := s.PutJobStatus(ctx, "job-b", []byte("RUNNING")); err != nil {
		t.Fatalf("PutJobStatus: %v", err)
	}
	want["job-b"].Status = []byte("RUNNING")
	check()

	if _, err := s.LatestCheckpoint(ctx, "job-a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LatestCheckpoint before any = %v, want ErrNotFound", err)
	}
	for _, id := range []int64{1, 3} {
		if err := s.PutLatestCheckpoint(ctx, "job-a", ptr(id)); err != nil {
			t.Fatalf("PutLatestCheckpoint %d: %v", id, err)
		}
	}
	if err := s.PutLatestCheckpoint(ctx, "job-a", ptr(3)); err != nil {
		t.Fatalf("PutLatestCheckpoint of the same pointer again: %v", err)
	}
	if err := s.PutLatestCheckpoint(ctx, "job-a", ptr(2)); !errors.Is(err, ErrStaleCheckpoint) {
		t.Fatalf("PutLatestCheckpoint backwards = %v, want ErrStaleCheckpoint", err)
	}
	other := ptr(3)
	other.ManifestKey = "elsewhere"
	if err := s.PutLatestCheckpoint(ctx, "job-a", other); !errors.Is(err, ErrStaleCheckpoint) {
		t.Fatalf("PutLatestCheckpoint of a different checkpoint 3 = %v, want ErrStaleCheckpoint", err)
	}
	if p, err := s.LatestCheckpoint(ctx, "job-a"); err != nil || !reflect.DeepEqual(p, ptr(3)) {
		t.Fatalf("LatestCheckpoint = %+v, %v; want %+v", p, err, ptr(3))
	}
	p3 := ptr(3)
	want["job-a"].Latest = &p3
	for i := range 2 {
		if _, err := s.NextCheckpointID(ctx, "job-a1"); err != nil {
			t.Fatalf("NextCheckpointID %d: %v", i, err)
		}
	}
	want["job-a1"].LastCheckpointID = 2
	check()

	if err := s.DeleteJob(ctx, "job-a"); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}
	delete(want, "job-a")
	if err := s.DeleteJob(ctx, "job-a"); err != nil {
		t.Fatalf("DeleteJob twice: %v", err)
	}
	check()

	// Operations on unknown jobs.
	for name, err := range map[string]error{
		"PutJobStatus":        s.PutJobStatus(ctx, "job-a", []byte("x")),
		"PutLatestCheckpoint": s.PutLatestCheckpoint(ctx, "job-a", ptr(9)),
		"LatestCheckpoint":    func() error { _, err := s.LatestCheckpoint(ctx, "job-a"); return err }(),
		"NextCheckpointID":    func() error { _, err := s.NextCheckpointID(ctx, "job-a"); return err }(),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of a deleted job = %v, want ErrNotFound", name, err)
		}
	}
	check()
	if n := s.FencedWrites(); n != 0 {
		t.Errorf("FencedWrites = %d for a live leader", n)
	}
}

func TestStoreRejectsBadInput(t *testing.T) {
	srv := etcdtest.Start(t)
	c := connect(t, testConfig(srv, 5*time.Second, nil))
	l := waitCampaign(t, campaignAsync(t.Context(), c, "jm"), 5*time.Second)
	s := l.Store()
	ctx := t.Context()
	tests := []struct {
		name, want string
		err        error
	}{
		{"empty id", "job id", s.PutJob(ctx, "", nil, nil)},
		{"slash in id", "must not contain", s.PutJob(ctx, "a/b", nil, nil)},
		{"space in id", "must not contain", s.PutJobStatus(ctx, "a b", nil)},
		{"huge graph", "store it in checkpoint storage", s.PutJob(ctx, "j", make([]byte, MaxValueSize+1), nil)},
		{"zero pointer", "not positive", s.PutLatestCheckpoint(ctx, "j", Pointer{})},
		{"bad sha", "64 lowercase hex", s.PutLatestCheckpoint(ctx, "j", Pointer{ID: 1, ManifestKey: "k", ManifestSHA256: "abc"})},
		{"upper sha", "64 lowercase hex", s.PutLatestCheckpoint(ctx, "j", Pointer{ID: 1, ManifestKey: "k", ManifestSHA256: strings.ToUpper(sum("k"))})},
		{"empty manifest key", "empty manifest key", s.PutLatestCheckpoint(ctx, "j", Pointer{ID: 1, ManifestSHA256: sum("k")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", tt.err, tt.want)
			}
		})
	}
	if jobs, err := s.ListJobs(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("ListJobs after rejected writes = %+v, %v; want none", jobs, err)
	}
}

// TestFencedWrites: a leader that was replaced but has not noticed (a
// paused process) must not change anything.
func TestFencedWrites(t *testing.T) {
	srv := etcdtest.Start(t)
	logs := &syncbuf.Buffer{}
	cfg := testConfig(srv, 5*time.Second, logs)
	a, b := connect(t, cfg), connect(t, cfg)
	la := waitCampaign(t, campaignAsync(t.Context(), a, "jm-a"), 5*time.Second)
	ctx := t.Context()
	if err := la.Store().PutJob(ctx, "job", []byte("graph-a"), []byte("RUNNING")); err != nil {
		t.Fatalf("PutJob: %v", err)
	}
	if id, err := la.Store().NextCheckpointID(ctx, "job"); err != nil || id != 1 {
		t.Fatalf("NextCheckpointID = %d, %v; want 1", id, err)
	}

	// The zombie: a's leadership as a paused process remembers it, blind to
	// everything since (no keep-alives, no watch).
	zombie := &Leadership{c: a, id: la.ID(), key: la.Key(), lost: make(chan struct{})}
	zombie.epoch.Store(la.Epoch())
	zs := newStore(a, zombie)

	bch := campaignAsync(ctx, b, "jm-b")
	if err := la.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	lb := waitCampaign(t, bch, 5*time.Second)
	if err := lb.Store().PutJobStatus(ctx, "job", []byte("RECOVERING")); err != nil {
		t.Fatalf("new leader PutJobStatus: %v", err)
	}

	writes := []struct {
		name string
		do   func() error
	}{
		{"PutJobStatus", func() error { return zs.PutJobStatus(ctx, "job", []byte("ZOMBIE")) }},
		{"PutJob", func() error { return zs.PutJob(ctx, "job", []byte("zombie graph"), nil) }},
		{"PutLatestCheckpoint", func() error { return zs.PutLatestCheckpoint(ctx, "job", ptr(7)) }},
		{"NextCheckpointID", func() error { _, err := zs.NextCheckpointID(ctx, "job"); return err }},
		{"DeleteJob", func() error { return zs.DeleteJob(ctx, "job") }},
	}
	for i, w := range writes {
		err := w.do()
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("zombie %s = %v, want ErrFenced", w.name, err)
		}
		if i == 0 {
			// The first refusal reached etcd and names the new leader.
			if !strings.Contains(err.Error(), `"jm-b"`) {
				t.Errorf("fenced error %q does not name the new leader", err)
			}
			// and ends the zombie's leadership.
			waitClosed(t, zombie.Lost(), time.Second, "zombie Lost after a fenced write")
		}
		if got := zs.FencedWrites(); got != int64(i+1) {
			t.Fatalf("FencedWrites after %d refused writes = %d", i+1, got)
		}
	}
	if got := a.FencedWrites(); got != int64(len(writes)) {
		t.Errorf("Client.FencedWrites = %d, want %d", got, len(writes))
	}
	// The real (resigned) leadership is refused locally, and counted too.
	if err := la.Store().PutJobStatus(ctx, "job", []byte("ZOMBIE")); !errors.Is(err, ErrFenced) {
		t.Fatalf("resigned leader PutJobStatus = %v, want ErrFenced", err)
	}
	if got := a.FencedWrites(); got != int64(len(writes))+1 {
		t.Errorf("Client.FencedWrites = %d, want %d", got, len(writes)+1)
	}
	if n := strings.Count(logs.String(), "fenced write refused"); n != len(writes)+1 {
		t.Errorf("logged %d fenced writes, want %d:\n%s", n, len(writes)+1, logs)
	}

	// Nothing the zombie did is visible.
	jobs, err := lb.Store().ListJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []JobRecord{{ID: "job", Graph: []byte("graph-a"), Status: []byte("RECOVERING"), LastCheckpointID: 1}}
	if !reflect.DeepEqual(jobs, want) {
		t.Fatalf("jobs after zombie writes = %+v, want %+v", jobs, want)
	}
	if lb.Store().FencedWrites() != 0 {
		t.Errorf("the live leader counted fenced writes")
	}
}

func TestNextCheckpointIDAcrossLeaders(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := testConfig(srv, 5*time.Second, nil)
	a, b := connect(t, cfg), connect(t, cfg)
	ctx := t.Context()
	la := waitCampaign(t, campaignAsync(ctx, a, "jm-a"), 5*time.Second)
	for _, job := range []string{"j1", "j2"} {
		if err := la.Store().PutJob(ctx, job, []byte("g"), []byte("s")); err != nil {
			t.Fatal(err)
		}
	}

	// Concurrent allocations by one leader never collide.
	const workers, each = 4, 5
	var mu sync.Mutex
	var got []int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				id, err := la.Store().NextCheckpointID(ctx, "j1")
				if err != nil {
					t.Errorf("NextCheckpointID: %v", err)
					return
				}
				mu.Lock()
				got = append(got, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	var want []int64
	for i := range int64(workers * each) {
		want = append(want, i+1)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("allocated ids %v, want %v", got, want)
	}
	if id, err := la.Store().NextCheckpointID(ctx, "j2"); err != nil || id != 1 {
		t.Fatalf("first id of another job = %d, %v; want 1", id, err)
	}

	// The next leader continues after the last id of the previous one.
	bch := campaignAsync(ctx, b, "jm-b")
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb := waitCampaign(t, bch, 5*time.Second)
	prev := int64(workers * each)
	for range 3 {
		id, err := lb.Store().NextCheckpointID(ctx, "j1")
		if err != nil {
			t.Fatal(err)
		}
		if id != prev+1 {
			t.Fatalf("new leader allocated %d after %d", id, prev)
		}
		prev = id
	}
	jobs, err := lb.Store().ListJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].LastCheckpointID != prev || jobs[1].LastCheckpointID != 1 {
		t.Fatalf("ListJobs = %+v; want j1 at %d and j2 at 1", jobs, prev)
	}
}
