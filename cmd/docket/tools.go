package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/mcptool"
	"github.com/docketrun/docket/tools/policy"
	"github.com/docketrun/docket/tools/toolsfile"
)

func init() {
	register("tools", "print the tools-file JSON Schema (tools schema), check a tools file (tools check --tools FILE [--connect]) or list every tool with its class (tools list --tools FILE)",
		func(env Env) command { return &toolsCmd{env: env} })
}

// toolsCmd is `docket tools schema`, `docket tools check --tools FILE
// [--connect]` and `docket tools list --tools FILE [--json]`.
type toolsCmd struct{ env Env }

func (c *toolsCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("tools", "tools schema | tools check --tools FILE [--connect] | tools list --tools FILE [--json]", c.env.Stderr)
	file := fs.String("tools", "", "the tools file to check")
	connect := fs.Bool("connect", false, "check: also start or reach the file's MCP servers, check that every tool the file names exists, and print the tools hash a run records")
	asJSON := fs.Bool("json", false, "list: print JSON")
	policyPath := policyFlag(fs)
	pos, err := parseArgs(fs, args)
	c.env.PolicyFile = *policyPath
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("tools needs one subcommand: schema or check")
	}
	switch pos[0] {
	case "schema":
		if *file != "" || *connect || *asJSON {
			return usageError("tools schema takes no flags")
		}
		_, err := c.env.Stdout.Write(toolsfile.Schema())
		return err
	case "check":
		if *asJSON {
			return usageError("tools check takes no --json (tools list --json does)")
		}
		return c.check(ctx, *file, *connect)
	case "list":
		if *connect {
			return usageError("tools list always connects: drop --connect")
		}
		return c.list(ctx, *file, *asJSON)
	}
	fs.Usage()
	return usageError("unknown tools subcommand %q (want schema, check or list)", pos[0])
}

// check loads the file as `docket run` would and prints its tools with their
// classes. A bad file is exit 2 with every problem listed. With connect it
// starts (or reaches) the MCP servers as a run does: a tool the file
// classifies that a server does not list is exit 2 naming it, a server that
// cannot be reached exit 1, and the tools hash printed is the one a run
// records.
func (c *toolsCmd) check(ctx context.Context, path string, connect bool) error {
	if path == "" {
		return usageError("tools check needs --tools FILE")
	}
	var (
		f   *httptool.File
		reg *tools.Registry
		err error
	)
	if connect {
		var closeSet func()
		if f, reg, closeSet, err = loadToolsFile(ctx, path, c.env); err != nil {
			return err
		}
		defer closeSet()
	} else {
		if f, err = parseToolsFile(path, c.env); err != nil {
			return err
		}
		if reg, err = tools.NewRegistry(f.Tools...); err != nil {
			return withCode(exitBad, fmt.Errorf("tools file %s: %w", path, err))
		}
	}
	out := c.env.Stdout
	fmt.Fprintf(out, "tools file %s: %d tools, %d MCP servers\n\n", path, len(f.Tools), len(f.MCPServers))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOOL\tCLASS\tTIMEOUT\tDETAILS")
	for _, name := range reg.Names() {
		s, _ := reg.Spec(name)
		tl, _ := reg.Get(name)
		_, looks := tl.(tools.Looker)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", name, s.Class, s.Timeout, details(s, looks))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, tl := range f.Tools {
		if ht, ok := httpTool(tl); ok {
			printView(out, tl.Spec().Name, ht.View())
		}
	}
	for _, srv := range f.MCPServers {
		where := "command " + srv.Command
		if srv.URL != "" {
			where = "url " + srv.URL
		}
		state := "not connected by check: --connect checks its tools"
		if connect {
			state = "connected"
		}
		fmt.Fprintf(out, "\nMCP server %s (%s; %s)", srv.Name, where, state)
		if srv.TrustAnnotations {
			fmt.Fprint(out, ", trusts annotations")
		}
		fmt.Fprintln(out)
		if connect {
			// Every tool the server lists, with the class a run gives it.
			for _, name := range reg.Names() {
				if !strings.HasPrefix(name, srv.Name+".") {
					continue
				}
				s, _ := reg.Spec(name)
				why := "tools file"
				switch t := mustGet(reg, name).(type) {
				case *mcptool.Tool:
					why = t.Why
				case *mcptool.LookupTool:
					why = t.Why
				}
				fmt.Fprintf(out, "  %s: %s (%s)\n", name, s.Class, why)
			}
		}
		names := make([]string, 0, len(srv.Tools))
		for n := range srv.Tools {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if connect && srv.Tools[n].Lookup == nil {
				continue // listed above
			}
			if !connect {
				fmt.Fprintf(out, "  %s.%s: %s\n", srv.Name, n, srv.Tools[n].Effect)
			}
			if l := srv.Tools[n].Lookup; l != nil {
				at := cmp.Or(l.Output, "the result")
				fmt.Fprintf(out, "    lookup: calls %s.%s; found: a non-empty object or array at %s, recorded as it is; "+
					"not found: nothing there (a missing member, an index past the end of an array), null, or an empty array or object\n",
					srv.Name, l.Tool, at)
			}
		}
	}
	rules, budgets, err := globalPolicy(f, c.env)
	if err != nil {
		return err
	}
	if len(rules) > 0 {
		reg = reg.WithPolicy(rules)
	}
	if len(budgets) > 0 {
		reg = reg.WithBudgets(budgets)
	}
	printPolicy(out, f.Tools, rules)
	printBudgets(out, budgets)
	if len(f.MCPServers) > 0 && !connect {
		fmt.Fprintf(out, "\ntools hash %s (the HTTP tools only: a run adds the MCP servers' tools; check --connect prints the hash a run records)\n", reg.Hash())
	} else {
		fmt.Fprintf(out, "\ntools hash %s\n", reg.Hash())
	}
	for _, warn := range f.Warnings {
		fmt.Fprintf(c.env.Stderr, "docket: warning: %s\n", warn)
	}
	return nil
}

func mustGet(reg *tools.Registry, name string) tools.Tool {
	t, _ := reg.Get(name)
	return t
}

// listedTool is one tool as `docket tools list --json` prints it.
type listedTool struct {
	Name        string `json:"name"`
	Source      string `json:"source"` // "http" or "mcp"
	Server      string `json:"server,omitempty"`
	Class       string `json:"class"`
	Why         string `json:"why"` // where the class comes from
	Lookup      bool   `json:"lookup"`
	Description string `json:"description"`
}

// list connects to the file's MCP servers as a run does and prints every
// tool of the registry with its effect class and where the class comes from
// (the tools file, a trusted annotation, or the default for an unclassified
// MCP tool), then the tools hash a run records.
func (c *toolsCmd) list(ctx context.Context, path string, asJSON bool) error {
	if path == "" {
		return usageError("tools list needs --tools FILE")
	}
	_, reg, closeSet, err := loadToolsFile(ctx, path, c.env)
	if err != nil {
		return err
	}
	defer closeSet()
	var out []listedTool
	for _, name := range reg.Names() {
		s, _ := reg.Spec(name)
		tl, _ := reg.Get(name)
		_, looks := tl.(tools.Looker)
		lt := listedTool{Name: name, Source: "http", Class: string(s.Class), Why: "tools file", Lookup: looks, Description: s.Description}
		var mt *mcptool.Tool
		switch t := tl.(type) {
		case *mcptool.Tool:
			mt = t
		case *mcptool.LookupTool:
			mt = t.Tool
		}
		if mt != nil {
			lt.Source, lt.Server, lt.Why = "mcp", mt.Server(), mt.Why
		}
		out = append(out, lt)
	}
	if asJSON {
		enc := json.NewEncoder(c.env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"tools": out, "tools_hash": reg.Hash()})
	}
	w := tabwriter.NewWriter(c.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOOL\tCLASS\tFROM\tCLASS FROM")
	for _, lt := range out {
		from := "http"
		if lt.Source == "mcp" {
			from = "mcp server " + lt.Server
		}
		class := lt.Class
		if lt.Lookup {
			class += " (lookup declared)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", lt.Name, class, from, lt.Why)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.env.Stdout, "\ntools hash %s\n", reg.Hash())
	return nil
}

// httpTool returns the HTTP tool behind t, if it is one.
func httpTool(t tools.Tool) (*httptool.Tool, bool) {
	switch t := t.(type) {
	case *httptool.Tool:
		return t, true
	case *httptool.LookupTool:
		return t.Tool, true
	}
	return nil, false
}

// printView prints what a tool sends and, for a lookup, what it will do.
// Values that type a credential into the file are masked by the view.
func printView(out io.Writer, name string, v httptool.View) {
	fmt.Fprintf(out, "\n%s: %s %s\n", name, v.Request.Method, v.Request.URL)
	printHeaders(out, "  ", v.Request.Headers)
	if len(v.Request.Body) > 0 {
		fmt.Fprintf(out, "  body %s\n", v.Request.Body)
	}
	if v.KeyHeader != "" {
		fmt.Fprintf(out, "  key in header %s\n", v.KeyHeader)
	}
	if v.Output != "" {
		fmt.Fprintf(out, "  records %s of the answer\n", v.Output)
	}
	if l := v.Lookup; l != nil {
		fmt.Fprintf(out, "  lookup: %s %s (found: %s)\n", l.Method, l.URL, l.Found)
		printHeaders(out, "    ", l.Headers)
		if len(l.Body) > 0 {
			fmt.Fprintf(out, "    body %s\n", l.Body)
		}
		for _, line := range l.Explain {
			fmt.Fprintf(out, "    %s\n", line)
		}
	}
}

func printHeaders(out io.Writer, indent string, h map[string]string) {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(out, "%sheader %s: %s\n", indent, n, h[n])
	}
}

func details(s tools.Spec, looks bool) string {
	var d []string
	if looks {
		d = append(d, "lookup")
	}
	if s.KeyTTL > 0 {
		d = append(d, "key_ttl "+s.KeyTTL.String())
	}
	if s.VisibilityLag > 0 {
		d = append(d, "visibility_lag "+s.VisibilityLag.String())
	}
	if s.Approval.Always {
		d = append(d, "approval always")
	}
	names := make([]string, 0, len(s.Approval.Above))
	for n := range s.Approval.Above {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d = append(d, fmt.Sprintf("approve above %s %s", n, s.Approval.Above[n]))
	}
	if s.Compensate != nil {
		d = append(d, "compensate "+s.Compensate.Tool)
	}
	if len(d) == 0 {
		return "-"
	}
	return strings.Join(d, ", ")
}

// printPolicy lists the policy rules: each tool's, then the global ones.
func printPolicy(out io.Writer, ts []tools.Tool, global []policy.Rule) {
	var all []policy.Rule
	for _, t := range ts {
		all = append(all, t.Spec().Policy...)
	}
	all = append(all, global...)
	if len(all) == 0 {
		return
	}
	fmt.Fprintf(out, "\npolicy (%d %s; every rule that applies counts, the strictest wins: deny, approve with the most approvers, allow):\n",
		len(all), plural(len(all), "rule", "rules"))
	for _, r := range all {
		fmt.Fprintf(out, "  %s: when %s -> %s", r.Label(), r.When, r.Outcome)
		if r.Outcome == policy.Approve {
			fmt.Fprintf(out, " by %d", r.Approvers)
			if len(r.ApproverNames) > 0 {
				fmt.Fprintf(out, " of %s", strings.Join(r.ApproverNames, ", "))
			}
			if len(r.ApproverGroups) > 0 {
				fmt.Fprintf(out, " of group %s", strings.Join(r.ApproverGroups, ", "))
			}
			if r.ExcludeCreator {
				fmt.Fprint(out, ", not the run's creator")
			}
			if r.TTL > 0 {
				fmt.Fprintf(out, ", each approval valid %v", r.TTL)
			}
		}
		if r.Message != "" {
			fmt.Fprintf(out, " (%q)", r.Message)
		}
		if r.Name != "" {
			fmt.Fprintf(out, "  [%s]", r.Where)
		}
		fmt.Fprintln(out)
	}
}

// printBudgets lists the budgets as `tools check` shows them.
func printBudgets(out io.Writer, bs []policy.Budget) {
	if len(bs) == 0 {
		return
	}
	fmt.Fprintf(out, "\nbudgets (%d; reserved with each claim, released on a definite failure):\n", len(bs))
	for _, b := range bs {
		what := "actions"
		if b.Sum != "" {
			what = "sum of " + b.Sum
		}
		fmt.Fprintf(out, "  %s: %s of %s at most %s per %s", b.Name, what, strings.Join(b.Tools, ", "), b.Limit, b.Per)
		if b.Window > 0 {
			fmt.Fprintf(out, " per %v", b.Window)
		}
		if b.GroupBy != "" {
			fmt.Fprintf(out, " per %s", b.GroupBy)
		}
		fmt.Fprintf(out, "; beyond: %s", b.Outcome)
		if b.Outcome == policy.Approve {
			fmt.Fprintf(out, " by %d", b.Approvers)
			if len(b.ApproverNames) > 0 {
				fmt.Fprintf(out, " of %s", strings.Join(b.ApproverNames, ", "))
			}
			if len(b.ApproverGroups) > 0 {
				fmt.Fprintf(out, " of group %s", strings.Join(b.ApproverGroups, ", "))
			}
			if b.ExcludeCreator {
				fmt.Fprint(out, ", not the run's creator")
			}
		}
		fmt.Fprintln(out)
	}
}
