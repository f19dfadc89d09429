package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir/connectors/nats/natstest"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// natsToFileSpec reads the stream "in" into the file sink.
const natsToFileSpec = `name: nats-to-file
parallelism: 1
checkpointing:
  interval: 500ms
  storage: %[1]q
restartStrategy:
  type: fixed-delay
  attempts: 100000
  delay: 200ms
operators:
  - uid: in
    type: nats
    config:
      url: %[2]q
      stream: in
      startFrom: first
      format: json
      fields:
        - {name: id, type: int64}
  - uid: out
    type: file
    config: {path: %[3]q, format: jsonl}
`

// fileToNATSSpec watches a directory for new JSON-lines files and
// publishes their rows to the stream "out".
const fileToNATSSpec = `name: file-to-nats
parallelism: 2
checkpointing:
  interval: 500ms
  storage: %[1]q
restartStrategy:
  type: fixed-delay
  attempts: 100000
  delay: 200ms
operators:
  - uid: files
    type: file
    config:
      path: %[2]q
      format: jsonl
      fields:
        - {name: id, type: int64}
      monitorInterval: 200ms
  - uid: out
    type: nats
    config:
      url: %[3]q
      subject: out.rows
      stream: out
      format: json
`

// feedNATS publishes {"id": i} for i in [0, n) to in.rows, about rate a
// second.
func feedNATS(ctx context.Context, js jetstream.JetStream, n, rate int) error {
	const chunk = 20
	tick := time.NewTicker(time.Second * chunk / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i += chunk {
		for j := i; j < min(i+chunk, n); j++ {
			if _, err := js.Publish(ctx, "in.rows", fmt.Appendf(nil, `{"id":%d}`, j)); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// feedFiles writes files of perFile rows {"id": i} for i in [0, n) into
// dir, one about every perFile/rate seconds, each under a hidden name
// first and then renamed, as a producer of such a directory must.
func feedFiles(ctx context.Context, dir string, n, perFile, rate int) error {
	tick := time.NewTicker(time.Second * time.Duration(perFile) / time.Duration(rate))
	defer tick.Stop()
	for f, i := 0, 0; i < n; f, i = f+1, i+perFile {
		var b strings.Builder
		for j := i; j < min(i+perFile, n); j++ {
			fmt.Fprintf(&b, "{\"id\":%d}\n", j)
		}
		name := fmt.Sprintf("rows-%05d.jsonl", f)
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// idCounts counts the ids of JSON values {"id": ...}; bad counts values
// that are not such.
func idCounts(values [][]byte) (seen map[int64]int, bad int) {
	seen = make(map[int64]int)
	for _, v := range values {
		var r struct {
			ID *int64 `json:"id"`
		}
		if err := json.Unmarshal(v, &r); err != nil || r.ID == nil {
			bad++
			continue
		}
		seen[*r.ID]++
	}
	return seen, bad
}

// committedLines returns the lines of the file sink's committed files in
// dir (its in-progress and pending files are hidden).
func committedLines(dir string) ([][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var lines [][]byte
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "part-") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, append([]byte(nil), sc.Bytes()...))
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return lines, nil
}

// streamValues returns the payloads of every message in the stream.
func streamValues(ctx context.Context, js jetstream.JetStream, name string) ([][]byte, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	var out [][]byte
	for uint64(len(out)) < info.State.Msgs {
		m, err := it.Next()
		if err != nil {
			return nil, err
		}
		out = append(out, m.Data())
	}
	return out, nil
}

// exactlyOnce counts ids of [0, n) missing from seen and seen more than
// once, and ids outside it.
func exactlyOnce(seen map[int64]int, n int) (lost, duplicated, unknown int) {
	for id, c := range seen {
		if id < 0 || id >= int64(n) {
			unknown += c
		} else if c > 1 {
			duplicated += c - 1
		}
	}
	for id := range int64(n) {
		if seen[id] == 0 {
			lost++
		}
	}
	return lost, duplicated, unknown
}

// TestPipelineNATS runs two jobs on three taskmanagers at once — a NATS
// JetStream stream → the file sink, and a directory of new files (the
// continuous file source) → the NATS sink — while their inputs grow, and
// SIGKILLs a taskmanager three times. The file sink's committed files must
// hold every message of the input stream once, and the output stream every
// row of the input files once (the sink's message ids let the stream drop
// what a restore publishes again).
func TestPipelineNATS(t *testing.T) {
	url := natstest.Start(t)
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	for _, s := range []jetstream.StreamConfig{
		{Name: "in", Subjects: []string{"in.>"}},
		{Name: "out", Subjects: []string{"out.>"}, Duplicates: 10 * time.Minute},
	} {
		if _, err := js.CreateStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	c := clustertest.Start(t, clustertest.Options{
		TaskManagers:      3,
		Slots:             2,
		HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout:  3 * time.Second,
		SlotWaitTimeout:   2 * time.Minute,
		LogLevel:          "info",
	})
	dir := t.TempDir()
	inFiles, outFiles := filepath.Join(dir, "in-files"), filepath.Join(dir, "out-files")
	for _, d := range []string{inFiles, outFiles} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	const rate = 400
	const records = rate * 40
	var wg sync.WaitGroup
	var natsErr, filesErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		natsErr = feedNATS(ctx, js, records, rate)
	}()
	go func() {
		defer wg.Done()
		filesErr = feedFiles(ctx, inFiles, records, 40, rate)
	}()
	defer wg.Wait()
	defer cancel()

	toFile := submitSpec(t, c, fmt.Sprintf(natsToFileSpec, "file://"+filepath.Join(dir, "ckpt"), url, outFiles))
	toNATS := submitSpec(t, c, fmt.Sprintf(fileToNATSSpec, "file://"+filepath.Join(dir, "ckpt"), inFiles, url))
	for _, job := range []string{toFile, toNATS} {
		waitCheckpoints(t, c, job, time.Time{}, 2, "of job "+job+" before the first fault")
	}
	for k := range 3 {
		killAndRecover(t, c, hosting(t, c, k, toFile, toNATS), toFile, toNATS)
	}
	restarts := restartsOf(c, toFile) + restartsOf(c, toNATS)

	wg.Wait()
	if natsErr != nil || filesErr != nil {
		t.Fatalf("feeding the input: stream: %v; files: %v", natsErr, filesErr)
	}
	var fileSeen, natsSeen map[int64]int
	var fileBad, natsBad int
	polltest.NoError(t, 3*time.Minute, "every input row in both outputs", func() error {
		lines, err := committedLines(outFiles)
		if err != nil {
			return err
		}
		fileSeen, fileBad = idCounts(lines)
		values, err := streamValues(ctx, js, "out")
		if err != nil {
			return err
		}
		natsSeen, natsBad = idCounts(values)
		if len(fileSeen) < records || len(natsSeen) < records {
			return fmt.Errorf("%d and %d of %d rows (files, stream)", len(fileSeen), len(natsSeen), records)
		}
		return nil
	})
	// Two more checkpoints of each job: anything that would come twice
	// does.
	now := time.Now()
	for _, job := range []string{toFile, toNATS} {
		waitCheckpoints(t, c, job, now, 2, "of job "+job+" after the last row arrived")
	}
	lines, err := committedLines(outFiles)
	if err != nil {
		t.Fatal(err)
	}
	fileSeen, fileBad = idCounts(lines)
	values, err := streamValues(ctx, js, "out")
	if err != nil {
		t.Fatal(err)
	}
	natsSeen, natsBad = idCounts(values)
	fl, fd, fu := exactlyOnce(fileSeen, records)
	nl, nd, nu := exactlyOnce(natsSeen, records)
	fmt.Printf("pipeline=nats-to-file kills=3 records=%d lost=%d duplicated=%d bad=%d unknown=%d\n", records, fl, fd, fileBad, fu)
	fmt.Printf("pipeline=file-to-nats kills=3 records=%d lost=%d duplicated=%d bad=%d unknown=%d\n", records, nl, nd, natsBad, nu)
	if fl+fd+fileBad+fu != 0 || nl+nd+natsBad+nu != 0 {
		t.Fatalf("not exactly once: nats-to-file lost=%d duplicated=%d bad=%d unknown=%d; file-to-nats lost=%d duplicated=%d bad=%d unknown=%d",
			fl, fd, fileBad, fu, nl, nd, natsBad, nu)
	}
	if restarts < 3 {
		t.Errorf("the jobs restarted %d times, want at least 3", restarts)
	}
	for _, job := range []string{toFile, toNATS} {
		if _, err := c.Weir("jobs", "cancel", job); err != nil {
			t.Fatalf("weir cancel %s: %v", job, err)
		}
	}
}
