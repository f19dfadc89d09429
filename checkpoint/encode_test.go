package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
)

// A field added to a manifest message must be added to the encoder too;
// until it is, manifests are encoded by proto.Marshal (slower, not wrong).
func TestManifestEncoderKnowsEveryField(t *testing.T) {
	if err := manifestCodecMatches(); err != nil {
		t.Fatalf("%v; update manifestFields and the manifestEncoder methods in encode.go", err)
	}
}

// The encoder writes exactly the bytes the generic marshaller writes, for
// random manifests in which every field of every message is set, zero or
// extreme, and messages carry unknown fields.
func TestManifestEncoderMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var e manifestEncoder // reused, as WriteManifest reuses its encoders
	for i := range 300 {
		m := &weirpb.Manifest{}
		fill(rng, m.ProtoReflect(), 0)
		want, err := marshal.Marshal(m)
		if err != nil {
			t.Fatalf("manifest %d: proto: %v", i, err)
		}
		got, err := e.marshalManifest(m)
		if err != nil {
			t.Fatalf("manifest %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("manifest %d: encoded to %d bytes that differ from proto.Marshal's %d", i, len(got), len(want))
		}
		back := &weirpb.Manifest{}
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("manifest %d: decodes to another manifest (%v)", i, err)
		}
	}
}

// Nil entries in the repeated fields are written as empty messages, as
// proto.Marshal writes them.
func TestManifestEncoderNilMessages(t *testing.T) {
	m := &weirpb.Manifest{JobId: "j", Operators: []*weirpb.OperatorState{nil, {
		OperatorUid: "op", Handles: []*weirpb.StateHandle{nil, {Key: "k", Files: []*weirpb.StateFile{nil}}},
		States: []*weirpb.StateInfo{nil},
	}}}
	want, err := marshal.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var e manifestEncoder
	got, err := e.marshalManifest(m)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("got %x (%v), want %x", got, err, want)
	}
}

// A string that is not UTF-8 is refused, as proto.Marshal refuses it,
// wherever it is, and the error does not echo it.
func TestManifestEncoderRefusesInvalidUTF8(t *testing.T) {
	const bad = "chk-\xff\xfe"
	cases := map[string]func(m *weirpb.Manifest){
		"job name":      func(m *weirpb.Manifest) { m.JobName = bad },
		"operator uid":  func(m *weirpb.Manifest) { m.Operators[0].OperatorUid = bad },
		"state kind":    func(m *weirpb.Manifest) { m.Operators[0].States[0].Kind = bad },
		"handle key":    func(m *weirpb.Manifest) { m.Operators[0].Handles[0].Key = bad },
		"handle sha256": func(m *weirpb.Manifest) { m.Operators[0].Handles[0].Sha256 = bad },
		"file key":      func(m *weirpb.Manifest) { m.Operators[0].Handles[0].Files[0].Key = bad },
		"file name":     func(m *weirpb.Manifest) { m.Operators[0].Handles[0].Files[0].Name = bad },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			m := &weirpb.Manifest{Version: ManifestVersion, JobId: "job", CheckpointId: 3, Operators: []*weirpb.OperatorState{{
				OperatorUid: "op", States: []*weirpb.StateInfo{{Name: "s", Kind: "value"}},
				Handles: []*weirpb.StateHandle{{Key: "job/chk-3/op/0-a1", Files: []*weirpb.StateFile{{Name: "1.sst", Key: "job/shared/x"}}}},
			}}}
			spoil(m)
			if _, err := marshal.Marshal(m); err == nil {
				t.Fatal("proto.Marshal accepts it; the test is wrong")
			}
			st := NewStorage(blobstore.NewMem())
			_, _, err := st.WriteManifest(context.Background(), m)
			if !errors.Is(err, errInvalidUTF8) {
				t.Fatalf("WriteManifest: %v, want %v", err, errInvalidUTF8)
			}
			if bytes.Contains([]byte(err.Error()), []byte(bad)) {
				t.Fatalf("the error echoes the value: %v", err)
			}
		})
	}
}

// fill sets every field of m (recursively, up to a small depth) to a
// random value, often zero or extreme, and adds unknown fields now and
// then.
func fill(rng *rand.Rand, m protoreflect.Message, depth int) {
	fs := m.Descriptor().Fields()
	for i := range fs.Len() {
		f := fs.Get(i)
		switch {
		case f.IsList() && f.Kind() == protoreflect.MessageKind:
			if depth > 3 {
				continue
			}
			l := m.Mutable(f).List()
			for range rng.IntN(4) {
				e := l.NewElement()
				fill(rng, e.Message(), depth+1)
				l.Append(e)
			}
		case f.IsList():
			l := m.Mutable(f).List()
			for range rng.IntN(5) {
				l.Append(scalar(rng, f))
			}
		default:
			if rng.IntN(4) > 0 {
				m.Set(f, scalar(rng, f))
			}
		}
	}
	if rng.IntN(5) == 0 {
		var u []byte
		u = protowire.AppendTag(u, protowire.Number(1000+rng.IntN(100)), protowire.VarintType)
		u = protowire.AppendVarint(u, rng.Uint64())
		u = protowire.AppendTag(u, 2000, protowire.BytesType)
		u = protowire.AppendBytes(u, []byte("unknown"))
		m.SetUnknown(u)
	}
}

func scalar(rng *rand.Rand, f protoreflect.FieldDescriptor) protoreflect.Value {
	strs := []string{"", "a", "job-7/chk-12/window/3-a1", "état ✓", string(make([]byte, 200))}
	ints := []int64{0, 1, -1, 127, 128, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64, rng.Int64()}
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(strs[rng.IntN(len(strs))])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(strs[rng.IntN(len(strs))]))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(ints[rng.IntN(len(ints))]))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(ints[rng.IntN(len(ints))])
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(ints[rng.IntN(len(ints))]))
	}
	panic("unexpected field kind " + f.Kind().String())
}

// Manifests written at once (of several jobs) do not share the reused
// encoding buffer: each stored manifest is its own, whole, with the
// checksum WriteManifest returned.
func TestConcurrentManifestWrites(t *testing.T) {
	st := NewStorage(blobstore.NewMem())
	ctx := context.Background()
	var g errgroup.Group
	for w := range 6 {
		g.Go(func() error {
			for i := range 15 {
				job := fmt.Sprintf("job-%d", w)
				m := wideManifest(50 + 40*w + i)
				m.JobId, m.CheckpointId = job, int64(i)
				key, sum, err := st.WriteManifest(ctx, m)
				if err != nil {
					return err
				}
				data, err := st.Store().Get(ctx, key)
				if err != nil {
					return err
				}
				want, _ := marshal.Marshal(m)
				if !bytes.Equal(data, want) || sha256Hex(want) != sum {
					return fmt.Errorf("%s checkpoint %d: stored manifest or its checksum is not the manifest's", job, i)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
