package scheduler

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/weirstream/weir/stream"
)

// normRegions sorts each region and the regions, so partitions compare
// independently of order.
func normRegions(rs [][]execKey) [][]execKey {
	less := func(a, b execKey) int {
		if c := cmp.Compare(a.vertex, b.vertex); c != 0 {
			return c
		}
		return cmp.Compare(a.subtask, b.subtask)
	}
	out := make([][]execKey, len(rs))
	for i, r := range rs {
		out[i] = slices.Clone(r)
		slices.SortFunc(out[i], less)
	}
	slices.SortFunc(out, func(a, b []execKey) int { return less(a[0], b[0]) })
	return out
}

func keys(pairs ...int) []execKey {
	var out []execKey
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, execKey{pairs[i], pairs[i+1]})
	}
	return out
}

func TestPipelinedRegions(t *testing.T) {
	reg := testRegistry(t)
	tests := []struct {
		name  string
		build func(b *stream.Builder)
		graph func(t testing.TB) *stream.JobGraph
		want  [][]execKey // (task head, subtask) pairs
	}{
		{
			name:  "fan-out to forward consumers: one region per subtask",
			graph: func(t testing.TB) *stream.JobGraph { return fanOut(t, 2) },
			want:  [][]execKey{keys(0, 0, 1, 0, 3, 0), keys(0, 1, 1, 1, 3, 1)},
		},
		{
			name:  "keyBy joins everything into one region",
			graph: func(t testing.TB) *stream.JobGraph { return pipeline(t, 2, 4) },
			want:  [][]execKey{keys(0, 0, 0, 1, 2, 0, 2, 1, 2, 2, 2, 3)},
		},
		{
			name: "one chained pipeline: each subtask is a region",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).SetParallelism(3).Then("b", "discard", nil).SetParallelism(3)
			},
			want: [][]execKey{keys(0, 0), keys(0, 1), keys(0, 2)},
		},
		{
			name: "rebalance is all-to-all",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).SetParallelism(2).Rebalance().Then("b", "discard", nil).SetParallelism(2)
			},
			want: [][]execKey{keys(0, 0, 0, 1, 1, 0, 1, 1)},
		},
		{
			name: "broadcast is all-to-all",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).SetParallelism(2).Broadcast().Then("b", "discard", nil).SetParallelism(3)
			},
			want: [][]execKey{keys(0, 0, 0, 1, 1, 0, 1, 1, 1, 2)},
		},
		{
			name: "forward between different parallelisms is planned as rebalance",
			build: func(b *stream.Builder) {
				b.Source("a", "gen", nil).SetParallelism(2).Then("b", "pass", nil).SetParallelism(3).Then("c", "discard", nil).SetParallelism(3)
			},
			want: [][]execKey{keys(0, 0, 0, 1, 1, 0, 1, 1, 1, 2)},
		},
		{
			name: "forward fan-in (two-input operator) keeps subtasks apart",
			build: func(b *stream.Builder) {
				l := b.Source("l", "gen", nil).SetParallelism(2)
				r := b.Source("r", "gen", nil).SetParallelism(2).Then("r2", "pass", nil).SetParallelism(2)
				l.Join(r, "j", "merge", nil).SetParallelism(2).Then("out", "discard", nil).SetParallelism(2)
			},
			want: [][]execKey{keys(0, 0, 1, 0, 3, 0), keys(0, 1, 1, 1, 3, 1)},
		},
		{
			name: "independent pipelines: a keyed one and a chained one",
			build: func(b *stream.Builder) {
				b.Source("s1", "gen", nil).SetParallelism(2).KeyBy("k").Then("c1", "count", nil).SetParallelism(2)
				b.Source("s2", "gen", nil).SetParallelism(2).Then("o2", "discard", nil).SetParallelism(2)
			},
			want: [][]execKey{keys(0, 0, 0, 1, 1, 0, 1, 1), keys(2, 0), keys(2, 1)},
		},
		{
			name: "one keyBy in a fan-out joins its branch's subtasks and so the source's",
			build: func(b *stream.Builder) {
				s := b.Source("src", "gen", nil).SetParallelism(2)
				s.KeyBy("k").Then("c", "count", nil).SetParallelism(2)
				s.Then("d", "discard", nil).SetParallelism(2)
			},
			want: [][]execKey{keys(0, 0, 0, 1, 1, 0, 1, 1, 2, 0, 2, 1)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var g *stream.JobGraph
			if tc.graph != nil {
				g = tc.graph(t)
			} else {
				b := stream.NewBuilder("job")
				tc.build(b)
				var err error
				if g, err = b.Build(); err != nil {
					t.Fatal(err)
				}
			}
			planned(t, g, reg)
			tasks, err := BuildTasks(g)
			if err != nil {
				t.Fatal(err)
			}
			got := pipelinedRegions(g, tasks)
			if !reflect.DeepEqual(normRegions(got), normRegions(tc.want)) {
				t.Errorf("regions = %v, want %v", got, tc.want)
			}
			if want := operatorLevelRegions(g, tasks); !reflect.DeepEqual(normRegions(got), want) {
				t.Errorf("regions = %v, the operator-level computation gives %v", got, want)
			}
		})
	}
}

// operatorLevelRegions computes the regions independently of the task
// level: a breadth-first search over operator subtasks, where every graph
// edge (chained or not) links subtask i to subtask i when forward and
// every pair of subtasks otherwise. An execution's region is that of its
// head operator's subtask.
func operatorLevelRegions(g *stream.JobGraph, tasks []*Task) [][]execKey {
	type node struct{ v, s int }
	adj := make(map[node][]node)
	link := func(a, b node) { adj[a] = append(adj[a], b); adj[b] = append(adj[b], a) }
	for _, e := range g.Edges {
		pf, pt := g.Vertices[e.From].Parallelism, g.Vertices[e.To].Parallelism
		for i := range pf {
			for k := range pt {
				if e.Partitioning != stream.Forward || i == k {
					link(node{e.From, i}, node{e.To, k})
				}
			}
		}
	}
	comp := make(map[node]int)
	n := 0
	for _, v := range g.Vertices {
		for s := range v.Parallelism {
			start := node{v.ID, s}
			if _, seen := comp[start]; seen {
				continue
			}
			comp[start] = n
			queue := []node{start}
			for len(queue) > 0 {
				x := queue[0]
				queue = queue[1:]
				for _, y := range adj[x] {
					if _, seen := comp[y]; !seen {
						comp[y] = n
						queue = append(queue, y)
					}
				}
			}
			n++
		}
	}
	byComp := make(map[int][]execKey)
	for _, t := range tasks {
		for s := range t.Parallelism {
			c := comp[node{t.Head, s}]
			for _, v := range t.Chain { // a chain is one execution: same component
				if comp[node{v, s}] != c {
					panic(fmt.Sprintf("chain %v subtask %d spans components", t.Chain, s))
				}
			}
			byComp[c] = append(byComp[c], execKey{t.Head, s})
		}
	}
	var out [][]execKey
	for _, r := range byComp {
		out = append(out, r)
	}
	return normRegions(out)
}

// Random planned graphs: the task-level union-find agrees with the
// operator-level search, and every execution is in exactly one region.
func TestPipelinedRegionsRandom(t *testing.T) {
	reg := testRegistry(t)
	r := rand.New(rand.NewPCG(4, 2))
	parts := []stream.Partitioning{stream.Forward, stream.Forward, stream.Hash, stream.Rebalance, stream.Broadcast}
	for iter := range 400 {
		g := &stream.JobGraph{Name: "random"}
		n := 2 + r.IntN(7)
		for i := range n {
			v := &stream.Vertex{ID: i, UID: fmt.Sprintf("v%d", i), Type: "gen", Parallelism: 1 + r.IntN(3)}
			g.Vertices = append(g.Vertices, v)
			if i == 0 || r.IntN(4) == 0 {
				continue
			}
			ins := 1
			if i > 1 && r.IntN(3) == 0 {
				ins = 2
				v.Type = "merge"
			} else {
				v.Type = "pass"
			}
			from := r.Perm(i)[:ins]
			for k, f := range from {
				e := &stream.Edge{From: f, To: i, Input: k, Partitioning: parts[r.IntN(len(parts))]}
				if e.Partitioning == stream.Hash {
					e.KeyFields = []string{"k"}
				}
				g.Edges = append(g.Edges, e)
			}
		}
		if err := stream.Plan(g, reg); err != nil {
			t.Fatalf("iteration %d: plan: %v", iter, err)
		}
		tasks, err := BuildTasks(g)
		if err != nil {
			t.Fatal(err)
		}
		got := pipelinedRegions(g, tasks)
		seen := make(map[execKey]int)
		for _, rg := range got {
			for _, k := range rg {
				seen[k]++
			}
		}
		total := 0
		for _, tk := range tasks {
			total += tk.Parallelism
			for s := range tk.Parallelism {
				if seen[execKey{tk.Head, s}] != 1 {
					t.Fatalf("iteration %d: execution %d/%d in %d regions", iter, tk.Head, s, seen[execKey{tk.Head, s}])
				}
			}
		}
		if len(seen) != total {
			t.Fatalf("iteration %d: %d executions in regions, want %d", iter, len(seen), total)
		}
		if want := operatorLevelRegions(g, tasks); !reflect.DeepEqual(normRegions(got), want) {
			t.Fatalf("iteration %d: regions %v, operator-level %v (edges %v)", iter, got, want, g.Edges)
		}
	}
}
