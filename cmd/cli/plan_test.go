package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/weirstream/weir/proto/weirpb"
)

// TestPlanShowsStates runs weir jobs plan against a savepoint of a job
// with keyed state: the plan lists each operator's type and its states as
// name (kind) with what the restore does with them, in the table and in
// the JSON output; a spec whose keyed operator changed type, and with it
// its state, is refused (exit non-zero) with a reason naming the operator,
// both types and the fix, by plan and by submit --from.
func TestPlanShowsStates(t *testing.T) {
	c := startProgressCluster(t)
	spec := c.planSpec(t, "type: running_count")
	id := c.submit(t, nil, spec)
	var out bytes.Buffer
	if err := c.weir(t, &out, "savepoint", id, "--dir", "file://"+filepath.Join(c.dir, "savepoints")); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`: (\S+)\n$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("weir savepoint printed %q", out.String())
	}
	from := m[1]

	out.Reset()
	if err := c.weir(t, &out, "jobs", "plan", spec, "--from", from); err != nil {
		t.Fatalf("plan of the same job: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		`(?m)^OPERATOR +STATE +PARALLELISM +BYTES +OBJECTS +FORMAT$`,
		`(?m)^counts +restored +2 -> 2 `,
		`(?m)^OPERATOR +TYPE +STATE +STATUS$`,
		`(?m)^counts +running_count +count \(value, int64\) +restored$`,
		`(?m)^counts +running_count +running_count\.key-types \(union\) +restored$`,
		`(?m)^weir submit --from would accept it$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("plan output does not match %s:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := c.weir(t, &out, "jobs", "plan", spec, "--from", from, "-o", "json"); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out.String())
	}
	var resp weirpb.PlanJobResponse
	if err := protojson.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatalf("plan -o json printed %q: %v", out.String(), err)
	}
	var got []string
	for _, o := range resp.GetOperators() {
		if o.GetUid() != "counts" {
			continue
		}
		for _, s := range o.GetStates() {
			got = append(got, fmt.Sprintf("%s %s %s/%s %s/%s", s.GetName(), s.GetStatus(), s.GetOldKind(), s.GetNewKind(), s.GetOldType(), s.GetNewType()))
		}
		if o.GetOldType() != "running_count" || o.GetNewType() != "running_count" {
			t.Errorf("counts' types in JSON: %q -> %q", o.GetOldType(), o.GetNewType())
		}
	}
	if want := "count restored value/value int64/int64|running_count.key-types restored union/union /"; strings.Join(got, "|") != want {
		t.Errorf("counts' states in JSON: %q, want %q", strings.Join(got, "|"), want)
	}

	out.Reset()
	changed := c.planSpec(t, "type: sequence_check\n    config: {field: n}")
	err := c.weir(t, &out, "jobs", "plan", changed, "--from", from)
	if err == nil {
		t.Fatalf("plan of a spec changing counts' type was accepted:\n%s", out.String())
	}
	for _, want := range []string{`operator "counts" is a running_count in the checkpoint and a sequence_check in the job`, "new uid"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	for _, want := range []string{
		`(?m)^counts +incompatible +2 -> 2 `,
		`(?m)^counts +running_count -> sequence_check +count \(value, int64\) +would be dropped$`,
		`(?m)^counts +running_count -> sequence_check +running_count\.key-types \(union\) +would be dropped$`,
		`(?m)^counts +running_count -> sequence_check +last \(value, int64\) +new, starts empty$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("plan output does not match %s:\n%s", want, out.String())
		}
	}
	// submit --from runs the same check.
	out.Reset()
	if err := c.weir(t, &out, "submit", changed, "--from", from); err == nil ||
		!strings.Contains(err.Error(), `operator "counts" is a running_count in the checkpoint and a sequence_check in the job`) {
		t.Errorf("submit --from of the changed spec: %v, want the plan's refusal\n%s", err, out.String())
	}
}

// planSpec writes the job of spec with counts' type line (and config)
// replaced by counts: datagen of key and n into counts, keyed by key,
// checkpointed every 500ms.
func (c *progressCluster) planSpec(t *testing.T, counts string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.yaml")
	body := fmt.Sprintf(`name: progress
parallelism: 2
checkpointing: {interval: 500ms, tolerableFailures: 10, storage: "file://%s"}
operators:
  - uid: events
    type: datagen
    config: {ratePerSecond: 20000, seed: 1, fields: [{name: key, kind: key, cardinality: 5000, prefix: k}, {name: n, kind: sequence}]}
  - uid: counts
    %s
    keyBy: [key]
  - uid: out
    type: discard
`, filepath.Join(c.dir, "ckpt"), counts)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
