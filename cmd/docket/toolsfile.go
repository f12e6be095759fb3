package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/mcptool"
	"github.com/docketrun/docket/tools/policy"
	"github.com/docketrun/docket/tools/toolsfile"
)

// loadTools reads a tools file (tools/README.md, "The tools file"), connects to its MCP
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
	rules, budgets, err := globalPolicy(f, env)
	if err != nil {
		closeSet()
		return nil, nil, nop, err
	}
	if len(rules) > 0 {
		reg = reg.WithPolicy(rules)
	}
	if len(budgets) > 0 {
		reg = reg.WithBudgets(budgets)
	}
	return f, reg, closeSet, nil
}

// globalPolicy is the tools file's global policy rules and budgets, then
// those of the policy file (--policy, else $DOCKET_POLICY). A policy file
// that cannot be read or does not compile, or whose budgets name a tool the
// tools file does not have or a budget name the tools file uses, is exit
// 2, every problem listed.
func globalPolicy(f *httptool.File, env Env) ([]policy.Rule, []policy.Budget, error) {
	rules := append([]policy.Rule(nil), f.Policy...)
	budgets := append([]policy.Budget(nil), f.Budgets...)
	path := cmp.Or(env.PolicyFile, env.Getenv("DOCKET_POLICY"))
	if path == "" {
		return rules, budgets, nil
	}
	pf, err := toolsfile.LoadPolicy(path)
	if err != nil {
		return nil, nil, withCode(exitBad, err)
	}
	all := append(budgets, pf.Budgets...)
	if err := policy.CheckBudgets(all, f.Known); err != nil {
		return nil, nil, withCode(exitBad, fmt.Errorf("policy file %s with tools file: %w", path, err))
	}
	return append(rules, pf.Rules...), all, nil
}

// identityFlag adds --as NAME: who acts (creator, approver) as "cli:NAME".
// The CLI works on the ledger directly, so this is as trustworthy as the OS
// account running it: for four eyes that must hold against a colleague, act
// through docket serve with named tokens.
func identityFlag(fs *flag.FlagSet) *string {
	return fs.String("as", "", "who acts, recorded as cli:NAME (creator of a new run, approver); default the OS user ($USER)")
}

// policyFlag adds --policy FILE to a command that loads a tools file.
func policyFlag(fs *flag.FlagSet) *string {
	return fs.String("policy", "", `policy file {"version": 1, "policy": [RULE...], "budgets": [BUDGET...]} whose rules and budgets join the tools file's (default $DOCKET_POLICY); give the same one to every command that continues the run`)
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
