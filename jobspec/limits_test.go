package jobspec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/stream"
)

// aliasBomb is a spec whose config holds levels lists of width aliases to
// the list before, the first of width "a"s: it expands to about
// 2*width^levels bytes.
func aliasBomb(width, levels int) []byte {
	var b strings.Builder
	b.WriteString("name: x\noperators:\n  - uid: a\n    type: gen\n    config:\n")
	fmt.Fprintf(&b, "      l0: &l0 [%s]\n", strings.TrimSuffix(strings.Repeat("a, ", width), ", "))
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), width), ", "))
	}
	return []byte(b.String())
}

// mergeBomb is a spec whose config holds levels mappings, each merging the
// one before twice: merge keys through aliases double the expanded size
// with every level.
func mergeBomb(levels int) []byte {
	var b strings.Builder
	b.WriteString("name: x\noperators:\n  - uid: a\n    type: gen\n    config:\n      m0: &m0 {a: 1, b: 2}\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "      m%d: &m%d {<<: [*m%d, *m%d], k%d: 1}\n", i, i, i-1, i-1, i)
	}
	return []byte(b.String())
}

// expandedSize is the size MaxExpandedBytes limits, computed by actually
// following every alias: the length of every scalar plus one per node.
// Only for documents known to be small.
func expandedSize(n *yaml.Node) int {
	if n.Kind == yaml.AliasNode {
		return expandedSize(n.Alias)
	}
	size := len(n.Value) + 1
	for _, c := range n.Content {
		size += expandedSize(c)
	}
	return size
}

func decodeNode(t *testing.T, data []byte) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return &doc
}

// allocated returns the bytes f allocates. Tests using it do not run in
// parallel, so that other tests' allocations do not count.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestAliasBombsAreRejected(t *testing.T) {
	// bytesBomb has few nodes but long strings: 8^4 copies of 2,000 bytes
	// (8 MB) in only a few thousand nodes, so a bound on nodes alone would
	// let it through.
	var bytesBomb strings.Builder
	bytesBomb.WriteString("name: x\noperators:\n  - uid: a\n    type: gen\n    config:\n")
	fmt.Fprintf(&bytesBomb, "      s: &l0 \"%s\"\n", strings.Repeat("x", 2000))
	for i := 1; i <= 4; i++ {
		fmt.Fprintf(&bytesBomb, "      l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 8), ", "))
	}
	// spread puts 1.5 MB of expansion in each of three operators: each
	// alone is within the limit, which holds for the spec as a whole.
	var spread strings.Builder
	spread.WriteString("name: x\noperators:\n  - uid: a\n    type: gen\n    config:\n")
	fmt.Fprintf(&spread, "      s: &s \"%s\"\n      l: &l [%s]\n", strings.Repeat("x", 10000), strings.TrimSuffix(strings.Repeat("*s, ", 50), ", "))
	for i := range 3 {
		fmt.Fprintf(&spread, "  - {uid: s%d, type: sink, input: a, config: {x: [*l, *l, *l]}}\n", i)
	}
	cases := []struct {
		name     string
		data     []byte
		expanded float64 // the expanded size, worked out by hand
		line     int     // of the alias through which the limit is passed
	}{
		// Level k (k >= 1) expands to 1 + 10*size(k-1) bytes with
		// size(0) = 21: about 2.1e6 at level 5 and 2.1e7 at level 6, so
		// level 6 (line 12) passes the 4 MiB limit.
		{"nested lists", aliasBomb(10, 10), 2.1e10, 12},
		// Level k expands to 2*size(k-1) + 10 bytes with size(0) = 9, about
		// 19*2^k, and levels 0..k together to about twice that: level 17
		// (line 23, about 5 MB with the levels before) passes the limit.
		{"merge keys", mergeBomb(30), 19 * (1 << 30), 23},
		// 2,000 bytes * 8^k: level 4 (line 10) is 8 MB.
		{"long strings", []byte(bytesBomb.String()), 8.2e6, 10},
		// Each sink's config is 3*50*10,000 = 1.5 MB; the third (line 10)
		// passes the limit.
		{"spread over operators", []byte(spread.String()), 4.5e6, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.expanded <= MaxExpandedBytes || len(tc.data) > 100_000 {
				t.Fatalf("bad test: %d bytes expanding to %.3g", len(tc.data), tc.expanded)
			}
			var err error
			alloc := allocated(func() { _, err = Parse("f.yaml", tc.data, testRegistry()) })
			var se *Error
			if !errors.Is(err, ErrTooLarge) || !errors.As(err, &se) {
				t.Fatalf("Parse = %v, want an *Error wrapping ErrTooLarge", err)
			}
			want := fmt.Sprintf("f.yaml:%d: the spec is larger than %d bytes once YAML aliases and merge keys are expanded (reached through the alias on this line); "+
				"the limit is jobspec.MaxExpandedBytes; alias fewer or smaller values", tc.line, MaxExpandedBytes)
			if err.Error() != want {
				t.Errorf("error\n %q, want\n %q", err, want)
			}
			t.Logf("a %d-byte spec expanding to %.3g bytes: Parse allocated %d bytes", len(tc.data), tc.expanded, alloc)
			// Decoding the spec itself takes some hundreds of bytes per
			// written byte; the expansion must take none of its size.
			if limit := 400*uint64(len(tc.data)) + 1<<20; alloc > limit {
				t.Errorf("Parse allocated %d bytes for a %d-byte spec; want at most %d, far below its expanded size %.3g", alloc, len(tc.data), limit, tc.expanded)
			}
		})
	}
}

// TestExpandedLimitIsExact builds a spec that expands to exactly
// MaxExpandedBytes, as measured by following every alias, and one byte more.
func TestExpandedLimitIsExact(t *testing.T) {
	build := func(fill int) []byte {
		var b strings.Builder
		b.WriteString("name: x\noperators:\n  - uid: a\n    type: gen\n    config:\n")
		fmt.Fprintf(&b, "      pad: &p \"%s\"\n      copies: [%s]\n      fill: \"%s\"\n",
			strings.Repeat("x", 56<<10), strings.TrimSuffix(strings.Repeat("*p, ", 64), ", "), strings.Repeat("y", fill))
		return []byte(b.String())
	}
	fill := MaxExpandedBytes - expandedSize(decodeNode(t, build(0)))
	atLimit := build(fill)
	if got := expandedSize(decodeNode(t, atLimit)); got != MaxExpandedBytes || len(atLimit) > MaxSpecBytes {
		t.Fatalf("bad test: the spec is %d bytes expanding to %d, want %d", len(atLimit), got, MaxExpandedBytes)
	}
	// At the limit the spec gets past the expansion check to planning,
	// which rejects its 3.5 MB config.
	if _, err := Parse("f.yaml", atLimit, testRegistry()); errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "stream.MaxConfigBytes") {
		t.Fatalf("Parse(at the limit) = %v, want the config size error of planning", err)
	}
	_, err := Parse("f.yaml", build(fill+1), testRegistry())
	if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), "f.yaml:8: the spec is larger than 4194304 bytes once YAML aliases and merge keys are expanded; ") {
		t.Fatalf("Parse(one byte over) = %v, want the expansion error at the fill line", err)
	}
}

func TestAliasesWithinTheLimitWork(t *testing.T) {
	data := spec(`
name: shared
operators:
  - &src {uid: a, type: gen, parallelism: 2, config: &rows {rows: 10}}
  - {<<: *src, uid: b, config: *rows}
  - &keyed
    uid: j
    type: join
    inputs: [a, b]
    keyBy: &key [key]
  - {uid: c, type: agg, input: j, keyBy: *key}
  - {uid: out, type: sink}
`)
	g, err := Parse("f.yaml", data, testRegistry())
	if err != nil {
		t.Fatal(err)
	}
	vertices, edges, configs := describeGraph(g)
	wantV := []string{"a:a:gen:p2", "b:b:gen:p2", "j:j:join:p1", "c:c:agg:p1", "out:out:sink:p1"}
	wantE := []string{"a->j#0 hash[key]", "b->j#1 hash[key]", "j->c#0 hash[key]", "c->out#0 forward"}
	if fmt.Sprint(vertices) != fmt.Sprint(wantV) || fmt.Sprint(edges) != fmt.Sprint(wantE) {
		t.Fatalf("vertices %v edges %v, want %v %v", vertices, edges, wantV, wantE)
	}
	if configs["a"] != `{"rows":10}` || configs["b"] != `{"rows":10}` {
		t.Fatalf("configs %v, want rows 10 for a and b", configs)
	}
}

func TestAliasCyclesAndDepth(t *testing.T) {
	var deep strings.Builder
	deep.WriteString("name: x\noperators:\n  - uid: a\n    type: gen\n    config:\n      d0: &d0 [x]\n")
	for i := 1; i <= 120; i++ {
		fmt.Fprintf(&deep, "      d%d: &d%d [*d%d]\n", i, i, i-1)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"value contains itself", spec(`
name: x
operators:
  - uid: a
    type: gen
    config: &c {rows: 1, again: *c}
`), `f.yaml:5: alias *c is inside the value it names`},
		{"merge of itself", spec(`
name: x
operators:
  - uid: a
    type: gen
    config: &c
      rows: 1
      <<: *c
`), `f.yaml:7: alias *c is inside the value it names`},
		{"nested through aliases", []byte(deep.String()), "nested more than 100 levels deep once its aliases are expanded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", tc.data, testRegistry())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSpecSizeLimit(t *testing.T) {
	base := spec(`
name: x
operators:
  - {uid: a, type: gen}
# `)
	pad := func(n int) []byte {
		return append(append([]byte(nil), base...), strings.Repeat("#", n-len(base))...)
	}
	if _, err := Parse("f.yaml", pad(MaxSpecBytes), testRegistry()); err != nil {
		t.Fatalf("Parse of a spec of exactly MaxSpecBytes = %v", err)
	}
	_, err := Parse("f.yaml", pad(MaxSpecBytes+1), testRegistry())
	if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), "f.yaml:1: the spec is larger than 1048576 bytes (jobspec.MaxSpecBytes); split the job") {
		t.Fatalf("Parse(MaxSpecBytes+1) = %v, want the size limit", err)
	}
	// Load reads no more than the limit and a byte.
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, pad(4*MaxSpecBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, testRegistry())
	if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), path+":1: the spec is larger than") {
		t.Fatalf("Load(big) = %v, want the size limit naming the file", err)
	}
}

func TestSpecNameAndCountLimits(t *testing.T) {
	long := func(n int) string { return strings.Repeat("q", n) }
	chain := func(n int) []byte {
		var b strings.Builder
		b.WriteString("name: x\noperators:\n  - {uid: op0, type: gen}\n")
		for i := 1; i < n; i++ {
			fmt.Fprintf(&b, "  - {uid: op%d, type: mapx}\n", i)
		}
		return []byte(b.String())
	}
	cases := []struct {
		name string
		data []byte
		want string // "" when the spec must parse
	}{
		{"operators at the limit", chain(stream.MaxOperators), ""},
		{"operators over the limit", chain(stream.MaxOperators + 1),
			"f.yaml:2: operators: the job has 1001 operators; the limit is 1000 (stream.MaxOperators); split it into several jobs"},
		{"job name over the limit", []byte("name: " + long(257) + "\noperators:\n  - {uid: a, type: gen}\n"),
			"f.yaml:1: name: is 257 bytes; the limit is 256 bytes (stream.MaxNameLength); use a shorter name"},
		{"uid at the limit", []byte("name: x\noperators:\n  - {uid: " + long(128) + ", type: gen}\n"), ""},
		{"uid over the limit", []byte("name: x\noperators:\n  - {type: gen,\n     uid: " + long(129) + "}\n"),
			"f.yaml:4: operator #1: uid: is 129 bytes; the limit is 128 bytes (stream.MaxUIDLength); use a shorter uid"},
		{"name at the limit", []byte("name: x\noperators:\n  - {uid: a, type: gen, name: " + long(256) + "}\n"), ""},
		{"name over the limit", []byte("name: x\noperators:\n  - uid: a\n    type: gen\n    name: " + long(257) + "\n"),
			`f.yaml:5: operator "a": name: is 257 bytes; the limit is 256 bytes (stream.MaxNameLength); use a shorter name`},
		{"type over the limit", []byte("name: x\noperators:\n  - uid: a\n    type: " + long(257) + "\n"),
			`f.yaml:4: operator "a": type: is 257 bytes, and type names are at most 256 bytes (stream.MaxNameLength); use a registered type`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Parse("f.yaml", tc.data, testRegistry())
			if tc.want == "" {
				if err != nil || g == nil {
					t.Fatalf("Parse = %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Parse error\n %v, want\n %s", err, tc.want)
			}
		})
	}
}
