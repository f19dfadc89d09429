package stream

import "fmt"

// StateKind is the kind of a piece of state an operator declares
// (StateDecl). The keyed kinds are the names of the kinds of statebackend
// tables (statebackend.Kind's String); the others are the list and union
// operator state of a SnapshotContext.
type StateKind string

const (
	// StateValue, StateList, StateMap, StateReducing and StateAggregating
	// are keyed state: a statebackend table of that kind.
	StateValue       StateKind = "value"
	StateList        StateKind = "list"
	StateMap         StateKind = "map"
	StateReducing    StateKind = "reducing"
	StateAggregating StateKind = "aggregating"
	// StateOperatorList is operator list state (SnapshotContext.AddListState),
	// split among the subtasks on restore.
	StateOperatorList StateKind = "operator-list"
	// StateUnion is union list state (SnapshotContext.AddUnionState), given
	// whole to every subtask on restore.
	StateUnion StateKind = "union"
)

// Valid reports whether k is one of the kinds above.
func (k StateKind) Valid() bool {
	switch k {
	case StateValue, StateList, StateMap, StateReducing, StateAggregating, StateOperatorList, StateUnion:
		return true
	}
	return false
}

// Keyed reports whether k is a kind of keyed state. Keyed state and
// operator (list and union) state have separate name spaces.
func (k StateKind) Keyed() bool { return k.Valid() && k != StateOperatorList && k != StateUnion }

// StateDecl declares one piece of state that an operator keeps in its
// checkpoints. Declarations hold no state: they are what a restore is
// checked against before anything runs (weir jobs plan, submit --from),
// matched by Name, so they must name what the operator really writes.
type StateDecl struct {
	// Name is the keyed state's table name (the name given to
	// statebackend.GetValueState and the like), or the name of the list
	// or union state.
	Name string
	Kind StateKind
	// Type identifies how the state's values are encoded, such as the
	// statebackend codec's ID ("int64", "slots/3"); "" when the operator
	// does not say. A state declared with two different non-empty types
	// does not restore one into the other.
	Type string
}

func (d StateDecl) String() string {
	if d.Type == "" {
		return fmt.Sprintf("%s (%s)", d.Name, d.Kind)
	}
	return fmt.Sprintf("%s (%s, %s)", d.Name, d.Kind, d.Type)
}

// DeclareState declares that the operator keeps the state d in its
// checkpoints. The Plan function of a stateful operator type calls it once
// for every piece of state its instances may write with this config and
// these inputs, whether or not they will hold any. A name is 1 to
// MaxNameLength bytes, unique among the operator's keyed state and among
// its list and union state; a type is at most MaxNameLength bytes. A bad or
// repeated declaration is reported by Plan as an error of the operator.
//
// An operator type that declares nothing is stateless, or does not say
// what it keeps: a restore then checks its state by uid only.
func (p *PlanContext) DeclareState(d StateDecl) {
	var err error
	switch {
	case d.Name == "" || len(d.Name) > MaxNameLength:
		err = fmt.Errorf("state %.64q: a state name is 1 to %d bytes", d.Name, MaxNameLength)
	case !d.Kind.Valid():
		err = fmt.Errorf("state %q: unknown kind %.64q", d.Name, d.Kind)
	case len(d.Type) > MaxNameLength:
		err = fmt.Errorf("state %q: its type is %d bytes; the limit is %d", d.Name, len(d.Type), MaxNameLength)
	}
	for _, e := range p.states {
		if err == nil && e.Name == d.Name && e.Kind.Keyed() == d.Kind.Keyed() {
			err = fmt.Errorf("state %q is declared twice (as %s and %s)", d.Name, e.Kind, d.Kind)
		}
	}
	if err != nil {
		if p.stateErr == nil {
			p.stateErr = err
		}
		return
	}
	p.states = append(p.states, d)
}

// States returns the states declared so far, in the order declared (nil
// when none). The slice must not be modified.
func (p *PlanContext) States() []StateDecl { return p.states }
