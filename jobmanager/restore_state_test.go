package jobmanager

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/jobmanager/scheduler/schedulertest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// stateRegistry has operator types that only plan: "gen" (a source that
// declares no state), "keep" and "keep2" (transforms that declare the
// states their config lists: {"states": [{"name": …, "kind": …, "type":
// …}]}) and "discard" (a sink).
func stateRegistry(t *testing.T) *stream.Registry {
	t.Helper()
	kv := schedulertest.Schema(t, stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "v", Type: stream.TypeInt64})
	newOp := func([]byte) (stream.Operator, error) { return nil, schedulertest.ErrNotRunnable }
	declare := func(p *stream.PlanContext) (*stream.Schema, error) {
		var cfg struct{ States []stream.StateDecl }
		if err := stream.DecodeConfig(p.Config, &cfg); err != nil {
			return nil, err
		}
		for _, d := range cfg.States {
			p.DeclareState(d)
		}
		return p.Inputs[0].Schema, nil
	}
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{Name: "gen", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return kv, nil },
		NewSource: func([]byte) (stream.Source, error) { return nil, schedulertest.ErrNotRunnable }})
	reg.Register(stream.OperatorType{Name: "keep", Kind: stream.KindTransform, NewOperator: newOp, Plan: declare})
	reg.Register(stream.OperatorType{Name: "keep2", Kind: stream.KindTransform, NewOperator: newOp, Plan: declare})
	reg.Register(stream.OperatorType{Name: "discard", Kind: stream.KindSink, NewOperator: newOp,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil }})
	return reg
}

// stateJob is src (gen) -keyBy(k)-> agg (typ, declaring states) -> sink,
// planned.
func stateJob(t *testing.T, typ string, states ...stream.StateDecl) *stream.JobGraph {
	t.Helper()
	b := stream.NewBuilder("states")
	b.Source("src", "gen", nil).SetParallelism(2).
		KeyBy("k").
		Then("agg", typ, map[string]any{"states": states}).SetParallelism(2).
		Then("sink", "discard", nil).SetParallelism(2)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return planned(t, g, stateRegistry(t))
}

// stateCheckpoint is the manifest buildManifest writes for a checkpoint of
// g in which src and agg acknowledged state.
func stateCheckpoint(g *stream.JobGraph) *weirpb.Manifest {
	var acks []coordinator.Ack
	for _, v := range g.Vertices[:2] {
		for s := range v.Parallelism {
			acks = append(acks, coordinator.Ack{Task: coordinator.TaskID{Vertex: v.ID, Subtask: s}, Payload: []*weirpb.StateHandle{{OperatorUid: v.UID, Subtask: int32(s),
				Parallelism: int32(v.Parallelism), Key: fmt.Sprintf("chk-3/%s-%d", v.UID, s), Size: 100}}})
		}
	}
	return buildManifest(scheduler.WriteManifestAction{JobID: "old", Graph: g, Mode: stream.ExactlyOnce, ID: 3,
		Triggered: time.UnixMilli(1000), Completed: time.UnixMilli(1100), Acks: acks})
}

var (
	countValue = stream.StateDecl{Name: "count", Kind: stream.StateValue, Type: "int64"}
	countList  = stream.StateDecl{Name: "count", Kind: stream.StateList, Type: "int64"}
	countJSON  = stream.StateDecl{Name: "count", Kind: stream.StateValue, Type: "json:main.Count"}
	countAny   = stream.StateDecl{Name: "count", Kind: stream.StateValue}
	keysUnion  = stream.StateDecl{Name: "key-types", Kind: stream.StateUnion}
	keysList   = stream.StateDecl{Name: "key-types", Kind: stream.StateOperatorList}
	seen       = stream.StateDecl{Name: "seen", Kind: stream.StateMap}
)

// TestPlanStates plans restores of a checkpoint whose operator "agg" kept
// count (value, int64) and key-types (union) into jobs whose "agg" changed:
// the plan lists agg's states, each with what the restore does with it, and
// refuses as submit --from does (checkRestore), naming the operator, the
// state, both kinds and the fix.
func TestPlanStates(t *testing.T) {
	old := stateCheckpoint(stateJob(t, "keep", countValue, keysUnion))
	for _, tc := range []struct {
		name  string
		m     *weirpb.Manifest // nil: old
		job   *stream.JobGraph
		allow bool
		// status of agg, and its states as name:status
		status string
		states []string
		// unknown is a substring of agg's states_unknown ("": none)
		unknown string
		// refusal has every one of these ("": accepted)
		refusal []string
	}{
		{name: "same states", job: stateJob(t, "keep", countValue, keysUnion),
			status: "restored", states: []string{"count:restored", "key-types:restored"}},
		{name: "declared in another order, one type not given", job: stateJob(t, "keep", keysUnion, countAny),
			status: "restored", states: []string{"count:restored", "key-types:restored"}},
		{name: "a new state starts empty", job: stateJob(t, "keep", countValue, keysUnion, seen),
			status: "restored", states: []string{"count:restored", "key-types:restored", "seen:new"}},
		{name: "keyed state changes kind", job: stateJob(t, "keep", countList, keysUnion),
			status: "incompatible", states: []string{"count:incompatible", "key-types:restored"},
			refusal: []string{`operator "agg"`, `state "count" is value state (int64) in the checkpoint and list state (int64) in the job`, "new uid"}},
		{name: "keyed state changes type", job: stateJob(t, "keep", countJSON, keysUnion),
			status: "incompatible", states: []string{"count:incompatible", "key-types:restored"},
			refusal: []string{`state "count" is value state (int64) in the checkpoint and value state (json:main.Count) in the job`}},
		{name: "kind change is refused also with --allow-non-restored-state", job: stateJob(t, "keep", countList, keysUnion), allow: true,
			status: "incompatible", states: []string{"count:incompatible", "key-types:restored"},
			refusal: []string{`state "count" is value state (int64)`}},
		{name: "union state becomes list state", job: stateJob(t, "keep", countValue, keysList),
			status: "incompatible", states: []string{"count:restored", "key-types:incompatible"},
			refusal: []string{`state "key-types" is union state in the checkpoint and operator-list state in the job`}},
		{name: "a state is dropped", job: stateJob(t, "keep", countValue),
			status: "restored", states: []string{"count:restored", "key-types:dropped"},
			refusal: []string{`operator "agg": "key-types" (union)`, "would be dropped", "--allow-non-restored-state"}},
		{name: "a state is dropped, allowed", job: stateJob(t, "keep", countValue), allow: true,
			status: "restored", states: []string{"count:restored", "key-types:dropped"}},
		{name: "operator type changes with the same state", job: stateJob(t, "keep2", countValue, keysUnion),
			status: "restored", states: []string{"count:restored", "key-types:restored"}},
		{name: "operator type changes with other state", job: stateJob(t, "keep2", countValue, seen),
			status: "incompatible", states: []string{"count:restored", "key-types:dropped", "seen:new"},
			refusal: []string{`operator "agg" is a keep in the checkpoint and a keep2 in the job`, "key-types (union)", "seen (map)", "new uid"}},
		{name: "operator type changes with other state, allowed", job: stateJob(t, "keep2", countValue, seen), allow: true,
			status: "incompatible", states: []string{"count:restored", "key-types:dropped", "seen:new"},
			refusal: []string{`is a keep in the checkpoint and a keep2 in the job`}},
		{name: "operator type changes to one that declares nothing", job: stateJob(t, "keep2"),
			status: "incompatible", unknown: "operator type keep2 does not declare its state",
			refusal: []string{`operator "agg" is a keep in the checkpoint and a keep2 in the job, and operator type keep2 does not declare its state`}},
		{name: "same type, declaring nothing now", job: stateJob(t, "keep"),
			status: "restored", unknown: "operator type keep does not declare its state"},
		{name: "checkpoint predates state names", m: withoutStateInfo(old), job: stateJob(t, "keep2", countList),
			status: "restored", unknown: "state names unknown (checkpoint predates them)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := cmpOr(tc.m, old)
			resp := planRestore("old@3", m, tc.job, tc.allow)
			var agg *weirpb.OperatorRestorePlan
			for _, p := range resp.GetOperators() {
				if p.GetUid() == "agg" {
					agg = p
				}
			}
			if agg == nil {
				t.Fatalf("the plan has no operator agg: %v", resp)
			}
			var states []string
			for _, s := range agg.GetStates() {
				states = append(states, s.GetName()+":"+s.GetStatus())
			}
			if agg.GetStatus() != tc.status || !slices.Equal(states, tc.states) {
				t.Errorf("agg is %s with states %q, want %s with %q", agg.GetStatus(), states, tc.status, tc.states)
			}
			if u := agg.GetStatesUnknown(); tc.unknown == "" && u != "" || !strings.Contains(u, tc.unknown) {
				t.Errorf("agg's states unknown: %q, want %q", u, tc.unknown)
			}
			if agg.GetOldType() != m.GetOperators()[1].GetOperatorType() || agg.GetNewType() != tc.job.Vertices[1].Type {
				t.Errorf("agg's types %q -> %q", agg.GetOldType(), agg.GetNewType())
			}
			err := checkRestore(m, tc.job, tc.allow)
			if (err == nil) != (resp.GetRefusal() == "") || err != nil && err.Error() != resp.GetRefusal() {
				t.Errorf("the plan refuses with %q, checkRestore with %v", resp.GetRefusal(), err)
			}
			if len(tc.refusal) == 0 && err != nil {
				t.Errorf("refused: %v", err)
			}
			if len(tc.refusal) > 0 && err == nil {
				t.Fatalf("accepted; want a refusal saying %q", tc.refusal)
			}
			for _, want := range tc.refusal {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
		})
	}
}

// The checkpoint's source declares no state: the plan says so and does not
// refuse; the job's sink has none in the checkpoint: it is new.
func TestPlanStatesUndeclared(t *testing.T) {
	g := stateJob(t, "keep", countValue, keysUnion)
	resp := planRestore("old@3", stateCheckpoint(g), g, false)
	if r := resp.GetRefusal(); r != "" {
		t.Fatalf("refused: %s", r)
	}
	var got []string
	for _, p := range resp.GetOperators() {
		got = append(got, fmt.Sprintf("%s %s %s->%s %d states %q", p.GetUid(), p.GetStatus(), p.GetOldType(), p.GetNewType(), len(p.GetStates()), p.GetStatesUnknown()))
	}
	want := []string{
		`src restored gen->gen 0 states "state names unknown (operator type gen does not declare its state)"`,
		`agg restored keep->keep 2 states ""`,
		`sink new ->discard 0 states ""`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// An operator the job no longer has lists its recorded states as dropped,
// and a new one its declared states as new.
func TestPlanStatesOfDroppedAndNewOperators(t *testing.T) {
	old := stateCheckpoint(stateJob(t, "keep", countValue, keysUnion))
	b := stream.NewBuilder("states")
	b.Source("src", "gen", nil).SetParallelism(2).
		KeyBy("k").
		Then("agg-v2", "keep", map[string]any{"states": []stream.StateDecl{countList}}).SetParallelism(2).
		Then("sink", "discard", nil).SetParallelism(2)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g = planned(t, g, stateRegistry(t))
	resp := planRestore("old@3", old, g, true)
	if r := resp.GetRefusal(); r != "" {
		t.Fatalf("refused with --allow-non-restored-state: %s", r)
	}
	rows := make(map[string][]string)
	for _, p := range resp.GetOperators() {
		for _, s := range p.GetStates() {
			rows[p.GetUid()] = append(rows[p.GetUid()], fmt.Sprintf("%s %s %s->%s", s.GetName(), s.GetStatus(), s.GetOldKind(), s.GetNewKind()))
		}
	}
	if got, want := rows["agg"], []string{"count dropped value->", "key-types dropped union->"}; !slices.Equal(got, want) {
		t.Errorf("dropped agg's states %q, want %q", got, want)
	}
	if got, want := rows["agg-v2"], []string{"count new ->list"}; !slices.Equal(got, want) {
		t.Errorf("new agg-v2's states %q, want %q", got, want)
	}
	if err := checkRestore(old, g, false); err == nil || !strings.Contains(err.Error(), `operators ["agg"] that the job does not have`) {
		t.Errorf("without --allow-non-restored-state: %v", err)
	}
}

// buildManifest records each operator's type and declared states; a
// manifest without them (written before Weir recorded them) is accepted.
func TestManifestRecordsStates(t *testing.T) {
	m := stateCheckpoint(stateJob(t, "keep", countValue, keysUnion))
	var got []string
	for _, op := range m.GetOperators() {
		got = append(got, fmt.Sprintf("%s %s %s", op.GetOperatorUid(), op.GetOperatorType(), listStates(op.GetStates())))
	}
	want := []string{"src gen ", "agg keep count (value), key-types (union)", "sink discard "}
	if !slices.Equal(got, want) {
		t.Errorf("manifest operators %q, want %q", got, want)
	}
	if m.GetOperators()[1].GetStates()[0].GetType() != "int64" {
		t.Errorf("count's type %q, want int64", m.GetOperators()[1].GetStates()[0].GetType())
	}
	if m.GetVersion() != manifestVersion {
		t.Errorf("manifest version %d, want %d", m.GetVersion(), manifestVersion)
	}
}

// withoutStateInfo is m as a Weir that did not record operator types and
// states wrote it.
func withoutStateInfo(m *weirpb.Manifest) *weirpb.Manifest {
	out := &weirpb.Manifest{Version: m.Version, JobId: m.JobId, CheckpointId: m.CheckpointId, MaxParallelism: m.MaxParallelism}
	for _, op := range m.GetOperators() {
		out.Operators = append(out.Operators, &weirpb.OperatorState{OperatorUid: op.OperatorUid, Parallelism: op.Parallelism,
			Handles: op.Handles, FinishedSubtasks: op.FinishedSubtasks})
	}
	return out
}

func cmpOr(m, def *weirpb.Manifest) *weirpb.Manifest {
	if m != nil {
		return m
	}
	return def
}
