package stream

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Plan records the states a type declares on its vertex, and reports a bad
// declaration as an error of the operator.
func TestPlanDeclaredStates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		declare []StateDecl
		err     string // "": planned
	}{
		{"none", nil, ""},
		{"keyed and operator state", []StateDecl{{"count", StateValue, "int64"}, {"marks", StateUnion, ""}, {"splits", StateOperatorList, ""}}, ""},
		{"one name in keyed and in operator state", []StateDecl{{"x", StateMap, ""}, {"x", StateUnion, ""}}, ""},
		{"keyed name twice", []StateDecl{{"x", StateValue, ""}, {"x", StateList, ""}}, `state "x" is declared twice (as value and list)`},
		{"operator name twice", []StateDecl{{"x", StateUnion, ""}, {"x", StateOperatorList, ""}}, `state "x" is declared twice`},
		{"no name", []StateDecl{{"", StateValue, ""}}, "a state name is 1 to"},
		{"long name", []StateDecl{{strings.Repeat("n", MaxNameLength+1), StateValue, ""}}, "a state name is 1 to"},
		{"unknown kind", []StateDecl{{"x", "timers", ""}}, `state "x": unknown kind "timers"`},
		{"long type", []StateDecl{{"x", StateValue, strings.Repeat("t", MaxNameLength+1)}}, "its type is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRegistry()
			r.Register(OperatorType{Name: "stateful", Kind: KindTransform,
				Plan: func(p *PlanContext) (*Schema, error) {
					for _, d := range tc.declare {
						p.DeclareState(d)
					}
					return p.Inputs[0].Schema, nil
				},
				NewOperator: func([]byte) (Operator, error) { return fakeOp{}, nil }})
			b := NewBuilder("job")
			b.Source("s", "src", nil).Then("op", "stateful", nil).Then("out", "sink", nil)
			g, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			err = Plan(g, r)
			if tc.err != "" {
				var ve *VertexError
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &ve) || ve.UID != "op" {
					t.Fatalf("Plan: %v, want an error of operator op saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g.Vertices[1].States, tc.declare) || g.Vertices[0].States != nil {
				t.Errorf("vertex states %v and %v, want %v and none", g.Vertices[1].States, g.Vertices[0].States, tc.declare)
			}
		})
	}
}

func TestStateKinds(t *testing.T) {
	for k, keyed := range map[StateKind]bool{StateValue: true, StateList: true, StateMap: true, StateReducing: true, StateAggregating: true,
		StateOperatorList: false, StateUnion: false} {
		if !k.Valid() || k.Keyed() != keyed {
			t.Errorf("%s: valid %v, keyed %v; want valid, keyed %v", k, k.Valid(), k.Keyed(), keyed)
		}
	}
	if k := StateKind("timers"); k.Valid() || k.Keyed() {
		t.Errorf("%s is valid", k)
	}
	if got := (StateDecl{"count", StateValue, "int64"}).String(); got != "count (value, int64)" {
		t.Errorf("String() = %q", got)
	}
}
