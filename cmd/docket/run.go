package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
)

func init() {
	register("run", "record a plan and perform it exactly once in effect", func(env Env) command { return &runCmd{env: env} })
}

// runCmd is `docket run`: it records the plan (or checks that the recorded one
// is identical), executes it and prints the Run JSON on stdout whatever the
// exit code.
type runCmd struct {
	env Env
	// leaseWait bounds the wait for other processes' claims on the shared
	// ledger (--lease-wait).
	leaseWait time.Duration
	// waitTimers: stay up while the run waits for a time (--wait-timers).
	waitTimers bool
	// key is the ledger's encryption key.
	key *ledgerKey
	// retention is the new run's own retention (--retention).
	retention time.Duration
}

const runUsage = "run [--data DIR | --ledger URL [--lease-wait 1m]] --tools FILE (--plan FILE | --goal TEXT [--model NAME] [--base-url URL]) [--run-id ID] [--approve all|safe|none] [--retention D] [--accept-tools-change] [--wait-timers=false] [--server URL --token T]"

func (c *runCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("run", runUsage, c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	c.key = ledgerFlag(fs, data, c.env.Getenv)
	toolsPath := fs.String("tools", "", "tools file (JSON, version 1)")
	planPath := fs.String("plan", "", "plan file (JSON) to record and perform")
	goal := fs.String("goal", "", "goal to plan with the model (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL); once the plan is recorded the model is never called again for this run")
	runID := fs.String("run-id", "", "run id (default: derived from the plan, so an identical rerun resumes)")
	approve := fs.String("approve", "", "approval policy stored with a new run: all, safe or none (default safe; given, a rerun must name the policy the run was created with)")
	acceptTools := fs.Bool("accept-tools-change", false, "resume even though the tool definitions changed since the run started")
	retentionFlag(fs, &c.retention, "keep a new run this long after it ended (30d, 2w, 12h), then docket gc or serve's sweep deletes it (never while a key of its keyed calls is honoured; a longer global --retention wins); default: as the global retention says, else for ever")
	leaseWait := leaseWaitFlag(fs)
	waitTimers := fs.Bool("wait-timers", true, "stay up while the run waits for its actions' times (not_before, after) and drive it then; false: exit 7 once only waiting actions are left, saying until when (docket serve wakes the run)")
	policyPath := policyFlag(fs)
	as := identityFlag(fs)
	mf := addModelFlags(fs)
	sf := addServerFlags(fs)

	pos, err := parseArgs(fs, args)
	if err != nil && exitCode(err) == exitOK {
		return err // -h: runEnv prints the usage on stdout
	}
	c.env.PolicyFile, c.env.As = *policyPath, *as
	policy := executor.Policy(*approve)
	doc, err := func() (ledger.RunDoc, error) {
		if err != nil {
			return ledger.RunDoc{}, err
		}
		if len(pos) > 0 {
			return ledger.RunDoc{}, usageError("run takes no positional arguments (got %q); see docket run -h", pos)
		}
		if sf.remote() {
			return c.remote(ctx, sf, *planPath, *goal, runID, policy)
		}
		c.leaseWait, c.waitTimers = *leaseWait, *waitTimers
		return c.exec(ctx, *data, *toolsPath, *planPath, *goal, runID, policy, *acceptTools, mf)
	}()
	// The Run JSON is printed when there is a run to show, as the ledger (or
	// the service) holds it. A refusal before that (bad input, a busy data
	// directory, a service out of reach) prints nothing on stdout: a made-up
	// run would claim a status nobody knows.
	if doc.Run.ID != "" {
		if werr := writeDoc(c.env.Stdout, c.env.traced(doc)); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	if sf.remote() {
		return remoteOutcome(doc, *sf.url)
	}
	return runOutcome(doc, *data, *toolsPath)
}

// remote is `docket run --server URL`: the service records the plan (or
// plans the goal with its model) and performs it; the command waits until
// the run stops and reports it like a local run. Without --run-id the id is
// derived from the plan, or from the goal, so the same command again is the
// same request (the service answers it with the run, repeating nothing).
func (c *runCmd) remote(ctx context.Context, sf *serverFlags, planPath, goal string, runID *string, policy executor.Policy) (ledger.RunDoc, error) {
	if err := checkPolicy(policy); err != nil {
		return ledger.RunDoc{}, err
	}
	cl, err := sf.client(c.env)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	body := map[string]any{}
	if policy != "" { // named: part of the request's identity (executor.Request)
		body["approve"] = string(policy)
	}
	switch {
	case planPath != "" && goal != "":
		return ledger.RunDoc{}, usageError("give either --plan FILE or --goal TEXT, not both")
	case goal != "":
		body["goal"] = goal
		if *runID == "" {
			*runID = planner.GoalRunID(planner.Request{Goal: goal}, "server")
		}
	case planPath != "":
		p, err := readPlan(planPath)
		if err != nil {
			return ledger.RunDoc{}, err
		}
		if *runID == "" {
			if *runID, err = executor.DeriveRunID(p); err != nil {
				return ledger.RunDoc{}, withCode(exitBad, err)
			}
		}
		raw, err := os.ReadFile(planPath)
		if err != nil {
			return ledger.RunDoc{}, usageError("reading plan: %v", err)
		}
		body["plan"] = json.RawMessage(raw)
	default:
		return ledger.RunDoc{}, usageError("--plan FILE is required, or --goal TEXT (see docket run -h)")
	}
	body["run_id"] = *runID
	if c.retention > 0 {
		body["retention"] = plan.FormatDuration(c.retention)
	}
	if err := cl.do(ctx, "POST", "/v1/runs", body, nil, nil); err != nil {
		if exitCode(err) == exitSentUnknown {
			return ledger.RunDoc{}, withCode(exitSentUnknown, fmt.Errorf("run %s may have been recorded, and its calls started, by the service at %s: the request was sent but its answer was lost (%w); "+
				"see it with docket runs show --server %s %s once the service answers, or run this same command again (it repeats nothing)", *runID, cl.base, err, cl.base, *runID))
		}
		return ledger.RunDoc{}, err
	}
	doc, err := cl.settled(ctx, *runID)
	if err != nil && ctx.Err() == nil && errors.Is(err, errUnreachable) {
		// The service accepted the run: whatever became of the connection
		// since, "nothing was sent" is not true of it.
		return doc, withCode(exitSentUnknown, fmt.Errorf("run %s was recorded by the service at %s, which went away before the run stopped (%v); its calls may have been made: "+
			"see where it is with docket runs show --server %s %s once the service answers, or run this same command again (it repeats nothing)",
			*runID, cl.base, plainUnreachable(err), cl.base, *runID))
	}
	return doc, err
}

// plainUnreachable is what went wrong with the connection, without the
// advice that fits a request nobody knows was received.
func plainUnreachable(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// remoteOutcome is outcome for a run done through a service: a run the
// service stopped driving while it was still running (it is shutting down)
// has an outcome nobody knows yet (exit 6), not a failure.
func remoteOutcome(doc ledger.RunDoc, server string) error {
	if doc.Run.Status == ledger.RunRunning && !waitingFor(doc) {
		return withCode(exitSentUnknown, fmt.Errorf("run %s is still running, but the service at %s stopped driving it (it may be shutting down); its calls may have been made: "+
			"run this same command again once the service answers (it repeats nothing), or see it with docket runs show --server %s %s", doc.Run.ID, server, server, doc.Run.ID))
	}
	return outcome(doc, " --server "+server)
}

// exec does the work of `docket run`. It sets *runID once it is known, so the
// refusal document names the run.
func (c *runCmd) exec(ctx context.Context, data, toolsPath, planPath, goal string, runID *string, policy executor.Policy, acceptTools bool, mf *modelFlags) (ledger.RunDoc, error) {
	if err := checkPolicy(policy); err != nil {
		return ledger.RunDoc{}, err
	}
	switch {
	case planPath != "" && goal != "":
		return ledger.RunDoc{}, usageError("give either --plan FILE or --goal TEXT, not both")
	case goal != "":
		return c.execGoal(ctx, data, toolsPath, goal, runID, policy, acceptTools, mf)
	case planPath == "":
		return ledger.RunDoc{}, usageError("--plan FILE is required, or --goal TEXT (see docket run -h)")
	}
	if toolsPath == "" {
		return ledger.RunDoc{}, usageError("--tools FILE is required")
	}
	p, err := readPlan(planPath)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	reg, closeTools, err := loadTools(ctx, toolsPath, c.env)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	defer closeTools()
	if err := checkPlan(p, planPath, reg); err != nil {
		return ledger.RunDoc{}, err
	}
	if *runID == "" {
		id, err := executor.DeriveRunID(p)
		if err != nil {
			return ledger.RunDoc{}, withCode(exitBad, err)
		}
		*runID = id
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
	// The request's identity, by the rule POST /v1/runs and docket step
	// share (executor/runs): a run any of them created with this plan (and
	// the named policy, if any) is continued; another request's is refused,
	// at once (before waiting for any other process's lease).
	ident := executor.Request{Plan: p, Policy: policy}
	req := runs.Request{RunID: *runID, Identity: &ident,
		Options: &executor.RunOptions{Policy: policy, AcceptToolsChange: acceptTools, Creator: reviewer(c.env), Retention: c.retention}}
	var doc ledger.RunDoc
	if err = runs.Check(ctx, l, req); err == nil {
		doc, err = driveShared(ctx, l, *runID, c.leaseWait, c.env.Stderr, func() (ledger.RunDoc, error) {
			_, doc, err := runs.Run(ctx, eng, l, req)
			if !c.waitTimers {
				return doc, err
			}
			return untilDone(ctx, c.env.Stderr, l, eng, doc, err)
		})
	}
	if err != nil && doc.Run.ID == "" {
		// Show the run that holds the id (if any), as it is.
		doc, _ = storedDoc(ctx, l, *runID)
	}
	if errors.Is(err, executor.ErrPlanMismatch) {
		err = withCode(exitBad, fmt.Errorf("run %s was created by a different request: pass a new --run-id to run this plan as a new run, or use docket replay to record it as a revision of that run (%w)", *runID, err))
	}
	return doc, noSpace(toolsChanged(err, *runID), data)
}

// execGoal is `docket run --goal`: the planner plans the run once (through
// runGoal, which reuses a recorded plan without calling the model), the
// executor records and performs it.
func (c *runCmd) execGoal(ctx context.Context, data, toolsPath, goal string, runID *string, policy executor.Policy, acceptTools bool, mf *modelFlags) (ledger.RunDoc, error) {
	if strings.TrimSpace(goal) == "" {
		return ledger.RunDoc{}, usageError("--goal must not be empty")
	}
	reg, closeTools, err := loadTools(ctx, toolsPath, c.env)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	defer closeTools()
	l, err := openLedger(ctx, data, c.key, c.env.Stderr)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	defer l.Close()
	eng, err := newEngine(c.env, l, reg)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	if *runID == "" {
		*runID = planner.GoalRunID(planner.Request{Goal: goal}, reg.Hash()) // as runGoal derives it
	}
	doc, err := driveShared(ctx, l, *runID, c.leaseWait, c.env.Stderr, func() (ledger.RunDoc, error) {
		doc, err := runGoal(ctx, c.env, mf, reg, l, eng, goal, runID, &executor.RunOptions{Policy: policy, AcceptToolsChange: acceptTools, Creator: reviewer(c.env), Retention: c.retention})
		if !c.waitTimers {
			return doc, err
		}
		return untilDone(ctx, c.env.Stderr, l, eng, doc, err)
	})
	if err != nil && doc.Run.ID == "" {
		doc, _ = storedDoc(ctx, l, *runID)
	}
	if errors.Is(err, planner.ErrConfig) {
		err = usageError("planning from a goal needs a model: set OPENAI_MODEL (and OPENAI_BASE_URL, OPENAI_API_KEY) or pass --model; or write the plan and pass --plan FILE (%v)", err)
	}
	return doc, noSpace(toolsChanged(err, *runID), data)
}

// toolsChanged explains executor.ErrToolsChanged (exit 2) and what to do about it.
func toolsChanged(err error, runID string) error {
	if errors.Is(err, executor.ErrToolsChanged) {
		return withCode(exitBad, fmt.Errorf("the tool definitions changed since run %s started; check the change and pass --accept-tools-change to resume with the new ones (%w)", runID, err))
	}
	return err
}

// checkPolicy checks an --approve value; "" (not given) is allowed: a new run
// gets safe, and a rerun continues whatever policy the run was created with.
func checkPolicy(p executor.Policy) error {
	if p == "" {
		return nil
	}
	_, err := parsePolicy(string(p))
	return err
}
