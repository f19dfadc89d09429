package window

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// State of the session_window operator.
//
// Every session is keyed state in the backend the task runtime opened
// (statebackend.KeyedBackend), which snapshots, restores and redistributes
// it with the rest of the subtask's keyed state:
//
//   - value state sessionsTable: per key, a *keySessions — the key's open
//     sessions in ascending start order (disjoint and not touching, since
//     touching sessions merge), each with its accumulator words — encoded
//     by sessionsCodec;
//   - event-time timers of the key: at end-1 of each session that has not
//     fired (it fires then) and at end-1+allowedLateness (the session's
//     state is dropped then; with no allowed lateness the two coincide).
//     A timer belongs to a key, not to a session: the timer at ts does
//     whatever is due at ts for every session of its key. When sessions
//     merge, the timers only the merged-away sessions needed are deleted
//     and the merged session's registered.
//
// Without keyBy the subtask's sessions are the state of the empty key in
// the first key group of the subtask's range. A restore after rescaling may
// hand a subtask that state from other key groups as well; RestoreState
// merges it into its own (see adoptGlobal).
//
// The operator writes two items of union operator state:
// sessionSignatureState, the key types and aggregate layout, which a restore
// checks; and sessionWatermarkState: byte version = 1, varint watermark. A
// restore takes the smallest watermark, so that no session that had not
// fired in some subtask is taken for fired.
const (
	sessionsTable          = "sessions"
	sessionSignatureState  = "session_signature"
	sessionWatermarkState  = "session_watermark"
	sessionStateVersion    = 1 // of sessionWatermarkState
	sessionsCodecVersion   = 1 // first byte of every encoded keySessions
	sessionsCodecIDVersion = "v1"
)

// session is the interval [start, end) of one open session.
type session struct {
	start, end int64
}

// keySessions is the state of one key: its sessions in ascending start
// order, and their accumulator words, width per session (see
// sessionLayout), session i's at words[i*width:(i+1)*width]. A keySessions
// stored in state is never modified: a change makes a new one.
type keySessions struct {
	ss    []session
	words []int64
}

// sessionLayout is how an accumulator slot of accs is kept as words: the
// words of the aggregates' layout (see layout in agg.go).
type sessionLayout struct {
	kinds []aggKind
	lay   *layout
}

func newSessionLayout(aggs []aggSpec) sessionLayout {
	l := sessionLayout{lay: newLayout(aggs)}
	for _, a := range aggs {
		l.kinds = append(l.kinds, a.kind)
	}
	return l
}

// width is the number of words of one session.
func (l sessionLayout) width() int { return l.lay.width }

// store appends the words of slot s of a to dst.
func (l sessionLayout) store(dst []int64, a *accs, s int32) []int64 {
	return append(dst, a.words(s)...)
}

// load sets slot s of a to the accumulator in w.
func (l sessionLayout) load(a *accs, s int32, w []int64) { copy(a.words(s), w) }

// kindNames name aggKinds in codec IDs, signatures and errors.
var kindNames = [...]string{
	aggCount:      "count",
	aggCountField: "count_field",
	aggSumInt:     "sum_int",
	aggSumFloat:   "sum_float",
	aggAvgInt:     "avg_int",
	aggAvgFloat:   "avg_float",
	aggMinInt:     "min_int",
	aggMinFloat:   "min_float",
	aggMaxInt:     "max_int",
	aggMaxFloat:   "max_float",
}

func (k aggKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("aggregate(%d)", uint8(k))
}

func kindList(kinds []aggKind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// sessionsCodec encodes a keySessions:
//
//	byte    version = 1
//	uvarint number of aggregates, then one aggKind byte per aggregate
//	uvarint number of sessions, then per session (ascending start):
//	    varint start, uvarint end-start (> 0), then the words of its
//	    accumulator (layout in agg.go), each a varint (floats as their
//	    IEEE 754 bits)
//
// Its ID names the aggregate layout, e.g. "window.sessions.v1(count,
// sum_int)"; and since every value repeats the layout, state written for
// other aggregates fails to decode (so to restore) with an error naming
// both, instead of being misread.
type sessionsCodec struct {
	l  sessionLayout
	id string
}

func newSessionsCodec(l sessionLayout) sessionsCodec {
	return sessionsCodec{l: l, id: "window.sessions." + sessionsCodecIDVersion + kindList(l.kinds)}
}

func (c sessionsCodec) ID() string { return c.id }

func (c sessionsCodec) Append(dst []byte, v *keySessions) []byte {
	dst = append(dst, sessionsCodecVersion)
	dst = binary.AppendUvarint(dst, uint64(len(c.l.kinds)))
	for _, k := range c.l.kinds {
		dst = append(dst, byte(k))
	}
	if v == nil {
		return binary.AppendUvarint(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(v.ss)))
	w := c.l.width()
	for i, s := range v.ss {
		dst = binary.AppendVarint(dst, s.start)
		dst = binary.AppendUvarint(dst, uint64(s.end-s.start))
		for _, x := range v.words[i*w : (i+1)*w] {
			dst = binary.AppendVarint(dst, x)
		}
	}
	return dst
}

func (c sessionsCodec) Decode(src []byte) (*keySessions, error) {
	r := &rowenc.Reader{B: src}
	if v := r.Byte(); r.Err == nil && v != sessionsCodecVersion {
		return nil, fmt.Errorf("%s codec: unknown format version %d (this build reads version %d)", c.id, v, sessionsCodecVersion)
	}
	na := r.Count()
	kinds := make([]aggKind, 0, min(na, 64))
	for range na {
		kinds = append(kinds, aggKind(r.Byte()))
	}
	if r.Err == nil && !sameKinds(kinds, c.l.kinds) {
		return nil, fmt.Errorf("%s codec: the state was written for aggregates %s, this operator has %s; restore it into the job that wrote it, or start without the checkpoint",
			c.id, kindList(kinds), kindList(c.l.kinds))
	}
	n := r.Count()
	w := c.l.width()
	v := &keySessions{ss: make([]session, 0, min(n, 1024)), words: make([]int64, 0, min(n, 1024)*w)}
	for range n {
		start := r.Varint()
		length := r.Uvarint()
		if r.Err != nil {
			break
		}
		if length == 0 || length > math.MaxInt64 || start > math.MaxInt64-int64(length) {
			return nil, fmt.Errorf("%s codec: session at %d of length %d is empty or out of range", c.id, start, length)
		}
		s := session{start: start, end: start + int64(length)}
		if k := len(v.ss); k > 0 && s.start <= v.ss[k-1].end {
			return nil, fmt.Errorf("%s codec: session [%d, %d) is not after session [%d, %d)", c.id, s.start, s.end, v.ss[k-1].start, v.ss[k-1].end)
		}
		v.ss = append(v.ss, s)
		for range w {
			v.words = append(v.words, r.Varint())
		}
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%s codec: %d bytes: %w", c.id, len(src), err)
	}
	return v, nil
}

func sameKinds(a, b []aggKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// signature names what the state was written for, e.g. "key (int64,
// string); aggregates (count, sum_int)".
func (o *SessionWindow) signature() string {
	key := "no key"
	if o.keyed {
		names := make([]string, len(o.r.keyCols))
		for i, c := range o.r.keyCols {
			names[i] = o.in.Fields[c].Type.String()
		}
		key = "key (" + strings.Join(names, ", ") + ")"
	}
	return key + "; aggregates " + kindList(o.layout.kinds)
}

var _ stream.Checkpointed = (*SessionWindow)(nil)

// SnapshotState writes the signature and the watermark as union state; the
// sessions and timers are keyed state, which the runtime snapshots.
func (o *SessionWindow) SnapshotState(c *stream.SnapshotContext) error {
	c.AddUnionState(sessionSignatureState, []byte(o.signature()))
	c.AddUnionState(sessionWatermarkState, binary.AppendVarint([]byte{sessionStateVersion}, o.wm))
	return nil
}

// RestoreState checks the signature, takes the smallest watermark and,
// without keyBy, gathers the sessions restored into other key groups than
// the subtask's own.
func (o *SessionWindow) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	where := fmt.Sprintf("%s: restoring checkpoint %d", o.name, c.CheckpointID)
	want := o.signature()
	for _, sig := range c.State.Union[sessionSignatureState] {
		if string(sig) != want {
			return fmt.Errorf("%s: the state was written for another key or other aggregates (%s); this operator has %s; restore it into the job that wrote it, or start without the checkpoint", where, sig, want)
		}
	}
	for i, item := range c.State.Union[sessionWatermarkState] {
		r := &rowenc.Reader{B: item}
		if v := r.Byte(); r.Err == nil && v != sessionStateVersion {
			return fmt.Errorf("%s: unknown watermark state version %d (this build reads %d)", where, v, sessionStateVersion)
		}
		wm := r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt watermark state: %v", where, err)
		}
		if i == 0 || wm < o.wm {
			o.wm = wm
		}
	}
	if !o.keyed {
		if err := o.adoptGlobal(); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

// adoptGlobal moves the sessions of a global (not keyed) session window
// that a restore put into key groups of the range other than the home one
// (the state of other subtasks before a rescale) into the home key group,
// merging them with its sessions, and moves their timers.
func (o *SessionWindow) adoptGlobal() error {
	kgs := o.backend.KeyGroups()
	type foreign struct {
		key []byte
		kg  int
	}
	var found []foreign
	for kg := kgs.Start; kg <= kgs.End; kg++ {
		if kg == o.home {
			continue
		}
		o.backend.Keys(sessionsTable, kg, func(key []byte) bool {
			found = append(found, foreign{key, kg})
			return true
		})
	}
	if len(found) == 0 {
		return nil
	}
	o.nslots = 0
	var cur []wsess
	o.backend.SetCurrentKey(globalKey, o.home)
	home, _ := o.state.Value()
	cur = o.loadSessions(cur, home)
	for _, f := range found {
		if len(f.key) != 0 {
			return fmt.Errorf("key group %d holds sessions of key %q; a session window without keyBy keeps them under the empty key (was the job keyed when the checkpoint was taken?)", f.kg, f.key)
		}
		o.backend.SetCurrentKey(f.key, f.kg)
		ks, ok := o.state.Value()
		if !ok {
			continue
		}
		for _, ts := range o.timerTimes(nil, ks.ss) {
			o.timers.DeleteEventTimeTimer(ts)
		}
		o.state.Clear()
		for _, w := range o.loadSessions(nil, ks) {
			cur = o.insert(cur, w)
		}
	}
	o.backend.SetCurrentKey(globalKey, o.home)
	var old []session
	if home != nil {
		old = home.ss
	}
	o.storeSessions(old, cur)
	return nil
}
