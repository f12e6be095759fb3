package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docketrun/docket/evals"
	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

func init() {
	register("eval", "evaluate plans offline: import-bfcl, score, run, check, compare, report",
		func(env Env) command { return &evalCmd{env: env} })
}

// evalCmd is `docket eval SUBCOMMAND`.
type evalCmd struct{ env Env }

const evalUsage = `usage: docket eval <subcommand> [flags]

subcommands:
  import-bfcl --questions FILE [--answers FILE] --out DATASET
              convert Berkeley Function Calling Leaderboard files into a dataset
  score       --dataset DATASET --plans FILE [--json] [--html FILE] [--out REPORT.json]
              score given plans (one JSON line per case) without any model
  run         --dataset DATASET [--tools FILE] [--record DIR | --replay DIR] [--mode tools|json_schema] [--repeat K]
              [--concurrency N] [--json] [--html FILE] [--out REPORT.json]
              plan every case with the model (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL) and score it
  check       --dataset DATASET [--tools FILE]
              validate a dataset and score every case's reference plan against its expectation
  compare     A.json B.json [--json]
              cases that flipped between two reports and the change in every metric
  report      --in REPORT.json [--html FILE] [--json]
              print a saved report as a table, or render it as HTML

The dataset format is described in evals/DATASET.md.`

func (c *evalCmd) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(c.env.Stderr, evalUsage)
		return usageError("eval needs a subcommand: import-bfcl, score, run, check, compare or report")
	}
	switch args[0] {
	case "import-bfcl":
		return c.importBFCL(args[1:])
	case "score":
		return c.score(ctx, args[1:])
	case "run":
		return c.run(ctx, args[1:])
	case "check":
		return c.check(ctx, args[1:])
	case "compare":
		return c.compare(args[1:])
	case "report":
		return c.report(args[1:])
	case "-h", "-help", "--help", "help":
		return showHelp(evalUsage + "\n")
	}
	fmt.Fprintln(c.env.Stderr, evalUsage)
	return usageError("unknown eval subcommand %q", args[0])
}

func noPositional(name string, pos []string) error {
	if len(pos) > 0 {
		return usageError("eval %s takes no positional arguments (got %q)", name, pos)
	}
	return nil
}

func (c *evalCmd) importBFCL(args []string) error {
	fs := newFlags("eval import-bfcl", "eval import-bfcl --questions FILE [--answers FILE] --out DATASET [--category C]", c.env.Stderr)
	qf := fs.String("questions", "", "leaderboard test file, BFCL_v*_<category>.json (JSON Lines; .gz accepted)")
	af := fs.String("answers", "", "its possible_answer file (default: possible_answer/<same name> next to it, when present)")
	out := fs.String("out", "", "dataset file to write (JSON Lines)")
	cat := fs.String("category", "", "category (default: from the questions file name)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := noPositional("import-bfcl", pos); err != nil {
		return err
	}
	if *qf == "" || *out == "" {
		fs.Usage()
		return usageError("eval import-bfcl needs --questions FILE and --out DATASET")
	}
	in := evals.BFCLImport{QuestionsName: *qf, Category: *cat}
	category := *cat
	if category == "" {
		category = evals.BFCLCategory(*qf)
	}
	rules, err := evals.BFCLRules(category)
	if err != nil {
		return withCode(exitBad, err)
	}
	q, err := openInput(*qf)
	if err != nil {
		return usageError("reading questions: %v", err)
	}
	defer q.Close()
	in.Questions = q
	if *af == "" && rules != evals.RulesBFCLIrrelevance {
		guess := filepath.Join(filepath.Dir(*qf), "possible_answer", filepath.Base(*qf))
		if _, err := os.Stat(guess); err == nil {
			*af = guess
			fmt.Fprintf(c.env.Stderr, "docket: using answers %s\n", guess)
		}
	}
	if *af != "" {
		a, err := openInput(*af)
		if err != nil {
			return usageError("reading answers: %v", err)
		}
		defer a.Close()
		in.Answers, in.AnswersName = a, *af
	}
	var buf bytes.Buffer
	n, err := evals.ImportBFCL(in, &buf)
	if err != nil {
		return withCode(exitBad, err)
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing dataset: %w", err)
	}
	fmt.Fprintf(c.env.Stderr, "docket: wrote %d %s cases to %s (data: %s)\n", n, category, *out, evals.BFCLSource)
	return nil
}

// openInput opens a file, decompressing ".gz".
func openInput(path string) (io.ReadCloser, error) {
	return evals.OpenFile(path)
}

// outputs are the report flags shared by score, run and report.
type outputs struct {
	asJSON  *bool
	html    *string
	out     *string
	minPass *float64
	show    *int
}

func addOutputs(fs interface {
	Bool(string, bool, string) *bool
	String(string, string, string) *string
	Float64(string, float64, string) *float64
	Int(string, int, string) *int
}) outputs {
	return outputs{
		asJSON:  fs.Bool("json", false, "print the report as JSON (every case's id, pass, reasons; aggregates by category)"),
		html:    fs.String("html", "", "also write a self-contained HTML report to this file"),
		out:     fs.String("out", "", "also write the JSON report to this file (for eval compare)"),
		minPass: fs.Float64("min-pass", 0, "exit 1 when the overall pass rate is below this (0..1)"),
		show:    fs.Int("show", 20, "failing cases listed in the table (0: all)"),
	}
}

func (c *evalCmd) emit(rep *evals.Report, o outputs) error {
	if *o.out != "" {
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			return err
		}
		if err := os.WriteFile(*o.out, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing report: %w", err)
		}
	}
	if *o.html != "" {
		var b bytes.Buffer
		if err := rep.WriteHTML(&b, ""); err != nil {
			return err
		}
		if err := os.WriteFile(*o.html, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing HTML report: %w", err)
		}
	}
	var err error
	if *o.asJSON {
		err = rep.WriteJSON(c.env.Stdout)
	} else {
		err = rep.WriteTable(c.env.Stdout, *o.show)
	}
	if err != nil {
		return err
	}
	if *o.minPass > 0 && rep.Overall.PassRate < *o.minPass {
		return withCode(exitFailed, fmt.Errorf("pass rate %.1f%% is below --min-pass %.1f%%", 100*rep.Overall.PassRate, 100**o.minPass))
	}
	return nil
}

func validMinPass(o outputs) error {
	if *o.minPass < 0 || *o.minPass > 1 {
		return usageError("--min-pass must be between 0 and 1, not %g", *o.minPass)
	}
	return nil
}

func (c *evalCmd) loadDataset(path, toolsFile string) (*evals.Dataset, error) {
	if path == "" {
		return nil, usageError("--dataset DATASET is required")
	}
	opts := evals.LoadOptions{Worlds: map[string]*tools.Registry{}}
	if reg, err := demoworldTools(); err == nil {
		opts.Worlds["demoworld"] = reg
	} else {
		return nil, fmt.Errorf("preparing the simulated world: %w", err)
	}
	if toolsFile != "" {
		reg, err := evals.LoadToolsFile(toolsFile)
		if err != nil {
			return nil, withCode(exitBad, err)
		}
		opts.Tools = reg
	}
	d, err := evals.LoadDataset(path, &opts)
	var fe *evals.FileError
	if errors.As(err, &fe) {
		return nil, withCode(exitBad, fmt.Errorf("dataset %s is invalid: %w", path, err))
	}
	if err != nil {
		return nil, withCode(exitBad, err)
	}
	return d, nil
}

func (c *evalCmd) score(ctx context.Context, args []string) error {
	fs := newFlags("eval score", "eval score --dataset DATASET --plans FILE [--json] [--html FILE] [--out REPORT.json]", c.env.Stderr)
	dataset := fs.String("dataset", "", "dataset (JSON Lines)")
	plansFile := fs.String("plans", "", `plans, one JSON line per case: {"id", "calls": [{"tool", "args", "id"?, "depends_on"?}]}`)
	toolsFile := fs.String("tools", "", "tools file for cases that name no tools")
	o := addOutputs(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := noPositional("score", pos); err != nil {
		return err
	}
	if err := validMinPass(o); err != nil {
		return err
	}
	if *plansFile == "" {
		return usageError("--plans FILE is required")
	}
	d, err := c.loadDataset(*dataset, *toolsFile)
	if err != nil {
		return err
	}
	ps, err := evals.ReadPlans(*plansFile)
	if err != nil {
		return withCode(exitBad, err)
	}
	rep, err := evals.ScorePlans(d, ps, &evals.ScoreOptions{Executor: demoExecutor{}, Context: ctx})
	if err != nil {
		return withCode(exitBad, fmt.Errorf("plans %s do not fit dataset %s: %w", *plansFile, *dataset, err))
	}
	return c.emit(rep, o)
}

func (c *evalCmd) run(ctx context.Context, args []string) error {
	fs := newFlags("eval run", "eval run --dataset DATASET [--tools FILE] [--record DIR | --replay DIR] [--mode tools|json_schema] [--repeat K] [--concurrency N] [--json] [--html FILE] [--out REPORT.json]", c.env.Stderr)
	dataset := fs.String("dataset", "", "dataset (JSON Lines)")
	toolsFile := fs.String("tools", "", "tools file for cases that name no tools")
	record := fs.String("record", "", "record every model request and answer into this directory")
	replay := fs.String("replay", "", "answer from recordings in this directory, with no network")
	repeat := fs.Int("repeat", 1, "plan every case K times and report pass^K")
	conc := fs.Int("concurrency", 4, "cases planned at once")
	retries := fs.Int("retries", 2, "re-plan a case after a passing model failure (rate limit, 5xx, timeout) this many times")
	plansOut := fs.String("plans-out", "", "also write every plan as a plans file (for eval score)")
	model := fs.String("model", "", "model name (default OPENAI_MODEL)")
	priceIn := fs.Float64("price-prompt", 0, "price per million prompt tokens, for the report's cost")
	priceOut := fs.Float64("price-completion", 0, "price per million completion tokens, for the report's cost")
	baseURL := fs.String("base-url", "", "API root including /v1 (default OPENAI_BASE_URL)")
	mode := fs.String("mode", string(planner.ModeTools), "tools (tool calling) or json_schema (structured output)")
	o := addOutputs(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := noPositional("run", pos); err != nil {
		return err
	}
	if err := validMinPass(o); err != nil {
		return err
	}
	switch {
	case *record != "" && *replay != "":
		return usageError("give --record or --replay, not both")
	case *repeat < 1 || *repeat > 100:
		return usageError("--repeat must be between 1 and 100, not %d", *repeat)
	case *conc < 1 || *conc > 256:
		return usageError("--concurrency must be between 1 and 256, not %d", *conc)
	case *retries < 0 || *retries > 10:
		return usageError("--retries must be between 0 and 10, not %d", *retries)
	case *priceIn < 0 || *priceOut < 0:
		return usageError("prices cannot be negative")
	}
	d, err := c.loadDataset(*dataset, *toolsFile)
	if err != nil {
		return err
	}
	cfg := planner.ConfigFromEnv(c.env.Getenv)
	if *model != "" {
		cfg.Model = *model
	}
	if *baseURL != "" {
		cfg.BaseURL = *baseURL
	}
	cfg.Mode = planner.Mode(*mode)
	cfg.Logger = cliLogger(c.env.Stderr)
	var rec *evals.Recorder
	var rep *evals.Replayer
	switch {
	case *replay != "":
		rep, err = evals.NewReplayer(*replay)
		if err != nil {
			return usageError("%v", err)
		}
		cfg.HTTPClient = &http.Client{Transport: rep}
		if cfg.Model == "" {
			return usageError("--replay needs the model the recordings were made with: --model or OPENAI_MODEL")
		}
		// recorded retries replay in order; waiting for them changes nothing
		cfg.Sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	case *record != "":
		rec, err = evals.NewRecorder(*record, nil)
		if err != nil {
			return err
		}
		cfg.HTTPClient = &http.Client{Transport: rec}
	}
	if cfg.Model == "" {
		return usageError("no model: set OPENAI_MODEL or pass --model (and OPENAI_BASE_URL, OPENAI_API_KEY for the endpoint)")
	}
	if err := checkPlannerConfig(cfg, d); err != nil {
		return err
	}
	ro := evals.RunOptions{
		Plan:        evals.PlannerFunc(cfg),
		Concurrency: *conc,
		Repeat:      *repeat,
		Retries:     *retries,
		Retryable:   evals.RetryablePlannerError,
		Progress:    c.env.Stderr,
		Terminal:    isTerminal(c.env.Stderr),
		Executor:    demoExecutor{},
	}
	if *retries == 0 {
		ro.Retries = -1
	}
	if rep != nil {
		ro.Retryable = nil
	}
	var plansBuf bytes.Buffer
	if *plansOut != "" {
		ro.Plans = &plansBuf
	}
	if rec != nil {
		ro.Done = func(cs *evals.Case, try int, _ evals.PlanLine) error { return rec.Save(cs.ID, try) }
	}
	report, err := evals.Run(ctx, d, ro)
	if err != nil {
		return err
	}
	report.Model = cfg.Model
	if *priceIn > 0 || *priceOut > 0 {
		report.SetCost(*priceIn, *priceOut)
	}
	if *plansOut != "" {
		if err := os.WriteFile(*plansOut, plansBuf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing plans: %w", err)
		}
	}
	if rep != nil {
		if unused := rep.Unused(); len(unused) > 0 {
			fmt.Fprintf(c.env.Stderr, "docket: warning: %d recordings were not fully replayed: %s\n", len(unused), strings.Join(unused, "; "))
		}
	}
	if rec != nil {
		fmt.Fprintf(c.env.Stderr, "docket: recorded the model exchanges of %d cases in %s\n", len(d.Cases), *record)
	}
	return c.emit(report, o)
}

// checkPlannerConfig builds one planner up front so a bad endpoint
// configuration is reported once, as bad input, rather than once per case.
func checkPlannerConfig(cfg planner.Config, d *evals.Dataset) error {
	var reg *tools.Registry
	for _, cs := range d.Cases {
		if reg = cs.Registry(); reg != nil {
			break
		}
	}
	cfg.Tools = reg
	if _, err := planner.New(cfg); err != nil {
		return withCode(exitBad, err)
	}
	return nil
}

// isTerminal reports whether w is a character device (progress bar) or not
// (plain lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (c *evalCmd) compare(args []string) error {
	fs := newFlags("eval compare", "eval compare A.json B.json [--json]", c.env.Stderr)
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return usageError("eval compare needs two reports (the JSON of eval score --out or --json)")
	}
	a, err := evals.ReadReport(pos[0])
	if err != nil {
		return withCode(exitBad, err)
	}
	b, err := evals.ReadReport(pos[1])
	if err != nil {
		return withCode(exitBad, err)
	}
	cmp := evals.Compare(a, b)
	if *asJSON {
		return writeJSONLine(c.env.Stdout, cmp)
	}
	fmt.Fprintf(c.env.Stdout, "A: %s\nB: %s\n\n", pos[0], pos[1])
	return cmp.WriteText(c.env.Stdout)
}

func (c *evalCmd) report(args []string) error {
	fs := newFlags("eval report", "eval report --in REPORT.json [--html FILE] [--json]", c.env.Stderr)
	in := fs.String("in", "", "a report written by eval score --out or --json")
	o := addOutputs(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := noPositional("report", pos); err != nil {
		return err
	}
	if err := validMinPass(o); err != nil {
		return err
	}
	if *in == "" {
		return usageError("eval report needs --in REPORT.json")
	}
	rep, err := evals.ReadReport(*in)
	if err != nil {
		return withCode(exitBad, err)
	}
	rep.Finish()
	return c.emit(rep, o)
}

func (c *evalCmd) check(ctx context.Context, args []string) error {
	fs := newFlags("eval check", "eval check --dataset DATASET [--tools FILE]", c.env.Stderr)
	dataset := fs.String("dataset", "", "dataset (JSON Lines)")
	toolsFile := fs.String("tools", "", "tools file for cases that name no tools")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := noPositional("check", pos); err != nil {
		return err
	}
	d, err := c.loadDataset(*dataset, *toolsFile)
	if err != nil {
		return err
	}
	checked, failed, without := 0, 0, 0
	for _, cs := range d.Cases {
		if len(cs.Reference) == 0 && !cs.Expect.NoAction {
			without++
			continue
		}
		checked++
		r := evals.Score(cs, cs.Reference)
		evals.CheckWorld(ctx, demoExecutor{}, cs, cs.Reference, &r)
		if !r.Pass {
			failed++
			fmt.Fprintf(c.env.Stdout, "%s (%s): its reference plan fails its expectation:\n", cs.ID, cs.Where())
			for _, reason := range r.Reasons {
				fmt.Fprintf(c.env.Stdout, "  - %s\n", reason)
			}
		}
	}
	fmt.Fprintf(c.env.Stdout, "%s: %d cases valid; %d reference plans checked, %d failed; %d cases without a reference\n", *dataset, len(d.Cases), checked, failed, without)
	if failed > 0 {
		return withCode(exitFailed, fmt.Errorf("%d reference %s fail their expectations", failed, plural(failed, "plan", "plans")))
	}
	return nil
}

// demoworldTools is the registry of evals/demoworld's tools, for loading
// execution-level cases (the schemas matter; the URLs are bound per run).
func demoworldTools() (*tools.Registry, error) {
	w := demoworld.Start()
	defer w.Close()
	f, err := httptool.Parse(w.ToolsFile(demoworld.ToolsOptions{}), func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	return tools.NewRegistry(f.Tools...)
}

// demoExecutor runs execution-level cases against a fresh evals/demoworld
// per case: the setup calls, then the plan, each as a run under policy
// "all" in a throwaway ledger, and returns the world's effect counters.
type demoExecutor struct{}

func (demoExecutor) Execute(ctx context.Context, cs *evals.Case, setup, calls []evals.Call) (map[string]int, error) {
	if cs.World.Name != "demoworld" {
		return nil, fmt.Errorf("unknown world %q (docket eval provides demoworld)", cs.World.Name)
	}
	w := demoworld.Start()
	defer w.Close()
	f, err := httptool.Parse(w.ToolsFile(demoworld.ToolsOptions{}), func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	defer f.CloseIdleConnections()
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "docket-eval-world-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir, Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	eng, err := executor.New(executor.Config{Ledger: l, Tools: reg, Logger: quiet})
	if err != nil {
		return nil, err
	}
	for i, part := range [][]evals.Call{setup, calls} {
		if len(part) == 0 {
			continue
		}
		p := &plan.Plan{Goal: cs.Goal}
		for _, call := range part {
			p.Actions = append(p.Actions, plan.Action{ID: call.ID, Tool: call.Tool, Args: call.Args, DependsOn: call.DependsOn})
		}
		what := []string{"setup", "plan"}[i]
		_, doc, err := runs.Run(ctx, eng, l, runs.Request{RunID: "eval-" + what, Plan: p, Options: &executor.RunOptions{Policy: executor.PolicyAll}})
		if err != nil {
			return nil, fmt.Errorf("the %s could not run: %w", what, err)
		}
		if doc.Run.Status != ledger.RunCompleted {
			var bad []string
			for _, a := range doc.Actions {
				if a.Error != "" || (a.Status != ledger.StatusSucceeded && a.Status != "") {
					bad = append(bad, fmt.Sprintf("%s %s: %s %s", a.ID, a.Tool, a.Status, a.Error))
				}
			}
			return nil, fmt.Errorf("the %s ended %s (%s)", what, doc.Run.Status, strings.Join(bad, "; "))
		}
	}
	return w.Effects(), nil
}
