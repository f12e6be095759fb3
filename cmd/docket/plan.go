package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

func init() {
	register("plan", "plan a goal with the model and print the plan JSON (nothing runs, nothing is recorded)",
		func(env Env) command { return &planCmd{env: env} })
	exitMappers = append(exitMappers, plannerErrorCode)
}

// planCmd is `docket plan --tools FILE --goal TEXT`: it asks the model for a
// plan and prints it as {"goal", "actions"} on stdout. Read-only tools may run
// while the model thinks; nothing else runs and nothing is recorded.
type planCmd struct{ env Env }

const planUsage = "plan --tools FILE --goal TEXT [--model NAME] [--base-url URL] [--temperature T] [--max-tokens N] [--timeout D] [--mode tools|json_schema] [--stream auto|on|off] [--strict auto|off] [--tool-choice auto|required] [--parallel-tool-calls true|false] [--order turns|references] [--progress] [--full]"

func (c *planCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("plan", planUsage, c.env.Stderr)
	toolsPath := fs.String("tools", "", "tools file (JSON, version 1)")
	goal := fs.String("goal", "", "what to plan")
	full := fs.Bool("full", false, "also print the plan's id, provenance (meta), created_at and the whole model exchange (transcript)")
	mf := addModelFlags(fs)
	progress := fs.Bool("progress", false, "print the planning as it happens on stderr (default: when stderr is a terminal)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("plan takes no positional arguments (got %q); put the goal in --goal", pos)
	}
	if strings.TrimSpace(*goal) == "" {
		return usageError("--goal TEXT is required")
	}
	reg, closeTools, err := loadTools(ctx, *toolsPath, c.env)
	if err != nil {
		return err
	}
	defer closeTools()
	p, err := mf.planner(c.env, reg)
	if err != nil {
		return err
	}
	pctx, pp := withProgress(ctx, c.env.Stderr, *progress || isTerminal(c.env.Stderr))
	res, err := p.Plan(pctx, planner.Request{Goal: *goal})
	pp.endText()
	if err != nil {
		return err
	}
	sayWarnings(c.env.Stderr, res)
	out := any(struct {
		Goal    string `json:"goal"`
		Actions any    `json:"actions"`
	}{res.Plan.Goal, res.Plan.Actions})
	if *full {
		out = res.Plan
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the plan: %w", err)
	}
	if _, err := c.env.Stdout.Write(append(b, '\n')); err != nil {
		return err
	}
	if res.Reply != "" && pp == nil {
		fmt.Fprintf(c.env.Stderr, "model: %s\n", oneLine(res.Reply))
	}
	fmt.Fprintf(c.env.Stderr, "docket: planned %d %s in %d model %s (%d tokens)\n",
		len(res.Plan.Actions), plural(len(res.Plan.Actions), "action", "actions"), res.Rounds, plural(res.Rounds, "turn", "turns"), res.Usage.TotalTokens)
	return nil
}

// modelFlags are the model endpoint flags of plan, chat and run --goal; they
// override OPENAI_BASE_URL, OPENAI_API_KEY's endpoint and OPENAI_MODEL. The
// key itself is read from the environment only, never from a flag (flags
// show up in process listings and shell history).
type modelFlags struct {
	model, baseURL, temperature, mode *string
	maxTokens                         *int
	timeout                           *time.Duration
	// server quirks and ordering (default: DOCKET_STREAM, DOCKET_STRICT,
	// DOCKET_TOOL_CHOICE, DOCKET_PARALLEL_TOOL_CALLS, DOCKET_ORDER)
	stream, strict, toolChoice, parallel, order *string
}

func addModelFlags(fs *flag.FlagSet) *modelFlags {
	return &modelFlags{
		model:       fs.String("model", "", "model name (default $OPENAI_MODEL)"),
		baseURL:     fs.String("base-url", "", "API root including /v1 (default $OPENAI_BASE_URL, else "+planner.DefaultBaseURL+")"),
		temperature: fs.String("temperature", "", "sampling temperature 0..2 (default: the server's)"),
		mode:        fs.String("mode", string(planner.ModeTools), "tools (tool calling) or json_schema (structured output, for models without tool calling)"),
		maxTokens:   fs.Int("max-tokens", 0, "bound of each model reply in tokens (default 4096)"),
		timeout:     fs.Duration("timeout", 0, "timeout of each model request (default 2m)"),
		stream:      fs.String("stream", "", "stream replies: auto (when progress is shown), on, off (default $DOCKET_STREAM, else auto)"),
		strict:      fs.String("strict", "", `"strict" tool schemas: auto (sent, left out after a server refuses it) or off (default $DOCKET_STRICT, else auto)`),
		toolChoice:  fs.String("tool-choice", "", "tool_choice to send: auto, or required (first turn only) (default $DOCKET_TOOL_CHOICE, else not sent)"),
		parallel:    fs.String("parallel-tool-calls", "", "parallel_tool_calls to send: true or false (default $DOCKET_PARALLEL_TOOL_CALLS, else not sent)"),
		order:       fs.String("order", "", "how calls without a data link are ordered: turns (a later message's calls run after earlier ones) or references (default $DOCKET_ORDER, else turns)"),
	}
}

// config is the planner configuration: the environment, overridden by flags.
func (f *modelFlags) config(env Env, reg *tools.Registry) (planner.Config, error) {
	cfg := planner.ConfigFromEnv(env.Getenv)
	if env.tracing != nil {
		cfg.TracerProvider = env.tracing.Provider()
	}
	if *f.model != "" {
		cfg.Model = *f.model
	}
	if *f.baseURL != "" {
		cfg.BaseURL = *f.baseURL
	}
	if s := strings.TrimSpace(*f.temperature); s != "" {
		t, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return cfg, usageError("--temperature %q is not a number", s)
		}
		t32 := float32(t)
		cfg.Temperature = &t32
	}
	if *f.maxTokens < 0 {
		return cfg, usageError("--max-tokens must not be negative")
	}
	if *f.timeout < 0 {
		return cfg, usageError("--timeout must not be negative")
	}
	cfg.MaxTokens = *f.maxTokens
	cfg.Timeout = *f.timeout
	cfg.Mode = planner.Mode(*f.mode)
	if f.stream != nil { // nil in a modelFlags built by hand
		for _, o := range []struct {
			flag string
			to   *string
		}{{*f.toolChoice, &cfg.ToolChoice}, {*f.parallel, &cfg.ParallelToolCalls}} {
			if o.flag != "" {
				*o.to = o.flag
			}
		}
		if *f.stream != "" {
			cfg.Stream = planner.Switch(*f.stream)
		}
		if *f.strict != "" {
			cfg.Strict = planner.Switch(*f.strict)
		}
		if *f.order != "" {
			cfg.Order = planner.Order(*f.order)
		}
	}
	cfg.Tools = reg
	cfg.Logger = cliLogger(env.Stderr)
	return cfg, nil
}

func (f *modelFlags) planner(env Env, reg *tools.Registry) (*planner.Planner, error) {
	cfg, err := f.config(env, reg)
	if err != nil {
		return nil, err
	}
	p, err := planner.New(cfg)
	if err != nil {
		return nil, withCode(exitBad, err)
	}
	return p, nil
}

// plannerErrorCode maps planning errors to exit codes: a configuration or
// request the planner refuses, or a model endpoint that refuses us for good
// (bad key, unknown model: a 4xx other than 408/429), is bad input (2); a model
// that failed to produce a valid plan, or an endpoint that stayed unavailable,
// is a failure (1).
func plannerErrorCode(err error) (int, bool) {
	if errors.Is(err, planner.ErrConfig) || errors.Is(err, planner.ErrBadRequest) {
		return exitBad, true
	}
	var me *planner.ModelError
	if errors.As(err, &me) {
		if me.Retryable() {
			return exitFailed, true
		}
		return exitBad, true
	}
	var pe *planner.PlanningError
	if errors.As(err, &pe) {
		return exitFailed, true
	}
	return 0, false
}

// runGoal does the planning part of `docket run --goal TEXT`, for run.go's
// exec (after it loaded the tools, opened the ledger and built the engine):
// without --run-id the id is planner.GoalRunID of the goal and the tools'
// hash, so the same command again resumes the same run. The run is created
// by executor/runs: when the ledger already holds that run's plan, the model
// is not called (no model configuration is even needed); otherwise the
// planner plans and the plan is recorded before anything runs. A crash while
// the model thinks records nothing: the next attempt plans again. It returns
// the run as the drive left it, and sets *runID once known.
func runGoal(ctx context.Context, env Env, mf *modelFlags, reg *tools.Registry, l ledger.Store, eng *executor.Engine,
	goal string, runID *string, opts *executor.RunOptions) (ledger.RunDoc, error) {
	req := planner.Request{Goal: goal}
	if *runID == "" {
		*runID = planner.GoalRunID(req, reg.Hash())
	}
	// The request's identity, by the rule POST /v1/runs and docket step
	// share (executor.SameRequest).
	ident := executor.Request{Goal: goal, Policy: opts.Policy}
	if _, err := ident.Hash(); err != nil {
		return ledger.RunDoc{}, withCode(exitBad, err)
	}
	var planned *planner.Result
	res, err := runs.Create(ctx, eng, l, runs.Request{RunID: *runID, Identity: &ident, Options: opts,
		Planner: func(ctx context.Context) (*plan.Plan, error) {
			p, err := mf.planner(env, reg)
			if err != nil {
				return nil, err
			}
			pctx, endPlan := env.planSpan(ctx, *runID)
			r, err := p.Plan(pctx, req)
			endPlan(err)
			if err != nil {
				return nil, err
			}
			planned = r
			return r.Plan, nil
		}})
	switch {
	case errors.Is(err, executor.ErrRequestMismatch):
		return ledger.RunDoc{}, usageError("%v; pass a new --run-id to plan this goal", err)
	case planned != nil:
		sayPlanned(env.Stderr, *runID, planned, err == nil)
	case res.Plan != nil:
		fmt.Fprintf(env.Stderr, "docket: run %s: using the recorded plan (%d %s); the model is not called again\n",
			*runID, len(res.Plan.Actions), plural(len(res.Plan.Actions), "action", "actions"))
	}
	if err != nil {
		return ledger.RunDoc{}, err
	}
	return eng.Resume(ctx, *runID, opts)
}

// sayPlanned tells what the model planned for runID (never a silent empty
// plan: that nothing will happen, and what the model said instead), and
// whether the plan is recorded.
func sayPlanned(w io.Writer, runID string, res *planner.Result, recorded bool) {
	sayWarnings(w, res)
	if len(res.Plan.Actions) == 0 {
		said := oneLine(res.Reply)
		if said == "" {
			said = "(nothing)"
		}
		fmt.Fprintf(w, "docket: run %s: the model planned no actions, so nothing will run; it said: %s\n", runID, said)
	}
	if !recorded {
		return
	}
	fmt.Fprintf(w, "docket: run %s: planned %d %s in %d model %s (%d tokens); the plan is recorded\n", runID,
		len(res.Plan.Actions), plural(len(res.Plan.Actions), "action", "actions"), res.Rounds, plural(res.Rounds, "turn", "turns"), res.Usage.TotalTokens)
}
