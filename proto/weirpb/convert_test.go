package weirpb

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/stream"
)

// TestGraphSideOutputsRoundTrip: side-output edges and the vertices'
// side-output schemas survive the conversion to protobuf, the wire and back.
func TestGraphSideOutputsRoundTrip(t *testing.T) {
	kv := stream.MustSchema(stream.Field{Name: "k", Type: stream.TypeString}, stream.Field{Name: "v", Type: stream.TypeInt64})
	late := stream.MustSchema(stream.Field{Name: "k", Type: stream.TypeString}, stream.Field{Name: "ts", Type: stream.TypeTimestamp})
	g := &stream.JobGraph{Name: "side", Parallelism: 2, MaxParallelism: 16,
		Vertices: []*stream.Vertex{
			{ID: 0, UID: "src", Name: "src", Type: "gen", Parallelism: 2, OutSchema: kv},
			{ID: 1, UID: "win", Name: "win", Type: "window", Parallelism: 2, OutSchema: kv,
				SideOutSchemas: map[string]*stream.Schema{"late": late}},
			{ID: 2, UID: "out", Name: "out", Type: "sink", Parallelism: 2},
			{ID: 3, UID: "late", Name: "late", Type: "sink", Parallelism: 2},
		},
		Edges: []*stream.Edge{
			{From: 0, To: 1, Partitioning: stream.Hash, KeyFields: []string{"k"}},
			{From: 1, To: 2, Partitioning: stream.Forward},
			{From: 1, SideOutput: "late", To: 3, Partitioning: stream.Hash, KeyFields: []string{"k"}},
		},
	}
	wire, err := proto.Marshal(FromGraph(g))
	if err != nil {
		t.Fatal(err)
	}
	var pg JobGraph
	if err := proto.Unmarshal(wire, &pg); err != nil {
		t.Fatal(err)
	}
	back, err := ToGraph(&pg)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range back.Edges {
		if !reflect.DeepEqual(*e, *g.Edges[i]) {
			t.Errorf("edge %d: got %+v, want %+v", i, *e, *g.Edges[i])
		}
	}
	if s := back.Vertices[1].SideOutSchemas["late"]; len(back.Vertices[1].SideOutSchemas) != 1 || !s.Equal(late) {
		t.Errorf("win's side outputs = %v, want late: %v", back.Vertices[1].SideOutSchemas, late)
	}
	for _, i := range []int{0, 2, 3} {
		if back.Vertices[i].SideOutSchemas != nil {
			t.Errorf("vertex %d got side outputs %v", i, back.Vertices[i].SideOutSchemas)
		}
	}
	// A side output without a schema is refused.
	bad := FromVertex(g.Vertices[1])
	bad.SideOutSchemas["late"] = nil
	if _, err := ToVertex(bad); err == nil {
		t.Error("ToVertex accepted a side output without a schema")
	}
}
