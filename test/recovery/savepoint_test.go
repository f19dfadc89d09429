package recovery

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// TestStopWithSavepointAndResume takes a savepoint of the running
// exactly-once job, on Pebble state with incremental checkpoints, over
// REST, stops it with a second one (weir jobs stop), moves that savepoint
// to another directory, and resumes the job from it on heap state (which
// reads only the canonical format savepoints are written in) into the same
// output directory: the output is exactly once. The first savepoint is
// then disposed of. It prints
//
//	savepoints=2 moved=true from=pebble resumed_backend=heap lost=0 duplicated=0
func TestStopWithSavepointAndResume(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "info"})
	job := clustertest.NewSequenceJob(t, "savepointed", 20, 1000, 16)
	heapSpec, err := os.ReadFile(job.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(job.Spec, []byte(strings.Replace(string(heapSpec), "operators:\n", "state: {backend: pebble}\noperators:\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	jobID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, jobID, time.Time{}, 2, "before the savepoint")
	spDir := "file://" + filepath.Join(t.TempDir(), "savepoints")

	location := func(out string) string {
		t.Helper()
		fields := strings.Fields(out)
		loc := fields[len(fields)-1]
		if !strings.HasPrefix(loc, spDir+"/savepoint-"+jobID+"-") {
			t.Fatalf("savepoint location %q is not under %s", loc, spDir)
		}
		if _, err := os.Stat(filepath.Join(strings.TrimPrefix(loc, "file://"), checkpoint.SavepointMetadataKey)); err != nil {
			t.Fatalf("savepoint %s has no metadata: %v", loc, err)
		}
		return loc
	}
	// The first over REST: the request answers at once, its outcome is
	// polled.
	hc := c.HTTPClient()
	resp, err := hc.Post(c.URL(c.REST)+"/v1/jobs/"+jobID+"/savepoints", "application/json", strings.NewReader(`{"dir": "`+spDir+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var started struct{ RequestID string }
	err = json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted || started.RequestID == "" {
		t.Fatalf("POST savepoints: %d %v %+v", resp.StatusCode, err, started)
	}
	var done struct{ Status, Location, Error string }
	polltest.Eventually(t, 2*time.Minute, "the REST savepoint request to end", func() bool {
		resp, err := hc.Get(c.URL(c.REST) + "/v1/savepoint-requests/" + started.RequestID)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&done) == nil && done.Status != "IN_PROGRESS"
	})
	if done.Status != "COMPLETED" {
		t.Fatalf("REST savepoint: %+v", done)
	}
	first := location(done.Location)

	out, err := c.Weir("jobs", "stop", jobID, "--savepoint-dir", spDir)
	if err != nil {
		t.Fatalf("weir jobs stop: %v\n%s", err, out)
	}
	stopped := location(out)
	if s := c.WaitJob(jobID, time.Minute).GetJob().GetState(); s != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("the stopped job is %v, want FINISHED", s)
	}

	// The savepoint owns its files: move it, and the job's own
	// checkpoints (deleted once it finished) are not needed.
	moved := filepath.Join(t.TempDir(), "moved", filepath.Base(stopped))
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(strings.TrimPrefix(stopped, "file://"), moved); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(filepath.Dir(job.Spec), "ckpt", jobID)
	polltest.Eventually(t, time.Minute, "the finished job's checkpoints to be deleted", func() bool {
		entries, _ := filepath.Glob(filepath.Join(ckpt, "chk-*"))
		return len(entries) == 0
	})

	heap := filepath.Join(t.TempDir(), "heap.yaml")
	if err := os.WriteFile(heap, heapSpec, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = c.Weir("submit", heap, "--from", "file://"+moved)
	if err != nil {
		t.Fatalf("submit --from the moved savepoint: %v\n%s", err, out)
	}
	fields := strings.Fields(out)
	job.ID = fields[len(fields)-1]
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)

	out, err = c.Weir("savepoints", "dispose", first)
	if err != nil {
		t.Fatalf("dispose %s: %v\n%s", first, err, out)
	}
	if _, err := os.Stat(strings.TrimPrefix(first, "file://") + "/" + checkpoint.SavepointMetadataKey); !os.IsNotExist(err) {
		t.Fatalf("the disposed savepoint still has its metadata: %v", err)
	}
	if out, err := c.Weir("savepoints", "dispose", spDir); err == nil {
		t.Fatalf("disposing a directory that is not a savepoint succeeded:\n%s", out)
	}
	fmt.Printf("savepoints=2 moved=true from=pebble resumed_backend=heap lost=%d duplicated=%d\n", lost, duplicated)
	if lost != 0 || duplicated != 0 {
		t.Fatalf("lost=%d duplicated=%d", lost, duplicated)
	}
}

// TestRescaleThroughSavepoints runs the exactly-once job (a keyed
// continuity check per key into the file sink) at parallelism 2, then
// stops it with a savepoint and resumes it at 4, at 1 and at 3, switching
// the state backend at each step (heap, Pebble, heap, Pebble): keyed state
// moves by key-group ranges, the sources' splits and the sink's pending
// transactions to whichever subtask receives them. The output is exactly
// once. It prints
//
//	rescale_path=2,4,1,3 restores=3 lost=0 duplicated=0
func TestRescaleThroughSavepoints(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 4, LogLevel: "info"})
	job := clustertest.NewSequenceJob(t, "rescaled", 24, 1000, 16)
	base, err := os.ReadFile(job.Spec)
	if err != nil {
		t.Fatal(err)
	}
	spec := func(p int, backend string) string {
		s := strings.Replace(string(base), "parallelism: 4\n", fmt.Sprintf("parallelism: %d\nstate: {backend: %s}\n", p, backend), 1)
		s = strings.Replace(s, "    parallelism: 2\n", fmt.Sprintf("    parallelism: %d\n", p), 1)
		path := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	spDir := "file://" + filepath.Join(t.TempDir(), "savepoints")
	path := []int{2, 4, 1, 3}
	backends := []string{"heap", "pebble", "heap", "pebble"}
	out, err := c.Weir("submit", spec(path[0], backends[0]))
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	fields := strings.Fields(out)
	job.ID = fields[len(fields)-1]
	restores := 0
	for i := 1; i < len(path); i++ {
		clustertest.WaitCheckpointsSince(t, c, job.ID, time.Time{}, 1, fmt.Sprintf("at parallelism %d", path[i-1]))
		out, err := c.Weir("jobs", "stop", job.ID, "--savepoint-dir", spDir)
		if err != nil {
			t.Fatalf("stop at parallelism %d: %v\n%s", path[i-1], err, out)
		}
		fields := strings.Fields(out)
		sp := fields[len(fields)-1]
		out, err = c.Weir("submit", spec(path[i], backends[i]), "--from", sp)
		if err != nil {
			t.Fatalf("resume at parallelism %d: %v\n%s", path[i], err, out)
		}
		fields = strings.Fields(out)
		job.ID = fields[len(fields)-1]
		restores++
	}
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	fmt.Printf("rescale_path=2,4,1,3 restores=%d lost=%d duplicated=%d\n", restores, lost, duplicated)
	if lost != 0 || duplicated != 0 {
		t.Fatalf("lost=%d duplicated=%d", lost, duplicated)
	}
}
