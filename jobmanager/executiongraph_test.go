package jobmanager

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/proto/weirpb"
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
			tasks, err := buildTasks(g)
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

func TestBuildDeployment(t *testing.T) {
	reg := testRegistry(t)
	g := planned(t, pipeline(t, 2, 4), reg)
	tasks, err := buildTasks(g)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 || slotsNeeded(tasks) != 4 {
		t.Fatalf("tasks %v, slots %d", tasks, slotsNeeded(tasks))
	}
	owners, err := placeSlots(4, []slotOffer{{"tm-a", 2}, {"tm-b", 3}})
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{"tm-a": "127.0.0.1:1", "tm-b": "127.0.0.1:2"}
	slotAddrs := make([]string, len(owners))
	for i, o := range owners {
		slotAddrs[i] = addr[o]
	}
	if want := []string{"127.0.0.1:2", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"}; !slices.Equal(slotAddrs, want) {
		t.Fatalf("slots %v, want %v", slotAddrs, want)
	}
	kv := weirpb.FromSchema(g.Vertices[0].OutSchema)
	kn := weirpb.FromSchema(g.Vertices[2].OutSchema)
	vertex := func(id int) *weirpb.Vertex { return weirpb.FromVertex(g.Vertices[id]) }

	gotSrc := buildDeployment(&deployAction{JobID: "job1", Graph: g, Task: tasks[0], Subtask: 1, Attempt: 3, SlotAddrs: slotAddrs})
	wantSrc := &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: "job1", VertexId: 0, Subtask: 1, Attempt: 3},
		TaskName: "src -> map (2/2)", Parallelism: 2, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{
			{Vertex: vertex(0)},
			{Vertex: vertex(1), InputSchemas: []*weirpb.Schema{kv}, InputKeys: []*weirpb.KeyFields{{}}},
		},
		Outputs: []*weirpb.OutputSpec{{DownstreamVertex: 2, DownstreamInput: 0, DownstreamParallelism: 4,
			Partitioning: weirpb.Partitioning_PARTITIONING_HASH, KeyFields: []string{"k"}, Targets: slotAddrs}},
	}
	if !proto.Equal(gotSrc, wantSrc) {
		t.Errorf("source deployment:\n got %v\nwant %v", gotSrc, wantSrc)
	}

	gotWin := buildDeployment(&deployAction{JobID: "job1", Graph: g, Task: tasks[1], Subtask: 3, Attempt: 3, SlotAddrs: slotAddrs})
	wantWin := &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: "job1", VertexId: 2, Subtask: 3, Attempt: 3},
		TaskName: "window -> sink (4/4)", Parallelism: 4, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{
			{Vertex: vertex(2), InputSchemas: []*weirpb.Schema{kv}, InputKeys: []*weirpb.KeyFields{{Fields: []string{"k"}}}},
			{Vertex: vertex(3), InputSchemas: []*weirpb.Schema{kn}, InputKeys: []*weirpb.KeyFields{{}}},
		},
		Inputs: []*weirpb.InputGate{{Input: 0, UpstreamVertex: 1, UpstreamParallelism: 2, Partitioning: weirpb.Partitioning_PARTITIONING_HASH}},
	}
	if !proto.Equal(gotWin, wantWin) {
		t.Errorf("window deployment:\n got %v\nwant %v", gotWin, wantWin)
	}

	// Every key group is owned by a downstream subtask that has a target,
	// and the window subtask on each target owns exactly its key groups.
	out := gotSrc.Outputs[0]
	owned := make([]int, out.DownstreamParallelism)
	for kg := range int(gotSrc.MaxParallelism) {
		st := stream.SubtaskForKeyGroup(int(gotSrc.MaxParallelism), int(out.DownstreamParallelism), kg)
		if st >= len(out.Targets) {
			t.Fatalf("key group %d goes to subtask %d; only %d targets", kg, st, len(out.Targets))
		}
		if !stream.KeyGroupRangeFor(int(gotWin.MaxParallelism), int(gotWin.Parallelism), st).Contains(kg) {
			t.Errorf("key group %d routed to subtask %d, which does not own it", kg, st)
		}
		owned[st]++
	}
	for st, n := range owned {
		if n != 32 {
			t.Errorf("subtask %d owns %d key groups, want 32", st, n)
		}
	}
}
