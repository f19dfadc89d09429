// Package scenariotest reads the scripted scenario files of the packages
// whose pure state machines are tested event by event (coordinator,
// jobmanager/scheduler), on github.com/cockroachdb/datadriven.
//
// A scenario file is a sequence of blocks:
//
//	# comment
//	command arg key=value key=(a,b) ...
//	----
//	expected output (one or more lines, ended by a blank line or EOF)
//
// Expected output that contains blank lines goes between a double ----
// separator (----, ----, output, ----, ----). Bare arguments come first;
// key=value arguments follow in any order. A list is written
// key=(a,b,...); a list of one needs no parentheses. Free text without
// commas or unbalanced parentheses is written key=(some text). Run the tests
// with -rewrite to replace the expected output with the actual one.
package scenariotest

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// Syntax is a command's syntax: its bare arguments by name, optional ones
// in brackets, and its keys.
type Syntax struct{ Args, Keys []string }

// RunFiles runs every testdata/*.txt file as a subtest, giving each a new
// state from newState and each command to run, which returns the
// command's output.
func RunFiles[S any](t *testing.T, newState func(t *testing.T) S, run func(s S, c *Directive) string, commands map[string]Syntax) {
	t.Helper()
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := newState(t)
			datadriven.RunTest(t, f, func(t *testing.T, d *datadriven.TestData) string {
				return run(s, Parse(t, d, commands))
			})
		})
	}
}

// A Directive is one command of a scenario. Its methods parse the
// arguments and fail the test, naming the line, on a bad one.
type Directive struct {
	T     *testing.T
	D     *datadriven.TestData
	Args  []string            // bare arguments
	Named []datadriven.CmdArg // key=value arguments
}

// Cmd is the command's name.
func (c *Directive) Cmd() string { return c.D.Cmd }

// Parse checks the command of d and its arguments against commands.
func Parse(t *testing.T, d *datadriven.TestData, commands map[string]Syntax) *Directive {
	t.Helper()
	c := &Directive{T: t, D: d}
	syntax, ok := commands[d.Cmd]
	if !ok {
		c.Fatalf("unknown command %q", d.Cmd)
	}
	if d.Input != "" {
		c.Fatalf("%s takes no input before ----", d.Cmd)
	}
	for _, a := range d.CmdArgs {
		switch {
		case len(a.Vals) == 0 && len(c.Named) > 0:
			c.Fatalf("bare argument %q after key=value arguments", a.Key)
		case len(a.Vals) == 0:
			c.Args = append(c.Args, a.Key)
		case !slices.Contains(syntax.Keys, a.Key):
			c.Fatalf("unknown argument %s", a)
		case slices.ContainsFunc(c.Named, func(b datadriven.CmdArg) bool { return b.Key == a.Key }):
			c.Fatalf("argument %s given twice", a.Key)
		default:
			c.Named = append(c.Named, a)
		}
	}
	required := 0
	for _, name := range syntax.Args {
		if !strings.HasPrefix(name, "[") {
			required++
		}
	}
	if len(c.Args) < required || len(c.Args) > len(syntax.Args) {
		usage := append([]string{d.Cmd}, syntax.Args...)
		for _, k := range syntax.Keys {
			usage = append(usage, "["+k+"=...]")
		}
		c.Fatalf("want %s", strings.Join(usage, " "))
	}
	return c
}

// Fatalf fails the test with a message that names the line of the command.
func (c *Directive) Fatalf(format string, a ...any) {
	c.T.Helper()
	c.D.Fatalf(c.T, format, a...)
}

// Value returns the value of a, which must have one.
func (c *Directive) Value(a datadriven.CmdArg) string {
	c.T.Helper()
	if len(a.Vals) != 1 {
		c.Fatalf("%s: want one value, not %d (a comma separates values)", a.Key, len(a.Vals))
	}
	return a.Vals[0]
}

// Lookup returns the key=value argument key, if given.
func (c *Directive) Lookup(key string) (datadriven.CmdArg, bool) {
	for _, a := range c.Named {
		if a.Key == key {
			return a, true
		}
	}
	return datadriven.CmdArg{}, false
}

// Text returns the single value of the argument key, or "" without one.
func (c *Directive) Text(key string) string {
	c.T.Helper()
	if a, ok := c.Lookup(key); ok {
		return c.Value(a)
	}
	return ""
}

// Duration parses s, the value of the argument name, as a duration.
func (c *Directive) Duration(name, s string) time.Duration {
	c.T.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		c.Fatalf("%s: %v", name, err)
	}
	return d
}

// Number parses s, the value of the argument name, as an integer.
func (c *Directive) Number(name, s string) int64 {
	c.T.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		c.Fatalf("%s: %v", name, err)
	}
	return n
}
