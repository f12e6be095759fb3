package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/mcptool"
	"github.com/docketrun/docket/tools/toolsfile"
)

// loadTools reads a tools file (DESIGN.md "Tools file"), connects to its MCP
// servers, whose tools join the registry as "server.tool", and builds the
// registry. Secrets the file names with {{env "NAME"}} come from env.Getenv. The returned
// function stops the servers; call it when the command ends. A server that
// cannot be reached is exit 1 (retry later); a file or tool definition that
// is wrong is exit 2, including a tool the file classifies that its server
// does not list (mcptool.ErrNotListed: a misspelled name).
func loadTools(ctx context.Context, path string, env Env) (*tools.Registry, func(), error) {
	_, reg, closeSet, err := loadToolsFile(ctx, path, env)
	return reg, closeSet, err
}

// loadToolsFile is loadTools that also returns the parsed file.
func loadToolsFile(ctx context.Context, path string, env Env) (*httptool.File, *tools.Registry, func(), error) {
	nop := func() {}
	if path == "" {
		return nil, nil, nop, usageError("--tools FILE is required")
	}
	f, err := parseToolsFile(path, env)
	if err != nil {
		return nil, nil, nop, err
	}
	all := append([]tools.Tool(nil), f.Tools...)
	closeSet := nop
	if len(f.MCPServers) > 0 {
		set, err := mcptool.Connect(ctx, f.MCPServers, &mcptool.Options{Env: env.Getenv, Logger: cliLogger(env.Stderr)})
		if errors.Is(err, mcptool.ErrNotListed) {
			return nil, nil, nop, withCode(exitBad, fmt.Errorf("tools file %s: %w", path, err))
		}
		if err != nil {
			return nil, nil, nop, withCode(exitFailed, fmt.Errorf("tools file %s: %w", path, err))
		}
		closeSet = func() {
			if err := set.Close(); err != nil {
				fmt.Fprintf(env.Stderr, "docket: warning: %v\n", err)
			}
		}
		all = append(all, set.Tools()...)
	}
	reg, err := tools.NewRegistry(all...)
	if err != nil {
		closeSet()
		return nil, nil, nop, withCode(exitBad, fmt.Errorf("tools file %s: %w", path, err))
	}
	return f, reg, closeSet, nil
}

// parseToolsFile reads and checks a tools file with toolsfile, the format's
// one parser, and builds its HTTP tools (MCP servers are listed, not
// connected). A file that cannot be read, or a wrong one, is exit 2; the
// error names the file once ("reading tools file F: ...", "invalid tools
// file F (N problems): ...", every problem with its tool and field).
func parseToolsFile(path string, env Env) (*httptool.File, error) {
	tf, err := toolsfile.Load(path, &toolsfile.Options{Env: env.Getenv})
	if err != nil {
		return nil, withCode(exitBad, err)
	}
	return httptool.Build(tf, httptool.Options{}), nil
}
