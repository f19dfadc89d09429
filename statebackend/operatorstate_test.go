package statebackend_test

import (
	"slices"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

func items(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func strs(items [][]byte) []string {
	var out []string
	for _, it := range items {
		out = append(out, string(it))
	}
	return out
}

func TestOperatorListState(t *testing.T) {
	s := statebackend.NewOperatorStateStore()
	l := s.ListState("offsets")
	if l != s.ListState("offsets") {
		t.Fatal("ListState returned a new list for the same name")
	}
	if s.UnionListState("offsets") == l {
		t.Fatal("list and union state share a name space")
	}
	l.Add([]byte("a"))
	l.Add([]byte("b"))
	got := l.Get()
	_ = append(got, []byte("c"))
	if !slices.Equal(strs(l.Get()), []string{"a", "b"}) {
		t.Fatalf("Get = %q", strs(l.Get()))
	}
	in := items("x", "y")
	l.Update(in)
	in[0] = []byte("changed")
	if !slices.Equal(strs(l.Get()), []string{"x", "y"}) {
		t.Fatalf("after Update: %q", strs(l.Get()))
	}
	l.Clear()
	if len(l.Get()) != 0 {
		t.Fatalf("after Clear: %q", strs(l.Get()))
	}
}

func TestOperatorStateSnapshotRestore(t *testing.T) {
	s := statebackend.NewOperatorStateStore()
	s.ListState("splits").Update(items("s0", "s1", "s2"))
	s.UnionListState("watermarks").Update(items("w"))
	s.ListState("empty")
	var zero statebackend.OperatorStateStore // the zero value works too
	zero.ListState("z").Add([]byte("z"))

	c := &stream.SnapshotContext{CheckpointID: 3}
	if err := s.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	if err := zero.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	// The snapshot does not alias: change the state afterwards.
	s.ListState("splits").Get()[0][0] = 'X'
	s.ListState("splits").Add([]byte("s3"))
	if got := strs(c.State.List["splits"]); !slices.Equal(got, []string{"s0", "s1", "s2"}) {
		t.Fatalf("snapshot list state %q", got)
	}
	if got := strs(c.State.Union["watermarks"]); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("snapshot union state %q", got)
	}
	if _, ok := c.State.List["empty"]; ok {
		t.Error("empty list written into the snapshot")
	}

	// Restore a share, as the storage layer hands it to one subtask.
	r := statebackend.NewOperatorStateStore()
	early := r.ListState("splits")
	rc := &stream.RestoreContext{State: &stream.OperatorSnapshot{
		List:  map[string][][]byte{"splits": c.State.List["splits"][:2], "z": c.State.List["z"]},
		Union: c.State.Union,
	}}
	if err := r.Restore(rc); err != nil {
		t.Fatal(err)
	}
	rc.State.List["splits"][0][0] = '!' // the store copied the items
	if got := strs(early.Get()); !slices.Equal(got, []string{"s0", "s1"}) {
		t.Errorf("restored splits %q (list asked for before Restore)", got)
	}
	if got := strs(r.UnionListState("watermarks").Get()); !slices.Equal(got, []string{"w"}) {
		t.Errorf("restored union %q", got)
	}
	if got := strs(r.ListState("z").Get()); !slices.Equal(got, []string{"z"}) {
		t.Errorf("restored z %q", got)
	}
	if err := r.Restore(&stream.RestoreContext{}); err != nil {
		t.Errorf("Restore of nothing: %v", err)
	}
}
