package jobspec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weirstream/weir/stream"
)

// spec trims the leading newline of a raw string literal, so that the first
// line of the literal's text is line 1.
func spec(s string) []byte { return []byte(strings.TrimPrefix(s, "\n")) }

// describeGraph renders g's vertices, edges and configs in a form that is easy
// to compare and to read in a failure.
func describeGraph(g *stream.JobGraph) (vertices, edges []string, configs map[string]string) {
	configs = make(map[string]string)
	for _, v := range g.Vertices {
		vertices = append(vertices, fmt.Sprintf("%s:%s:%s:p%d", v.UID, v.Name, v.Type, v.Parallelism))
		if v.Config != nil {
			configs[v.UID] = string(v.Config)
		}
	}
	for _, e := range g.Edges {
		from := g.Vertices[e.From].UID
		if e.SideOutput != "" {
			from += "[" + e.SideOutput + "]"
		}
		s := fmt.Sprintf("%s->%s#%d %v", from, g.Vertices[e.To].UID, e.Input, e.Partitioning)
		if e.KeyFields != nil {
			s += "[" + strings.Join(e.KeyFields, ",") + "]"
		}
		edges = append(edges, s)
	}
	return vertices, edges, configs
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name     string
		spec     string
		jobPar   int
		maxPar   int
		vertices []string
		edges    []string
		configs  map[string]string
		schemas  map[string]string // uid -> OutSchema.String(), optional
	}{
		{
			name: "linear pipeline",
			spec: `
name: counts
parallelism: 4
maxParallelism: 64
operators:
  - uid: events
    name: Events
    type: gen
    parallelism: 2
    config: {rows: 100}
  - uid: enrich
    type: mapx
    config: {set: [{name: score, type: float64}]}
  - uid: counts
    type: agg
    keyBy: [key]
  - uid: out
    type: sink
`,
			jobPar: 4, maxPar: 64,
			vertices: []string{"events:Events:gen:p2", "enrich:enrich:mapx:p4", "counts:counts:agg:p4", "out:out:sink:p4"},
			// gen (2) -> mapx (4) differ in parallelism: Plan makes it rebalance.
			edges:   []string{"events->enrich#0 rebalance", "enrich->counts#0 hash[key]", "counts->out#0 forward"},
			configs: map[string]string{"events": `{"rows":100}`, "enrich": `{"set":[{"name":"score","type":"float64"}]}`},
			schemas: map[string]string{
				"enrich": "(key string, value int64, ts timestamp, score float64)",
				"counts": "(key string, n int64)",
			},
		},
		{
			name: "defaults",
			spec: `
name: tiny
operators:
  - {uid: g, type: gen}
  - {uid: s, type: sink}
`,
			jobPar: 1, maxPar: stream.DefaultMaxParallelism,
			vertices: []string{"g:g:gen:p1", "s:s:sink:p1"},
			edges:    []string{"g->s#0 forward"},
			configs:  map[string]string{},
		},
		{
			name: "config conversion keeps order and types",
			spec: `
name: conv
operators:
  - uid: g
    type: gen
    config: {rows: 5}
  - uid: m
    type: sink
    config:
      zeta: 1
      alpha: -7
      big: 18446744073709551615
      hex: 0x1F
      ratio: 0.5
      exp: 1e6
      on: true
      off: false
      nothing: null
      tilde: ~
      size: 10s
      lateness: 500ms
      quoted: "42"
      expr: price > 10 && a < b
      date: 2024-01-02
      list: [1, two, 3.5, [x], {k: v}]
      nested:
        deep: {deeper: [a, b]}
      empty: {}
      emptyList: []
`,
			jobPar: 1, maxPar: 128,
			vertices: []string{"g:g:gen:p1", "m:m:sink:p1"},
			edges:    []string{"g->m#0 forward"},
			configs: map[string]string{
				"g": `{"rows":5}`,
				"m": `{"zeta":1,"alpha":-7,"big":18446744073709551615,"hex":31,"ratio":0.5,"exp":1e+06,` +
					`"on":true,"off":false,"nothing":null,"tilde":null,"size":"10s","lateness":"500ms","quoted":"42",` +
					`"expr":"price > 10 && a < b","date":"2024-01-02","list":[1,"two",3.5,["x"],{"k":"v"}],` +
					`"nested":{"deep":{"deeper":["a","b"]}},"empty":{},"emptyList":[]}`,
			},
		},
		{
			name: "anchors aliases and merge keys",
			spec: `
name: anchors
operators:
  - uid: g
    type: gen
    config: &base {rows: 3}
  - uid: s
    type: sink
    config:
      <<: *base
      extra: &x yes-string
      again: *x
  - <<: {type: gen, parallelism: 2}
    uid: g2
  - uid: s2
    type: sink
    config: {<<: [{a: 1, b: 1}, {b: 2, c: 2}], c: 3}
`,
			jobPar: 1, maxPar: 128,
			vertices: []string{"g:g:gen:p1", "s:s:sink:p1", "g2:g2:gen:p2", "s2:s2:sink:p1"},
			edges:    []string{"g->s#0 forward", "g2->s2#0 rebalance"},
			configs: map[string]string{
				"g":  `{"rows":3}`,
				"s":  `{"extra":"yes-string","again":"yes-string","rows":3}`,
				"s2": `{"c":3,"a":1,"b":1}`,
			},
		},
		{
			name: "second source later in the list and a two-input join",
			spec: `
name: join
parallelism: 2
operators:
  - uid: left
    type: gen
  - uid: lkeyed
    type: mapx
  - uid: right
    type: gen
    parallelism: 1
  - uid: joined
    type: join
    inputs:
      - {from: lkeyed, keyBy: key}
      - {from: right, keyBy: [key, value]}
  - uid: out
    type: sink
`,
			jobPar: 2, maxPar: 128,
			vertices: []string{"left:left:gen:p2", "lkeyed:lkeyed:mapx:p2", "right:right:gen:p1", "joined:joined:join:p2", "out:out:sink:p2"},
			edges: []string{
				"left->lkeyed#0 forward",
				"lkeyed->joined#0 hash[key]", "right->joined#1 hash[key,value]",
				"joined->out#0 forward",
			},
			configs: map[string]string{},
		},
		{
			name: "operator keyBy applies to every input, an input entry overrides it",
			spec: `
name: override
operators:
  - uid: a
    type: gen
  - uid: b
    type: gen
  - uid: c
    type: gen
  - uid: j1
    type: join
    keyBy: [key]
    inputs: [a, b]
  - uid: j2
    type: join
    partitioning: broadcast
    inputs: [j1, {from: c, partitioning: rebalance}]
  - uid: out
    type: sink
    input: j2
`,
			jobPar: 1, maxPar: 128,
			vertices: []string{"a:a:gen:p1", "b:b:gen:p1", "c:c:gen:p1", "j1:j1:join:p1", "j2:j2:join:p1", "out:out:sink:p1"},
			edges: []string{
				"a->j1#0 hash[key]", "b->j1#1 hash[key]",
				"j1->j2#0 broadcast", "c->j2#1 rebalance",
				"j2->out#0 forward",
			},
			configs: map[string]string{},
		},
		{
			name: "a type that is also a source continues the pipeline, or starts one after a sink",
			spec: `
name: files
operators:
  - uid: in
    type: file
  - uid: upper
    type: mapx
  - uid: out
    type: file
  - uid: in2
    type: file
  - uid: out2
    type: sink
  - uid: in3
    type: file
    inputs: []
  - uid: fan
    type: sink
    input: upper
    partitioning: hash
    keyBy: line
`,
			jobPar: 1, maxPar: 128,
			vertices: []string{"in:in:file:p1", "upper:upper:mapx:p1", "out:out:file:p1", "in2:in2:file:p1", "out2:out2:sink:p1", "in3:in3:file:p1", "fan:fan:sink:p1"},
			edges: []string{
				"in->upper#0 forward", "upper->out#0 forward",
				"in2->out2#0 forward",
				"upper->fan#0 hash[line]",
			},
			configs: map[string]string{},
			schemas: map[string]string{"in": "(line string)", "in2": "(line string)", "in3": "(line string)", "out": "<nil>"},
		},
		{
			name: "an input may name an operator further down",
			spec: `
name: forward-ref
operators:
  - uid: out
    type: sink
    input: src
  - uid: src
    type: gen
`,
			jobPar: 1, maxPar: 128,
			vertices: []string{"out:out:sink:p1", "src:src:gen:p1"},
			edges:    []string{"src->out#0 forward"},
			configs:  map[string]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Parse("job.yaml", spec(tc.spec), testRegistry())
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if g.Parallelism != tc.jobPar || g.MaxParallelism != tc.maxPar {
				t.Errorf("parallelism %d, maxParallelism %d; want %d, %d", g.Parallelism, g.MaxParallelism, tc.jobPar, tc.maxPar)
			}
			vs, es, cs := describeGraph(g)
			if got, want := strings.Join(vs, "\n"), strings.Join(tc.vertices, "\n"); got != want {
				t.Errorf("vertices:\n%s\nwant:\n%s", got, want)
			}
			if got, want := strings.Join(es, "\n"), strings.Join(tc.edges, "\n"); got != want {
				t.Errorf("edges:\n%s\nwant:\n%s", got, want)
			}
			if len(cs) != len(tc.configs) {
				t.Errorf("configs %v, want %v", cs, tc.configs)
			}
			for uid, want := range tc.configs {
				if cs[uid] != want {
					t.Errorf("config of %s:\n %s\nwant\n %s", uid, cs[uid], want)
				}
			}
			for uid, want := range tc.schemas {
				var got string
				for _, v := range g.Vertices {
					if v.UID == uid {
						got = fmt.Sprint(v.OutSchema)
					}
				}
				if got != want {
					t.Errorf("schema of %s = %s, want %s", uid, got, want)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		spec  string
		line  int      // of job.yaml, where the problem is
		names []string // what the message names: keys, values, suggestions, fixes
	}{
		{
			name: "malformed YAML",
			spec: `
name: bad
operators:
  - uid: a
    type: gen
   config: {rows: 1}
`,
			line: 5, names: []string{"YAML", "'-'"},
		},
		{
			name: "unclosed flow mapping",
			spec: `
name: bad
operators:
  - {uid: a, type: gen
`,
			line: 3, names: []string{"YAML", "',' or '}'"},
		},
		{
			name: "mapping value in the wrong place",
			spec: `
name: x
operators:
  - uid: a
    type: gen: datagen
`,
			line: 4, names: []string{"YAML", "mapping values"},
		},
		{
			name: "unknown anchor",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    config: *nothing
`,
			line: 5, names: []string{"YAML", "'nothing'"},
		},
		{
			name: "tab indentation",
			spec: "name: x\noperators:\n  - uid: a\n\ttype: gen\n",
			line: 4, names: []string{"YAML", "tab"},
		},
		{
			name: "empty file",
			spec: "",
			line: 1, names: []string{"empty", "name and operators"},
		},
		{
			name: "not a mapping",
			spec: "- a\n- b\n",
			line: 1, names: []string{"mapping", "name and operators", "list"},
		},
		{
			name: "two documents",
			spec: "name: a\noperators: [{uid: a, type: gen}]\n---\nname: b\n",
			line: 3, names: []string{"YAML document", "second"},
		},
		{
			name: "missing name",
			spec: `
parallelism: 2
operators:
  - {uid: a, type: gen}
`,
			line: 1, names: []string{`"name"`},
		},
		{
			name: "missing operators",
			spec: `
name: x
parallelism: 2
`,
			line: 1, names: []string{`"operators"`},
		},
		{
			name: "empty operators",
			spec: `
name: x
operators: []
`,
			line: 2, names: []string{"operators", "at least one operator"},
		},
		{
			name: "operators not a list",
			spec: `
name: x
operators:
  a: b
`,
			line: 3, names: []string{"operators", "list", "mapping"},
		},
		{
			name: "unknown top-level key with suggestion",
			spec: `
name: x
paralelism: 2
operators: [{uid: a, type: gen}]
`,
			line: 2, names: []string{`"paralelism"`, `"parallelism"`, "name, parallelism, maxParallelism, checkpointing, restartStrategy, state, operators"},
		},
		{
			name: "duplicate top-level key",
			spec: `
name: x
operators: [{uid: a, type: gen}]
name: y
`,
			line: 3, names: []string{"name", "line 1"},
		},
		{
			name: "name of the wrong type",
			spec: `
name: [a]
operators: [{uid: a, type: gen}]
`,
			line: 1, names: []string{"name", "string", "list"},
		},
		{
			name: "parallelism of the wrong type",
			spec: `
name: x
parallelism: four
operators: [{uid: a, type: gen}]
`,
			line: 2, names: []string{"parallelism", "integer", `"four"`},
		},
		{
			name: "job parallelism 0",
			spec: `
name: x
parallelism: 0
operators: [{uid: a, type: gen}]
`,
			line: 2, names: []string{"parallelism", "at least 1"},
		},
		{
			name: "maxParallelism out of range",
			spec: `
name: x
maxParallelism: 100000
operators: [{uid: a, type: gen}]
`,
			line: 2, names: []string{"maxParallelism", "32768", "100000"},
		},
		{
			name: "job parallelism above maxParallelism",
			spec: `
name: x
parallelism: 8
maxParallelism: 4
operators: [{uid: a, type: gen}]
`,
			line: 2, names: []string{"parallelism 8", "maxParallelism 4"},
		},
		{
			name: "operator parallelism above maxParallelism set later in the file",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    parallelism: 16
maxParallelism: 8
`,
			line: 5, names: []string{`operator "a"`, "parallelism 16", "maxParallelism 8"},
		},
		{
			name: "operator parallelism 0",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    parallelism: 0
`,
			line: 5, names: []string{`operator "a"`, "parallelism", "at least 1"},
		},
		{
			name: "operator parallelism negative",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    parallelism: -3
`,
			line: 5, names: []string{`operator "a"`, "parallelism", "-3"},
		},
		{
			name: "operator parallelism of the wrong type",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    parallelism: 1.5
`,
			line: 5, names: []string{`operator "a"`, "parallelism", "integer", "1.5"},
		},
		{
			name: "operator entry not a mapping",
			spec: `
name: x
operators:
  - {uid: a, type: gen}
  - just-a-string
`,
			line: 4, names: []string{"operator #2", "uid and type", `"just-a-string"`},
		},
		{
			name: "missing uid",
			spec: `
name: x
operators:
  - {uid: a, type: gen}
  - type: sink
    name: Out
`,
			line: 4, names: []string{"operator #2", `"uid"`},
		},
		{
			name: "missing type",
			spec: `
name: x
operators:
  - uid: a
    config: {rows: 1}
`,
			line: 3, names: []string{`operator "a"`, `"type"`, "agg, file, gen, join, mapx, sink"},
		},
		{
			name: "uid of the wrong type",
			spec: `
name: x
operators:
  - uid: {a: b}
    type: gen
`,
			line: 3, names: []string{"operator #1", "uid", "string"},
		},
		{
			name: "uid not allowed by Plan",
			spec: `
name: x
operators:
  - type: gen
    uid: "has space"
`,
			line: 4, names: []string{`operator "has space"`, "uid", "letters, digits"},
		},
		{
			name: "duplicate uid",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: a
    type: sink
`,
			line: 5, names: []string{`operator "a"`, "uid", "line 3"},
		},
		{
			name: "unknown operator key",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    paralelism: 2
`,
			line: 5, names: []string{`operator "a"`, `"paralelism"`, `"parallelism"`, "uid, name, type, parallelism, config, keyBy, partitioning, input, inputs"},
		},
		{
			name: "unknown key without a close match",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    window: 10s
`,
			line: 5, names: []string{`operator "a"`, `"window"`, "uid, name, type, parallelism, config, keyBy, partitioning, input, inputs"},
		},
		{
			name: "key_by suggests keyBy",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: b
    type: agg
    key_by: [key]
`,
			line: 7, names: []string{`operator "b"`, `"key_by"`, `"keyBy"`},
		},
		{
			name: "unknown operator type",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: b
    type: mapp
`,
			line: 6, names: []string{`operator "b"`, `"mapp"`, `"mapx"`, "agg, file, gen, join, mapx, sink"},
		},
		{
			name: "config of the wrong type",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    config: [1, 2]
`,
			line: 5, names: []string{`operator "a"`, "config", "mapping", "list"},
		},
		{
			name: "config with a non-string key",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    config:
      fields:
        - 1: one
`,
			line: 7, names: []string{`operator "a"`, "config.fields[0]", "strings"},
		},
		{
			name: "config with infinity",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    config:
      rate: .inf
`,
			line: 6, names: []string{`operator "a"`, "config.rate", ".inf", "quote it"},
		},
		{
			name: "config with a duplicate key",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    config:
      rows: 1
      rows: 2
`,
			line: 7, names: []string{`operator "a"`, "rows", "line 6"},
		},
		{
			name: "bad config rejected by Plan",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    config:
      rows: -5
  - uid: b
    type: sink
`,
			line: 5, names: []string{`operator "a"`, "rows", "-5"},
		},
		{
			name: "unknown config field rejected by Plan",
			spec: `
name: x
operators:
  - uid: a
    type: gen
    config: {rowz: 5}
`,
			line: 5, names: []string{`operator "a"`, `"rowz"`},
		},
		{
			name: "config error marked with stream.ErrConfig",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: m
    type: mapx
    parallelism: 1
    config:
      set: [{type: int64}]
`,
			line: 8, names: []string{`operator "m"`, "set[0]", "name"},
		},
		{
			name: "keyBy on a transform that has no input",
			spec: `
name: x
operators:
  - uid: counts
    type: agg
    keyBy: [key]
`,
			line: 3, names: []string{`operator "counts"`, `"agg"`, "input"},
		},
		{
			name: "inputs: [] on a transform",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: m
    type: mapx
    inputs: []
`,
			line: 7, names: []string{`operator "m"`, `"mapx"`, "input"},
		},
		{
			name: "inputs: null",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: m
    type: mapx
    inputs:
`,
			line: 7, names: []string{`operator "m"`, "inputs", "list", "inputs: []"},
		},
		{
			name: "keyBy on a field that does not exist",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: counts
    type: agg
    keyBy: [user]
`,
			line: 7, names: []string{`operator "counts"`, "keyBy", `"user"`, "key, value, ts"},
		},
		{
			name: "keyBy on an input entry on a field that does not exist",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: b
    type: gen
  - uid: j
    type: join
    inputs:
      - a
      - from: b
        keyBy: [nope]
`,
			line: 12, names: []string{`operator "j"`, "keyBy", `"nope"`, "key, value, ts"},
		},
		{
			name: "keyed operator without keyBy",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: counts
    type: agg
`,
			line: 5, names: []string{`operator "counts"`, "keyed input", "set keyBy"},
		},
		{
			name: "keyBy of the wrong type",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: counts
    type: agg
    keyBy: {key: 1}
`,
			line: 7, names: []string{`operator "counts"`, "keyBy", "field names", "mapping"},
		},
		{
			name: "keyBy with an empty list",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: counts
    type: agg
    keyBy: []
`,
			line: 7, names: []string{`operator "counts"`, "keyBy", "at least one field"},
		},
		{
			name: "keyBy with rebalance",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: counts
    type: agg
    keyBy: [key]
    partitioning: rebalance
`,
			line: 8, names: []string{`operator "counts"`, "rebalance", "keyBy", "remove one"},
		},
		{
			name: "hash without keyBy",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: counts
    type: agg
    partitioning: hash
`,
			line: 7, names: []string{`operator "counts"`, "hash", "keyBy"},
		},
		{
			name: "unknown partitioning",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: b
    type: sink
    partitioning: brodcast
`,
			line: 7, names: []string{`operator "b"`, `"brodcast"`, `"broadcast"`, "forward, hash, rebalance or broadcast"},
		},
		{
			name: "keyBy on a source",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: b
    type: gen
    keyBy: [key]
`,
			line: 7, names: []string{`operator "b"`, "keyBy", "source", "the operator that reads it"},
		},
		{
			name: "unknown input",
			spec: `
name: x
operators:
  - uid: events
    type: gen
  - uid: b
    type: sink
    input: evnts
`,
			line: 7, names: []string{`operator "b"`, `"evnts"`, `"events"`},
		},
		{
			name: "unknown input in a list",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: join
    inputs:
      - a
      - {from: zzz}
`,
			line: 9, names: []string{`operator "j"`, "inputs[1]", `"zzz"`},
		},
		{
			name: "unknown key in an input entry",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: sink
    inputs:
      - {form: a}
`,
			line: 8, names: []string{`operator "j"`, "inputs[0]", `"form"`, `"from"`, "from, output, keyBy, partitioning"},
		},
		{
			name: "input entry without from",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: sink
    inputs:
      - keyBy: [key]
`,
			line: 8, names: []string{`operator "j"`, "inputs[0]", `"from"`},
		},
		{
			name: "input and inputs together",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: sink
    input: a
    inputs: [a]
`,
			line: 8, names: []string{`operator "j"`, "inputs", "input", "one of them"},
		},
		{
			name: "input of the wrong type",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: sink
    input: [a]
`,
			line: 7, names: []string{`operator "j"`, "input", "list", "inputs:"},
		},
		{
			name: "wrong number of inputs",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: join
`,
			line: 5, names: []string{`operator "j"`, `"join"`, "2 input"},
		},
		{
			name: "explicit input on a source",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: b
    type: gen
    input: a
`,
			line: 7, names: []string{`operator "b"`, `"gen"`, "source"},
		},
		{
			name: "first operator is not a source",
			spec: `
name: x
operators:
  - uid: m
    type: mapx
`,
			line: 3, names: []string{`operator "m"`, `"mapx"`, "input"},
		},
		{
			name: "reading a sink",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: out
    type: sink
  - uid: more
    type: sink
    input: out
`,
			line: 9, names: []string{`operator "more"`, `"out"`, "sink", "the operator that feeds it"},
		},
		{
			name: "sink followed by a non-source with no input",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: out
    type: sink
  - uid: more
    type: mapx
  - uid: out2
    type: sink
`,
			line: 7, names: []string{`operator "more"`, `"out"`, "sink", "input: <uid>"},
		},
		{
			name: "dual type after a sink is a source, and then a sink after it is fine but a transform after file sink is not",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: out
    type: file
  - uid: m
    type: mapx
`,
			line: 7, names: []string{`operator "m"`, `"out"`, "sink", "input: <uid>"},
		},
		{
			name: "self input",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: join
    inputs: [a, j]
`,
			line: 7, names: []string{`operator "j"`, "inputs[1]", "its own output"},
		},
		{
			name: "cycle",
			spec: `
name: x
operators:
  - uid: a
    type: gen
  - uid: j
    type: join
    inputs: [a, m2]
  - uid: m1
    type: mapx
  - uid: m2
    type: mapx
`,
			line: 7, names: []string{`operator "j"`, "inputs[1]", `"m2"`, "j reads m2 reads m1 reads j"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Parse("job.yaml", spec(tc.spec), testRegistry())
			if err == nil {
				t.Fatalf("Parse succeeded with %d vertices; want an error at line %d", len(g.Vertices), tc.line)
			}
			checkSpecError(t, err, "job.yaml", tc.line, tc.names...)
		})
	}
}

// The line of a planning error is the operator's entry, or its config: line,
// and the *stream.VertexError stays reachable.
func TestPlanErrorIsVertexError(t *testing.T) {
	src := spec(`
name: x
operators:
  - uid: a
    type: gen
  - uid: counts
    type: agg
    config:
      bogus: 1
`)
	_, err := Parse("j.yaml", src, testRegistry())
	var ve *stream.VertexError
	if !errors.As(err, &ve) || ve.UID != "counts" {
		t.Fatalf("error %v: want a *stream.VertexError for counts", err)
	}
	var se *Error
	if !errors.As(err, &se) || se.Line != 7 {
		t.Fatalf("error %v: want line 7 (the config: line)", err)
	}
}

// Parse does not keep or modify state between calls: the same registry parses
// many specs, concurrently.
func TestParseConcurrent(t *testing.T) {
	reg := testRegistry()
	src := spec(`
name: c
operators:
  - {uid: a, type: gen}
  - {uid: b, type: agg, keyBy: key}
  - {uid: c, type: sink}
`)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			g, err := Parse("c.yaml", src, reg)
			if err == nil && len(g.Edges) != 2 {
				err = fmt.Errorf("got %d edges", len(g.Edges))
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, spec(`
name: g
operators:
  - {uid: a, type: gen}
  - {uid: b, type: sink}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: g\noperators:\n  - {uid: a, type: nope}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := Load(good, testRegistry())
	if err != nil || g.Name != "g" || len(g.Vertices) != 2 {
		t.Fatalf("Load(good) = %v, %v", g, err)
	}
	var se *Error
	if _, err := Load(bad, testRegistry()); !errors.As(err, &se) || se.File != bad || se.Line != 3 ||
		!strings.Contains(err.Error(), `operator "a"`) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Load(bad) error %v, want %s:3 naming the operator and its type", err, bad)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing, testRegistry()); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Load(missing) error %v, want fs.ErrNotExist naming the path", err)
	}
	if _, err := Load(dir, testRegistry()); !errors.Is(err, syscall.EISDIR) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Load(dir) error %v, want EISDIR naming the path", err)
	}
}

func TestSuggest(t *testing.T) {
	cands := []string{"parallelism", "maxParallelism", "keyBy", "input", "inputs"}
	tests := []struct{ in, want string }{
		{"paralelism", "parallelism"},
		{"keyby", "keyBy"},
		{"key_by", "keyBy"},
		{"inptus", "inputs"},
		{"zzz", ""},
		{"input", ""}, // exact: no suggestion
	}
	for _, tc := range tests {
		got := suggest(tc.in, cands)
		want := ""
		if tc.want != "" {
			want = fmt.Sprintf(" (did you mean %q?)", tc.want)
		}
		if got != want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, want)
		}
	}
}

// checkSpecError checks that err is a *Error at file:line whose text
// starts with "file:line: " and names each of names.
func checkSpecError(t *testing.T, err error, file string, line int, names ...string) {
	t.Helper()
	var se *Error
	if !errors.As(err, &se) || se.File != file || se.Line != line {
		t.Fatalf("error %v: want a *jobspec.Error at %s:%d", err, file, line)
	}
	if prefix := fmt.Sprintf("%s:%d: ", file, line); !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("error %q does not start with %q", err, prefix)
	}
	for _, w := range names {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
}
