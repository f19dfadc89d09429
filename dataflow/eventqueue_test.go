package dataflow

import (
	"math/rand/v2"
	"testing"
)

// TestEventQueueModel checks eventQueue against a slice on random pushes,
// pushes to the front and pops.
func TestEventQueueModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q eventQueue
	var model []int64
	for step := 0; step < 20000; step++ {
		switch op := rng.IntN(4); {
		case op == 0 && len(model) > 0:
			e := q.pop()
			if e.value != model[0] {
				t.Fatalf("step %d: pop %d, want %d", step, e.value, model[0])
			}
			model = model[1:]
		case op == 1:
			v := int64(step)
			q.pushFront(event{value: v})
			model = append([]int64{v}, model...)
		default:
			v := int64(step)
			q.push(event{value: v})
			model = append(model, v)
		}
		if q.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, q.len(), len(model))
		}
		for i, v := range model {
			if q.at(i).value != v {
				t.Fatalf("step %d: at(%d) = %d, want %d", step, i, q.at(i).value, v)
			}
		}
		if l := q.last(); (l == nil) != (len(model) == 0) || l != nil && l.value != model[len(model)-1] {
			t.Fatalf("step %d: last wrong", step)
		}
	}
}
