package connectors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
)

// Tests of the continuous file source. Listing time is driven by a fake
// clock: a listing is due when the test advances the clock past the
// interval, so the tests poll without waiting.

const testInterval = time.Second

// contFiles writes the input files of a test and remembers their lines.
type contFiles struct {
	t     *testing.T
	dir   string
	n     int            // files written
	lines map[string]int // line → file number
}

func newContFiles(t *testing.T) *contFiles {
	return &contFiles{t: t, dir: t.TempDir(), lines: map[string]int{}}
}

// add writes the next file, of lines lines, the safe way: under a hidden
// name, then renamed into place.
func (f *contFiles) add(lines int) string {
	f.t.Helper()
	k := f.n
	f.n++
	var b strings.Builder
	for i := range lines {
		line := fmt.Sprintf("f%04d-%d", k, i)
		b.WriteString(line + "\n")
		f.lines[line] = k
	}
	name := fmt.Sprintf("f%04d.txt", k)
	tmp := filepath.Join(f.dir, ".tmp-"+name)
	writeFile(f.t, tmp, b.String())
	must(f.t, os.Rename(tmp, filepath.Join(f.dir, name)))
	return filepath.Join(f.dir, name)
}

// openCont opens subtask sub of par of a continuous source on clk.
func openCont(t *testing.T, cfg FileSourceConfig, sub, par int, clk *fakeClock) *FileSource {
	t.Helper()
	return openFileSource(t, cfg, sub, par, func(s *FileSource) { s.mon.now = clk.now })
}

func contConfig(path string) FileSourceConfig {
	return FileSourceConfig{Path: path, MonitorInterval: testInterval.String(), BatchSize: 4}
}

// pollIdle polls s into c until it has nothing to do before its next
// listing: it returned PollIdle with a positive IdleFor.
func pollIdle(t *testing.T, s *FileSource, c *collector) {
	t.Helper()
	for range 100000 {
		st, err := s.Poll(t.Context(), c)
		must(t, err)
		switch {
		case st == stream.PollEnd:
			t.Fatal("a continuous source returned PollEnd")
		case st == stream.PollIdle && s.IdleFor() > 0:
			return
		}
	}
	t.Fatal("the source did not become idle")
}

// pollSome polls s n times into c, or until it is idle.
func pollSome(t *testing.T, s *FileSource, c *collector, n int) {
	t.Helper()
	for range n {
		st, err := s.Poll(t.Context(), c)
		must(t, err)
		if st == stream.PollEnd {
			t.Fatal("a continuous source returned PollEnd")
		}
		if st == stream.PollIdle && s.IdleFor() > 0 {
			return
		}
	}
}

// check checks that rows holds every line of f exactly once; it
// reports the lost and the duplicated lines, and lines that no file has.
func (f *contFiles) check(rows []string) {
	f.t.Helper()
	count := map[string]int{}
	unknown := 0
	for _, r := range rows {
		if _, ok := f.lines[r]; !ok {
			unknown++
		}
		count[r]++
	}
	lost, dup := 0, 0
	for line := range f.lines {
		switch n := count[line]; {
		case n == 0:
			lost++
		case n > 1:
			dup += n - 1
		}
	}
	if lost > 0 || dup > 0 || unknown > 0 {
		f.t.Fatalf("of %d lines in %d files: %d lost, %d duplicated, %d not in any file", len(f.lines), f.n, lost, dup, unknown)
	}
}

func strs(rows [][]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r[0].(string)
	}
	return out
}

func TestContinuousFileSourceReadsNewFiles(t *testing.T) {
	files := newContFiles(t)
	files.add(3)
	files.add(5)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := openCont(t, contConfig(files.dir), 0, 1, clk)
	var c collector
	pollIdle(t, s, &c)
	if len(c.batches) != 0 {
		t.Fatalf("read %d batches at the first listing; a file needs two listings that find it unchanged", len(c.batches))
	}
	if d := s.IdleFor(); d != testInterval {
		t.Fatalf("IdleFor after a listing = %v, want %v", d, testInterval)
	}
	clk.t = clk.t.Add(testInterval / 4)
	if st, err := s.Poll(t.Context(), &c); st != stream.PollIdle || err != nil || s.IdleFor() != testInterval*3/4 {
		t.Fatalf("Poll before the next listing = %v, %v, IdleFor %v; want PollIdle for %v", st, err, s.IdleFor(), testInterval*3/4)
	}
	// Files appear between polls; each is read two listings after it
	// appears.
	for round := range 6 {
		if round < 4 {
			files.add(1 + round)
		}
		clk.t = clk.t.Add(testInterval)
		pollIdle(t, s, &c)
	}
	files.check(strs(c.rows()))
	if len(c.watermarks) != 0 {
		t.Fatalf("the continuous source emitted watermarks %v", c.watermarks)
	}
	if got := s.mon.seen.n; got != files.n {
		t.Fatalf("seen holds %d files, want %d", got, files.n)
	}
}

// TestContinuousFileSourceRescaled runs a job whose parallelism changes at
// each restore while files keep appearing: in each stage the subtasks read
// for a few rounds (of new files and a listing each), the job takes a
// checkpoint in the middle of files, reads on a little (lost in the
// crash), files appear while it is down, and it restores with the next
// parallelism; the last stage reads until nothing is left. The output must
// hold every line of every file exactly once.
func TestContinuousFileSourceRescaled(t *testing.T) {
	for _, pars := range [][]int{{1, 1, 1}, {2, 3, 1}, {3, 2, 4}, {1, 4, 2}} {
		t.Run(fmt.Sprint(pars), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(len(pars)), uint64(pars[0]*10+pars[1])))
			files := newContFiles(t)
			for range 3 {
				files.add(1 + rng.IntN(20))
			}
			clk := &fakeClock{t: time.Unix(1_000_000, 0)}
			cfg := contConfig(files.dir)
			var got []string
			var restored []*stream.OperatorSnapshot
			midFile := 0 // files being read at a checkpoint
			for stage, par := range pars {
				id := int64(stage + 1)
				last := stage == len(pars)-1
				srcs := make([]*FileSource, par)
				outs := make([]collector, par)
				for sub := range par {
					srcs[sub] = openCont(t, cfg, sub, par, clk)
					if restored != nil {
						must(t, restore(srcs[sub], id-1, restored[sub]))
					}
				}
				rounds := 4 + rng.IntN(3)
				if last {
					rounds = 8 // the files of the last 3 rounds are read to the end
				}
				for round := range rounds {
					if !last || round < rounds-3 {
						for range rng.IntN(4) {
							files.add(1 + rng.IntN(20))
						}
					}
					clk.t = clk.t.Add(testInterval)
					for sub, s := range srcs {
						if last {
							pollIdle(t, s, &outs[sub])
						} else {
							pollSome(t, s, &outs[sub], 1+rng.IntN(5))
						}
					}
				}
				for sub := range par {
					got = append(got, strs(outs[sub].rows())...)
					if len(outs[sub].watermarks) != 0 {
						t.Fatalf("stage %d subtask %d emitted watermarks", stage, sub)
					}
				}
				if last {
					break
				}
				snaps := make([]*stream.OperatorSnapshot, par)
				for sub, s := range srcs {
					snaps[sub] = snapshot(t, s, id)
					midFile += len(snaps[sub].List[fileSplitsState])
					clk.t = clk.t.Add(testInterval)
					pollSome(t, s, &collector{}, 3) // lost in the crash
					s.Close()
				}
				files.add(1 + rng.IntN(20)) // appears while the job is down
				restored = redistribute(t, id, snaps, pars[stage+1])
			}
			files.check(got)
			if midFile == 0 {
				t.Fatal("no checkpoint was taken in the middle of a file")
			}
		})
	}
}

func TestContinuousFileSourceWaitsForCompleteFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "growing.txt")
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := openCont(t, contConfig(dir), 0, 1, clk)
	var c collector
	writeFile(t, path, "l0\nl1\nhal") // written in place, the unsafe way
	pollIdle(t, s, &c)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString("f\nl3\n")
	must(t, err)
	must(t, f.Close())
	clk.t = clk.t.Add(testInterval)
	pollIdle(t, s, &c) // the size changed: not yet
	if len(c.batches) != 0 {
		t.Fatalf("read %v from a file whose size changed between two listings", c.rows())
	}
	clk.t = clk.t.Add(testInterval)
	pollIdle(t, s, &c)
	if got, want := strs(c.rows()), []string{"l0", "l1", "half", "l3"}; !slices.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}

	t.Run("minFileAge", func(t *testing.T) {
		dir := t.TempDir()
		cfg := contConfig(dir)
		cfg.MinFileAge = "10s"
		s := openCont(t, cfg, 0, 1, clk)
		var c collector
		path := filepath.Join(dir, "aged.txt")
		writeFile(t, path, "a\nb\n")
		must(t, os.Chtimes(path, clk.t, clk.t.Add(-5*time.Second)))
		pollIdle(t, s, &c)
		if len(c.batches) != 0 {
			t.Fatalf("read a file 5s old with minFileAge 10s")
		}
		clk.t = clk.t.Add(5 * time.Second)
		pollIdle(t, s, &c)
		if got := strs(c.rows()); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("read %q once the file was 10s old, want a, b", got)
		}
	})
}

func TestContinuousFileSourceSkipsHiddenFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".partial.log"), "hidden1\n")
	writeFile(t, filepath.Join(dir, "_tmp.log"), "hidden2\n")
	writeFile(t, filepath.Join(dir, "other.txt"), "unmatched\n")
	writeFile(t, filepath.Join(dir, "read.log"), "visible\n")
	must(t, os.Mkdir(filepath.Join(dir, "sub.log"), 0o755))
	writeFile(t, filepath.Join(dir, "sub.log", "x.log"), "nested\n")
	must(t, os.Symlink(filepath.Join(dir, "read.log"), filepath.Join(dir, "link.log")))
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := openCont(t, contConfig(filepath.Join(dir, "*.log")), 0, 1, clk)
	var c collector
	for range 3 {
		pollIdle(t, s, &c)
		clk.t = clk.t.Add(testInterval)
	}
	if got := strs(c.rows()); !slices.Equal(got, []string{"visible"}) {
		t.Fatalf("read %q, want only the line of read.log", got)
	}
}

func TestContinuousFileSourceProcessOnlyNew(t *testing.T) {
	files := newContFiles(t)
	files.add(2)
	files.add(3)
	old := files.lines
	files.lines = map[string]int{}
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	cfg := contConfig(files.dir)
	cfg.ProcessOnlyNew = true
	s := openCont(t, cfg, 0, 1, clk)
	var c collector
	pollIdle(t, s, &c)
	files.add(4)
	for range 2 {
		clk.t = clk.t.Add(testInterval)
		pollIdle(t, s, &c)
	}
	st := snapshot(t, s, 1)
	files.add(5) // while the job is down: not part of the first listing
	s = openCont(t, cfg, 0, 1, clk)
	must(t, restore(s, 1, st))
	for range 3 {
		clk.t = clk.t.Add(testInterval)
		pollIdle(t, s, &c)
	}
	rows := strs(c.rows())
	for _, r := range rows {
		if _, ok := old[r]; ok {
			t.Fatalf("read line %q of a file present at the first listing", r)
		}
	}
	files.check(rows)
}

func TestContinuousFileSourceSkipsRemovedFile(t *testing.T) {
	files := newContFiles(t)
	path := files.add(30)
	keep := files.add(2)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := openCont(t, contConfig(files.dir), 0, 1, clk)
	var c collector
	pollIdle(t, s, &c)
	clk.t = clk.t.Add(testInterval)
	pollSome(t, s, &c, 2) // 8 lines of the first file
	st := snapshot(t, s, 1)
	if len(st.List[fileSplitsState]) != 2 {
		t.Fatalf("snapshot holds %d splits, want the two files being read", len(st.List[fileSplitsState]))
	}
	must(t, os.Remove(path))
	s = openCont(t, contConfig(files.dir), 0, 1, clk)
	must(t, restore(s, 1, st))
	var after collector
	pollIdle(t, s, &after)
	if got := strs(after.rows()); !slices.Equal(got, []string{"f0001-0", "f0001-1"}) {
		t.Fatalf("after the removal read %q, want the lines of %s only", got, keep)
	}
}

func TestContinuousFileSourceListsInChunks(t *testing.T) {
	files := newContFiles(t)
	const n = 2*listChunk + 100
	for range n {
		files.add(1)
	}
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := openCont(t, contConfig(files.dir), 0, 1, clk)
	var c collector
	polls := 0
	for {
		st, err := s.Poll(t.Context(), &c)
		must(t, err)
		polls++
		if st != stream.PollIdle {
			t.Fatalf("poll %d: %v", polls, st)
		}
		if s.IdleFor() > 0 {
			break
		}
	}
	if want := (n + listChunk - 1) / listChunk; polls < want {
		t.Fatalf("the first listing of %d files took %d polls, want at least %d (at most %d entries a poll)", n, polls, want, listChunk)
	}
	clk.t = clk.t.Add(testInterval)
	pollIdle(t, s, &c)
	files.check(strs(c.rows()))
	if s.mon.seen.n != n {
		t.Fatalf("seen holds %d files, want %d", s.mon.seen.n, n)
	}
	// Moving files away makes the source forget them.
	for k := range n / 2 {
		must(t, os.Remove(filepath.Join(files.dir, fmt.Sprintf("f%04d.txt", k))))
	}
	clk.t = clk.t.Add(testInterval)
	pollIdle(t, s, &c)
	if s.mon.seen.n != n-n/2 {
		t.Fatalf("after removing %d files seen holds %d, want %d", n/2, s.mon.seen.n, n-n/2)
	}
}

func TestContinuousFileSourceLimit(t *testing.T) {
	files := newContFiles(t)
	for range 6 {
		files.add(1)
	}
	for _, par := range []int{1, 3} {
		clk := &fakeClock{t: time.Unix(1_000_000, 0)}
		for sub := range par {
			s := openCont(t, contConfig(files.dir), sub, par, clk)
			s.mon.maxFiles = 5
			var err error
			for range 10 {
				if _, err = s.Poll(t.Context(), &collector{}); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatalf("subtask %d of %d: no error listing 6 files with a limit of 5", sub, par)
			}
			for _, w := range []string{files.dir, "more than 5 files", "move processed files out of the directory", "new job"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		}
	}
}

func TestContinuousFileSourceMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "in")
	must(t, os.Mkdir(dir, 0o755))
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := openCont(t, contConfig(dir), 0, 1, clk)
	pollIdle(t, s, &collector{})
	must(t, os.Remove(dir))
	clk.t = clk.t.Add(testInterval)
	_, err := s.Poll(t.Context(), &collector{})
	if err == nil || !strings.Contains(err.Error(), "cannot list directory "+dir) || !strings.Contains(err.Error(), "needs the directory") {
		t.Fatalf("Poll after the directory was removed: %v", err)
	}
	s, _ = NewFileSource(contConfig(dir))
	if err := s.Open(t.Context(), octxFor(0, 1)); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Open without the directory: %v", err)
	}
}

// TestFileSourceRestoresV1Items restores bounded checkpoints written in
// version 1, byte for byte as earlier builds wrote them, with and without
// the "listing" item.
func TestFileSourceRestoresV1Items(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), "a0\na1\na2\n")
	writeFile(t, filepath.Join(dir, "b"), "b0\nb1\n")
	v1 := func(file, off int64, done bool, path string) []byte {
		item := []byte{1}
		item = binary.AppendVarint(item, file)
		item = binary.AppendVarint(item, off)
		if done {
			item = append(item, 1)
		} else {
			item = append(item, 0)
		}
		item = binary.AppendUvarint(item, uint64(len(path)))
		return append(item, path...)
	}
	list := map[string][][]byte{fileSplitsState: {v1(1, 0, true, filepath.Join(dir, "b")), v1(0, 3, false, filepath.Join(dir, "a"))}}
	for _, union := range []map[string][][]byte{nil, {fileListingMarker: {binary.AppendVarint([]byte{1}, 2)}}} {
		s := openFileSource(t, FileSourceConfig{Path: dir}, 0, 1, nil)
		must(t, restore(s, 7, &stream.OperatorSnapshot{List: list, Union: union}))
		rows, err := drain(t, s, 10)
		must(t, err)
		if got := strs(rows); !slices.Equal(got, []string{"a1", "a2"}) {
			t.Fatalf("union %v: read %q, want a1, a2", union, got)
		}
	}
}

func TestFileSourceModeMismatch(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), "a0\na1\n")
	bounded := openFileSource(t, FileSourceConfig{Path: dir, BatchSize: 1}, 0, 1, nil)
	pollN(t, bounded, &collector{}, 1)
	boundedState := snapshot(t, bounded, 1)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	cont := openCont(t, contConfig(dir), 0, 1, clk)
	pollIdle(t, cont, &collector{})
	clk.t = clk.t.Add(testInterval)
	pollSome(t, cont, &collector{}, 1)
	contState := snapshot(t, cont, 1)
	if len(contState.List[fileSplitsState]) != 0 || len(contState.Union[fileSeenState]) != 1 {
		t.Fatalf("continuous snapshot %v, want one seen item and no split (the file was read)", contState)
	}
	tests := []struct {
		name  string
		cfg   FileSourceConfig
		state *stream.OperatorSnapshot
		want  string
	}{
		{"bounded into continuous", contConfig(dir), boundedState, "taken by a bounded file source"},
		{"bounded split only into continuous", contConfig(dir), &stream.OperatorSnapshot{List: boundedState.List}, "taken by a bounded file source"},
		{"continuous into bounded", FileSourceConfig{Path: dir}, contState, "taken by a continuous file source"},
		{"continuous split into bounded", FileSourceConfig{Path: dir}, &stream.OperatorSnapshot{List: map[string][][]byte{fileSplitsState: {statecodec.AppendString([]byte{2, 0}, "/x")}}}, "taken by a continuous file source"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openFileSource(t, tc.cfg, 0, 1, func(s *FileSource) {
				if s.mon != nil {
					s.mon.now = clk.now
				}
			})
			err := restore(s, 1, tc.state)
			if !errors.Is(err, errFileSourceMode) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestContinuousFileSourceCorruptState(t *testing.T) {
	dir := t.TempDir()
	seen := func(flags byte, paths ...[2]any) []byte {
		item := []byte{1, flags}
		item = binary.AppendUvarint(item, uint64(len(paths)))
		for _, p := range paths {
			item = binary.AppendUvarint(item, uint64(p[0].(int)))
			item = statecodec.AppendString(item, p[1].(string))
		}
		return item
	}
	good := seen(1, [2]any{0, "/d/a"}, [2]any{3, "b"})
	tests := []struct {
		name  string
		state *stream.OperatorSnapshot
		want  string
	}{
		{"unsorted", &stream.OperatorSnapshot{Union: map[string][][]byte{fileSeenState: {seen(0, [2]any{0, "/d/b"}, [2]any{3, "a"})}}}, "not after the one before"},
		{"duplicate", &stream.OperatorSnapshot{Union: map[string][][]byte{fileSeenState: {seen(0, [2]any{0, "/d/b"}, [2]any{4, ""})}}}, "not after the one before"},
		{"shared too long", &stream.OperatorSnapshot{Union: map[string][][]byte{fileSeenState: {seen(0, [2]any{0, "/d/b"}, [2]any{9, "c"})}}}, "bytes shared"},
		{"flags", &stream.OperatorSnapshot{Union: map[string][][]byte{fileSeenState: {seen(6)}}}, "unknown flags"},
		{"truncated", &stream.OperatorSnapshot{Union: map[string][][]byte{fileSeenState: {good[:len(good)-1]}}}, "truncated"},
		{"over the limit", &stream.OperatorSnapshot{Union: map[string][][]byte{fileSeenState: {seen(0, [2]any{0, "/a"}, [2]any{1, "b"}, [2]any{1, "c"}, [2]any{1, "d"})}}}, "more than the limit of 3"},
		{"splits without seen", &stream.OperatorSnapshot{List: map[string][][]byte{fileSplitsState: {statecodec.AppendString([]byte{2, 0}, "/x")}}}, "no seen item"},
		{"negative offset", &stream.OperatorSnapshot{List: map[string][][]byte{fileSplitsState: {statecodec.AppendString([]byte{2, 1}, "/x")}}, Union: map[string][][]byte{fileSeenState: {good}}}, "offset -1"},
		{"split twice", &stream.OperatorSnapshot{List: map[string][][]byte{fileSplitsState: {statecodec.AppendString([]byte{2, 0}, "/x"), statecodec.AppendString([]byte{2, 2}, "/x")}}, Union: map[string][][]byte{fileSeenState: {good}}}, "twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1_000_000, 0)}
			s := openCont(t, contConfig(dir), 0, 1, clk)
			s.mon.maxFiles = 3
			err := restore(s, 4, tc.state)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "checkpoint 4") {
				t.Fatalf("restore: %v, want an error about checkpoint 4 saying %q", err, tc.want)
			}
		})
	}
	s := openCont(t, contConfig(dir), 0, 1, &fakeClock{})
	must(t, restore(s, 4, &stream.OperatorSnapshot{Union: map[string][][]byte{fileSeenState: {good}}}))
	var got []string
	for _, p := range s.mon.seen.all() {
		got = append(got, string(p))
	}
	if !slices.Equal(got, []string{"/d/a", "/d/b"}) || !s.mon.listed {
		t.Fatalf("restored seen %q listed %v, want /d/a, /d/b and listed", got, s.mon.listed)
	}
}

func TestContinuousFileSourcePlan(t *testing.T) {
	dir := t.TempDir()
	quote := func(s string) string { return `"` + s + `"` }
	tests := []struct {
		name, config string
		want         []string
	}{
		{"bad interval", `{"path":` + quote(dir) + `,"monitorInterval":"often"}`, []string{`monitorInterval "often" is not a duration`, `"10s"`}},
		{"short interval", `{"path":` + quote(dir) + `,"monitorInterval":"1ms"}`, []string{`monitorInterval "1ms"`, "at least 10ms"}},
		{"onlyNew bounded", `{"path":` + quote(dir) + `,"processOnlyNew":true}`, []string{"processOnlyNew needs monitorInterval"}},
		{"age bounded", `{"path":` + quote(dir) + `,"minFileAge":"1s"}`, []string{"minFileAge needs monitorInterval"}},
		{"bad age", `{"path":` + quote(dir) + `,"monitorInterval":"1s","minFileAge":"old"}`, []string{`minFileAge "old" is not a duration`}},
		{"zero age", `{"path":` + quote(dir) + `,"monitorInterval":"1s","minFileAge":"0s"}`, []string{`minFileAge "0s" must be positive`}},
		{"missing dir", `{"path":` + quote(dir+"/nope/*.log") + `,"monitorInterval":"1s"}`, []string{"directory " + dir + "/nope does not exist", "create it"}},
		{"bad glob", `{"path":` + quote(dir+"/[a.log") + `,"monitorInterval":"1s"}`, []string{"bad glob pattern"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := planSource("file", tc.config)
			if !errors.Is(err, stream.ErrConfig) {
				t.Fatalf("Plan: %v, want a config error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// An empty directory and a glob matching nothing yet are fine.
	for _, path := range []string{dir, dir + "/*.log", dir + "/*/part-*"} {
		r := stream.NewRegistry()
		Register(r)
		typ, _ := r.Lookup("file", true)
		p := &stream.PlanContext{UID: "src", Config: []byte(`{"path":` + quote(path) + `,"monitorInterval":"1s"}`), Parallelism: 2}
		if _, err := typ.Plan(p); err != nil {
			t.Fatalf("Plan %s: %v", path, err)
		}
		want := []stream.StateDecl{{Name: fileSplitsState, Kind: stream.StateOperatorList}, {Name: fileSeenState, Kind: stream.StateUnion}}
		if !reflect.DeepEqual(p.States(), want) {
			t.Fatalf("declared %v, want %v", p.States(), want)
		}
	}
}

func TestContinuousFileSourceGlobDirectories(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"x", "y"} {
		must(t, os.Mkdir(filepath.Join(root, d), 0o755))
		writeFile(t, filepath.Join(root, d, "part-1"), d+"1\n")
		writeFile(t, filepath.Join(root, d, "other"), "no\n")
	}
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := openCont(t, contConfig(filepath.Join(root, "*", "part-*")), 0, 1, clk)
	var c collector
	pollIdle(t, s, &c)
	must(t, os.Mkdir(filepath.Join(root, "z"), 0o755)) // a directory appears
	writeFile(t, filepath.Join(root, "z", "part-1"), "z1\n")
	for range 2 {
		clk.t = clk.t.Add(testInterval)
		pollIdle(t, s, &c)
	}
	got := strs(c.rows())
	slices.Sort(got)
	if !slices.Equal(got, []string{"x1", "y1", "z1"}) {
		t.Fatalf("read %q, want x1, y1, z1", got)
	}
}

// TestPathSet checks the front-coded set against a sorted slice.
func TestPathSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randPath := func() string {
		dirs := []string{"/data/in/", "/data/in/sub/", "/x/", "/data/inbox/"}
		return fmt.Sprintf("%spart-%d-%0*d", dirs[rng.IntN(len(dirs))], rng.IntN(3), rng.IntN(6), rng.IntN(5000))
	}
	for _, n := range []int{0, 1, 15, 16, 17, 100, 1000} {
		var want []string
		for range n {
			want = append(want, randPath())
		}
		slices.Sort(want)
		want = slices.Compact(want)
		var b pathSetBuilder
		for _, p := range want {
			b.add([]byte(p))
		}
		set := b.finish()
		var got []string
		for i, p := range set.all() {
			if i != len(got) {
				t.Fatalf("all yielded index %d at %d", i, len(got))
			}
			got = append(got, string(p))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: all differs from the paths added", n)
		}
		var buf []byte
		for i, p := range want {
			if j := set.find(p, &buf); j != i {
				t.Fatalf("find(%q) = %d, want %d", p, j, i)
			}
		}
		for range 500 {
			p := randPath()
			if i, ok := slices.BinarySearch(want, p); set.find(p, &buf) != map[bool]int{true: i, false: -1}[ok] {
				t.Fatalf("find(%q) = %d, want %d", p, set.find(p, &buf), map[bool]int{true: i, false: -1}[ok])
			}
		}
		for _, p := range []string{"", "/", "/zzz", "/data/in/part-0-"} {
			if _, ok := slices.BinarySearch(want, p); !ok && set.find(p, &buf) != -1 {
				t.Fatalf("find(%q) found a path not in the set", p)
			}
		}
		// update: keep a random subset, add new paths.
		keep := make([]uint64, (set.n+63)/64)
		var kept []string
		for i, p := range want {
			if rng.IntN(3) > 0 {
				keep[i/64] |= 1 << (i % 64)
				kept = append(kept, p)
			}
		}
		var added []string
		for range rng.IntN(50) {
			if p := randPath(); !slices.Contains(want, p) {
				added = append(added, p)
			}
		}
		slices.Sort(added)
		added = slices.Compact(added)
		updated := set.update(keep, added)
		want2 := slices.Sorted(slices.Values(append(kept, added...)))
		got = got[:0]
		for _, p := range updated.all() {
			got = append(got, string(p))
		}
		if !slices.Equal(got, want2) || updated.n != len(want2) {
			t.Fatalf("n=%d: update differs", n)
		}
		// The checkpoint item decodes to the same paths.
		item := binary.AppendUvarint([]byte{1, 0}, uint64(updated.n))
		item = append(item, updated.data...)
		got = got[:0]
		if _, err := decodeSeen(item, len(want2), func(p []byte) { got = append(got, string(p)) }); err != nil || !slices.Equal(got, want2) {
			t.Fatalf("n=%d: decodeSeen: %v, paths equal %v", n, err, slices.Equal(got, want2))
		}
	}
}

func TestFileOwnerSpreads(t *testing.T) {
	const p = 4
	var count [p]int
	for k := range 4000 {
		count[fileOwner(fmt.Sprintf("/data/in/part-%05d.jsonl", k), p)]++
	}
	for sub, n := range count {
		if n < 800 || n > 1200 {
			t.Fatalf("subtask %d of %d owns %d of 4000 files: %v", sub, p, n, count)
		}
	}
}

// BenchmarkContinuousFileSourceListing measures a listing of a directory
// whose files have all been read: the steady-state cost of continuous mode
// per file and per listing, and the size of the seen set per file.
func BenchmarkContinuousFileSourceListing(b *testing.B) {
	dir := b.TempDir()
	const n = 20000
	for k := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-2026-01-01-%06d.jsonl", k)), []byte("x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s, err := NewFileSource(contConfig(dir))
	if err != nil {
		b.Fatal(err)
	}
	s.mon.now = clk.now
	if err := s.Open(b.Context(), octxFor(0, 1)); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var rows int64
	listing := func() {
		clk.t = clk.t.Add(testInterval)
		for {
			st, err := s.Poll(b.Context(), releaser{rows: &rows})
			if err != nil {
				b.Fatal(err)
			}
			if st == stream.PollIdle && s.IdleFor() > 0 {
				return
			}
		}
	}
	listing()
	listing()
	if rows != n || s.mon.seen.n != n {
		b.Fatalf("read %d rows, seen %d files; want %d", rows, s.mon.seen.n, n)
	}
	listings := 0
	for b.Loop() {
		listing()
		listings++
	}
	if rows != n {
		b.Fatalf("a listing of read files emitted %d rows", rows-n)
	}
	perFile := float64(b.Elapsed().Nanoseconds()) / float64(listings*n)
	b.ReportMetric(perFile, "ns/file")
	fmt.Printf("file_source_listing_ns_per_file=%.0f\n", perFile)
	fmt.Printf("file_source_listing_ms_per_20k_files=%.2f\n", perFile*n/1e6)
	fmt.Printf("file_source_seen_bytes_per_file=%.1f\n", float64(len(s.mon.seen.data)+8*len(s.mon.seen.restarts))/n)
}
