package stream

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// chainGraph is a job of n operators in a line: a source, n-2 pass
// transforms and a sink.
func chainGraph(n int) *JobGraph {
	g := &JobGraph{Name: "chain"}
	for i := range n {
		typ := "pass"
		switch i {
		case 0:
			typ = "src"
		case n - 1:
			typ = "sink"
		}
		g.Vertices = append(g.Vertices, &Vertex{ID: i, UID: fmt.Sprintf("op-%d", i), Type: typ})
		if i > 0 {
			g.Edges = append(g.Edges, &Edge{From: i - 1, To: i, Partitioning: Forward})
		}
	}
	return g
}

func TestPlanLimits(t *testing.T) {
	reg := testRegistry()
	// Each case edits a valid three-operator chain (src -> pass -> sink).
	long := func(n int) string { return strings.Repeat("z", n) }
	// paddedConfig is a JSON object of exactly n bytes that decodes to an
	// empty config.
	paddedConfig := func(n int) []byte { return []byte("{" + strings.Repeat(" ", n-2) + "}") }
	cases := []struct {
		name  string
		edit  func(g *JobGraph)
		want  []string // substrings of the error; nil when Plan must succeed
		never string   // must not appear in the error: the over-long value
	}{
		{name: "operators at the limit", edit: func(g *JobGraph) { *g = *chainGraph(MaxOperators) }},
		{name: "operators over the limit", edit: func(g *JobGraph) { *g = *chainGraph(MaxOperators + 1) },
			want: []string{fmt.Sprintf("job has %d operators", MaxOperators+1), fmt.Sprintf("the limit is %d", MaxOperators), "stream.MaxOperators", "split it"}},
		{name: "job name at the limit", edit: func(g *JobGraph) { g.Name = long(MaxNameLength) }},
		{name: "job name over the limit", edit: func(g *JobGraph) { g.Name = long(MaxNameLength + 1) },
			want: []string{"job name is 257 bytes", "the limit is 256 bytes", "stream.MaxNameLength", "use a shorter name"}, never: long(100)},
		{name: "uid at the limit", edit: func(g *JobGraph) { g.Vertices[1].UID = long(MaxUIDLength) }},
		{name: "uid over the limit", edit: func(g *JobGraph) { g.Vertices[1].UID = long(MaxUIDLength + 1) },
			want: []string{"operator #2: uid is 129 bytes", "the limit is 128 bytes", "stream.MaxUIDLength", "use a shorter uid"}, never: long(100)},
		{name: "name at the limit", edit: func(g *JobGraph) { g.Vertices[1].Name = long(MaxNameLength) }},
		{name: "name over the limit", edit: func(g *JobGraph) { g.Vertices[1].Name = long(MaxNameLength + 1) },
			want: []string{`operator "op-1": name is 257 bytes`, "the limit is 256 bytes", "stream.MaxNameLength"}, never: long(100)},
		{name: "type over the limit", edit: func(g *JobGraph) { g.Vertices[1].Type = long(MaxNameLength + 1) },
			want: []string{`operator "op-1": unknown operator type`, "257 bytes", "stream.MaxNameLength"}, never: long(100)},
		{name: "config at the limit", edit: func(g *JobGraph) { g.Vertices[1].Config = paddedConfig(MaxConfigBytes) }},
		{name: "config over the limit", edit: func(g *JobGraph) { g.Vertices[1].Config = paddedConfig(MaxConfigBytes + 1) },
			want: []string{`operator "op-1": config is 65537 bytes`, "the limit is 65536 bytes", "stream.MaxConfigBytes"}},
		{name: "key field over the limit", edit: func(g *JobGraph) {
			g.Edges[0].Partitioning, g.Edges[0].KeyFields = Hash, []string{"k", long(MaxNameLength + 1)}
		}, want: []string{`operator "op-1": keyBy: key field #2 is 257 bytes`, "stream.MaxNameLength"}, never: long(100)},
		{name: "side output name far too long", edit: func(g *JobGraph) { g.Edges[0].SideOutput = long(1000) },
			want: []string{"reads side output (a name of 1000 bytes)"}, never: long(100)},
		{name: "key groups at the limit", edit: func(g *JobGraph) { g.MaxParallelism = MaxKeyGroups }},
		{name: "key groups over the limit", edit: func(g *JobGraph) { g.MaxParallelism = MaxKeyGroups + 1 },
			want: []string{"maxParallelism 32769", "between 1 and 32768"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := chainGraph(3)
			tc.edit(g)
			err := Plan(g, reg)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Plan = %v, want success", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Plan succeeded, want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Plan error %q does not contain %q", err, w)
				}
			}
			if tc.never != "" && strings.Contains(err.Error(), tc.never) {
				t.Errorf("Plan error repeats the over-long value: %.200q", err)
			}
		})
	}
}

// TestPlanLeavesGraphUnchangedOnFailure plans graphs that fail late, after
// Plan has worked out partitionings, parallelisms and schemas, and compares
// each with a fresh copy built the same way.
func TestPlanLeavesGraphUnchangedOnFailure(t *testing.T) {
	reg := sideRegistry()
	// base has everything Plan fills in on success: a job parallelism and
	// max parallelism to default, a vertex parallelism to default, a
	// forward edge between parallelisms 2 and 1 to turn into rebalance,
	// names to default and schemas to compute.
	base := func(last func(b *Builder, s *Stream)) func() *JobGraph {
		return func() *JobGraph {
			b := NewBuilder("job")
			s := b.Source("s", "src", nil).SetParallelism(2).Then("p", "pass", nil)
			last(b, s)
			g, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range g.Vertices {
				v.Name = ""
			}
			return g
		}
	}
	cases := []struct {
		name string
		mk   func() *JobGraph
		want string
	}{
		{"last operator's type fails", base(func(b *Builder, s *Stream) {
			s.Then("q", "pass", map[string]string{"Fail": "boom"})
		}), `operator "q": boom`},
		{"edge after a rewritten one has no partitioning", base(func(b *Builder, s *Stream) {
			s.Then("q", "sink", nil)
			b.g.Edges[len(b.g.Edges)-1].Partitioning = 0
		}), "has no partitioning"},
		{"cycle found after the edges were checked", base(func(b *Builder, s *Stream) {
			q := s.Then("q", "pass", nil)
			b.connect(q, 1, 1) // p's second input: a cycle p -> q -> p
		}), "cycle"},
		{"last operator reads an undeclared side output", base(func(b *Builder, s *Stream) {
			s.SideOutput("nope").Then("q", "sink", nil)
		}), `side output "nope"`},
		{"last operator declares a side output wrongly", base(func(b *Builder, s *Stream) {
			s.Then("q", "twice", nil)
		}), "declared twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.mk()
			err := Plan(g, reg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Plan = %v, want an error containing %q", err, tc.want)
			}
			if want := tc.mk(); !reflect.DeepEqual(g, want) {
				t.Fatalf("a failed Plan changed the graph:\n got %s\nwant %s", dumpGraph(g), dumpGraph(want))
			}
		})
	}
	// The comparison can fail: a successful Plan of the same base changes
	// the graph in all the ways above.
	mk := base(func(b *Builder, s *Stream) { s.Then("q", "sink", nil) })
	g := mk()
	if err := Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(g, mk()) || g.Edges[0].Partitioning != Rebalance || g.Vertices[1].Name != "p" || g.Vertices[1].OutSchema == nil {
		t.Fatalf("Plan of the valid base did not fill it in: %s", dumpGraph(g))
	}
}

func dumpGraph(g *JobGraph) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s par %d max %d;", g.Name, g.Parallelism, g.MaxParallelism)
	for _, v := range g.Vertices {
		fmt.Fprintf(&b, " v%d %s/%q par %d schema %v sides %v;", v.ID, v.UID, v.Name, v.Parallelism, v.OutSchema != nil, len(v.SideOutSchemas))
	}
	for _, e := range g.Edges {
		fmt.Fprintf(&b, " %d.%s->%d.%d %v;", e.From, e.SideOutput, e.To, e.Input, e.Partitioning)
	}
	return b.String()
}

// TestIndexAgreesWithScans compares EdgeIndex with the scanning Inputs and
// Outputs on random graphs, and checks TopoOrder's order on them.
func TestIndexAgreesWithScans(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		n := 1 + rng.IntN(30)
		g := &JobGraph{Name: "random"}
		for i := range n {
			g.Vertices = append(g.Vertices, &Vertex{ID: i, UID: fmt.Sprint("v", i)})
		}
		// Edges only go from lower to higher ids, so the graph is acyclic;
		// input numbers repeat and come out of order on purpose.
		for range rng.IntN(3 * n) {
			from := rng.IntN(n)
			if from == n-1 {
				continue
			}
			to := from + 1 + rng.IntN(n-from-1)
			g.Edges = append(g.Edges, &Edge{From: from, To: to, Input: rng.IntN(3), Partitioning: Forward})
		}
		rng.Shuffle(len(g.Edges), func(i, j int) { g.Edges[i], g.Edges[j] = g.Edges[j], g.Edges[i] })
		idx := g.Index()
		for id := -1; id <= n; id++ {
			if got, want := idx.Inputs(id), g.Inputs(id); !slices.Equal(got, want) {
				t.Fatalf("graph %d vertex %d: index inputs %v, scan %v", iter, id, got, want)
			}
			if got, want := idx.Outputs(id), g.Outputs(id); !slices.Equal(got, want) {
				t.Fatalf("graph %d vertex %d: index outputs %v, scan %v", iter, id, got, want)
			}
		}
		order, err := g.TopoOrder()
		if err != nil {
			t.Fatalf("graph %d: %v", iter, err)
		}
		pos := make([]int, n)
		for i, id := range order {
			pos[id] = i
		}
		if len(order) != n {
			t.Fatalf("graph %d: order %v has %d of %d vertices", iter, order, len(order), n)
		}
		for _, e := range g.Edges {
			if pos[e.From] >= pos[e.To] {
				t.Fatalf("graph %d: order %v puts %d before its input %d", iter, order, e.To, e.From)
			}
		}
	}
	// Edges naming missing vertices are left out of the index rather than
	// making it panic; Plan reports them.
	g := chainGraph(3)
	g.Edges = append(g.Edges, &Edge{From: 0, To: 7, Partitioning: Forward}, &Edge{From: -1, To: 1, Partitioning: Forward}, nil)
	if idx := g.Index(); len(idx.Inputs(1)) != 1 || len(idx.Outputs(0)) != 1 {
		t.Fatalf("index of a graph with dangling edges: inputs(1) %v outputs(0) %v", idx.Inputs(1), idx.Outputs(0))
	}
	if err := Plan(g, testRegistry()); err == nil || !strings.Contains(err.Error(), "names a vertex that does not exist") {
		t.Fatalf("Plan of a graph with dangling edges = %v", err)
	}
}

// BenchmarkPlanLargeGraph plans chains of increasing size. Planning is
// linear, so ns_per_operator stays about the same from size to size, where
// a step scanning all edges for every vertex would multiply it by the
// growth in size. Planning an already planned graph does the same work as
// planning a fresh one, so one graph serves every iteration.
func BenchmarkPlanLargeGraph(b *testing.B) {
	reg := testRegistry()
	for _, n := range []int{100, MaxOperators} {
		b.Run(fmt.Sprintf("operators=%d", n), func(b *testing.B) {
			g := chainGraph(n)
			plans := 0
			for b.Loop() {
				if err := Plan(g, reg); err != nil {
					b.Fatal(err)
				}
				plans++
			}
			opsPerSec := float64(plans*n) / b.Elapsed().Seconds()
			nsPerOp := float64(b.Elapsed().Nanoseconds()) / float64(plans*n)
			b.ReportMetric(opsPerSec, "plan_ops_per_second")
			b.ReportMetric(nsPerOp, "ns_per_operator")
			fmt.Printf("operators=%d plan_ops_per_second=%.0f ns_per_operator=%.1f\n", n, opsPerSec, nsPerOp)
		})
	}
}

func TestValidateJobID(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"0123456789abcdef", true}, // what the jobmanager generates
		{"Job_1.v2-final", true},
		{"...", true}, // a name, not a parent directory
		{".hidden", true},
		{strings.Repeat("x", MaxJobIDLength), true},
		{strings.Repeat("x", MaxJobIDLength+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"../etc", false},
		{`a\b`, false},
		{"a b", false},
		{"a\x00b", false},
		{"a\nb", false},
		{"jöb", false},
		{"a:b", false},
		{"a%2fb", false},
		{"a*", false},
	}
	for _, tc := range cases {
		err := ValidateJobID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateJobID(%.40q) = %v, want ok %v", tc.id, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidJobID) {
			t.Errorf("ValidateJobID(%.40q) = %v, which does not wrap ErrInvalidJobID", tc.id, err)
		}
		if err != nil && len(tc.id) > MaxJobIDLength && strings.Contains(err.Error(), tc.id[:50]) {
			t.Errorf("ValidateJobID repeats an over-long id: %v", err)
		}
	}
	// Independently of the table: every single byte is accepted exactly
	// when it is an ASCII letter, digit, '.', '_' or '-' (and "." alone is
	// refused as a directory name).
	const allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
	for c := range 256 {
		id := string([]byte{byte(c)})
		want := strings.IndexByte(allowed, byte(c)) >= 0 && id != "."
		if got := ValidateJobID(id) == nil; got != want {
			t.Errorf("ValidateJobID(%q) ok = %v, want %v", id, got, want)
		}
	}
}
