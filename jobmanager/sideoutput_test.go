package jobmanager

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/jobmanager/scheduler/schedulertest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// sideRegistry is testRegistry plus "split", which forwards its input and
// declares side output "late" of schema (k, late).
func sideRegistry(t *testing.T) (*stream.Registry, *stream.Schema) {
	reg := testRegistry(t)
	late := schedulertest.Schema(t, stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "late", Type: stream.TypeInt64})
	reg.Register(stream.OperatorType{Name: "split", Kind: stream.KindTransform,
		NewOperator: func([]byte) (stream.Operator, error) { return nil, schedulertest.ErrNotRunnable },
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			p.DeclareSideOutput("late", late)
			return p.Inputs[0].Schema, nil
		}})
	return reg, late
}

// TestSideOutputChaining: a side-output edge is never chained, so an
// operator whose side output is read ends its chain, even when nothing reads
// its main output.
func TestSideOutputChaining(t *testing.T) {
	reg, _ := sideRegistry(t)
	for _, tc := range []struct {
		name   string
		build  func(b *stream.Builder)
		chains [][]int
	}{
		{"main and side read", func(b *stream.Builder) {
			s := b.Source("a", "gen", nil).Then("split", "split", nil)
			s.Then("main", "discard", nil)
			s.SideOutput("late").Then("late", "discard", nil)
		}, [][]int{{0, 1}, {2}, {3}}},
		{"only the side output read", func(b *stream.Builder) {
			b.Source("a", "gen", nil).Then("split", "split", nil).SideOutput("late").Then("late", "pass", nil).Then("out", "discard", nil)
		}, [][]int{{0, 1}, {2, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := stream.NewBuilder("job")
			tc.build(b)
			g, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			tasks, err := scheduler.BuildTasks(planned(t, g, reg))
			if err != nil {
				t.Fatal(err)
			}
			var chains [][]int
			for _, tk := range tasks {
				chains = append(chains, tk.Chain)
			}
			if !reflect.DeepEqual(chains, tc.chains) {
				t.Fatalf("chains = %v, want %v", chains, tc.chains)
			}
		})
	}
}

// TestBuildDeploymentSideOutput: the deployment of the task that ends with the
// splitting operator names the side output its output edge reads and
// carries the side output's schema in the vertex; the reader's deployment
// has the side output's schema as its input schema.
func TestBuildDeploymentSideOutput(t *testing.T) {
	reg, late := sideRegistry(t)
	b := stream.NewBuilder("job").Parallelism(2)
	s := b.Source("a", "gen", nil).Then("split", "split", nil)
	s.Then("main", "discard", nil)
	s.SideOutput("late").KeyBy("late").Then("late", "discard", nil).SetParallelism(3)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	planned(t, g, reg)
	tasks, err := scheduler.BuildTasks(g)
	if err != nil {
		t.Fatal(err)
	}
	slotAddrs := []string{"tm:1", "tm:2", "tm:3"}
	split := buildDeployment(&scheduler.DeployAction{JobID: "j", Graph: g, Task: tasks[0], Subtask: 0, Attempt: 1, SlotAddrs: slotAddrs})
	wantOuts := []*weirpb.OutputSpec{
		{DownstreamVertex: 2, DownstreamParallelism: 2, Partitioning: weirpb.Partitioning_PARTITIONING_FORWARD, Targets: slotAddrs[:2]},
		{SideOutput: "late", DownstreamVertex: 3, DownstreamParallelism: 3, Partitioning: weirpb.Partitioning_PARTITIONING_HASH,
			KeyFields: []string{"late"}, Targets: slotAddrs},
	}
	if len(split.Outputs) != len(wantOuts) {
		t.Fatalf("split task outputs %v, want %v", split.Outputs, wantOuts)
	}
	for i := range wantOuts {
		if !proto.Equal(split.Outputs[i], wantOuts[i]) {
			t.Errorf("output %d = %v, want %v", i, split.Outputs[i], wantOuts[i])
		}
	}
	tail := split.Chain[len(split.Chain)-1].GetVertex()
	if got := tail.GetSideOutSchemas()["late"]; !proto.Equal(got, weirpb.FromSchema(late)) {
		t.Errorf("the split vertex carries side output schema %v, want %v", got, late)
	}
	reader := buildDeployment(&scheduler.DeployAction{JobID: "j", Graph: g, Task: tasks[2], Subtask: 2, Attempt: 1, SlotAddrs: slotAddrs})
	if got := reader.Chain[0].GetInputSchemas(); len(got) != 1 || !proto.Equal(got[0], weirpb.FromSchema(late)) {
		t.Errorf("the late reader's input schemas are %v, want the side output's %v", got, late)
	}
	if got := reader.Chain[0].GetInputKeys(); len(got) != 1 || !reflect.DeepEqual(got[0].GetFields(), []string{"late"}) {
		t.Errorf("the late reader's input keys are %v", got)
	}
}
