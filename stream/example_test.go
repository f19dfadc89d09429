package stream_test

import (
	"fmt"
	"log"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/stream"
)

// A job graph built with the Go API: generated bids, keyed by auction, a
// running count per auction, written nowhere. Plan checks it against the
// operator types a taskmanager offers and fills in parallelism, edges'
// partitioning and every operator's output schema.
func ExampleBuilder() {
	b := stream.NewBuilder("bid-counts").Parallelism(4)
	b.Source("bids", "datagen", map[string]any{"preset": "bid", "rows": 1000}).SetParallelism(2).
		KeyBy("auction").
		Then("counts", "running_count", nil).
		Then("out", "discard", nil)
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	if err := stream.Plan(g, builtin.Registry()); err != nil {
		log.Fatal(err)
	}
	for _, v := range g.Vertices {
		fmt.Printf("%s (%s) parallelism %d\n", v.UID, v.Type, v.Parallelism)
	}
	for _, e := range g.Edges {
		fmt.Printf("%s -> %s: %v %v\n", g.Vertices[e.From].UID, g.Vertices[e.To].UID, e.Partitioning, e.KeyFields)
	}
	fmt.Println(g.Vertices[1].OutSchema.Names())
	// Output:
	// bids (datagen) parallelism 2
	// counts (running_count) parallelism 4
	// out (discard) parallelism 4
	// bids -> counts: hash [auction]
	// counts -> out: forward []
	// [auction count]
}
