package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// A process's settings are one table: each row binds a field of its Config
// to a command-line flag and to a key of its YAML config file. The flags
// are made from the table (their defaults are the Config's, from its
// DefaultConfig), and a config file sets, through the same flag parsing,
// every key whose flag was not given: one definition per setting, every
// setting reachable both ways.

// setting binds one config field to a flag and a config-file key.
type setting struct {
	// key is the YAML key, dotted for nested ones ("ha.endpoints").
	key string
	// flag is the command-line flag's name.
	flag  string
	usage string
	// ptr is the config field: *string, *int, *int64, *float64, *time.Duration,
	// *[]string or *map[string]string.
	ptr any
}

// bindSettings defines a flag for every row, with the field's current
// value as its default.
func bindSettings(fs *pflag.FlagSet, table []setting) {
	for _, s := range table {
		switch p := s.ptr.(type) {
		case *string:
			fs.StringVar(p, s.flag, *p, s.usage)
		case *int:
			fs.IntVar(p, s.flag, *p, s.usage)
		case *int64:
			fs.Int64Var(p, s.flag, *p, s.usage)
		case *time.Duration:
			fs.DurationVar(p, s.flag, *p, s.usage)
		case *float64:
			fs.Float64Var(p, s.flag, *p, s.usage)
		case *[]string:
			fs.StringSliceVar(p, s.flag, *p, s.usage)
		case *map[string]string:
			fs.StringToStringVar(p, s.flag, *p, s.usage)
		default:
			panic(fmt.Sprintf("cli: setting %s: unsupported field type %T", s.key, s.ptr))
		}
	}
}

// applyConfigFile reads the YAML config file at path and sets, through
// their flags, the settings it names whose flags were not given on the
// command line (nor skipped by skip). Unknown keys are errors.
func applyConfigFile(fs *pflag.FlagSet, table []setting, path string, skip func(flag string) bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc map[string]any
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file
		return fmt.Errorf("config file %s: %v", path, err)
	}
	byKey := make(map[string]setting, len(table))
	for _, s := range table {
		byKey[s.key] = s
	}
	values := make(map[string]any)
	if err := flatten("", doc, byKey, values); err != nil {
		return fmt.Errorf("config file %s: %v; the keys are %s", path, err, strings.Join(settingKeys(table), ", "))
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := byKey[k]
		if fs.Changed(s.flag) || (skip != nil && skip(s.flag)) {
			continue
		}
		text, err := flagText(values[k])
		if err != nil {
			return fmt.Errorf("config file %s: %s: %v", path, k, err)
		}
		if text == "" && isMap(s.ptr) {
			continue
		}
		// The first Set of a list or map flag replaces its default.
		if err := fs.Set(s.flag, text); err != nil {
			return fmt.Errorf("config file %s: %s: %v", path, k, err)
		}
	}
	return nil
}

func isMap(ptr any) bool { _, ok := ptr.(*map[string]string); return ok }

// flatten collects the values of doc under their dotted keys; a mapping is
// descended into unless a map setting takes it whole.
func flatten(prefix string, doc map[string]any, byKey map[string]setting, out map[string]any) error {
	for k, v := range doc {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if s, ok := byKey[key]; ok {
			if _, isMapping := v.(map[string]any); isMapping && !isMap(s.ptr) {
				return fmt.Errorf("%s: want a value, found a mapping", key)
			}
			out[key] = v
			continue
		}
		if m, ok := v.(map[string]any); ok {
			if err := flatten(key, m, byKey, out); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("unknown key %q", key)
	}
	return nil
}

// flagText renders a YAML value as the flag's command-line text.
func flagText(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case int:
		return strconv.Itoa(x), nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := flagText(e)
			if err != nil {
				return "", err
			}
			if strings.Contains(s, ",") {
				return "", fmt.Errorf("list item %q holds a comma", s)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			s, err := flagText(x[k])
			if err != nil {
				return "", err
			}
			if strings.ContainsAny(s, ",=") {
				return "", fmt.Errorf("value %q of %s holds ',' or '='", s, k)
			}
			parts[i] = k + "=" + s
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("unsupported value %v", v)
}

func settingKeys(table []setting) []string {
	keys := make([]string, len(table))
	for i, s := range table {
		keys[i] = s.key
	}
	return keys
}
