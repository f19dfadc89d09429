package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is the release the binaries were built as. A release build sets
// it with
//
//	go build -ldflags "-X github.com/weirstream/weir/cmd/cli.Version=v0.3.0" ./cmd/...
//
// Left at "dev", the module version is used when the binary was built by
// `go install module@version`.
var Version = "dev"

// Commit is the source commit, for builds that carry no VCS information
// (a build outside a Git checkout, or with -buildvcs=false): set it with
// -X github.com/weirstream/weir/cmd/cli.Commit=<sha>. The commit Go records
// in the binary (vcs.revision) wins over it.
var Commit = ""

// buildInfo is what `version` prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"` // "unknown" when neither Go nor -ldflags recorded one
	Modified  bool   `json:"modified"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// readBuildInfo gathers the version from the variables above and from what
// the Go toolchain recorded in the binary.
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return makeBuildInfo(bi)
}

// makeBuildInfo combines Version and Commit with bi (nil when the binary
// carries none): a module version and a VCS revision recorded by the
// toolchain win over the defaults.
func makeBuildInfo(bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: Version, Commit: Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// line renders b as one line for the program name:
// "weir v0.3.0 commit 1a2b3c4d5e6f (modified) go1.26.8 linux/amd64".
func (b buildInfo) line(name string) string {
	commit := b.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	modified := ""
	if b.Modified {
		modified = " (modified)"
	}
	return fmt.Sprintf("%s %s commit %s%s %s %s", name, b.Version, commit, modified, b.GoVersion, b.Platform)
}

// addVersion gives cmd a `version` subcommand and a --version flag, both
// printing its build line. Commands that already have them are left alone,
// so that Main may call it on any command.
func addVersion(cmd *cobra.Command) {
	if cmd.Version == "" {
		cmd.Version = readBuildInfo().line(cmd.Name())
		cmd.SetVersionTemplate("{{.Version}}\n")
	}
	for _, c := range cmd.Commands() {
		if c.Name() == "version" {
			return
		}
	}
	cmd.AddCommand(newVersionCommand(cmd.Name()))
}

func newVersionCommand(name string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the source commit and the Go version this binary was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), readBuildInfo().line(name))
			return err
		},
	}
}
