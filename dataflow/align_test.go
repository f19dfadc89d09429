package dataflow

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// TestAligner runs scripted scenarios against the pure alignment logic.
// Each step is "b<ch>:<id>" (barrier id on channel ch), "e<ch>" (channel ch
// ended) or "x<id>" (the coordinator aborted id), followed by the expected
// outcome: blocked channel (B), completed ids (D), abandoned ids (A),
// unblocked channels (U), e.g. "b0:1 -> B", "b1:1 -> D1 U0".
func TestAligner(t *testing.T) {
	eo, alo := stream.ExactlyOnce, stream.AtLeastOnce
	for _, tc := range []struct {
		name     string
		mode     stream.CheckpointMode
		channels int
		steps    []string
	}{
		{"one channel completes at once", eo, 1, []string{"b0:1 -> D1", "b0:2 -> D2"}},
		{"exactly-once blocks until all arrive", eo, 3, []string{
			"b0:1 -> B", "b2:1 -> B", "b1:1 -> D1 U0,2",
		}},
		{"at-least-once never blocks", alo, 3, []string{
			"b0:1 ->", "b2:1 ->", "b1:1 -> D1",
		}},
		{"higher barrier abandons the aligning one", eo, 2, []string{
			"b0:1 -> B", "b1:2 -> B A1 U0", "b1:1 ->", "b0:2 -> D2 U1",
		}},
		{"stale barrier below the aligning one is ignored", eo, 2, []string{
			"b0:3 -> B", "b1:2 ->", "b1:3 -> D3 U0", "b0:3 ->", "b0:2 ->",
		}},
		{"barriers not above the last completed are ignored", eo, 2, []string{
			"b0:5 -> B", "b1:5 -> D5 U0", "b0:4 ->", "b1:5 ->",
		}},
		{"ended channels count as aligned", eo, 3, []string{
			"e2 ->", "b0:1 -> B", "b1:1 -> D1 U0", "b0:2 -> B", "e1 -> D2 U0",
		}},
		{"the last channel ending completes", eo, 2, []string{
			"b0:1 -> B", "e1 -> D1 U0", "e0 ->",
		}},
		{"coordinator abort unblocks", eo, 2, []string{
			"b0:4 -> B", "x4 -> A4 U0", "b1:4 ->", "b0:5 -> B", "b1:5 -> D5 U0",
		}},
		{"at-least-once keeps several pending", alo, 2, []string{
			"b0:1 ->", "b0:2 ->", "b1:1 -> D1", "b1:2 -> D2",
		}},
		{"at-least-once: completing a later one abandons earlier", alo, 2, []string{
			"b0:1 ->", "b0:2 ->", "b1:2 -> A1 D2", "b1:1 ->",
		}},
		{"at-least-once: an end completes several", alo, 3, []string{
			"b0:1 ->", "b1:1 ->", "b0:2 ->", "b1:2 ->", "e2 -> D1 D2",
		}},
		{"at-least-once: barrier below a pending one", alo, 2, []string{
			"b0:2 ->", "b1:1 ->", "b1:2 -> A1 D2",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAligner(tc.mode, tc.channels)
			now := time.Unix(0, 0)
			a.clock = func() time.Time { return now }
			for i, step := range tc.steps {
				in, want, _ := strings.Cut(step, "->")
				in, want = strings.TrimSpace(in), strings.TrimSpace(want)
				now = now.Add(time.Millisecond)
				var s alignStep
				var ch, id int64
				switch in[0] {
				case 'b':
					fmt.Sscanf(in, "b%d:%d", &ch, &id)
					s = a.barrier(int(ch), id, 1000+id)
				case 'e':
					fmt.Sscanf(in, "e%d", &ch)
					s = a.end(int(ch))
				case 'x':
					fmt.Sscanf(in, "x%d", &id)
					s = a.abortUpTo(id)
				}
				if got := describeStep(s); got != want {
					t.Fatalf("step %d %q: got %q, want %q", i, in, got, want)
				}
				for _, d := range s.done {
					if d.ts != 1000+d.id || d.aligning < 0 {
						t.Fatalf("step %d: done %+v: wrong timestamp or alignment time", i, d)
					}
				}
			}
		})
	}
}

func describeStep(s alignStep) string {
	var parts []string
	if s.block {
		parts = append(parts, "B")
	}
	for _, id := range s.aborted {
		parts = append(parts, fmt.Sprintf("A%d", id))
	}
	for _, d := range s.done {
		parts = append(parts, fmt.Sprintf("D%d", d.id))
	}
	if len(s.unblock) > 0 {
		u := make([]string, len(s.unblock))
		for i, c := range s.unblock {
			u[i] = fmt.Sprint(c)
		}
		parts = append(parts, "U"+strings.Join(u, ","))
	}
	return strings.Join(parts, " ")
}

func TestAlignerAlignmentTime(t *testing.T) {
	a := newAligner(stream.ExactlyOnce, 2)
	now := time.Unix(100, 0)
	a.clock = func() time.Time { return now }
	a.barrier(0, 1, 7)
	now = now.Add(250 * time.Millisecond)
	s := a.barrier(1, 1, 7)
	want := []alignDone{{id: 1, ts: 7, aligning: 250 * time.Millisecond}}
	if !reflect.DeepEqual(s.done, want) {
		t.Fatalf("done = %+v, want %+v", s.done, want)
	}
	if ids := a.abortAll(); len(ids) != 0 {
		t.Fatalf("abortAll after completion = %v, want none", ids)
	}
	a.barrier(0, 2, 8)
	if ids := a.abortAll(); !reflect.DeepEqual(ids, []int64{2}) {
		t.Fatalf("abortAll = %v, want [2]", ids)
	}
}
