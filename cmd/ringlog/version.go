package main

// ringlog version / --version: what was built, from the build info the Go
// toolchain embeds and an optional version set at link time.

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/cli"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"; the
// Makefile passes `git describe --always --dirty`). Empty: the module
// version or the VCS revision from the build info is used.
var version string

// buildVersion describes this binary: its version, the Go toolchain that
// built it, and the VCS revision and time when the build recorded them.
func buildVersion() broker.BuildInfo {
	bi := broker.BuildInfo{Version: version, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if bi.Version == "" {
			bi.Version = "unknown"
		}
		return bi
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			bi.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				bi.Time = t.UTC().Format(time.RFC3339)
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if bi.Version == "" {
		switch {
		case info.Main.Version != "" && info.Main.Version != "(devel)":
			bi.Version = info.Main.Version
		case bi.Revision != "":
			bi.Version = shortRev(bi.Revision)
			if dirty {
				bi.Version += "-dirty"
			}
		default:
			bi.Version = "devel"
		}
	}
	return bi
}

func shortRev(r string) string {
	if len(r) > 12 {
		return r[:12]
	}
	return r
}

const versionUsage = `
Usage: ringlog version [flags]

Prints the version of this binary, the Go toolchain that built it and the
source revision (also: ringlog --version). The broker exports the same as
the metric ringlog_build_info{version,goversion,revision} 1.
`

const versionExamples = `
Examples:
  ringlog version
  ringlog version --output json | jq -r .version
`

type versionJSON struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Platform  string `json:"platform"`
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	var out outputFlag
	fs := cli.NewFlagSet("version", versionUsage, versionExamples, stdout)
	addOutputFlag(fs, &out)
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("version takes no arguments, got %q", rest)
	}
	bi := buildVersion()
	v := versionJSON{Version: bi.Version, GoVersion: bi.GoVersion, Revision: bi.Revision, Time: bi.Time,
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if out == "json" {
		return writeJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "ringlog %s\n", v.Version)
	fmt.Fprintf(stdout, "go:       %s %s\n", v.GoVersion, v.Platform)
	if v.Revision != "" {
		fmt.Fprintf(stdout, "revision: %s\n", v.Revision)
	}
	if v.Time != "" {
		fmt.Fprintf(stdout, "built at: %s (commit time)\n", v.Time)
	}
	return nil
}
