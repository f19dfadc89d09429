package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/stream"
)

// runWeir runs `weir args...` against reg and returns what it printed.
func runWeir(t *testing.T, reg *stream.Registry, args ...string) (string, error) {
	t.Helper()
	cmd := NewWeirCommand(reg)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

// TestOperatorsListsBuiltins checks `weir operators -o json` against the
// registry: every built-in type is listed once, in order, with its config
// keys; and each key listed is one the type's Plan accepts, while a made-up
// key is refused, so the keys come from the struct Plan really decodes.
func TestOperatorsListsBuiltins(t *testing.T) {
	reg := builtin.Registry()
	out, err := runWeir(t, reg, "operators", "-o", "json")
	if err != nil {
		t.Fatalf("weir operators -o json: %v\n%s", err, out)
	}
	var listed []operatorInfo
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("weir operators -o json printed %q: %v", out, err)
	}
	var want []string
	for _, name := range reg.Names() {
		for _, source := range []bool{true, false} {
			if typ, ok := reg.Lookup(name, source); ok {
				want = append(want, typ.Name+"/"+typ.Kind.String())
				if typ.Config == nil {
					t.Errorf("operator type %s (%s) has no Config: its keys cannot be listed", typ.Name, typ.Kind)
				}
			}
		}
	}
	var got []string
	for _, in := range listed {
		got = append(got, in.Name+"/"+in.Kind)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("weir operators listed\n%v\nwant\n%v", got, want)
	}
	t.Logf("%d operator types listed", len(listed))

	byName := make(map[string]operatorInfo)
	for _, in := range listed {
		byName[in.Name+"/"+in.Kind] = in
		if in.Doc == "" {
			t.Errorf("%s %s: no doc line", in.Name, in.Kind)
		}
		if in.Config == nil {
			t.Errorf("%s %s: config keys not described", in.Name, in.Kind)
		}
		typ, _ := reg.Lookup(in.Name, in.Kind == "source")
		if want := map[bool]int{true: 0, false: typ.Inputs}[in.Kind == "source"]; in.Inputs != want {
			t.Errorf("%s %s: %d inputs listed, want %d", in.Name, in.Kind, in.Inputs, want)
		}
		for _, k := range in.Config {
			if err := planWithKey(typ, k.Key); err != nil && strings.Contains(err.Error(), "unknown field") {
				t.Errorf("%s %s lists key %s, which its Plan refuses: %v", in.Name, in.Kind, k.Key, err)
			}
		}
		if err := planWithKey(typ, "noSuchKey"); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s %s: Plan accepts an unknown key (%v); it must decode strictly for the listed keys to be all", in.Name, in.Kind, err)
		}
	}

	keys := func(id string) []string {
		var ks []string
		for _, k := range byName[id].Config {
			ks = append(ks, k.Key)
		}
		return ks
	}
	if got, want := keys("file/sink"), []string{"format", "path"}; !slices.Equal(got, want) {
		t.Errorf("file sink keys %v, want %v", got, want)
	}
	kafka := keys("kafka/source")
	for _, want := range []string{"bootstrapServers", "topics", "startFrom", "group", "fields[].name", "fields[].type", "watermark.field", "security.sasl.mechanism", "security.tls.caFile"} {
		if !slices.Contains(kafka, want) {
			t.Errorf("kafka source keys %v lack %s", kafka, want)
		}
	}
	if !slices.IsSorted(kafka) {
		t.Errorf("kafka source keys are not sorted: %v", kafka)
	}
	if k := byName["kafka/source"].Config; k[slices.Index(kafka, "bootstrapServers")].Type != "[]string" {
		t.Errorf("kafka bootstrapServers type %q, want []string", k[slices.Index(kafka, "bootstrapServers")].Type)
	}
}

// planWithKey runs t's Plan with a config that sets key (a dotted path as
// weir operators prints it) to null, which sets nothing but must be a
// known field.
func planWithKey(typ *stream.OperatorType, key string) (err error) {
	config := map[string]any{}
	cur := config
	parts := strings.Split(key, ".")
	for i, p := range parts {
		if i == len(parts)-1 {
			cur[p] = nil
			break
		}
		next := map[string]any{}
		if name, ok := strings.CutSuffix(p, "[]"); ok {
			cur[name] = []any{next}
		} else {
			cur[p] = next
		}
		cur = next
	}
	raw, _ := json.Marshal(config)
	schema := stream.MustSchema(stream.Field{Name: "k", Type: stream.TypeString}, stream.Field{Name: "ts", Type: stream.TypeTimestamp})
	p := &stream.PlanContext{UID: "op", Config: raw, Parallelism: 1}
	if typ.Kind != stream.KindSource {
		for range typ.Inputs {
			p.Inputs = append(p.Inputs, stream.PlanInput{Schema: schema, KeyFields: []string{"k"}})
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plan panicked: %v", r)
		}
	}()
	_, err = typ.Plan(p)
	return err
}

// TestOperatorsText checks the human-readable listing and the name filter.
func TestOperatorsText(t *testing.T) {
	reg := builtin.Registry()
	out, err := runWeir(t, reg, "operators", "file", "discard")
	if err != nil {
		t.Fatalf("weir operators file discard: %v\n%s", err, out)
	}
	for _, want := range []string{"file (source)\n", "file (sink, 1 input)\n", "discard (sink, 1 input)\n", "  config: none\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "    path  ") || !strings.Contains(out, "monitorInterval") || strings.Contains(out, "kafka") {
		t.Errorf("want the file types' keys and nothing else:\n%s", out)
	}
	again, _ := runWeir(t, reg, "operators", "file", "discard")
	if again != out {
		t.Error("two listings differ; the output must be stable")
	}
	if out, err := runWeir(t, reg, "operators", "nosuch"); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("weir operators nosuch: %v\n%s", err, out)
	}
}

type keysInner struct {
	Name string `json:"name"`
	Deep *struct {
		Flag bool `json:"flag,omitempty"`
	} `json:"deep,omitempty"`
}

type KeysEmbedded struct {
	Promoted int `json:"promoted"`
}

type keysRecursive struct {
	Value int            `json:"value"`
	Next  *keysRecursive `json:"next,omitempty"`
}

type keysConfig struct {
	KeysEmbedded
	Plain     string            `json:"plain"`
	NoTag     float64           // encoding/json uses the Go name
	Skipped   string            `json:"-"`
	hidden    string            //nolint:unused // unexported: not a key
	Inner     keysInner         `json:"inner"`
	List      []keysInner       `json:"list,omitempty"`
	Ptrs      []*keysInner      `json:"ptrs"`
	Strings   []string          `json:"strings"`
	Labels    map[string]string `json:"labels"`
	When      time.Time         `json:"when"`
	Raw       json.RawMessage   `json:"raw"`
	Anything  any               `json:"anything"`
	Recursive keysRecursive     `json:"recursive"`
}

// TestConfigKeys checks the key paths and kinds on a struct with every
// shape encoding/json distinguishes.
func TestConfigKeys(t *testing.T) {
	_ = keysConfig{}.hidden
	got := configKeys(reflect.TypeFor[*keysConfig]())
	want := []configKey{
		{"NoTag", "float64"},
		{"anything", "any"},
		{"inner.deep.flag", "bool"},
		{"inner.name", "string"},
		{"labels", "map[string]string"},
		{"list[].deep.flag", "bool"},
		{"list[].name", "string"},
		{"plain", "string"},
		{"promoted", "int"},
		{"ptrs[].deep.flag", "bool"},
		{"ptrs[].name", "string"},
		{"raw", "json"},
		{"recursive.value", "int"},
		{"strings", "[]string"},
		{"when", "json"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("configKeys:\n got %v\nwant %v", got, want)
	}
	if got := configKeys(reflect.TypeFor[struct{}]()); got == nil || len(got) != 0 {
		t.Errorf("an empty struct has keys %v; want an empty, non-nil list", got)
	}
}
