package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

func init() {
	register("tools", "print the tools-file JSON Schema (tools schema) or check a tools file (tools check --tools FILE)",
		func(env Env) command { return &toolsCmd{env: env} })
}

// toolsCmd is `docket tools schema` and `docket tools check --tools FILE`.
type toolsCmd struct{ env Env }

func (c *toolsCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("tools", "tools schema | tools check --tools FILE", c.env.Stderr)
	file := fs.String("tools", "", "the tools file to check")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("tools needs one subcommand: schema or check")
	}
	switch pos[0] {
	case "schema":
		if *file != "" {
			return usageError("tools schema takes no --tools")
		}
		_, err := c.env.Stdout.Write(httptool.Schema())
		return err
	case "check":
		return c.check(*file)
	}
	fs.Usage()
	return usageError("unknown tools subcommand %q (want schema or check)", pos[0])
}

// check loads the file as `docket run` would and prints its tools with their
// classes. A bad file is exit 2 with every problem listed.
func (c *toolsCmd) check(path string) error {
	if path == "" {
		return usageError("tools check needs --tools FILE")
	}
	f, err := httptool.Load(path, c.env.Getenv)
	var le *httptool.LoadError
	if errors.As(err, &le) {
		return withCode(exitBad, err)
	}
	if err != nil {
		return withCode(exitBad, fmt.Errorf("tools file %s: %w", path, err))
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		return withCode(exitBad, fmt.Errorf("tools file %s: %w", path, err))
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
	for _, srv := range f.MCPServers {
		where := "command " + srv.Command
		if srv.URL != "" {
			where = "url " + srv.URL
		}
		fmt.Fprintf(out, "\nMCP server %s (%s; not connected by check)", srv.Name, where)
		if srv.TrustAnnotations {
			fmt.Fprint(out, ", trusts annotations")
		}
		fmt.Fprintln(out)
		names := make([]string, 0, len(srv.Tools))
		for n := range srv.Tools {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(out, "  %s.%s: %s\n", srv.Name, n, srv.Tools[n].Effect)
		}
	}
	fmt.Fprintf(out, "\ntools hash %s\n", reg.Hash())
	return nil
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
