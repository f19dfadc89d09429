package checkpoint

import (
	"bytes"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// progressLog records restore progress as a running total, as a
// taskmanager sums it.
type progressLog struct {
	mu     sync.Mutex
	totals []int64
}

func (p *progressLog) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := int64(0)
	if len(p.totals) > 0 {
		last = p.totals[len(p.totals)-1]
	}
	p.totals = append(p.totals, last+n)
}

func (p *progressLog) done() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.totals) == 0 {
		return 0
	}
	return p.totals[len(p.totals)-1]
}

// TestRestoreProgressReachesRestoreSize restores every subtask of an
// operator whose snapshots are canonical objects plus, for some handles,
// incremental files, at the checkpoint's parallelism and rescaled, with
// and without files to reuse locally: the progress each subtask reports
// grows with every object and ends at exactly RestoreSize of its handles.
func TestRestoreProgressReachesRestoreSize(t *testing.T) {
	st := NewStorage(blobstore.NewMem())
	_, handles := snapshotOperator(t, st, 3, "op", 4, 7)
	// Handles of subtasks 0 and 2 carry an incremental snapshot's files.
	local := t.TempDir()
	for _, h := range handles {
		if h.GetSubtask()%2 != 0 {
			continue
		}
		dir := filepath.Join(local, h.GetKey())
		files := writeFiles(t, dir, map[string]string{"000001.sst": "sst-" + h.GetKey(), "MANIFEST-1": "manifest"})
		up, _, err := st.UploadFiles(t.Context(), "job-1", 3, "op", int(h.GetSubtask()), 1, files)
		if err != nil {
			t.Fatal(err)
		}
		h.Files = up
	}
	for _, tc := range []struct {
		name          string
		p             int
		reuse, stream bool
	}{{"same parallelism", 4, false, false}, {"rescaled to 3", 3, false, false}, {"rescaled to 1", 1, false, false},
		{"local files reused", 4, true, false}, {"sstables streamed", 3, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			for sub := range tc.p {
				kg := stream.KeyGroupRangeFor(maxP, tc.p, sub)
				hs := handles
				if tc.p == 4 {
					hs = slices.DeleteFunc(slices.Clone(handles), func(h *weirpb.StateHandle) bool { return int(h.GetSubtask()) != sub })
				}
				var log progressLog
				rs := st.WithRestoreProgress(log.add)
				if _, err := rs.LoadOperatorState(t.Context(), hs, kg, sub, tc.p); err != nil {
					t.Fatal(err)
				}
				var fromFiles int64
				for _, h := range hs {
					if !RestoresFiles(h, kg) {
						continue
					}
					var opts DownloadOptions
					if tc.reuse {
						opts.Reuse = func(name string) string { return filepath.Join(local, h.GetKey(), name) }
					}
					if tc.stream {
						opts.Stream = func(name string) bool { return filepath.Ext(name) == ".sst" }
					}
					files, n, err := rs.DownloadFiles(t.Context(), h.GetFiles(), filepath.Join(t.TempDir(), "r"), opts)
					if err != nil {
						t.Fatal(err)
					}
					fromFiles += n
					for _, f := range files {
						if (f.Fetch != nil) != (tc.stream && filepath.Ext(f.Name) == ".sst") {
							t.Fatalf("file %s: streamed %v", f.Name, f.Fetch != nil)
						}
						if f.Fetch == nil {
							continue
						}
						// A streamed file counts once it was read.
						var buf bytes.Buffer
						before := log.done()
						if n, err := f.Fetch(&buf); err != nil || n != f.Size || buf.String() != "sst-"+h.GetKey() {
							t.Fatalf("streaming %s: %d bytes %q, %v", f.Name, n, buf.String(), err)
						}
						if got := log.done() - before; got != f.Size {
							t.Fatalf("streaming %s added %d bytes to the progress, want %d", f.Name, got, f.Size)
						}
					}
				}
				want := RestoreSize(hs, kg)
				if got := log.done(); got != want || want == 0 {
					t.Fatalf("subtask %d: progress ended at %d bytes, RestoreSize %d", sub, got, want)
				}
				if !slices.IsSorted(log.totals) || slices.Contains(log.totals, 0) {
					t.Fatalf("subtask %d: progress %v is not strictly growing", sub, log.totals)
				}
				if tc.reuse && fromFiles != 0 {
					t.Fatalf("subtask %d: %d bytes downloaded although every file was local", sub, fromFiles)
				}
			}
		})
	}
	// The original Storage reports nothing.
	if _, err := st.LoadOperatorState(t.Context(), handles[:1], stream.KeyGroupRangeFor(maxP, 4, 0), 0, 4); err != nil {
		t.Fatal(err)
	}
}

func TestRestoresFiles(t *testing.T) {
	files := []*weirpb.StateFile{{Name: "a", Size: 10}, {Name: "b", Size: 5}}
	h := &weirpb.StateHandle{Size: 100, KeyGroupStart: 32, KeyGroupEnd: 63, Files: files}
	for _, tc := range []struct {
		kg   stream.KeyGroupRange
		want bool
	}{
		{stream.KeyGroupRange{Start: 0, End: 31}, false},
		{stream.KeyGroupRange{Start: 0, End: 32}, true},
		{stream.KeyGroupRange{Start: 40, End: 50}, true},
		{stream.KeyGroupRange{Start: 63, End: 127}, true},
		{stream.KeyGroupRange{Start: 64, End: 127}, false},
	} {
		if got := RestoresFiles(h, tc.kg); got != tc.want {
			t.Errorf("RestoresFiles(%v) = %v, want %v", tc.kg, got, tc.want)
		}
		want := int64(100)
		if tc.want {
			want += 15
		}
		if got := RestoreSize([]*weirpb.StateHandle{h}, tc.kg); got != want {
			t.Errorf("RestoreSize(%v) = %d, want %d", tc.kg, got, want)
		}
	}
	if RestoresFiles(&weirpb.StateHandle{KeyGroupEnd: 127}, stream.KeyGroupRange{End: 127}) {
		t.Error("a handle without files restores files")
	}
}
