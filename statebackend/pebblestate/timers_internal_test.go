package pebblestate

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// timerRange is the key groups of the timer tests.
var timerRange = stream.KeyGroupRange{Start: 0, End: 7}

type modelTimer struct {
	ts  int64
	kg  int
	key string
}

func (m modelTimer) String() string { return fmt.Sprintf("%s@%d/%d", m.key, m.ts, m.kg) }

func timerKG(key string) int { return int(key[len(key)-1]) % timerRange.Len() }

// checkTimerIndex checks the invariants of the timer index of both of b's
// timer domains against the timers in Pebble: every indexed timer exists;
// with timersAll the index holds every timer of the key group, with
// timersUpTo every timer up to its bound; and it holds no more than its
// share, or one timer.
func checkTimerIndex(t *testing.T, what string, b *Backend) {
	t.Helper()
	b.flush()
	checkQueueIndex(t, what+": event-time timers", b, &b.timers.event)
	checkQueueIndex(t, what+": processing-time timers", b, &b.timers.proc)
}

func checkQueueIndex(t *testing.T, what string, b *Backend, q *timerQueue) {
	t.Helper()
	// One iterator over all key groups, sought to each key group's timers
	// in turn: under -race each iterator Pebble opens over a file records
	// a stack, and this runs after every step of TestTimerIndex.
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: q.dom.prefix(b.kg.Start), UpperBound: q.dom.end(b.kg.End)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	for i := range q.idx {
		x := &q.idx[i]
		kg := b.kg.Start + i
		stored := map[string]bool{}
		end := q.dom.end(kg)
		for ok := it.SeekGE(q.dom.prefix(kg)); ok && bytes.Compare(it.Key(), end) < 0; ok = it.Next() {
			stored[string(it.Key()[q.at:])] = true
		}
		if err := it.Error(); err != nil {
			t.Fatal(err)
		}
		var indexed []string
		for _, blk := range x.set.blocks {
			indexed = append(indexed, blk...)
		}
		switch {
		case !slices.IsSorted(indexed) || len(indexed) != x.set.n:
			t.Fatalf("%s: key group %d: index of %d timers is not a sorted set of %d", what, kg, len(indexed), x.set.n)
		case x.set.bytes > q.share && x.set.n > 1:
			t.Fatalf("%s: key group %d: index holds %d timers in %d bytes, over its share of %d", what, kg, x.set.n, x.set.bytes, q.share)
		}
		for _, s := range indexed {
			if !stored[s] {
				t.Fatalf("%s: key group %d: indexed timer %x does not exist", what, kg, s)
			}
		}
		for s := range stored {
			if (x.state == timersAll || x.state == timersUpTo && s <= x.upto) && !slices.Contains(indexed, s) {
				t.Fatalf("%s: key group %d: timer %x is not indexed, but the index is complete up to %x (state %d)", what, kg, s, x.upto, x.state)
			}
		}
	}
}

// timerOps are the calls of one timer domain.
type timerOps struct {
	name     string
	register func(statebackend.TimerService, int64)
	delete   func(statebackend.TimerService, int64)
	advance  func(statebackend.TimerService, int64, func([]byte, int, int64) error) error
}

var timerDomains = []timerOps{
	{"event", statebackend.TimerService.RegisterEventTimeTimer, statebackend.TimerService.DeleteEventTimeTimer, statebackend.TimerService.AdvanceWatermark},
	{"processing", statebackend.TimerService.RegisterProcessingTimeTimer, statebackend.TimerService.DeleteProcessingTimeTimer, statebackend.TimerService.AdvanceProcessingTime},
}

// TestTimerIndex drives the timers of one domain through registrations,
// deletions, firings (which register and delete more), full snapshots
// restored into a new backend, and changelog snapshots opened with
// OpenFromCheckpoint, with indexes of one to a few timers per key group,
// and checks the fired timers against a model and the index's invariants
// against Pebble after every step. Timers of the other domain are
// registered alongside, at the same times: they must never fire. Both
// domains run the same code over other keys, so processing time runs with
// one seed per index size; event time with three with WEIR_LONG_TESTS=1,
// and one by default (each run opens about 60 databases).
func TestTimerIndex(t *testing.T) {
	t.Parallel()
	for i, dom := range timerDomains {
		other := timerDomains[1-i]
		seeds := uint64(1)
		if LongTests() {
			seeds = uint64(3 - 2*i)
		}
		for _, timerBytes := range []int64{1, 8 * 3 * 64, 8 * 20 * 64} {
			for seed := range seeds {
				t.Run(fmt.Sprintf("%s/timercache=%d/seed=%d", dom.name, timerBytes, seed), func(t *testing.T) {
					t.Parallel() // every run has its own backends and directories
					testTimerIndex(t, dom, other, timerBytes, seed)
				})
			}
		}
	}
}

func testTimerIndex(t *testing.T, dom, other timerOps, timerBytes int64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(timerBytes)))
	root := t.TempDir()
	dirs := 0
	newOpts := func() Options {
		dirs++
		return NoSync(Options{Dir: filepath.Join(root, fmt.Sprint("db-", dirs)), TimerCacheBytes: timerBytes, DeleteOnClose: true})
	}
	b, err := New(newOpts(), timerRange)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	model := map[modelTimer]bool{}
	var wm int64 = 100 // timers are at wm-10 and later: none negative
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	fired := 0
	for step := range 600 {
		key := keys[rng.IntN(len(keys))]
		b.SetCurrentKey([]byte(key), timerKG(key))
		ts := wm + rng.Int64N(300) - 10
		switch op := rng.IntN(100); {
		case op < 50:
			dom.register(b.Timers(), ts)
			model[modelTimer{ts, timerKG(key), key}] = true
			if op < 12 {
				other.register(b.Timers(), ts)
			}
		case op < 65:
			dom.delete(b.Timers(), ts)
			delete(model, modelTimer{ts, timerKG(key), key})
		case op < 70:
			// Delete one that exists.
			for m := range model {
				if m.key == key {
					dom.delete(b.Timers(), m.ts)
					delete(model, m)
					break
				}
			}
		case op < 90:
			w := wm + rng.Int64N(80) // the watermark never goes down
			var got, want []string
			err := dom.advance(b.Timers(), w, func(k []byte, kg int, ts int64) error {
				got = append(got, modelTimer{ts, kg, string(k)}.String())
				if ts%4 == 0 { // at or below the watermark: fires in this call
					dom.register(b.Timers(), ts+1+ts%3)
				}
				if ts%5 == 0 {
					dom.delete(b.Timers(), ts+7)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wm = max(wm, w)
			// The model fires the same way, one timer at a time.
			for {
				var due []modelTimer
				for m := range model {
					if m.ts <= wm {
						due = append(due, m)
					}
				}
				if len(due) == 0 {
					break
				}
				m := slices.MinFunc(due, func(x, y modelTimer) int {
					return cmp.Or(cmp.Compare(x.ts, y.ts), cmp.Compare(x.kg, y.kg), strings.Compare(x.key, y.key))
				})
				delete(model, m)
				want = append(want, m.String())
				if m.ts%4 == 0 {
					model[modelTimer{m.ts + 1 + m.ts%3, m.kg, m.key}] = true
				}
				if m.ts%5 == 0 {
					delete(model, modelTimer{m.ts + 7, m.kg, m.key})
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: watermark %d fired %v\nwant %v", step, w, got, want)
			}
			fired += len(got)
		case op < 95:
			c := &stream.SnapshotContext{CheckpointID: int64(step), KeyGroups: timerRange}
			if err := b.Snapshot(c); err != nil {
				t.Fatal(err)
			}
			r, err := New(newOpts(), timerRange)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Restore(&stream.RestoreContext{CheckpointID: int64(step), KeyGroups: timerRange, State: &c.State}); err != nil {
				t.Fatal(err)
			}
			b.Close()
			b = r
		default:
			dir := filepath.Join(root, fmt.Sprint("snap-", step))
			if _, err := b.SnapshotFiles(dir); err != nil {
				t.Fatal(err)
			}
			r, err := OpenFromCheckpoint(newOpts(), dir, timerRange)
			if err != nil {
				t.Fatal(err)
			}
			b.Close()
			b = r
		}
		if err := b.Err(); err != nil {
			t.Fatal(err)
		}
		checkTimerIndex(t, fmt.Sprintf("step %d", step), b)
	}
	if fired < 100 {
		t.Fatalf("only %d timers fired", fired)
	}

}

// TestTimerIndexSparesPebble checks that registering timers the index holds
// and firing them neither reads Pebble (the point-read iterator stays
// closed) nor opens an iterator (which would commit the batch first).
func TestTimerIndexSparesPebble(t *testing.T) {
	b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), DeleteOnClose: true}, timerRange)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	register := func() {
		for i := range 500 {
			key := fmt.Sprint("key-", i)
			b.SetCurrentKey([]byte(key), timerKG(key))
			b.Timers().RegisterEventTimeTimer(int64(1000 + i%7))
		}
	}
	register()
	if err := b.commit(); err != nil {
		t.Fatal(err)
	}
	register()
	if b.rd != nil || !b.batch.Empty() {
		t.Fatalf("registering known timers again read Pebble (%v) or wrote %d records", b.rd != nil, b.batch.Count())
	}
	n := uint32(0)
	err = b.Timers().AdvanceWatermark(2000, func([]byte, int, int64) error {
		n++
		if b.rd != nil || b.batch.Count() != n {
			return fmt.Errorf("timer %d: Pebble read (%v) or batch committed (%d records)", n, b.rd != nil, b.batch.Count())
		}
		return nil
	})
	if err != nil || n != 500 {
		t.Fatalf("fired %d timers of 500: %v", n, err)
	}
}

// TestLayoutVersion checks that a database moves to layoutV2 with its
// first processing-time timer, registered or restored, and not before, so
// that a database without any is still opened by builds that read only
// layoutV1; and that an unknown version is refused naming the versions
// read.
func TestLayoutVersion(t *testing.T) {
	root := t.TempDir()
	layout := func(b *Backend) byte {
		t.Helper()
		if err := b.commit(); err != nil {
			t.Fatal(err)
		}
		v, err := loadLayout(b.db, b.opts.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if v != b.layout {
			t.Fatalf("stored layout version %d, the backend says %d", v, b.layout)
		}
		return v
	}
	newBackend := func(name string) *Backend {
		b, err := New(Options{Dir: filepath.Join(root, name), DeleteOnClose: true}, timerRange)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b := newBackend("a")
	b.SetCurrentKey([]byte("k"), 1)
	b.Timers().RegisterEventTimeTimer(5)
	b.Timers().DeleteProcessingTimeTimer(5)
	if v := layout(b); v != layoutV1 {
		t.Fatalf("layout version %d with event-time timers only, want %d", v, layoutV1)
	}
	b.Timers().RegisterProcessingTimeTimer(5)
	if v := layout(b); v != layoutV2 {
		t.Fatalf("layout version %d with a processing-time timer, want %d", v, layoutV2)
	}

	// A restore of a chunk with processing-time timers, and one without.
	c := &stream.SnapshotContext{KeyGroups: timerRange}
	if err := b.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	r := newBackend("b")
	if err := r.Restore(&stream.RestoreContext{KeyGroups: timerRange, State: &c.State}); err != nil {
		t.Fatal(err)
	}
	if v := layout(r); v != layoutV2 {
		t.Fatalf("layout version %d after restoring a processing-time timer, want %d", v, layoutV2)
	}
	if err := b.Timers().AdvanceProcessingTime(10, func([]byte, int, int64) error { return nil }); err != nil {
		t.Fatal(err)
	}
	c = &stream.SnapshotContext{KeyGroups: timerRange}
	if err := b.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	r = newBackend("c")
	if err := r.Restore(&stream.RestoreContext{KeyGroups: timerRange, State: &c.State}); err != nil {
		t.Fatal(err)
	}
	if v := layout(r); v != layoutV1 {
		t.Fatalf("layout version %d after restoring event-time timers only, want %d", v, layoutV1)
	}

	// A version this build does not know.
	if err := r.batchSet(metaVersionKey, []byte{3}); err != nil {
		t.Fatal(err)
	}
	if err := r.commit(); err != nil {
		t.Fatal(err)
	}
	_, err := loadLayout(r.db, r.opts.Dir)
	if err == nil || !strings.Contains(err.Error(), "key layout version [3], this build reads versions 1 and 2") {
		t.Fatalf("error %v for layout version 3", err)
	}
}
