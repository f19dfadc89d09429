package clustertest

// Helpers that read and check what jobs wrote, shared by the process tests.

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors"
)

// CommittedRows reads every committed (visible) part file under dir: the
// two-phase-commit sink keeps uncommitted data in dot-files.
func CommittedRows(t *testing.T, dir string) (header []string, rows [][]string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read output %s: %v", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		r := csv.NewReader(f)
		h, err := r.Read()
		if err == io.EOF {
			f.Close()
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		header = h
		for {
			rec, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			rows = append(rows, rec)
		}
		f.Close()
	}
	return header, rows
}

// CheckRunningCounts compares the committed running counts with the
// generated rows: every key must show exactly 1..N once each.
func CheckRunningCounts(t *testing.T, dir string, datagen string) (lost, duplicated int) {
	t.Helper()
	var cfg connectors.DatagenConfig
	if err := json.Unmarshal([]byte(datagen), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	connectors.GenerateRows(cfg, 0, cfg.Rows, func(_ int64, row []any) { want[row[0].(string)]++ })
	header, rows := CommittedRows(t, dir)
	if len(rows) > 0 && strings.Join(header, ",") != "key,count" {
		t.Fatalf("running count header %v", header)
	}
	seen := map[string]map[int64]int{}
	for _, r := range rows {
		n, err := strconv.ParseInt(r[1], 10, 64)
		if err != nil {
			t.Fatalf("bad count %v", r)
		}
		if seen[r[0]] == nil {
			seen[r[0]] = map[int64]int{}
		}
		seen[r[0]][n]++
	}
	return LostAndDuplicated(want, seen)
}

// LostAndDuplicated compares the numbers seen per key (with how often each
// was seen) with 1..want[key] for every key: a number never seen is lost;
// every extra copy, and every number or key outside the expected ones (a
// count beyond N means a record was counted twice), is a duplicate.
func LostAndDuplicated[K comparable](want map[K]int64, seen map[K]map[int64]int) (lost, duplicated int) {
	for key, n := range want {
		for i := int64(1); i <= n; i++ {
			switch c := seen[key][i]; {
			case c == 0:
				lost++
			case c > 1:
				duplicated += c - 1
			}
		}
	}
	for key, counts := range seen {
		for i, c := range counts {
			if i < 1 || i > want[key] {
				duplicated += c
			}
		}
	}
	return lost, duplicated
}

// SubmitSpec writes a job spec to path, submits it with the weir CLI and
// returns the job's id.
func SubmitSpec(t *testing.T, c *Cluster, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := c.Weir("submit", path)
	if err != nil {
		t.Fatalf("weir submit: %v\n%s", err, out)
	}
	fields := strings.Fields(out)
	return fields[len(fields)-1]
}

// ParseTime reads a time column written by a sink: Unix milliseconds or
// RFC 3339.
func ParseTime(t *testing.T, s string) int64 {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad timestamp %q in output: %v", s, err)
	}
	return ts.UnixMilli()
}
