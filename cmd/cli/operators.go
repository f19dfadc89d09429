package cli

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/stream"
)

// operatorInfo is one operator type as `weir operators` lists it.
type operatorInfo struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Inputs int    `json:"inputs"` // 0 for sources
	Doc    string `json:"doc"`
	// Config holds the config keys, sorted; nil when the type does not
	// describe its config (OperatorType.Config unset).
	Config []configKey `json:"config"`
}

// configKey is one key of an operator's JSON config: its path (nested
// objects as "parent.child", lists of objects as "parent[].child") and its
// Go kind ("string", "int", "[]string", ...).
type configKey struct {
	Key  string `json:"key"`
	Type string `json:"type"`
}

func newOperatorsCommand(cc *clientConfig, reg *stream.Registry) *cobra.Command {
	return &cobra.Command{
		Use:   "operators [NAME...]",
		Short: "List the operator types a job spec may use, with their config keys",
		Long: "operators lists the registered operator types (all, or those named): name, kind, inputs, what the type does\n" +
			"and the keys of its config, nested objects as parent.child and lists of objects as parent[].child.\n" +
			"-o json prints the same as a JSON array.",
		RunE: func(cmd *cobra.Command, args []string) error {
			infos := operatorInfos(reg)
			if len(args) > 0 {
				want := make(map[string]bool, len(args))
				for _, a := range args {
					want[a] = true
				}
				kept := infos[:0]
				found := make(map[string]bool, len(args))
				for _, in := range infos {
					if want[in.Name] {
						kept = append(kept, in)
						found[in.Name] = true
					}
				}
				if len(found) < len(want) {
					var missing []string
					for n := range want {
						if !found[n] {
							missing = append(missing, n)
						}
					}
					sort.Strings(missing)
					return fmt.Errorf("no operator type %s; `weir operators` lists them all", strings.Join(missing, ", "))
				}
				infos = kept
			}
			if cc.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(infos)
			}
			return writeOperators(cmd.OutOrStdout(), infos)
		},
	}
}

// operatorInfos describes every type in reg, sorted by name and, for a
// name shared by a source and a sink, the source first.
func operatorInfos(reg *stream.Registry) []operatorInfo {
	var out []operatorInfo
	for _, name := range reg.Names() {
		for _, source := range []bool{true, false} {
			t, ok := reg.Lookup(name, source)
			if !ok {
				continue
			}
			in := operatorInfo{Name: t.Name, Kind: t.Kind.String(), Doc: t.Doc}
			if t.Kind != stream.KindSource {
				in.Inputs = t.Inputs
			}
			if t.Config != nil {
				in.Config = configKeys(reflect.TypeOf(t.Config))
			}
			out = append(out, in)
		}
	}
	return out
}

func writeOperators(w io.Writer, infos []operatorInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, in := range infos {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		inputs := ""
		switch {
		case in.Inputs == 1:
			inputs = ", 1 input"
		case in.Inputs > 1:
			inputs = fmt.Sprintf(", %d inputs", in.Inputs)
		}
		fmt.Fprintf(tw, "%s (%s%s)\n", in.Name, in.Kind, inputs)
		if in.Doc != "" {
			fmt.Fprintf(tw, "  %s\n", in.Doc)
		}
		switch {
		case in.Config == nil:
			fmt.Fprintln(tw, "  config: not described")
		case len(in.Config) == 0:
			fmt.Fprintln(tw, "  config: none")
		}
		for _, k := range in.Config {
			fmt.Fprintf(tw, "    %s\t%s\n", k.Key, k.Type)
		}
	}
	return tw.Flush()
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// configKeys lists the JSON keys of the config struct type t the way
// encoding/json decodes them, sorted. A type that is not a struct has no
// keys.
func configKeys(t reflect.Type) []configKey {
	keys := []configKey{}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct {
		collectKeys("", t, &keys, map[reflect.Type]bool{})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	return keys
}

// collectKeys appends the keys of struct t under prefix; seen stops
// recursive types.
func collectKeys(prefix string, t reflect.Type, keys *[]configKey, seen map[reflect.Type]bool) {
	if seen[t] {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := jsonName(f)
		if !ok {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" {
			// An embedded struct without a tag: its fields are promoted.
			if ft.Kind() == reflect.Struct && !decodesItself(ft) {
				collectKeys(prefix, ft, keys, seen)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := prefix + name
		switch {
		case ft.Kind() == reflect.Struct && !decodesItself(ft):
			collectKeys(key+".", ft, keys, seen)
		case (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) && isObject(ft.Elem()):
			elem := ft.Elem()
			for elem.Kind() == reflect.Pointer {
				elem = elem.Elem()
			}
			collectKeys(key+"[].", elem, keys, seen)
		default:
			*keys = append(*keys, configKey{Key: key, Type: kindName(ft)})
		}
	}
}

// jsonName returns the field's key from its json tag ("" for the Go name),
// and false for fields encoding/json skips.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", false
	}
	name, _, _ := strings.Cut(tag, ",")
	if !f.IsExported() && !(f.Anonymous && name == "") {
		return "", false
	}
	return name, true
}

// decodesItself says that values of t decode from JSON by their own
// method rather than field by field.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshaler) || p.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) || p.Implements(textUnmarshaler)
}

// isObject says that t (or what it points to) is a struct decoded field by
// field.
func isObject(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !decodesItself(t)
}

// kindName renders a leaf type by its kind: "string", "int", "[]string",
// "map[string]string"; "text" for types that decode from a JSON string by
// their own method, "json" for other self-decoding types, "object" for
// structs inside maps.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler):
		return "json"
	case t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler):
		return "text"
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		return "[]" + kindName(t.Elem())
	case reflect.Map:
		return "map[" + kindName(t.Key()) + "]" + kindName(t.Elem())
	case reflect.Struct:
		return "object"
	case reflect.Interface:
		return "any"
	}
	return t.Kind().String()
}
