package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

func TestBuildTasksChaining(t *testing.T) {
	reg := testRegistry(t)
	tests := []struct {
		name   string
		build  func(b *stream.Builder)
		chains [][]int // expected, in topological order of heads
		names  []string
	}{
		{
			name: "forward equal parallelism chains",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).Then("b", "pass", nil).Then("c", "discard", nil)
			},
			chains: [][]int{{0, 1, 2}},
			names:  []string{"a -> b -> c"},
		},
		{
			name: "different parallelism breaks the chain",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).SetParallelism(2).Then("b", "pass", nil).SetParallelism(4).Then("c", "discard", nil).SetParallelism(4)
			},
			chains: [][]int{{0}, {1, 2}},
		},
		{
			name: "keyBy breaks the chain",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).Then("b", "pass", nil).KeyBy("k").Then("c", "count", nil).Then("d", "discard", nil)
			},
			chains: [][]int{{0, 1}, {2, 3}},
			names:  []string{"a -> b", "c -> d"},
		},
		{
			name: "rebalance and broadcast break the chain",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).Rebalance().Then("b", "pass", nil).Broadcast().Then("c", "discard", nil)
			},
			chains: [][]int{{0}, {1}, {2}},
		},
		{
			name: "fan-out: an operator with two outputs chains neither",
			build: func(b *stream.Builder) {
				s := b.Source("a", "gen", nil)
				s.Then("b", "pass", nil).Then("c", "discard", nil)
				s.Then("d", "discard", nil)
			},
			chains: [][]int{{0}, {1, 2}, {3}},
		},
		{
			name: "fan-in: a two-input operator is not chained to either input",
			build: func(b *stream.Builder) {
				l := b.Source("l", "gen", nil)
				r := b.Source("r", "gen", nil).Then("r2", "pass", nil)
				l.Join(r, "j", "merge", nil).Then("out", "discard", nil)
			},
			chains: [][]int{{0}, {1, 2}, {3, 4}},
		},
		{
			name: "default job parallelism applies to every vertex",
			build: func(b *stream.Builder) {
				b.Parallelism(3).Source("a", "gen", nil).Then("b", "discard", nil)
			},
			chains: [][]int{{0, 1}},
			names:  []string{"a -> b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := stream.NewBuilder("job")
			tc.build(b)
			g, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			planned(t, g, reg)
			tasks, err := BuildTasks(g)
			if err != nil {
				t.Fatal(err)
			}
			var chains [][]int
			var names []string
			for _, tk := range tasks {
				chains = append(chains, tk.Chain)
				names = append(names, tk.Name)
				if tk.Head != tk.Chain[0] {
					t.Errorf("task head %d, chain %v", tk.Head, tk.Chain)
				}
				for _, id := range tk.Chain {
					if g.Vertices[id].Parallelism != tk.Parallelism {
						t.Errorf("vertex %d parallelism %d in task of parallelism %d", id, g.Vertices[id].Parallelism, tk.Parallelism)
					}
				}
			}
			if !reflect.DeepEqual(chains, tc.chains) {
				t.Errorf("chains = %v, want %v", chains, tc.chains)
			}
			if tc.names != nil && !reflect.DeepEqual(names, tc.names) {
				t.Errorf("names = %q, want %q", names, tc.names)
			}
			// Every vertex is in exactly one task.
			seen := make(map[int]int)
			for _, c := range chains {
				for _, id := range c {
					seen[id]++
				}
			}
			for id := range g.Vertices {
				if seen[id] != 1 {
					t.Errorf("vertex %d appears in %d tasks", id, seen[id])
				}
			}
		})
	}
}

func TestPlaceSlots(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		offers []slotOffer
		want   []string
		short  *slotShortageError // the error, if the slots do not suffice
	}{
		{name: "spreads evenly over equal taskmanagers", n: 4,
			offers: []slotOffer{{"b", 2}, {"a", 2}}, want: []string{"a", "b", "a", "b"}},
		{name: "most free first, then round robin", n: 4,
			offers: []slotOffer{{"a", 1}, {"b", 3}, {"c", 3}}, want: []string{"b", "c", "a", "b"}},
		{name: "fills the bigger one when the small one is full", n: 4,
			offers: []slotOffer{{"a", 3}, {"b", 1}}, want: []string{"a", "b", "a", "a"}},
		{name: "skips full taskmanagers", n: 2,
			offers: []slotOffer{{"a", 0}, {"b", 2}}, want: []string{"b", "b"}},
		{name: "not enough", n: 4,
			offers: []slotOffer{{"a", 2}},
			short:  &slotShortageError{Need: 4, Free: 2, TaskManagers: 1}},
		{name: "not enough counts full taskmanagers too", n: 3,
			offers: []slotOffer{{"a", 0}, {"b", 1}},
			short:  &slotShortageError{Need: 3, Free: 1, TaskManagers: 2}},
		{name: "no taskmanagers", n: 1,
			short: &slotShortageError{Need: 1, Free: 0, TaskManagers: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := placeSlots(tc.n, tc.offers)
			if tc.short != nil {
				var se *slotShortageError
				if !errors.As(err, &se) || *se != *tc.short {
					t.Fatalf("err = %#v, want %#v", err, tc.short)
				}
				// The numbers and the fix.
				for _, w := range []string{fmt.Sprintf("needs %d", se.Need), fmt.Sprintf("%d free", se.Free), "start more taskmanagers or lower parallelism"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("placeSlots = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlaceSlotsSpread checks random cases against the definition of an
// even spread: no taskmanager gets more than it offers, and a taskmanager
// gets fewer slots than another only when it is full.
func TestPlaceSlotsSpread(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var offers []slotOffer
		total := 0
		for i := range r.IntN(5) + 1 {
			f := r.IntN(5)
			offers = append(offers, slotOffer{fmt.Sprintf("tm%d", i), f})
			total += f
		}
		n := r.IntN(total + 2)
		got, err := placeSlots(n, offers)
		if n > total {
			if err == nil {
				t.Fatalf("n=%d offers=%v: want error", n, offers)
			}
			continue
		}
		if err != nil || len(got) != n {
			t.Fatalf("n=%d offers=%v: got %v, %v", n, offers, got, err)
		}
		count := make(map[string]int)
		for _, id := range got {
			count[id]++
		}
		for _, a := range offers {
			if count[a.TaskManager] > a.Free {
				t.Fatalf("n=%d offers=%v: %s got %d", n, offers, a.TaskManager, count[a.TaskManager])
			}
			for _, b := range offers {
				if count[a.TaskManager] < count[b.TaskManager]-1 && count[a.TaskManager] < a.Free {
					t.Fatalf("n=%d offers=%v: uneven %v", n, offers, count)
				}
			}
		}
	}
}

// A chain longer than stream.MaxChainLength is cut into tasks of at most
// that many operators, in order, each fed by the one before.
func TestBuildTasksCutsLongChains(t *testing.T) {
	const n = 2*stream.MaxChainLength + 50
	b := stream.NewBuilder("long")
	op := b.Source("src", "gen", nil).SetParallelism(2)
	for i := range n {
		op = op.Then(fmt.Sprintf("p%d", i), "pass", nil).SetParallelism(2)
	}
	op.Then("sink", "discard", nil).SetParallelism(2)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g = planned(t, g, testRegistry(t))
	tasks, err := BuildTasks(g)
	if err != nil {
		t.Fatal(err)
	}
	total := n + 2 // with the source and the sink
	var lens []int
	next := 0 // vertex ids are in chain order
	for _, task := range tasks {
		lens = append(lens, len(task.Chain))
		for _, v := range task.Chain {
			if v != next {
				t.Fatalf("task %s chains vertex %d, want %d", task.Name, v, next)
			}
			next++
		}
	}
	want := []int{stream.MaxChainLength, stream.MaxChainLength, total - 2*stream.MaxChainLength}
	if !slices.Equal(lens, want) || next != total {
		t.Fatalf("chain lengths %v covering %d vertices, want %v covering %d", lens, next, want, total)
	}
}
