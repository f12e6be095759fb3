package main

import (
	"errors"
	"fmt"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// loadTools reads a tools file (DESIGN.md "Tools file") and builds the
// registry. Secrets the file names with {{env "NAME"}} come from env.Getenv.
// Any problem is bad input (exit 2).
func loadTools(path string, env Env) (*tools.Registry, error) {
	if path == "" {
		return nil, usageError("--tools FILE is required")
	}
	f, err := httptool.Load(path, env.Getenv)
	var le *httptool.LoadError
	if errors.As(err, &le) {
		return nil, withCode(exitBad, err) // names the file and lists every problem
	}
	if err != nil {
		return nil, withCode(exitBad, fmt.Errorf("tools file %s: %w", path, err))
	}
	if len(f.MCPServers) > 0 {
		fmt.Fprintf(env.Stderr, "docket: warning: tools file %s declares MCP servers; this build does not connect to them, so their tools are not available\n", path)
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		return nil, withCode(exitBad, fmt.Errorf("tools file %s: %w", path, err))
	}
	return reg, nil
}
