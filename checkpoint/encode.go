package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/weirstream/weir/proto/weirpb"
)

// The manifest encoder. A wide job's manifest holds a handle per stateful
// subtask and a few files per handle: at 10,000 subtasks some 40,000
// messages and 6 MB, written at every checkpoint. manifestEncoder writes
// exactly the bytes proto.MarshalOptions{Deterministic: true} writes (the
// same wire format, fields in number order, unknown fields kept, invalid
// UTF-8 refused), at about 60 % of the cost of the generic, table-driven
// marshaller: it knows the five message types, reads each message once
// (writing back to front, so no pass computes sizes first), and writes
// into a buffer kept for the next manifest.
//
// It knows the fields the messages had when it was written. Should one be
// added to the .proto files and this file not be updated, manifestCodecOK
// is false and encoding falls back to proto.Marshal (so nothing is lost),
// and TestManifestEncoderKnowsEveryField fails, saying what to update.

// manifestFields are the fields, by message, that manifestEncoder writes:
// number and kind (repeated fields marked as such).
var manifestFields = map[protoreflect.FullName][]fieldShape{
	"weir.v1.Manifest": {
		{1, protoreflect.Int32Kind, false}, {2, protoreflect.StringKind, false}, {3, protoreflect.StringKind, false},
		{4, protoreflect.Int64Kind, false}, {5, protoreflect.Int64Kind, false}, {6, protoreflect.Int64Kind, false},
		{7, protoreflect.EnumKind, false}, {8, protoreflect.Int32Kind, false}, {9, protoreflect.MessageKind, true},
	},
	"weir.v1.OperatorState": {
		{1, protoreflect.StringKind, false}, {2, protoreflect.Int32Kind, false}, {3, protoreflect.MessageKind, true},
		{4, protoreflect.Int32Kind, true}, {5, protoreflect.StringKind, false}, {6, protoreflect.MessageKind, true},
	},
	"weir.v1.StateInfo": {
		{1, protoreflect.StringKind, false}, {2, protoreflect.StringKind, false}, {3, protoreflect.StringKind, false},
	},
	"weir.v1.StateHandle": {
		{1, protoreflect.StringKind, false}, {2, protoreflect.Int32Kind, false}, {3, protoreflect.Int32Kind, false},
		{4, protoreflect.StringKind, false}, {5, protoreflect.Int64Kind, false}, {6, protoreflect.StringKind, false},
		{7, protoreflect.Int32Kind, false}, {8, protoreflect.Int32Kind, false}, {9, protoreflect.BoolKind, false},
		{10, protoreflect.MessageKind, true}, {11, protoreflect.BytesKind, false}, {12, protoreflect.Int64Kind, false},
	},
	"weir.v1.StateFile": {
		{1, protoreflect.StringKind, false}, {2, protoreflect.StringKind, false}, {3, protoreflect.Int64Kind, false},
		{4, protoreflect.StringKind, false}, {5, protoreflect.BoolKind, false},
	},
}

type fieldShape struct {
	number   protoreflect.FieldNumber
	kind     protoreflect.Kind
	repeated bool
}

// manifestCodecOK reports whether the generated messages have exactly the
// fields manifestEncoder writes (checked once, at start-up).
var manifestCodecOK = manifestCodecMatches() == nil

// manifestCodecMatches says how the generated messages differ from what
// manifestEncoder writes, or nil when they do not.
func manifestCodecMatches() error {
	for _, m := range []proto.Message{&weirpb.Manifest{}, &weirpb.OperatorState{}, &weirpb.StateInfo{}, &weirpb.StateHandle{}, &weirpb.StateFile{}} {
		d := m.ProtoReflect().Descriptor()
		want := manifestFields[d.FullName()]
		fs := d.Fields()
		var got []fieldShape
		for i := range fs.Len() {
			f := fs.Get(i)
			if f.ContainingOneof() != nil || f.HasPresence() && f.Kind() != protoreflect.MessageKind || f.IsMap() ||
				f.IsList() && f.Kind() != protoreflect.MessageKind && !f.IsPacked() {
				return fmt.Errorf("%s field %s: encoded in a way the manifest encoder does not handle", d.FullName(), f.Name())
			}
			got = append(got, fieldShape{f.Number(), f.Kind(), f.IsList()})
		}
		slices.SortFunc(got, func(a, b fieldShape) int { return int(a.number) - int(b.number) })
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s has fields %v, the manifest encoder writes %v", d.FullName(), got, want)
		}
	}
	return nil
}

// errInvalidUTF8 is what proto.Marshal refuses too: a string field that is
// not UTF-8 would make the manifest unreadable.
var errInvalidUTF8 = errors.New("a string field holds invalid UTF-8")

// manifestEncoder encodes manifests; its buffer is reused from one
// manifest to the next. It is not safe for concurrent use.
//
// It writes back to front, from the end of buf towards its start: a
// message's fields go in reverse order, and once they are written its
// length is known and goes in front of them. So it reads every message
// and string once, with no pass to compute sizes first (which would
// fetch the 40,000 messages of a wide manifest from memory twice).
type manifestEncoder struct {
	// buf holds the encoding written so far at buf[pos:].
	buf []byte
	pos int
	// bad: a string written was not UTF-8.
	bad bool
}

// maxSpareBuffer bounds the buffer the spare encoder keeps between
// manifests.
const maxSpareBuffer = 64 << 20

// spare is an encoder kept from one manifest write to the next, so that
// checkpoint after checkpoint encodes its manifest into the same memory
// instead of allocating (and clearing) megabytes each time. A sync.Pool
// would not do: the garbage collector empties it, and a collection or two
// between checkpoints is the rule. Concurrent writes (of several jobs)
// take fresh encoders; the largest one is kept.
var spare struct {
	sync.Mutex
	e *manifestEncoder
}

// getEncoder takes the spare encoder, or a new one.
func getEncoder() *manifestEncoder {
	spare.Lock()
	defer spare.Unlock()
	e := spare.e
	spare.e = nil
	if e == nil {
		e = new(manifestEncoder)
	}
	return e
}

// release makes e the spare encoder, unless its buffer is too large or
// the spare's is larger. The bytes e encoded must no longer be used.
func (e *manifestEncoder) release() {
	if len(e.buf) > maxSpareBuffer {
		return
	}
	spare.Lock()
	defer spare.Unlock()
	if spare.e == nil || len(spare.e.buf) < len(e.buf) {
		spare.e = e
	}
}

// marshalManifest encodes m as proto.MarshalOptions{Deterministic: true}
// would. The result aliases e's buffer: it is valid until e encodes again.
func (e *manifestEncoder) marshalManifest(m *weirpb.Manifest) ([]byte, error) {
	if !manifestCodecOK {
		return marshal.Marshal(m)
	}
	if len(e.buf) == 0 {
		// A first guess; the buffer grows as needed and is then reused.
		n := 4 << 10
		for _, op := range m.GetOperators() {
			n += 512 * len(op.GetHandles())
		}
		e.buf = make([]byte, n)
	}
	e.pos, e.bad = len(e.buf), false
	if err := e.manifest(m); err != nil {
		return nil, err
	}
	return e.buf[e.pos:], nil
}

// written is how many bytes have been written.
func (e *manifestEncoder) written() int { return len(e.buf) - e.pos }

// reserve makes room for n more bytes in front of those written.
func (e *manifestEncoder) reserve(n int) {
	if e.pos >= n {
		return
	}
	w := e.written()
	nb := make([]byte, max(2*len(e.buf), w+n+4<<10))
	copy(nb[len(nb)-w:], e.buf[e.pos:])
	e.buf, e.pos = nb, len(nb)-w
}

func (e *manifestEncoder) raw(s []byte) {
	e.reserve(len(s))
	e.pos -= len(s)
	copy(e.buf[e.pos:], s)
}

func (e *manifestEncoder) varint(v uint64) {
	n := protowire.SizeVarint(v)
	e.reserve(n)
	e.pos -= n
	protowire.AppendVarint(e.buf[e.pos:e.pos], v)
}

// tag writes a field's tag; every field number here is below 16, so it is
// one byte.
func (e *manifestEncoder) tag(num protowire.Number, typ protowire.Type) {
	e.reserve(1)
	e.pos--
	e.buf[e.pos] = byte(uint64(num)<<3 | uint64(typ))
}

// string writes a string field (nothing for ""), noting invalid UTF-8.
func (e *manifestEncoder) string(num protowire.Number, s string) {
	if s == "" {
		return
	}
	if !utf8.ValidString(s) {
		e.bad = true
	}
	e.reserve(len(s))
	e.pos -= len(s)
	copy(e.buf[e.pos:], s)
	e.varint(uint64(len(s)))
	e.tag(num, protowire.BytesType)
}

// uint writes a varint field (nothing for 0). Negative int32 and int64
// values are passed sign-extended, as protobuf encodes them.
func (e *manifestEncoder) uint(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.varint(v)
	e.tag(num, protowire.VarintType)
}

func (e *manifestEncoder) bool(num protowire.Number, v bool) {
	if v {
		e.uint(num, 1)
	}
}

// end writes the length and tag of an embedded message (or packed list)
// whose content was written after start (a value of written).
func (e *manifestEncoder) end(num protowire.Number, start int) {
	e.varint(uint64(e.written() - start))
	e.tag(num, protowire.BytesType)
}

func (e *manifestEncoder) manifest(m *weirpb.Manifest) error {
	e.raw(m.ProtoReflect().GetUnknown())
	ops := m.GetOperators()
	for i := len(ops) - 1; i >= 0; i-- {
		start := e.written()
		if err := e.operator(ops[i]); err != nil {
			return fmt.Errorf("operator %d: %w", i, err)
		}
		e.end(9, start)
	}
	e.uint(8, uint64(m.GetMaxParallelism()))
	e.uint(7, uint64(m.GetMode()))
	e.uint(6, uint64(m.GetCompleteTimeMs()))
	e.uint(5, uint64(m.GetTriggerTimeMs()))
	e.uint(4, uint64(m.GetCheckpointId()))
	e.string(3, m.GetJobName())
	e.string(2, m.GetJobId())
	e.uint(1, uint64(m.GetVersion()))
	if e.bad {
		return fmt.Errorf("job: %w", errInvalidUTF8)
	}
	return nil
}

func (e *manifestEncoder) operator(op *weirpb.OperatorState) error {
	e.raw(op.ProtoReflect().GetUnknown())
	states := op.GetStates()
	for i := len(states) - 1; i >= 0; i-- {
		si, start := states[i], e.written()
		e.raw(si.ProtoReflect().GetUnknown())
		e.string(3, si.GetType())
		e.string(2, si.GetKind())
		e.string(1, si.GetName())
		e.end(6, start)
	}
	e.string(5, op.GetOperatorType())
	if e.bad {
		return errInvalidUTF8
	}
	if fs := op.GetFinishedSubtasks(); len(fs) > 0 {
		start := e.written()
		for i := len(fs) - 1; i >= 0; i-- {
			e.varint(uint64(fs[i]))
		}
		e.end(4, start)
	}
	hs := op.GetHandles()
	for i := len(hs) - 1; i >= 0; i-- {
		start := e.written()
		if e.handle(hs[i]); e.bad {
			return fmt.Errorf("handle %d: %w", i, errInvalidUTF8)
		}
		e.end(3, start)
	}
	e.uint(2, uint64(op.GetParallelism()))
	e.string(1, op.GetOperatorUid())
	if e.bad {
		return errInvalidUTF8
	}
	return nil
}

func (e *manifestEncoder) handle(h *weirpb.StateHandle) {
	e.raw(h.ProtoReflect().GetUnknown())
	e.uint(12, uint64(h.GetChannelStateBytes()))
	if d := h.GetInlineData(); len(d) > 0 {
		start := e.written()
		e.raw(d)
		e.end(11, start)
	}
	fs := h.GetFiles()
	for i := len(fs) - 1; i >= 0; i-- {
		f, start := fs[i], e.written()
		e.raw(f.ProtoReflect().GetUnknown())
		e.bool(5, f.GetShared())
		e.string(4, f.GetSha256())
		e.uint(3, uint64(f.GetSize()))
		e.string(2, f.GetKey())
		e.string(1, f.GetName())
		e.end(10, start)
	}
	e.bool(9, h.GetUnionOnly())
	e.uint(8, uint64(h.GetKeyGroupEnd()))
	e.uint(7, uint64(h.GetKeyGroupStart()))
	e.string(6, h.GetSha256())
	e.uint(5, uint64(h.GetSize()))
	e.string(4, h.GetKey())
	e.uint(3, uint64(h.GetParallelism()))
	e.uint(2, uint64(h.GetSubtask()))
	e.string(1, h.GetOperatorUid())
}
