package nexmark

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weirstream/weir/stream"
)

// A Digest summarises a multiset of result rows: how many, and the sum
// (mod 2^64) of a hash of each row. It does not depend on the order of the
// rows nor on how they were split among subtasks (digests add), so a
// query's output can be checked against an oracle's however the engine
// ordered and partitioned it; a lost, doubled or changed row changes it.
type Digest struct {
	Rows int64  `json:"rows"`
	Hash uint64 `json:"hash"`
}

// Add returns the digest of the union of the two multisets.
func (d Digest) Add(o Digest) Digest { return Digest{Rows: d.Rows + o.Rows, Hash: d.Hash + o.Hash} }

func (d Digest) String() string { return fmt.Sprintf("%d rows, hash %016x", d.Rows, d.Hash) }

// RowHasher hashes one row, value by value, in the columns' order: the
// oracles feed it Go values, the digest sink the columns of a batch, and
// both must agree. Int64 and timestamp values hash as their int64, float64
// values as their IEEE 754 bits, strings by their bytes, booleans as 0 or
// 1 and nulls as a fixed marker.
type RowHasher struct{ h uint64 }

const (
	rowSeed    = 0x6e65786d61726b21
	nullMarker = 0x4e554c4c4e554c4c
)

// NewRowHasher starts a row.
func NewRowHasher() RowHasher { return RowHasher{h: rowSeed} }

func (r *RowHasher) Int(v int64)     { r.h = mix64(r.h ^ uint64(v)) }
func (r *RowHasher) Float(v float64) { r.h = mix64(r.h ^ math.Float64bits(v)) }
func (r *RowHasher) Str(s string)    { r.h = mix64(r.h ^ strHash(s)) }
func (r *RowHasher) Null()           { r.h = mix64(r.h ^ nullMarker) }

// Sum is the row's contribution to a Digest's hash.
func (r *RowHasher) Sum() uint64 { return mix64(r.h + golden) }

// AddRow adds the row hashed by r to d.
func (d *Digest) AddRow(r *RowHasher) {
	d.Rows++
	d.Hash += r.Sum()
}

// AddWeighted adds the row hashed by r to d weight times (the digest of a
// weighted row: see DigestConfig.Weight), in wrapping arithmetic.
func (d *Digest) AddWeighted(r *RowHasher, weight int64) {
	d.Rows += weight
	d.Hash += uint64(weight) * r.Sum()
}

// strHash hashes s eight bytes at a time.
func strHash(s string) uint64 {
	h := uint64(len(s)) * golden
	for len(s) >= 8 {
		h = mix64(h ^ (uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56))
		s = s[8:]
	}
	var tail uint64
	for i := range len(s) {
		tail |= uint64(s[i]) << (8 * i)
	}
	return mix64(h ^ tail)
}

// DigestBatch adds the rows of b to d, all columns in order, or only the
// columns cols when it is not nil. scratch is reusable memory; it returns
// it, grown if need be.
func DigestBatch(d *Digest, b *stream.Batch, cols []int, scratch []uint64) []uint64 {
	n := b.Len()
	if cols == nil {
		cols = allColumns(b)
	}
	for _, c := range cols {
		if b.Cols[c].Nulls != nil {
			// Rare: value by value.
			for i := range n {
				r := NewRowHasher()
				hashRowAt(&r, b, cols, i)
				d.AddRow(&r)
			}
			return scratch
		}
	}
	scratch = partialHashes(b, cols, scratch)
	for _, h := range scratch[:n] {
		d.Hash += mix64(h + golden)
	}
	d.Rows += int64(n)
	return scratch
}

// DigestBatchWeighted adds the rows of b to d as DigestBatch does (all
// columns, or only cols when it is not nil), each weighted by its int64
// value in column weight (AddWeighted): Rows grows by the weights' sum. A
// null weight is an error that names the column; d is then unchanged.
func DigestBatchWeighted(d *Digest, b *stream.Batch, cols []int, weight int) error {
	n := b.Len()
	if cols == nil {
		cols = allColumns(b)
	}
	wc := &b.Cols[weight]
	if wc.Type != stream.TypeInt64 {
		return fmt.Errorf("%s: weight column %q is %v; it must be int64", TypeDigest, b.Schema.Fields[weight].Name, wc.Type)
	}
	for i := range n {
		if wc.IsNull(i) {
			return fmt.Errorf("%s: weight column %q has a null in a row; weights must be counts, never null", TypeDigest, b.Schema.Fields[weight].Name)
		}
	}
	var part Digest
	for i := range n {
		r := NewRowHasher()
		hashRowAt(&r, b, cols, i)
		part.AddWeighted(&r, wc.Ints[i])
	}
	*d = d.Add(part)
	return nil
}

// partialHashes sets scratch[i], grown to b's length if need be, to row
// i's hash before RowHasher.Sum's final mix, over the columns cols, none
// of which has nulls.
func partialHashes(b *stream.Batch, cols []int, scratch []uint64) []uint64 {
	n := b.Len()
	if cap(scratch) < n {
		scratch = make([]uint64, n)
	}
	hs := scratch[:n]
	for i := range hs {
		hs[i] = rowSeed
	}
	for _, c := range cols {
		col := &b.Cols[c]
		switch col.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			for i, v := range col.Ints[:n] {
				hs[i] = mix64(hs[i] ^ uint64(v))
			}
		case stream.TypeFloat64:
			for i, v := range col.Floats[:n] {
				hs[i] = mix64(hs[i] ^ math.Float64bits(v))
			}
		case stream.TypeString:
			for i, v := range col.Strs[:n] {
				hs[i] = mix64(hs[i] ^ strHash(v))
			}
		case stream.TypeBool:
			for i, v := range col.Bools[:n] {
				var x uint64
				if v {
					x = 1
				}
				hs[i] = mix64(hs[i] ^ x)
			}
		}
	}
	return scratch
}

// hashRowAt hashes row i of b's columns cols value by value.
func hashRowAt(r *RowHasher, b *stream.Batch, cols []int, i int) {
	for _, c := range cols {
		col := &b.Cols[c]
		if col.IsNull(i) {
			r.Null()
			continue
		}
		switch col.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			r.Int(col.Ints[i])
		case stream.TypeFloat64:
			r.Float(col.Floats[i])
		case stream.TypeString:
			r.Str(col.Strs[i])
		case stream.TypeBool:
			if col.Bools[i] {
				r.Int(1)
			} else {
				r.Int(0)
			}
		}
	}
}

// TypeDigest is the digest sink: it adds every row it receives to a
// Digest, keeps the digest as checkpointed state (so a restored job counts
// every row once, as an exactly-once sink) and, at the end of its input,
// writes it to a file in a directory, one file per subtask.
const TypeDigest = "nexmark_digest"

// DigestConfig is the JSON config of the digest sink.
type DigestConfig struct {
	// Dir is the directory the digest files go to, as
	// digest-<subtask>.json (a Digest). Required; it must exist and lie
	// under the cluster's allowed paths.
	Dir string `json:"dir"`
	// Fields, if set, are the fields hashed (in this order); default all,
	// in the schema's order.
	Fields []string `json:"fields,omitempty"`
	// Weight, if set, names an int64 field, not null, that weights each
	// row: the row adds its weight to Rows and weight × its hash to Hash
	// (mod 2^64), as that many copies of it would. A query whose rows are
	// counts (q12: bids per bidder and window) is so checked against the
	// records counted, however they were split among rows: with Fields
	// [bidder] and Weight bid_count, the digest is, per bidder, its number
	// of bids × its hash, whatever the windows. Default none: every row
	// counts once. The option does not change the sink's checkpointed
	// state (the digest so far).
	Weight string `json:"weight,omitempty"`
}

const digestState = "digest"

// ReadDigests sums the digest files that digest sinks wrote to dir.
func ReadDigests(dir string) (Digest, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "digest-*.json"))
	if err != nil {
		return Digest{}, 0, err
	}
	var total Digest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return Digest{}, 0, err
		}
		var d Digest
		if err := json.Unmarshal(data, &d); err != nil {
			return Digest{}, 0, fmt.Errorf("digest file %s: %w", f, err)
		}
		total = total.Add(d)
	}
	return total, len(files), nil
}

func registerDigest(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name: TypeDigest,
		Kind: stream.KindSink,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			cfg, err := parseDigest(p.Config)
			if err != nil {
				return nil, err
			}
			if p.Paths != nil {
				if err := p.Paths.Check(TypeDigest+" dir", cfg.Dir); err != nil {
					return nil, stream.ConfigErrorf("%s: %v", TypeDigest, err)
				}
			}
			if len(p.Inputs) == 1 && p.Inputs[0].Schema != nil {
				in := p.Inputs[0].Schema
				if _, err := in.Lookup(cfg.Fields...); err != nil {
					return nil, stream.ConfigErrorf("%s: fields: %v", TypeDigest, err)
				}
				if _, err := weightColumn(in, cfg.Weight); err != nil {
					return nil, err
				}
			}
			p.DeclareState(stream.StateDecl{Name: digestState, Kind: stream.StateOperatorList})
			return nil, nil
		},
		NewOperator: func(config []byte) (stream.Operator, error) {
			cfg, err := parseDigest(config)
			if err != nil {
				return nil, err
			}
			return &DigestSink{cfg: cfg}, nil
		},
		Config: DigestConfig{},
		Doc:    "benchmark sink: a row count and an order-independent hash of the rows, checkpointed, written to <dir>/digest-<subtask>.json at the end ({dir, fields, weight})",
	})
}

func parseDigest(raw []byte) (DigestConfig, error) {
	var c DigestConfig
	if err := stream.DecodeOperatorConfig(TypeDigest, raw, &c); err != nil {
		return c, err
	}
	if c.Dir == "" {
		return c, stream.ConfigErrorf("%s: dir: required; name the directory the digests go to", TypeDigest)
	}
	return c, nil
}

// weightColumn returns the index of the weight field in in, or -1 for
// none.
func weightColumn(in *stream.Schema, weight string) (int, error) {
	if weight == "" {
		return -1, nil
	}
	i := in.Index(weight)
	if i < 0 {
		return -1, stream.ConfigErrorf("%s: weight: field %q is not in the input (the input has %s); name an int64 field of counts", TypeDigest, weight, strings.Join(in.Names(), ", "))
	}
	if t := in.Fields[i].Type; t != stream.TypeInt64 {
		return -1, stream.ConfigErrorf("%s: weight: field %q is %v; the weight must be an int64 field of counts", TypeDigest, weight, t)
	}
	return i, nil
}

// DigestSink is one subtask of the digest sink.
type DigestSink struct {
	stream.BaseOperator
	cfg     DigestConfig
	subtask int
	cols    []int
	weight  int // column of DigestConfig.Weight, or -1
	d       Digest
	scratch []uint64
	paths   *stream.PathPolicy
}

var (
	_ stream.Operator     = (*DigestSink)(nil)
	_ stream.Checkpointed = (*DigestSink)(nil)
)

// Open resolves the hashed fields.
func (s *DigestSink) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.subtask, s.paths = octx.Subtask, octx.Paths
	s.weight = -1
	if len(octx.InputSchemas) != 1 {
		return nil
	}
	in := octx.InputSchemas[0]
	if len(s.cfg.Fields) > 0 {
		cols, err := in.Lookup(s.cfg.Fields...)
		if err != nil {
			return fmt.Errorf("%s: fields: %w", TypeDigest, err)
		}
		s.cols = cols
	}
	w, err := weightColumn(in, s.cfg.Weight)
	if err != nil {
		return err
	}
	s.weight = w
	return nil
}

// ProcessBatch adds b's rows to the digest.
func (s *DigestSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	if s.weight >= 0 {
		return DigestBatchWeighted(&s.d, b, s.cols, s.weight)
	}
	s.scratch = DigestBatch(&s.d, b, s.cols, s.scratch)
	return nil
}

// allColumns lists the columns of b.
func allColumns(b *stream.Batch) []int {
	cols := make([]int, len(b.Cols))
	for c := range cols {
		cols[c] = c
	}
	return cols
}

// Digest returns the digest so far.
func (s *DigestSink) Digest() Digest { return s.d }

// SnapshotState stores the digest so far: version 1 | varint rows | 8
// bytes hash.
func (s *DigestSink) SnapshotState(c *stream.SnapshotContext) error {
	item := binary.AppendVarint([]byte{1}, s.d.Rows)
	c.AddListState(digestState, binary.LittleEndian.AppendUint64(item, s.d.Hash))
	return nil
}

// RestoreState adds up the digests it received (digests add, so any
// distribution of the items among subtasks keeps the total).
func (s *DigestSink) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	for _, item := range c.State.List[digestState] {
		if len(item) < 2 || item[0] != 1 {
			return fmt.Errorf("%s subtask %d: checkpoint %d: corrupt digest state", TypeDigest, s.subtask, c.CheckpointID)
		}
		rows, n := binary.Varint(item[1:])
		if n <= 0 || len(item) != 1+n+8 {
			return fmt.Errorf("%s subtask %d: checkpoint %d: corrupt digest state", TypeDigest, s.subtask, c.CheckpointID)
		}
		s.d = s.d.Add(Digest{Rows: rows, Hash: binary.LittleEndian.Uint64(item[1+n:])})
	}
	return nil
}

// Finish writes the digest file.
func (s *DigestSink) Finish(stream.Collector) error {
	path := filepath.Join(s.cfg.Dir, "digest-"+strconv.Itoa(s.subtask)+".json")
	if s.paths != nil {
		if err := s.paths.Check(TypeDigest+" file", path); err != nil {
			return err
		}
	}
	data, err := json.Marshal(s.d)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("%s: write %s: %w", TypeDigest, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("%s: write %s: %w", TypeDigest, path, err), os.Remove(tmp))
	}
	return nil
}
