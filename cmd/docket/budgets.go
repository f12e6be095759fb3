package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/docketrun/docket/ui"
)

func init() {
	register("budgets", "show budget usage per budget, scope, window and group (text table, or --json)",
		func(env Env) command { return &budgetsCmd{env: env} })
}

// budgetsCmd is `docket budgets [--data DIR | --ledger URL | --server URL
// --token T] [--json]`.
type budgetsCmd struct{ env Env }

const budgetsUsage = "budgets [--data DIR | --ledger URL | --server URL --token T] [--json]"

// Run prints every budget bucket: what the claims kept (reserved and not
// released by a definite failure), the limit and what remains. --json
// prints GET /v1/budgets's body.
func (c *budgetsCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("budgets", budgetsUsage, c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	asJSON := fs.Bool("json", false, "print JSON (the body of GET /v1/budgets)")
	sf := addServerFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("budgets takes no arguments")
	}
	var list ui.BudgetList
	if sf.remote() {
		cl, err := sf.client(c.env)
		if err != nil {
			return err
		}
		if err := cl.do(ctx, "GET", "/v1/budgets", nil, nil, &list); err != nil {
			return err
		}
	} else {
		l, err := openRecorded(ctx, *data, key, c.env.Stderr)
		if err != nil {
			return err
		}
		defer l.Close()
		list, err = ui.ReadBudgets(ctx, l)
		if errors.Is(err, ui.ErrNoBudgets) {
			list = ui.BudgetList{Budgets: []ui.Budget{}}
		} else if err != nil {
			return fmt.Errorf("reading budgets: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(c.env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	if len(list.Budgets) == 0 {
		fmt.Fprintln(c.env.Stdout, "no budget usage recorded (budgets are declared in the tools file's \"budgets\"; usage appears with the first claim)")
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUDGET\tSCOPE\tWINDOW\tGROUP\tUSED\tLIMIT\tREMAINING\tACTIONS")
	for _, b := range list.Budgets {
		window := "-"
		if b.Window != nil {
			window = b.Window.UTC().Format("2006-01-02T15:04Z") + ".." + b.WindowEnd.UTC().Format("2006-01-02T15:04Z")
		}
		group := b.Group
		if group == "" {
			group = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", b.Budget, b.Scope, window, group, b.Used, b.Limit, b.Remaining, b.Count)
	}
	return tw.Flush()
}
