package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/toolsfile"
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
		_, err := c.env.Stdout.Write(toolsfile.Schema())
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
	f, err := parseToolsFile(path, c.env)
	if err != nil {
		return err
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
			if l := srv.Tools[n].Lookup; l != nil {
				at := cmp.Or(l.Output, "the result")
				fmt.Fprintf(out, "    lookup: calls %s.%s; found: a non-empty object or array at %s, recorded as it is; "+
					"not found: nothing there (a missing member, an index past the end of an array), null, or an empty array or object\n",
					srv.Name, l.Tool, at)
			}
		}
	}
	fmt.Fprintf(out, "\ntools hash %s\n", reg.Hash())
	for _, warn := range f.Warnings {
		fmt.Fprintf(c.env.Stderr, "docket: warning: %s\n", warn)
	}
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
