package connectors_test

import (
	"fmt"

	"github.com/weirstream/weir/connectors"
)

func ExampleGenerateRow() {
	cfg := connectors.DatagenConfig{
		Seed: 1,
		Fields: []connectors.DatagenField{
			{Name: "id", Kind: "sequence", Start: []byte("100")},
			{Name: "ts", Kind: "timestamp", Start: []byte(`"2026-01-01T00:00:00Z"`), StepMillis: 10},
		},
	}
	for seq := range int64(3) {
		fmt.Println(connectors.GenerateRow(cfg, seq))
	}
	// Output:
	// [100 1767225600000]
	// [101 1767225600010]
	// [102 1767225600020]
}

func ExampleBidAt() {
	a, b := connectors.BidAt(42, 7), connectors.BidAt(42, 7)
	fmt.Println(a == b, a.DateTime-connectors.BidEpochMillis)
	// Output: true 7
}
