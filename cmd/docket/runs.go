package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docketrun/docket/ledger"
)

func init() {
	register("runs", "list runs (runs list) or show one (runs show RUN)", func(env Env) command { return &runsCmd{env: env} })
}

const runsUsage = "usage: docket runs list [--data DIR | --server URL --token T] [--json] [--status S] [--limit N]\n       docket runs show [--data DIR | --server URL --token T] [--json] RUN"

// runsCmd is `docket runs list` and `docket runs show`.
type runsCmd struct{ env Env }

func (c *runsCmd) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(c.env.Stderr, runsUsage)
		return usageError("runs needs a subcommand: list or show")
	}
	switch args[0] {
	case "list":
		return c.list(ctx, args[1:])
	case "show":
		return c.show(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		return showHelp(runsUsage + "\n\nRun 'docket runs list -h' or 'docket runs show -h' for their flags.\n")
	}
	fmt.Fprintln(c.env.Stderr, runsUsage)
	return usageError("unknown runs subcommand %q: use list or show", args[0])
}

var runStatuses = []ledger.RunStatus{
	ledger.RunPlanning, ledger.RunAwaitingApproval, ledger.RunRunning, ledger.RunPaused,
	ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled,
}

// runList is the JSON of `docket runs list --json`: run headers newest first,
// and the cursor of the next page ("" on the last one).
type runList struct {
	Runs []ledger.Run `json:"runs"`
	Next string       `json:"next"`
}

func (c *runsCmd) list(ctx context.Context, args []string) error {
	fs := newFlags("runs list", "runs list [--data DIR] [--json] [--status S] [--limit N]", c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	asJSON := fs.Bool("json", false, "print JSON for programs instead of a table")
	status := fs.String("status", "", "only runs with this status ("+joinStatuses()+")")
	limit := fs.Int("limit", 50, "at most this many runs (1..1000)")
	sf := addServerFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("runs list takes no positional arguments (got %q)", pos)
	}
	if *status != "" && !validRunStatus(ledger.RunStatus(*status)) {
		return usageError("--status must be one of %s, not %q", joinStatuses(), *status)
	}
	if *limit < 1 || *limit > 1000 {
		return usageError("--limit must be between 1 and 1000, not %d", *limit)
	}
	var (
		runs []ledger.Run
		next string
	)
	if sf.remote() {
		cl, err := sf.client(c.env)
		if err != nil {
			return err
		}
		q := url.Values{"limit": {strconv.Itoa(*limit)}}
		if *status != "" {
			q.Set("status", *status)
		}
		var list runList
		if err := cl.do(ctx, "GET", "/v1/runs?"+q.Encode(), nil, nil, &list); err != nil {
			return err
		}
		runs, next = list.Runs, list.Next
	} else {
		l, err := openRecorded(ctx, *data, key, c.env.Stderr)
		if err != nil {
			return err
		}
		defer l.Close()
		runs, next, err = l.ListRuns(ctx, ledger.ListOptions{Status: ledger.RunStatus(*status), Limit: *limit})
		if err != nil {
			return fmt.Errorf("listing runs: %w", err)
		}
	}
	if *asJSON {
		if runs == nil {
			runs = []ledger.Run{}
		}
		return writeJSONLine(c.env.Stdout, runList{Runs: runs, Next: next})
	}
	return writeRunTable(c.env.Stdout, runs, next)
}

func writeRunTable(w io.Writer, runs []ledger.Run, next string) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "no runs")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tREV\tPOLICY\tUPDATED\tGOAL")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Status, r.Revision, r.Policy, formatTime(r.UpdatedAt), clip(r.Goal, 60))
	}
	if next != "" {
		fmt.Fprintf(tw, "(more runs: raise --limit or use --json for the cursor)\n")
	}
	return tw.Flush()
}

func (c *runsCmd) show(ctx context.Context, args []string) error {
	fs := newFlags("runs show", "runs show [--data DIR] [--json] RUN", c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	asJSON := fs.Bool("json", false, "print the Run JSON instead of a summary")
	sf := addServerFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("runs show needs exactly one run id")
	}
	var doc ledger.RunDoc
	if sf.remote() {
		cl, err := sf.client(c.env)
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := cl.do(ctx, "GET", "/v1/runs/"+url.PathEscape(pos[0]), nil, nil, &raw); err != nil {
			return err
		}
		if doc, err = decodeDoc(raw); err != nil {
			return err
		}
	} else {
		l, err := openRecorded(ctx, *data, key, c.env.Stderr)
		if err != nil {
			return err
		}
		defer l.Close()
		doc, err = l.Doc(ctx, pos[0])
		if err != nil {
			return notFound(fmt.Errorf("reading run %s: %w", pos[0], err), pos[0])
		}
	}
	if *asJSON {
		return writeDoc(c.env.Stdout, c.env.traced(doc))
	}
	return writeRunSummary(c.env.Stdout, doc)
}

// writeRunSummary prints a run for people: its header, then one line per action.
func writeRunSummary(w io.Writer, doc ledger.RunDoc) error {
	r := doc.Run
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", r.ID)
	fmt.Fprintf(tw, "status\t%s\n", r.Status)
	if r.Goal != "" {
		fmt.Fprintf(tw, "goal\t%s\n", r.Goal)
	}
	fmt.Fprintf(tw, "revision\t%d\n", r.Revision)
	fmt.Fprintf(tw, "policy\t%s\n", r.Policy)
	fmt.Fprintf(tw, "created\t%s\n", formatTime(r.CreatedAt))
	fmt.Fprintf(tw, "updated\t%s\n", formatTime(r.UpdatedAt))
	if r.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", r.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tTOOL\tCLASS\tSTATUS\tATTEMPTS\tOUTPUT / ERROR")
	for _, a := range doc.Actions {
		detail := a.Error
		if detail == "" && len(a.Output) > 0 && string(a.Output) != "null" {
			detail = string(a.Output)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", a.ID, a.Tool, a.Class, a.Status, a.Attempts, clip(oneLine(detail), 70))
	}
	return tw.Flush()
}

func validRunStatus(s ledger.RunStatus) bool {
	for _, v := range runStatuses {
		if s == v {
			return true
		}
	}
	return false
}

func joinStatuses() string {
	s := make([]string, len(runStatuses))
	for i, v := range runStatuses {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
