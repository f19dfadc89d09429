package checkpoint

import (
	"slices"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// With unchanged parallelism a subtask gets its own list items and keyed
// state, plus the union state of every subtask from their union-only
// handles.
func TestLoadOperatorStateUnionFromEverySubtask(t *testing.T) {
	ctx := t.Context()
	st := NewStorage(blobstore.NewMem())
	const par = 2
	var all []*weirpb.StateHandle
	for sub := 0; sub < par; sub++ {
		kg := stream.KeyGroupRangeFor(128, par, sub)
		main, err := EncodeSnapshot(&stream.OperatorSnapshot{
			Keyed: map[int][][]byte{kg.Start: {[]byte{byte('k' + sub)}}},
			List:  map[string][][]byte{"pos": {[]byte{byte('0' + sub)}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		union, err := EncodeSnapshot(&stream.OperatorSnapshot{Union: map[string][][]byte{"wm": {[]byte{byte('a' + sub)}}}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := st.UploadSnapshot(ctx, "job", 3, "op", sub, par, 1, kg, main)
		if err != nil {
			t.Fatal(err)
		}
		u, err := st.UploadUnionSnapshot(ctx, "job", 3, "op", sub, par, 1, kg, union)
		if err != nil {
			t.Fatal(err)
		}
		if !u.GetUnionOnly() || u.GetKey() == h.GetKey() {
			t.Fatalf("union handle %v must be marked and stored apart from %v", u, h)
		}
		all = append(all, h, u)
	}
	// What the jobmanager hands subtask 1: its own handle and every
	// union-only handle.
	var mine []*weirpb.StateHandle
	for _, h := range all {
		if h.GetSubtask() == 1 || h.GetUnionOnly() {
			mine = append(mine, h)
		}
	}
	got, err := st.LoadOperatorState(ctx, mine, stream.KeyGroupRangeFor(128, par, 1), 1, par)
	if err != nil {
		t.Fatal(err)
	}
	if u := got.Union["wm"]; len(u) != 2 || !slices.ContainsFunc(u, func(b []byte) bool { return string(b) == "a" }) {
		t.Fatalf("union state %q, want the items of both subtasks", u)
	}
	if l := got.List["pos"]; len(l) != 1 || string(l[0]) != "1" {
		t.Fatalf("list state %q, want only subtask 1's item", l)
	}
	if len(got.Keyed) != 1 {
		t.Fatalf("keyed state %v, want only subtask 1's key group", got.Keyed)
	}
}
