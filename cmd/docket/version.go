package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

func init() {
	register("version", "print the version of docket and of Go it was built with (also: docket --version)", func(env Env) command { return &versionCmd{env: env} })
}

// versionCmd is `docket version`.
type versionCmd struct{ env Env }

func (c *versionCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("version", "version", c.env.Stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("version takes no arguments")
	}
	v := buildVersion()
	fmt.Fprintf(c.env.Stdout, "docket %s\n", v.module)
	fmt.Fprintf(c.env.Stdout, "go     %s\n", v.goVersion)
	if v.commit != "" {
		fmt.Fprintf(c.env.Stdout, "commit %s\n", v.commit)
	}
	return nil
}

type versionInfo struct {
	module    string // module version; "devel" for a build that has none (go build or go run in a checkout)
	goVersion string
	commit    string // VCS revision (+ time, "dirty"), when the build recorded it
}

func buildVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionFrom(bi)
}

// versionFrom reads the version out of the build information the Go
// toolchain stamped into the binary (nil: none).
func versionFrom(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{module: "devel", goVersion: runtime.Version()}
	if bi == nil {
		return v
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.module = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.goVersion = bi.GoVersion
	}
	var rev, when, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		v.commit = rev
		if when != "" {
			v.commit += " (" + when + ")"
		}
		if modified == "true" {
			v.commit += " dirty"
		}
	}
	return v
}
