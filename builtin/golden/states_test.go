package golden

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// TestDeclaredStates checks what each operator type declares at planning
// (stream.PlanContext.DeclareState), which weir jobs plan and submit --from
// check a restore against, with what its fixture really holds: every keyed
// table (name and kind), list state and union state of the fixture must be
// declared, with its kind.
func TestDeclaredStates(t *testing.T) {
	for i := range fixtures {
		fx := &fixtures[i]
		t.Run(fx.file(), func(t *testing.T) {
			typ, ok := builtin.Registry().Lookup(fx.typ, false)
			if !ok {
				t.Fatalf("operator type %q is not registered", fx.typ)
			}
			pc := &stream.PlanContext{UID: fx.typ, Config: []byte(fx.config), Parallelism: 1}
			for i, s := range fx.inputs {
				pc.Inputs = append(pc.Inputs, stream.PlanInput{Schema: s, KeyFields: fx.keys[i]})
			}
			if _, err := typ.Plan(pc); err != nil {
				t.Fatal(err)
			}
			declared := pc.States()
			if len(declared) == 0 {
				t.Fatalf("%s declares no state", fx.typ)
			}
			snap := loadFixture(t, fx)
			var found []stream.StateDecl
			for _, chunks := range snap.Keyed {
				for _, c := range chunks {
					for _, d := range chunkTables(t, c) {
						if !slices.Contains(found, d) {
							found = append(found, d)
						}
					}
				}
			}
			for name := range snap.List {
				found = append(found, stream.StateDecl{Name: name, Kind: stream.StateOperatorList})
			}
			for name := range snap.Union {
				found = append(found, stream.StateDecl{Name: name, Kind: stream.StateUnion})
			}
			for _, f := range found {
				if !slices.ContainsFunc(declared, func(d stream.StateDecl) bool { return d.Name == f.Name && d.Kind == f.Kind }) {
					t.Errorf("the fixture holds state %s, which %s does not declare (it declares %v)", f, fx.typ, declared)
				}
			}
		})
	}
}

// The keyed kinds of stream.StateKind are the names of statebackend's
// kinds.
func TestStateKindsMatchBackend(t *testing.T) {
	for k := statebackend.KindValue; k.Valid(); k++ {
		if sk := stream.StateKind(k.String()); !sk.Valid() || !sk.Keyed() {
			t.Errorf("statebackend kind %s is not a keyed stream.StateKind", k)
		}
	}
}

// chunkTables returns the tables of chunk c (statebackend/internal/chunk's
// format, version 1 or 2; see docs/state.md) as name and kind.
func chunkTables(t *testing.T, c []byte) []stream.StateDecl {
	t.Helper()
	pos := 4 // magic, version
	uvarint := func() int {
		v, n := binary.Uvarint(c[pos:])
		if n <= 0 {
			t.Fatalf("chunk: bad uvarint at %d", pos)
		}
		pos += n
		return int(v)
	}
	field := func() string {
		n := uvarint()
		pos += n
		return string(c[pos-n : pos])
	}
	uvarint() // key group
	var out []stream.StateDecl
	for range uvarint() {
		name := field()
		kind := statebackend.Kind(c[pos])
		pos++
		for range uvarint() {
			field() // key
			if kind != statebackend.KindMap {
				field() // value
				continue
			}
			for range uvarint() {
				field() // user key
				field() // value
			}
		}
		out = append(out, stream.StateDecl{Name: name, Kind: stream.StateKind(kind.String())})
	}
	return out
}
