package cli

import (
	"bytes"
	"regexp"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/builtin"
)

// TestVersion runs `version` and --version on the three binaries' commands
// and checks the line against the version variable and the runtime.
func TestVersion(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	Version, Commit = "v1.2.3-test", "0123456789abcdef0123"
	line := regexp.MustCompile(`^(weir|jobmanager|taskmanager) v1\.2\.3-test commit (\S+)( \(modified\))? (\S+) (\S+)\n$`)
	reg := builtin.Registry()
	for _, build := range []func() *cobra.Command{
		func() *cobra.Command { return NewWeirCommand(reg) },
		func() *cobra.Command { c := NewJobManagerCommand(reg); addVersion(c); return c },
		func() *cobra.Command { c := NewTaskManagerCommand(reg); addVersion(c); return c },
	} {
		for _, args := range [][]string{{"version"}, {"--version"}} {
			cmd := build()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetArgs(args)
			if err := cmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("%s %v: %v", cmd.Name(), args, err)
			}
			m := line.FindStringSubmatch(out.String())
			if m == nil || m[1] != cmd.Name() {
				t.Fatalf("%s %v printed %q", cmd.Name(), args, out.String())
			}
			// A test binary records no VCS revision, so Commit shows.
			if m[2] != "0123456789ab" || m[4] != runtime.Version() || m[5] != runtime.GOOS+"/"+runtime.GOARCH {
				t.Errorf("%s %v printed %q; want commit 0123456789ab, %s, %s/%s", cmd.Name(), args, out.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			}
			t.Logf("%s %v: %s", cmd.Name(), args, bytes.TrimSpace(out.Bytes()))
		}
	}
}

// TestVersionLine checks the rendering of what the toolchain may record.
func TestVersionLine(t *testing.T) {
	b := buildInfo{Version: "v0.4.0", Commit: "abcdef0123456789abcdef", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"}
	if got, want := b.line("weir"), "weir v0.4.0 commit abcdef012345 (modified) go1.26.8 linux/arm64"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
	b = buildInfo{Version: "dev", Commit: "unknown", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := b.line("jobmanager"), "jobmanager dev commit unknown go1.26.8 linux/amd64"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
}

// TestBuildInfoFromToolchain checks what a binary built in a Git checkout
// (or by go install module@version) reports, from the settings the Go
// toolchain records.
func TestBuildInfoFromToolchain(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	Version, Commit = "dev", "fromldflags"
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v0.9.1"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "a1b2c3d4e5f6a7b8c9d0"}, {Key: "vcs.modified", Value: "true"}}}
	got := makeBuildInfo(bi)
	if got.Version != "v0.9.1" || got.Commit != "a1b2c3d4e5f6a7b8c9d0" || !got.Modified {
		t.Errorf("from a stamped build: %+v", got)
	}
	Version = "v1.0.0"
	bi = &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	if got := makeBuildInfo(bi); got.Version != "v1.0.0" || got.Commit != "fromldflags" || got.Modified {
		t.Errorf("-ldflags values without VCS information: %+v", got)
	}
	Commit = ""
	if got := makeBuildInfo(nil); got.Commit != "unknown" {
		t.Errorf("no information at all: %+v", got)
	}
}

// TestAddVersionKeepsTheProcessCommand checks that giving the jobmanager
// command a version subcommand leaves its own flags and argument checks
// as they were.
func TestAddVersionKeepsTheProcessCommand(t *testing.T) {
	cmd := NewJobManagerCommand(builtin.Registry())
	addVersion(cmd)
	addVersion(cmd) // idempotent: Main adds it to commands that may have it
	n := 0
	for _, c := range cmd.Commands() {
		if c.Name() == "version" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d version subcommands", n)
	}
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--no-such-flag"})
	if err := cmd.ExecuteContext(t.Context()); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
	if cmd.Flags().Lookup("config") == nil || cmd.Flags().Lookup("ha-advertised-address") == nil {
		t.Fatal("the jobmanager's flags are gone")
	}
}
