package golden

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// backendNames are the backends a restore error must look the same on.
var backendNames = []string{stream.StateBackendHeap, stream.StateBackendPebble}

// TestUnknownVersion restores a fixture whose chunks claim format version
// 99 (with valid checksums, as a newer Weir would write them): the restore
// fails with a RestoreError naming the operator, holding a FormatError that
// names the version found and the versions this build reads.
func TestUnknownVersion(t *testing.T) {
	fx := fixtureOf(t, "running_count")
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			snap := loadFixture(t, fx)
			for _, chunks := range snap.Keyed {
				for _, c := range chunks {
					c[3] = 99
					fixCRC(c)
				}
			}
			_, err := open(t, fx, backend, false, 0, 1, snap)
			t.Log(err)
			re, fe := restoreErrors(t, err, fx.typ)
			if !errors.Is(err, backends.ErrFormatVersion) || !errors.Is(err, statebackend.ErrCorrupt) {
				t.Errorf("error %v does not wrap backends.ErrFormatVersion and statebackend.ErrCorrupt", err)
			}
			if fe.What != "format version" || fe.Found != "99" || !strings.HasPrefix(fe.Expected, "1 ") {
				t.Errorf("FormatError says %s: found %s, expected %s; want format version 99, expected 1", fe.What, fe.Found, fe.Expected)
			}
			if first := slices.Min(slices.Collect(maps.Keys(snap.Keyed))); fe.KeyGroup != first || fe.CheckpointID != checkpointID || re.CheckpointID != checkpointID {
				t.Errorf("error places the chunk in checkpoint %d (%d), key group %d; want checkpoint %d, key group %d", fe.CheckpointID, re.CheckpointID, fe.KeyGroup, checkpointID, first)
			}
			for _, want := range []string{`operator "running_count"`, "format version: found 99, expected 1"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestRestoreErrors restores fixtures that cannot be restored: each fails
// with one error that names the operator, the state, what was found and
// what was expected, on every backend.
func TestRestoreErrors(t *testing.T) {
	tests := []struct {
		name string
		typ  string // the fixture
		par  int    // of the restoring operator, as subtask 0
		// damage changes the fixture's snapshot and returns the key group
		// of the chunk that is wrong.
		damage func(t *testing.T, s *stream.OperatorSnapshot) int
		class  error
		table  string // FormatError.Table
		tables []string
		found  string // FormatError.Found's start
		expect string // FormatError.Expected's start; %d is the key group
	}{
		{"state of another kind in one key group", "window_topn", 1, func(t *testing.T, s *stream.OperatorSnapshot) int {
			kg := keyGroups(s)[1] // not the first: its kind is what the others must have
			c := s.Keyed[kg][0]
			c[firstTable(t, c)] = byte(statebackend.KindReducing)
			fixCRC(c)
			return kg
		}, statebackend.ErrConflict, "panes", nil, "reducing state", ""},
		{"chunk of a key group outside the subtask's range", "window_join", 2, func(t *testing.T, s *stream.OperatorSnapshot) int {
			kgs := keyGroups(s)
			mine, other := kgs[0], kgs[len(kgs)-1]
			if owned := stream.KeyGroupRangeFor(maxPar, 2, 0); !owned.Contains(mine) || owned.Contains(other) {
				t.Fatalf("fixture has key groups %v: want one in and one outside %v", kgs, owned)
			}
			s.Keyed[mine] = s.Keyed[other]
			return mine
		}, statebackend.ErrCorrupt, "", []string{"rows"}, "", "%d (the key group it is filed under)"},
		{"damaged chunk", "stream_join", 1, func(t *testing.T, s *stream.OperatorSnapshot) int {
			kg := keyGroups(s)[0]
			c := s.Keyed[kg][0]
			c[len(c)-8] ^= 0x10 // in the last value
			return kg
		}, statebackend.ErrCorrupt, "", []string{"rows"}, "", ""},
		{"damaged chunk with a valid checksum", "sequence_check", 1, func(t *testing.T, s *stream.OperatorSnapshot) int {
			kg := keyGroups(s)[0]
			c := s.Keyed[kg][0]
			c[firstTable(t, c)+1] = 0x7f // the key count: more keys than the chunk holds
			fixCRC(c)
			return kg
		}, statebackend.ErrCorrupt, "last", nil, "", ""},
	}
	for _, tt := range tests {
		fx := fixtureOf(t, tt.typ)
		for _, backend := range backendNames {
			t.Run(tt.name+"/"+backend, func(t *testing.T) {
				snap := loadFixture(t, fx)
				expect := tt.expect
				if tt.class == statebackend.ErrConflict {
					expect = fmt.Sprintf("value state (its kind in key group %d)", keyGroups(snap)[0])
				}
				kg := tt.damage(t, snap)
				if strings.Contains(expect, "%d") {
					expect = fmt.Sprintf(expect, kg)
				}
				_, err := open(t, fx, backend, false, 0, tt.par, snap)
				t.Log(err)
				_, fe := restoreErrors(t, err, fx.typ)
				if !errors.Is(err, tt.class) || fe.Err != tt.class {
					t.Errorf("error %v is not of class %v", err, tt.class)
				}
				if fe.KeyGroup != kg || fe.Table != tt.table || !slices.Equal(fe.Tables, tt.tables) {
					t.Errorf("error is about key group %d, state %q, states %q; want %d, %q, %q", fe.KeyGroup, fe.Table, fe.Tables, kg, tt.table, tt.tables)
				}
				if fe.What == "" || fe.Found == "" || fe.Expected == "" || !strings.HasPrefix(fe.Found, tt.found) || !strings.HasPrefix(fe.Expected, expect) {
					t.Errorf("error says %s: found %s, expected %s; want found %q..., expected %q...", fe.What, fe.Found, fe.Expected, tt.found, expect)
				}
				names := fe.Table
				if names == "" {
					names = strings.Join(fe.Tables, "")
				}
				for _, want := range []string{fmt.Sprintf("operator %q", fx.typ), fmt.Sprintf("state %q", names), "found " + fe.Found, "expected " + fe.Expected} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
			})
		}
	}
}

// TestStateOfAnotherKind restores a fixture whose state was written with
// another kind than the operator asks for in every key group: the restore
// itself succeeds, and opening the operator fails with an error wrapping
// statebackend.ErrConflict that names the operator, the state, the kind
// found and the kind expected.
func TestStateOfAnotherKind(t *testing.T) {
	fx := fixtureOf(t, "running_count")
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			snap := loadFixture(t, fx)
			for _, chunks := range snap.Keyed {
				for _, c := range chunks {
					c[firstTable(t, c)] = byte(statebackend.KindReducing)
					fixCRC(c)
				}
			}
			_, err := open(t, fx, backend, false, 0, 1, snap)
			t.Log(err)
			if !errors.Is(err, statebackend.ErrConflict) {
				t.Fatalf("error %v, want one wrapping statebackend.ErrConflict", err)
			}
			for _, want := range []string{`"running_count"`, `state "count"`, "reducing", "value"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// restoreErrors checks that err is a RestoreError of operator uid and
// returns it and the FormatError it holds.
func restoreErrors(t *testing.T, err error, uid string) (*backends.RestoreError, *backends.FormatError) {
	t.Helper()
	var re *backends.RestoreError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T), want a *backends.RestoreError", err, err)
	}
	if re.OperatorUID != uid {
		t.Errorf("RestoreError names operator %q, want %q", re.OperatorUID, uid)
	}
	var fe *backends.FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v, want a *backends.FormatError in it", err)
	}
	return re, fe
}

func fixtureOf(t *testing.T, typ string) *fixture {
	for i := range fixtures {
		if fixtures[i].typ == typ {
			return &fixtures[i]
		}
	}
	t.Fatalf("no fixture of %q", typ)
	return nil
}

// loadFixture decodes fx's fixture, all key groups, into bytes of its own.
func loadFixture(t *testing.T, fx *fixture) *stream.OperatorSnapshot {
	t.Helper()
	data, err := os.ReadFile(fx.file())
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.DecodeSnapshot(data, stream.KeyGroupRange{Start: 0, End: maxPar - 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func keyGroups(s *stream.OperatorSnapshot) []int {
	return slices.Sorted(maps.Keys(s.Keyed))
}

// firstTable returns the position of the kind byte of the first table of
// chunk c, which the key count follows (in one byte, for the fixtures'
// small counts). The layout is statebackend/internal/chunk's, version 1:
// "WKG", version, uvarint key group, uvarint table count, then the table's
// name (uvarint length, bytes) and kind.
func firstTable(t *testing.T, c []byte) int {
	t.Helper()
	pos := 4
	next := func() uint64 {
		v, n := binary.Uvarint(c[pos:])
		if n <= 0 {
			t.Fatalf("chunk %q: bad uvarint at %d", c, pos)
		}
		pos += n
		return v
	}
	next() // key group
	if next() == 0 {
		t.Fatalf("chunk %q has no table", c)
	}
	pos += int(next()) // name
	if c[pos+1] >= 0x80 {
		t.Fatalf("chunk %q: key count of more than one byte", c)
	}
	return pos
}

// fixCRC recomputes the checksum that ends chunk c.
func fixCRC(c []byte) {
	body := c[:len(c)-4]
	binary.LittleEndian.PutUint32(c[len(c)-4:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}
