package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

func init() {
	register("step", "one workflow-engine step: a request on stdin, the Run JSON on stdout; re-send to continue", func(env Env) command { return &stepCmd{env: env} })
}

// stepCmd is `docket step`, the language-neutral way to run docket as a step
// of another workflow engine (cmd/docket/README.md, step). The request on stdin
// carries the step's identity as the run id, a plan or a goal, and an
// approval policy:
//
//	{"run_id": "ID", "plan": {...} | "goal": "TEXT", "approve": "safe"|"all"|"none"}
//
// Sending the same request again continues the same run: after a crash or a
// timeout it resumes from the ledger and repeats no effect; while the run
// waits for a person it answers "paused" (exit 3), so the host can poll by
// re-sending; once the run is done it returns the same result (exit 0 or 1)
// without calling any tool. A request with only the run id continues an
// existing run. The policy is stored when the run is created; a later
// request cannot change it.
type stepCmd struct {
	env Env
	key *ledgerKey // the ledger's encryption key
}

const stepUsage = "step [--data DIR] --tools FILE < request.json   (request: {\"run_id\", \"plan\"? | \"goal\"?, \"approve\"?})"

// maxStepRequest bounds the request read from stdin: a plan as large as
// `docket run --plan` takes (plan.MaxDocumentSize) and 1 MiB for the rest.
const maxStepRequest = plan.MaxDocumentSize + 1<<20

// stepRequest is the request on stdin.
type stepRequest struct {
	RunID   string          `json:"run_id"`
	Goal    string          `json:"goal,omitempty"`
	Plan    json.RawMessage `json:"plan,omitempty"`
	Approve string          `json:"approve,omitempty"`

	// named: the request names its policy ("approve"), which then is part
	// of its identity (executor.Request); Approve defaults to safe.
	named bool
}

func (c *stepCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("step", stepUsage, c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	c.key = ledgerFlag(fs, data, c.env.Getenv)
	toolsPath := fs.String("tools", "", "tools file (JSON, version 1)")
	policyPath := policyFlag(fs)
	as := identityFlag(fs)
	pos, err := parseArgs(fs, args)
	c.env.PolicyFile, c.env.As = *policyPath, *as
	if err != nil && exitCode(err) == exitOK {
		return err // -h: runEnv prints the usage on stdout
	}
	var req stepRequest
	doc, err := func() (ledger.RunDoc, error) {
		if err != nil {
			return ledger.RunDoc{}, err
		}
		if len(pos) > 0 {
			return ledger.RunDoc{}, usageError("step takes no positional arguments (got %q): the request comes on stdin", pos)
		}
		if req, err = readStepRequest(c.env.Stdin); err != nil {
			return ledger.RunDoc{}, err
		}
		return c.exec(ctx, *data, *toolsPath, req)
	}()
	// cmd/docket/README.md, step: while a step waits for a person it says "paused", whether an
	// approval or a review is awaited; the actions' statuses tell which.
	outDoc := doc
	if outDoc.Run.Status == ledger.RunAwaitingApproval {
		outDoc.Run.Status = ledger.RunPaused
	}
	// The Run JSON is printed when there is a run to show, as the ledger holds
	// it; a refusal before that (bad input, a busy data directory, a tool
	// server out of reach) prints nothing on stdout rather than a made-up run.
	if outDoc.Run.ID != "" {
		if werr := writeDoc(c.env.Stdout, c.env.traced(outDoc)); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	return runOutcome(doc, *data, *toolsPath)
}

// readStepRequest decodes the request strictly: unknown fields, a missing run
// id, both a plan and a goal, or trailing data are bad input.
func readStepRequest(r io.Reader) (stepRequest, error) {
	var req stepRequest
	if r == nil {
		return req, usageError("step reads its request on stdin, which is not available")
	}
	data, err := io.ReadAll(io.LimitReader(r, maxStepRequest+1))
	if err != nil {
		return req, usageError("reading the request from stdin: %v", err)
	}
	if len(data) > maxStepRequest {
		n, _ := io.Copy(io.Discard, io.LimitReader(r, 1<<30))
		return req, usageError("the request on stdin is %d bytes or more, larger than the limit of %d bytes (a 16 MiB plan + 1 MiB)", int64(len(data))+n, maxStepRequest)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return req, usageError(`step needs a request on stdin: {"run_id": "ID", "plan": {...} | "goal": "TEXT", "approve": "safe"}`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, usageError("the request on stdin is not valid (want {\"run_id\", \"plan\"? | \"goal\"?, \"approve\"?}): %v", err)
	}
	if bytes.Equal(bytes.TrimSpace(req.Plan), []byte("null")) {
		req.Plan = nil // "plan": null is no plan
	}
	if dec.More() {
		return req, usageError("the request on stdin has data after the JSON object")
	}
	switch {
	case req.RunID == "":
		return req, usageError(`the request needs "run_id": the step's identity in the host engine, so that re-sending it continues the same run`)
	case req.Goal != "" && len(req.Plan) > 0:
		return req, usageError(`give either "plan" or "goal" in the request, not both`)
	}
	// No "approve": a new run gets safe, and the request continues a run
	// created with any policy (executor.Request).
	req.named = req.Approve != ""
	if req.Approve == "" {
		req.Approve = string(executor.PolicySafe)
	}
	if _, err := parsePolicy(req.Approve); err != nil {
		return req, usageError(`"approve" must be all, safe or none, not %q`, req.Approve)
	}
	return req, nil
}

func (c *stepCmd) exec(ctx context.Context, data, toolsPath string, req stepRequest) (ledger.RunDoc, error) {
	var p *plan.Plan
	if len(req.Plan) > 0 {
		var err error
		if p, err = plan.Decode(req.Plan); err != nil {
			return ledger.RunDoc{}, withCode(exitBad, describeProblems("the request's plan is invalid", err))
		}
	}
	reg, closeTools, err := loadTools(ctx, toolsPath, c.env)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	defer closeTools()
	if p != nil {
		if err := checkPlan(p, "in the request", reg); err != nil {
			return ledger.RunDoc{}, err
		}
	}
	l, err := openLedger(ctx, data, c.key, c.env.Stderr)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	defer l.Close()
	eng, err := newEngine(c.env, l, reg)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	if p == nil && req.Goal == "" {
		// A request naming only the run continues it.
		if _, err := l.GetRun(ctx, req.RunID); errors.Is(err, ledger.ErrNotFound) {
			return ledger.RunDoc{}, withCode(exitBad, fmt.Errorf(`run %s does not exist: the first request for a step needs "plan" or "goal"`, req.RunID))
		} else if err != nil {
			return ledger.RunDoc{}, fmt.Errorf("reading run %s: %w", req.RunID, err)
		}
		doc, err := eng.Resume(ctx, req.RunID, nil)
		if err != nil && doc.Run.ID == "" {
			doc, _ = storedDoc(ctx, l, req.RunID)
		}
		return doc, toolsChanged(err, req.RunID)
	}
	doc, err := c.create(ctx, eng, l, reg, req, p)
	if err != nil && doc.Run.ID == "" {
		doc, _ = storedDoc(ctx, l, req.RunID)
	}
	return doc, toolsChanged(err, req.RunID)
}

// create creates the step's run from its plan or goal (executor/runs: the
// same request again continues it and never plans again; another request
// under the run id is refused) and drives it.
func (c *stepCmd) create(ctx context.Context, eng *executor.Engine, l ledger.Store, reg *tools.Registry, req stepRequest, p *plan.Plan) (ledger.RunDoc, error) {
	// The request's identity, by the rule POST /v1/runs, docket run and
	// docket plan share (executor.SameRequest): the policy is part of it
	// when the request names one.
	ident := executor.Request{Plan: p, Goal: req.Goal}
	if req.named {
		ident.Policy = executor.Policy(req.Approve)
	}
	if _, err := ident.Hash(); err != nil {
		return ledger.RunDoc{}, withCode(exitBad, err)
	}
	cr := runs.Request{RunID: req.RunID, Identity: &ident, Options: &executor.RunOptions{Policy: executor.Policy(req.Approve), Creator: reviewer(c.env)}}
	if p == nil {
		cr.Planner = c.goalPlanner(reg, req)
	}
	_, doc, err := runs.Run(ctx, eng, l, cr)
	switch {
	case errors.Is(err, executor.ErrRequestMismatch):
		doc, _ = storedDoc(ctx, l, req.RunID)
		err = withCode(exitBad, fmt.Errorf("%w: a step's run id must identify one request (derive it from the host's step identity and the plan's or goal's version)", err))
	case errors.Is(err, executor.ErrPlanMismatch):
		err = withCode(exitBad, fmt.Errorf("run %s was recorded with a different plan: a step's run id must identify one plan (derive it from the host's step identity and the plan's version) (%w)", req.RunID, err))
	}
	return doc, err
}

// goalPlanner plans a new run from the goal with the model (OPENAI_BASE_URL,
// OPENAI_API_KEY, OPENAI_MODEL). A crash while the model thinks records
// nothing; the re-sent request plans again.
func (c *stepCmd) goalPlanner(reg *tools.Registry, req stepRequest) func(context.Context) (*plan.Plan, error) {
	return func(ctx context.Context) (*plan.Plan, error) {
		cfg := planner.ConfigFromEnv(c.env.Getenv)
		cfg.Tools = reg
		cfg.Logger = cliLogger(c.env.Stderr)
		if c.env.tracing != nil {
			cfg.TracerProvider = c.env.tracing.Provider()
		}
		pl, err := planner.New(cfg)
		if err != nil {
			return nil, withCode(exitBad, fmt.Errorf("planning the goal needs a model (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL): %w", err))
		}
		res, err := pl.Plan(ctx, planner.Request{Goal: req.Goal})
		if err != nil {
			return nil, fmt.Errorf("planning run %s: %w", req.RunID, err)
		}
		return res.Plan, nil
	}
}
