package statebackend_test

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/stream"
)

// A keyed running count with a timer that reports it, checkpointed and
// restored into a new backend.
func Example() {
	kg := stream.KeyGroupRangeFor(stream.DefaultMaxParallelism, 1, 0)
	b := heap.New(kg)
	defer b.Close()
	count, err := statebackend.GetValueState(b, "count", statebackend.Int64Codec)
	if err != nil {
		panic(err)
	}
	for _, word := range []string{"a", "b", "a", "a"} {
		// The task computes the key group from the key's hash.
		b.SetCurrentKey([]byte(word), int(word[0])%stream.DefaultMaxParallelism)
		n, _ := count.Value()
		count.Update(n + 1)
		b.Timers().RegisterEventTimeTimer(100)
	}

	c := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: kg}
	if err := b.Snapshot(c); err != nil {
		panic(err)
	}
	restored := heap.New(kg)
	defer restored.Close()
	if err := restored.Restore(&stream.RestoreContext{CheckpointID: 1, KeyGroups: kg, State: &c.State}); err != nil {
		panic(err)
	}
	count, _ = statebackend.GetValueState(restored, "count", statebackend.Int64Codec)
	_ = restored.Timers().AdvanceWatermark(100, func(key []byte, _ int, ts int64) error {
		n, _ := count.Value() // the timer's key is current
		fmt.Printf("%s=%d at %d\n", key, n, ts)
		return nil
	})
	// Output:
	// a=3 at 100
	// b=1 at 100
}

func ExampleGetMapState() {
	b := heap.New(stream.KeyGroupRange{Start: 0, End: 0})
	perPage, _ := statebackend.GetMapState(b, "visits", statebackend.StringCodec, statebackend.Int64Codec)
	b.SetCurrentKey([]byte("user-1"), 0)
	for _, page := range []string{"/", "/a", "/"} {
		n, _ := perPage.Get(page)
		perPage.Put(page, n+1)
	}
	n, _ := perPage.Get("/")
	fmt.Println(n, perPage.Contains("/b"))
	// Output: 2 false
}

// The last page a user visited, forgotten 30 minutes after it was written.
func ExampleWithTTL() {
	b := heap.New(stream.KeyGroupRange{Start: 0, End: 0})
	defer b.Close()
	var now int64 // a manual clock (Unix ms); nil uses the system clock
	cfg := statebackend.DefaultTTLConfig(30 * time.Minute)
	cfg.Clock = func() int64 { return now }
	lastPage, err := statebackend.GetValueState(b, "last-page", statebackend.StringCodec, statebackend.WithTTL(cfg))
	if err != nil {
		panic(err)
	}
	b.SetCurrentKey([]byte("user-1"), 0)
	lastPage.Update("/cart")
	for _, wait := range []time.Duration{29 * time.Minute, time.Minute} {
		now += wait.Milliseconds()
		page, ok := lastPage.Value()
		fmt.Printf("%q %v\n", page, ok)
	}
	// Output:
	// "/cart" true
	// "" false
}
