package dataflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// ckState is what the checkpointing test operators of one run report to.
type ckState struct {
	// holdAt: sources emit ids below it, then stay idle (no limit when < 0).
	holdAt  atomic.Int64
	emitted atomic.Int64
	// slow, if set before the tasks start, makes kcount take a value from
	// it before each batch (closed: no wait).
	slow chan struct{}

	mu     sync.Mutex
	counts map[string]map[int64]int64 // kcount state at Finish, by "uid/subtask"
	events map[string][]string        // kcount notifications and finish, by "uid/subtask"
	octx   map[string]stream.OperatorContext
}

func newCkState() *ckState {
	s := &ckState{counts: map[string]map[int64]int64{}, events: map[string][]string{}, octx: map[string]stream.OperatorContext{}}
	s.holdAt.Store(-1)
	return s
}

func (s *ckState) event(who, what string) {
	s.mu.Lock()
	s.events[who] = append(s.events[who], what)
	s.mu.Unlock()
}

func (s *ckState) eventsOf(who string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events[who]...)
}

// ckgenConfig configures the "ckgen" source: subtask s of p emits ids s,
// s+p, s+2p, … below Rows (forever when Rows < 0) with key id%Keys, in
// batches of Batch rows, each followed by a watermark. Its position (the
// next id) is its operator list state "pos".
type ckgenConfig struct {
	Rows  int64 `json:"rows"`
	Batch int   `json:"batch"`
	Keys  int64 `json:"keys"`
	// NoWatermarks: no watermark after each batch (which would send what
	// a channel to a peer holds to coalesce it).
	NoWatermarks bool `json:"noWatermarks"`
}

type ckgenSource struct {
	st       *ckState
	cfg      ckgenConfig
	next     int64
	step     int64
	restored bool
	names    []string
}

var (
	_ stream.Source       = (*ckgenSource)(nil)
	_ stream.Checkpointed = (*ckgenSource)(nil)
)

func (g *ckgenSource) Open(_ context.Context, octx *stream.OperatorContext) error {
	if !g.restored {
		g.next = int64(octx.Subtask)
	}
	g.step = int64(octx.Parallelism)
	if g.cfg.Batch <= 0 {
		g.cfg.Batch = 16
	}
	if g.cfg.Keys <= 0 {
		g.cfg.Keys = 10
	}
	g.names = make([]string, g.cfg.Keys)
	for k := range g.names {
		g.names[k] = fmt.Sprintf("n%d", k)
	}
	return nil
}

func (g *ckgenSource) Close() error { return nil }

func (g *ckgenSource) SnapshotState(c *stream.SnapshotContext) error {
	c.AddListState("pos", binary.LittleEndian.AppendUint64(nil, uint64(g.next)))
	return nil
}

func (g *ckgenSource) RestoreState(c *stream.RestoreContext) error {
	items := c.State.List["pos"]
	if len(items) != 1 || len(items[0]) != 8 {
		return fmt.Errorf("want one 8-byte position, got %d items", len(items))
	}
	g.next = int64(binary.LittleEndian.Uint64(items[0]))
	g.restored = true
	return nil
}

func (g *ckgenSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if g.cfg.Rows >= 0 && g.next >= g.cfg.Rows {
		return stream.PollEnd, nil
	}
	hold := g.st.holdAt.Load()
	if hold >= 0 && g.next >= hold {
		return stream.PollIdle, nil
	}
	b := stream.NewBatch(genSchema, g.cfg.Batch)
	ids, keys, names := b.Cols[0].Ints, b.Cols[1].Ints, b.Cols[2].Strs
	for len(ids) < g.cfg.Batch && (g.cfg.Rows < 0 || g.next < g.cfg.Rows) && (hold < 0 || g.next < hold) {
		k := g.next % g.cfg.Keys
		ids = append(ids, g.next)
		keys = append(keys, k)
		names = append(names, g.names[k])
		g.next += g.step
	}
	b.Cols[0].Ints, b.Cols[1].Ints, b.Cols[2].Strs = ids, keys, names
	b.SetLen(len(ids))
	g.st.emitted.Add(int64(len(ids)))
	last := ids[len(ids)-1]
	out.Collect(b)
	if !g.cfg.NoWatermarks {
		out.EmitWatermark(last)
	}
	return stream.PollEmitted, nil
}

// kcountConfig configures "kcount", a keyed running count per key (column
// "key") kept as keyed state, one 16-byte (key, count) record per key in
// the chunk of its key group. It is a sink; it records its counts and its
// checkpoint notifications in the ckState. FailSnapshot makes the snapshot
// of that checkpoint fail.
type kcountConfig struct {
	FailSnapshot int64 `json:"failSnapshot"`
}

type keyCount struct {
	n  int64
	kg int
}

type kcount struct {
	stream.BaseOperator
	st     *ckState
	cfg    kcountConfig
	who    string
	maxPar int
	kgs    stream.KeyGroupRange
	counts map[int64]*keyCount
	hashes []uint64
}

var (
	_ stream.Checkpointed       = (*kcount)(nil)
	_ stream.CheckpointListener = (*kcount)(nil)
)

func (c *kcount) Open(_ context.Context, octx *stream.OperatorContext) error {
	c.who = fmt.Sprintf("%s/%d", octx.OperatorUID, octx.Subtask)
	c.maxPar, c.kgs = octx.MaxParallelism, octx.KeyGroups
	if c.counts == nil {
		c.counts = map[int64]*keyCount{}
	}
	c.st.mu.Lock()
	c.st.octx[c.who] = *octx
	c.st.mu.Unlock()
	return nil
}

func (c *kcount) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	if s := c.st.slow; s != nil {
		<-s
	}
	n := b.Len()
	if cap(c.hashes) < n {
		c.hashes = make([]uint64, n)
	}
	h := c.hashes[:n]
	stream.HashKeys(b, []int{1}, h)
	for i, k := range b.Cols[1].Ints[:n] {
		kc := c.counts[k]
		if kc == nil {
			kg := stream.KeyGroupForHash(h[i], c.maxPar)
			if !c.kgs.Contains(kg) {
				return fmt.Errorf("key %d of key group %d arrived at a subtask owning %v", k, kg, c.kgs)
			}
			kc = &keyCount{kg: kg}
			c.counts[k] = kc
		}
		kc.n++
	}
	b.Release()
	return nil
}

func (c *kcount) ProcessWatermark(int64, stream.Collector) error { return nil }

func (c *kcount) Finish(stream.Collector) error {
	c.st.mu.Lock()
	c.st.counts[c.who] = c.snapshotCounts()
	c.st.events[c.who] = append(c.st.events[c.who], "finish")
	c.st.mu.Unlock()
	return nil
}

func (c *kcount) snapshotCounts() map[int64]int64 {
	m := make(map[int64]int64, len(c.counts))
	for k, kc := range c.counts {
		m[k] = kc.n
	}
	return m
}

// Errors of kcount, for errors.Is.
var (
	errInjectedSnapshot = errors.New("injected snapshot failure")
	errBadChunk         = errors.New("not a list of 16-byte records")
)

func (c *kcount) SnapshotState(sc *stream.SnapshotContext) error {
	if c.cfg.FailSnapshot == sc.CheckpointID {
		return errInjectedSnapshot
	}
	chunks := map[int][]byte{}
	for k, kc := range c.counts {
		b := chunks[kc.kg]
		b = binary.LittleEndian.AppendUint64(b, uint64(k))
		chunks[kc.kg] = binary.LittleEndian.AppendUint64(b, uint64(kc.n))
	}
	for kg, b := range chunks {
		sc.WriteKeyGroup(kg, b)
	}
	return nil
}

func (c *kcount) RestoreState(rc *stream.RestoreContext) error {
	c.counts = map[int64]*keyCount{}
	for kg, chunks := range rc.State.Keyed {
		if !rc.KeyGroups.Contains(kg) {
			return fmt.Errorf("key group %d is outside %v", kg, rc.KeyGroups)
		}
		for _, b := range chunks {
			if len(b)%16 != 0 {
				return fmt.Errorf("key group %d: chunk of %d bytes is %w", kg, len(b), errBadChunk)
			}
			for ; len(b) > 0; b = b[16:] {
				k := int64(binary.LittleEndian.Uint64(b))
				c.counts[k] = &keyCount{n: int64(binary.LittleEndian.Uint64(b[8:])), kg: kg}
			}
		}
	}
	return nil
}

func (c *kcount) NotifyCheckpointComplete(id int64) error {
	c.st.event(c.who, fmt.Sprintf("complete %d", id))
	return nil
}

func (c *kcount) NotifyCheckpointAborted(id int64) error {
	c.st.event(c.who, fmt.Sprintf("aborted %d", id))
	return nil
}

// decodeCounts reads a kcount snapshot.
func decodeCounts(t testing.TB, s *stream.OperatorSnapshot) map[int64]int64 {
	t.Helper()
	c := &kcount{}
	if err := c.RestoreState(&stream.RestoreContext{KeyGroups: stream.KeyGroupRange{Start: 0, End: 1 << 30}, State: s}); err != nil {
		t.Fatal(err)
	}
	return c.snapshotCounts()
}

func newCkRegistry(st *ckState) *stream.Registry {
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{
		Name: "ckgen", Kind: stream.KindSource,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
		NewSource: func(config []byte) (stream.Source, error) {
			g := &ckgenSource{st: st}
			return g, stream.DecodeConfig(config, &g.cfg)
		},
	})
	reg.Register(stream.OperatorType{
		Name: "kcount", Kind: stream.KindSink,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func(config []byte) (stream.Operator, error) {
			c := &kcount{st: st}
			return c, stream.DecodeConfig(config, &c.cfg)
		},
	})
	return reg
}

// fakeHooks records one task's checkpoint outcomes.
type fakeHooks struct {
	mu     sync.Mutex
	taken  map[int64]map[string]*stream.OperatorSnapshot
	stats  map[int64]SnapshotStats
	ts     map[int64]int64
	failed map[int64]error
	log    []string
	// onTaken, if set, is called (on the task goroutine) after recording.
	onTaken func(id int64)
}

var _ CheckpointHooks = (*fakeHooks)(nil)

func newFakeHooks() *fakeHooks {
	return &fakeHooks{taken: map[int64]map[string]*stream.OperatorSnapshot{}, stats: map[int64]SnapshotStats{}, ts: map[int64]int64{}, failed: map[int64]error{}}
}

func (h *fakeHooks) SnapshotTaken(id, ts int64, snaps map[string]*stream.OperatorSnapshot, stats SnapshotStats) {
	h.mu.Lock()
	h.taken[id] = snaps
	h.ts[id] = ts
	h.stats[id] = stats
	h.log = append(h.log, fmt.Sprintf("taken %d", id))
	f := h.onTaken
	h.mu.Unlock()
	if f != nil {
		f(id)
	}
}

func (h *fakeHooks) SnapshotFailed(id int64, err error) {
	h.mu.Lock()
	h.failed[id] = err
	h.log = append(h.log, fmt.Sprintf("failed %d", id))
	h.mu.Unlock()
}

func (h *fakeHooks) snaps(id int64) (map[string]*stream.OperatorSnapshot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.taken[id]
	return s, ok
}

func (h *fakeHooks) statsOf(id int64) SnapshotStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats[id]
}

func (h *fakeHooks) timestamp(id int64) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ts[id]
}

func (h *fakeHooks) failure(id int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed[id]
}

func (h *fakeHooks) entries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.log...)
}

// running reports whether t's Run has started and not ended.
func running(t *Task) bool {
	t.ctl.mu.Lock()
	defer t.ctl.mu.Unlock()
	return t.ctl.mu.state == ctlRunning
}

// isBlocked reports whether ch is blocked and how many events it buffers.
func (g *inputGate) isBlocked(ch *inputChannel) (blocked bool, queued int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return ch.blocked, ch.q.len()
}

// ckRun runs tasks, each with its own fakeHooks, in the background.
type ckRun struct {
	tasks  []*Task
	hooks  []*fakeHooks
	errs   []error
	done   []chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startCk builds every spec with checkpointing in mode and starts it.
// restore, if set, gives the state of spec i.
func startCk(t *testing.T, specs []*TaskSpec, reg *stream.Registry, mode stream.CheckpointMode, restoreID int64, restore func(i int) map[string]*stream.OperatorSnapshot, exchangeOf func(*TaskSpec) *Exchange) *ckRun {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &ckRun{cancel: cancel}
	for i, s := range specs {
		h := newFakeHooks()
		s.Checkpointing, s.Mode, s.Hooks = true, mode, h
		if restore != nil {
			s.RestoreCheckpointID, s.Restore = restoreID, restore(i)
		}
		task, err := NewTask(s, reg, exchangeOf(s), nil)
		if err != nil {
			t.Fatalf("NewTask %d: %v", i, err)
		}
		r.tasks = append(r.tasks, task)
		r.hooks = append(r.hooks, h)
		r.done = append(r.done, make(chan struct{}))
	}
	r.errs = make([]error, len(r.tasks))
	for i, task := range r.tasks {
		r.wg.Go(func() {
			defer close(r.done[i])
			r.errs[i] = task.Run(ctx)
		})
	}
	t.Cleanup(r.stop)
	waitFor(t, "every task to run", func() bool {
		for i, task := range r.tasks {
			if !running(task) && !r.isDone(i) {
				return false
			}
		}
		return true
	})
	return r
}

func (r *ckRun) stop() {
	r.cancel()
	r.wg.Wait()
}

func (r *ckRun) isDone(i int) bool {
	select {
	case <-r.done[i]:
		return true
	default:
		return false
	}
}

func (r *ckRun) allDone() bool {
	for i := range r.tasks {
		if !r.isDone(i) {
			return false
		}
	}
	return true
}

// checkpoint plays the coordinator for checkpoint id: it triggers every
// source task that accepts the trigger, waits until every task has taken
// it, failed it or ended, then notifies every task that it completed (when
// no task failed it) or was aborted. It reports whether it completed. When
// no source accepts the trigger, nothing happens.
func (r *ckRun) checkpoint(t *testing.T, id int64) bool {
	t.Helper()
	return r.checkpointThen(t, id, nil)
}

// checkpointThen is checkpoint that calls afterTrigger, if set, once the
// sources accepted the trigger (which they act on asynchronously).
func (r *ckRun) checkpointThen(t *testing.T, id int64, afterTrigger func()) bool {
	t.Helper()
	accepted := 0
	for _, task := range r.tasks {
		if task.chain[0].src != nil && task.TriggerCheckpoint(id, 1000+id) == nil {
			accepted++
		}
	}
	if accepted == 0 {
		return false
	}
	if afterTrigger != nil {
		afterTrigger()
	}
	deadline := time.Now().Add(10 * time.Second)
	ok := true
	for i := range r.tasks {
		for {
			if _, taken := r.hooks[i].snaps(id); taken {
				break
			}
			if err := r.hooks[i].failure(id); err != nil {
				ok = false
				break
			}
			if r.isDone(i) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("checkpoint %d: task %s neither took it nor ended", id, r.tasks[i].Name())
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	for _, task := range r.tasks {
		if ok {
			task.NotifyCheckpointComplete(id)
		} else {
			task.NotifyCheckpointAborted(id)
		}
	}
	return ok
}

// checkpointUntilDone takes checkpoints from id on until every task ended;
// it returns the last completed id.
func (r *ckRun) checkpointUntilDone(t *testing.T, id int64) int64 {
	t.Helper()
	last := int64(0)
	deadline := time.Now().Add(20 * time.Second)
	for ; !r.allDone(); id++ {
		if time.Now().After(deadline) {
			t.Fatal("tasks did not finish")
		}
		if r.checkpoint(t, id) {
			last = id
		}
		time.Sleep(time.Millisecond) // the checkpoint interval
	}
	return last
}

// wait waits until every task ended and returns their errors.
func (r *ckRun) wait(t *testing.T) []error {
	t.Helper()
	waitFor(t, "every task to end", r.allDone)
	r.wg.Wait()
	return r.errs
}

// mergeCounts adds up kcount results of uid over subtasks.
func mergeCounts(st *ckState, uid string) map[int64]int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := map[int64]int64{}
	for who, m := range st.counts {
		if len(who) > len(uid) && who[:len(uid)+1] == uid+"/" {
			for k, n := range m {
				out[k] += n
			}
		}
	}
	return out
}

func expectedCounts(rows, keys int64) map[int64]int64 {
	m := map[int64]int64{}
	for id := int64(0); id < rows; id++ {
		m[id%keys]++
	}
	return m
}
