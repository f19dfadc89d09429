package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/proto/weirpb"
)

// TestCheckpointsStatsExplainAndRates runs weir checkpoints stats,
// weir checkpoints explain and weir jobs status against a real
// jobmanager and taskmanager, and checks what they print against the
// REST API's documents and the checkpoint list of the gRPC API.
func TestCheckpointsStatsExplainAndRates(t *testing.T) {
	c := startProgressCluster(t)
	job := c.submit(t, nil, c.spec(t))
	var cid int64
	eventually(t, "a completed checkpoint", func() bool {
		resp, err := c.api.ListCheckpoints(t.Context(), &weirpb.ListCheckpointsRequest{JobId: job})
		if err != nil {
			return false
		}
		for _, ck := range resp.GetCheckpoints() {
			if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				cid = ck.GetCheckpointId()
				return true
			}
		}
		return false
	})
	rest := []string{"--rest", c.rest}

	var out bytes.Buffer
	if err := c.weir(t, &out, append([]string{"checkpoints", "stats", job, strconv.FormatInt(cid, 10), "-o", "json"}, rest...)...); err != nil {
		t.Fatalf("checkpoints stats: %v\n%s", err, out.String())
	}
	var st view.CheckpointStats
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("stats -o json: %v\n%s", err, out.String())
	}
	var want view.CheckpointStats
	getJSON(t, fmt.Sprintf("http://%s/v1/jobs/%s/checkpoints/%d/stats", c.rest, job, cid), &want)
	if st.ID != cid || st.Status != "COMPLETED" || len(st.Tasks) != len(want.Tasks) || st.SizeBytes != want.SizeBytes {
		t.Fatalf("stats %+v, REST says %+v", st, want)
	}
	var sum int64
	for _, task := range st.Tasks {
		if task.Acknowledged != task.Parallelism {
			t.Errorf("task %s: %d of %d acknowledged", task.Name, task.Acknowledged, task.Parallelism)
		}
		for _, s := range task.Subtasks {
			sum += s.StateBytes
			if phases := s.StartDelayMs + s.AlignmentMs + s.SyncMs + s.AsyncMs; phases > s.EndToEndMs {
				t.Errorf("task %s subtask %d: phases %d ms exceed end to end %d ms", task.Name, s.Subtask, phases, s.EndToEndMs)
			}
		}
	}
	if sum != st.SizeBytes {
		t.Errorf("subtasks' state bytes sum to %d, the checkpoint's size is %d", sum, st.SizeBytes)
	}
	out.Reset()
	if err := c.weir(t, &out, append([]string{"checkpoints", "stats", job, strconv.FormatInt(cid, 10)}, rest...)...); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("checkpoint %d: completed", cid)) || !strings.Contains(out.String(), "START DELAY") {
		t.Errorf("checkpoints stats printed:\n%s", out.String())
	}

	var ex view.CheckpointExplain
	getJSON(t, fmt.Sprintf("http://%s/v1/jobs/%s/checkpoints/%d/explain", c.rest, job, cid), &ex)
	out.Reset()
	if err := c.weir(t, &out, append([]string{"checkpoints", "explain", job, strconv.FormatInt(cid, 10)}, rest...)...); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{fmt.Sprintf("checkpoint %d: completed", cid), "cause: " + ex.Cause, "critical path (" + ex.SlowestTask, "[" + ex.Dominant} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("checkpoints explain: no %q in\n%s", w, out.String())
		}
	}

	// A checkpoint the history does not hold: the API's reason.
	out.Reset()
	err := c.weir(t, &out, append([]string{"checkpoints", "explain", job, "999999"}, rest...)...)
	if err == nil || !strings.Contains(err.Error(), "recent history") {
		t.Errorf("explain of an unknown checkpoint: %v", err)
	}

	// jobs status shows the rates the REST API measures: the source
	// produces 20000 records a second.
	eventually(t, "weir jobs status to show the source's rate", func() bool {
		out.Reset()
		if err := c.weir(t, &out, append([]string{"jobs", "status", job}, rest...)...); err != nil {
			return false
		}
		m := regexp.MustCompile(`(?m)^events \(1/2\)\s+running\s+\S+\s+\d+\s+\d+\s+(\S+)\s+(\S+)\s+(\d+)%`).FindStringSubmatch(out.String())
		if m == nil {
			return false
		}
		rate, err := strconv.ParseFloat(strings.TrimSuffix(m[2], "k"), 64)
		return err == nil && strings.HasSuffix(m[2], "k") || err == nil && rate > 1000
	})
	if !strings.Contains(out.String(), "IN/S") || !strings.Contains(out.String(), "BACKPRESSURE") {
		t.Errorf("jobs status printed:\n%s", out.String())
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
