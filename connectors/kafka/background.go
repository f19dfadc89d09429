package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// defaultUnreachableAfter is how long partition discovery may fail in a row
// before Poll fails the task: the cluster is then taken to be unreachable,
// and the restart strategy retries.
const defaultUnreachableAfter = 2 * time.Minute

// commitTimeout bounds one commit of offsets to the consumer group.
const commitTimeout = 30 * time.Second

// background runs a source's network work that Poll must not wait for:
// partition discovery every discovery interval, and commits of completed
// checkpoints' offsets to the consumer group. Its goroutine starts in
// startBackground and has exited when stop returns.
type background struct {
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{} // a commit is waiting

	mu struct {
		sync.Mutex
		parts   []tp  // the latest discovery's partitions
		round   int64 // counts successful discoveries
		failing time.Time
		err     error
		commit  kadm.Offsets // the offsets to commit next, nil when none
	}
}

// pendingCommit holds the offsets a checkpoint recorded for the group.
type pendingCommit struct {
	checkpoint int64
	offsets    kadm.Offsets
}

// maxPendingCommits bounds the checkpoints whose offsets wait for their
// completion; older ones are dropped (a later completion subsumes them).
const maxPendingCommits = 16

func startBackground(ctx context.Context, s *Source) *background {
	ctx, cancel := context.WithCancel(ctx)
	bg := &background{cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	interval, group := s.spec.discovery, s.spec.cfg.Group
	go func() {
		defer close(bg.done)
		var tick <-chan time.Time
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick:
				dctx, dcancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
				parts, err := s.listPartitions(dctx, false)
				dcancel()
				if ctx.Err() != nil {
					return
				}
				bg.discoveryDone(parts, err)
			case <-bg.wake:
				bg.mu.Lock()
				offs := bg.mu.commit
				bg.mu.commit = nil
				bg.mu.Unlock()
				if offs == nil {
					continue
				}
				cctx, ccancel := context.WithTimeout(ctx, commitTimeout)
				_, err := s.adm.CommitOffsets(cctx, group, offs)
				ccancel()
				if err != nil && ctx.Err() == nil {
					s.log.Warn(s.name+": could not commit offsets to the consumer group (they serve monitoring only; recovery uses checkpoints)", "group", group, "error", err)
				}
			}
		}
	}()
	return bg
}

func (bg *background) discoveryDone(parts []tp, err error) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if err != nil {
		if bg.mu.failing.IsZero() {
			bg.mu.failing = time.Now()
		}
		bg.mu.err = err
		return
	}
	bg.mu.failing, bg.mu.err = time.Time{}, nil
	bg.mu.parts = parts
	bg.mu.round++
}

// discovered returns the partitions of the latest discovery when it is
// newer than round seen, and an error when discovery has failed for longer
// than after.
func (bg *background) discovered(seen int64, after time.Duration) ([]tp, int64, error) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if !bg.mu.failing.IsZero() && time.Since(bg.mu.failing) > after {
		return nil, seen, bg.mu.err
	}
	if bg.mu.round == seen {
		return nil, seen, nil
	}
	return bg.mu.parts, bg.mu.round, nil
}

// commit has the goroutine commit offs, replacing offsets not yet
// committed.
func (bg *background) commit(offs kadm.Offsets) {
	bg.mu.Lock()
	bg.mu.commit = offs
	bg.mu.Unlock()
	select {
	case bg.wake <- struct{}{}:
	default:
	}
}

// stop ends the goroutine and waits for it.
func (bg *background) stop() {
	bg.cancel()
	<-bg.done
}
