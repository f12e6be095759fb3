// Package runs creates runs: it is the one place where a run id, the
// identity of the request that asks for the run, and a plan (given, or
// planned once from a goal) become a run recorded in the ledger, which the
// executor then drives. POST /v1/runs (ui), docket mcp (executor/mcpserve)
// and the commands of cmd/docket (run, step, plan, chat, demo, eval) create
// their runs here.
//
// The rule it applies, for every caller:
//
//   - An existing run is continued only by the request that created it
//     (executor.SameRequest); another request is refused with an error
//     wrapping executor.ErrRequestMismatch (and so executor.ErrPlanMismatch).
//   - A run planned from a goal is planned once. While Request.Planner runs
//     nothing is written, so a crash then leaves nothing recorded and the
//     next attempt plans again; once the plan is recorded it is read back
//     (revision 1) and the planner is never called again for that run.
//   - The plan that creates the run carries the request's identity
//     (executor.Request.Stamp) and is recorded durably (executor
//     Engine.Record, revision 1) before any action is claimed.
//
// It imports executor, ledger and plan. It does not import planner: a run
// planned from a goal gets its plan from a plain function, so the planner
// needs nothing of the executor, and programs that never plan (docket mcp)
// carry no model client.
package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// Request is a run to create, or to find created and continue.
type Request struct {
	// RunID names the run. Required.
	RunID string
	// Identity is the identity of the request that asks for the run
	// (executor.Request): checked against an existing run
	// (executor.SameRequest) and stamped on the plan that creates a new
	// one. Nil: no identity is checked or recorded, and the plan is the
	// run's only identity (Engine.Record refuses a different one with
	// executor.ErrPlanMismatch), as for MCP calls and chat turns.
	Identity *executor.Request
	// Plan is the plan to record. Nil: Identity.Plan, else Planner plans
	// it.
	Plan *plan.Plan
	// Planner plans the run when no plan is given and the ledger holds
	// none for RunID yet; it is never called for a recorded run. Its errors
	// are returned as they are. It needs Identity: a planned run is
	// recognised by the request it was planned for.
	Planner func(ctx context.Context) (*plan.Plan, error)
	// Options are the run's options (executor.RunOptions): the policy and
	// creator are stored when the run is created; AcceptToolsChange applies
	// to an existing run. Nil: the executor's defaults.
	Options *executor.RunOptions
}

// Result is what Create did.
type Result struct {
	// Run is the run as recorded (zero when recording failed).
	Run ledger.Run
	// Plan is the run's first plan: the given one, the one planned now, or
	// the recorded one read back. Nil when there is none (a refusal, a
	// planning error).
	Plan *plan.Plan
	// Planned says whether Planner was called (this call planned the run).
	Planned bool
	// Created says whether this call recorded the run; false when it
	// existed (the same request again, or another writer of the ledger
	// recorded it meanwhile).
	Created bool
}

// Create records the run req asks for, or checks that the run recorded as
// req.RunID is the one req asks for, without driving it (Engine.Resume
// drives it; Run does both).
//
// It returns an error wrapping executor.ErrRequestMismatch when the run
// exists and another request created it, executor.ErrPlanMismatch when the
// run holds a different plan, executor.ErrInvalidPlan when the identity or
// the plan is invalid, executor.ErrToolsChanged when the run's tool
// definitions changed and req.Options does not accept it, and Planner's
// errors unchanged. Result.Plan and Result.Planned are set whenever a plan
// was given, read back or planned, also with an error from recording it.
func Create(ctx context.Context, eng *executor.Engine, l executor.RunReader, req Request) (Result, error) {
	if err := req.check(eng, l); err != nil {
		return Result{}, err
	}
	exists, err := req.exists(ctx, l)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if res.Plan, res.Planned, err = req.plan(ctx, l, exists); err != nil {
		return res, err
	}
	if req.Identity != nil && !exists {
		if err := req.Identity.Stamp(res.Plan); err != nil {
			return res, err
		}
	}
	res.Run, res.Created, err = eng.Record(ctx, req.RunID, res.Plan, req.Options)
	return res, err
}

// Run is Create, then Engine.Resume under req.Options: it drives the run
// until it is completed, failed, cancelled, paused or awaiting approval, and
// returns the run as the drive left it (the zero RunDoc when Create failed).
func Run(ctx context.Context, eng *executor.Engine, l executor.RunReader, req Request) (Result, ledger.RunDoc, error) {
	res, err := Create(ctx, eng, l, req)
	if err != nil {
		return res, ledger.RunDoc{}, err
	}
	doc, err := eng.Resume(ctx, req.RunID, req.Options)
	return res, doc, err
}

// Check refuses req early, before a caller waits for anything (another
// process's lease, a reservation): an error wrapping
// executor.ErrRequestMismatch when run req.RunID exists and another request
// created it. It returns nil when the run does not exist yet, when req is
// the request that created it, and when req names no identity. Create
// checks the same again.
func Check(ctx context.Context, l executor.RunReader, req Request) error {
	if l == nil {
		return errors.New("runs: checking a run needs its ledger")
	}
	_, err := req.exists(ctx, l)
	return err
}

// check refuses a request no caller should make.
func (req Request) check(eng *executor.Engine, l executor.RunReader) error {
	switch {
	case eng == nil || l == nil:
		return errors.New("runs: creating a run needs an executor engine and its ledger")
	case strings.TrimSpace(req.RunID) == "":
		return fmt.Errorf("%w: empty run id", executor.ErrInvalidPlan)
	case req.Plan == nil && (req.Identity == nil || req.Identity.Plan == nil) && req.Planner == nil:
		return fmt.Errorf("runs: run %s: no plan and no planner", req.RunID)
	case req.Plan == nil && req.Identity == nil:
		return fmt.Errorf("runs: run %s: a planned run needs the identity of the request it is planned for", req.RunID)
	}
	return nil
}

// exists says whether req.RunID is recorded by the request req is (false
// when there is no such run, or req names no identity: Engine.Record then
// judges by the plan).
func (req Request) exists(ctx context.Context, l executor.RunReader) (bool, error) {
	if req.Identity == nil {
		return false, nil
	}
	_, err := executor.SameRequest(ctx, l, req.RunID, *req.Identity)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ledger.ErrNotFound):
		return false, nil
	}
	return false, err
}

// plan is the run's plan: the given one; for an existing run planned from a
// goal, the recorded one (never planned again); else the planner's, with
// nothing written while it plans.
func (req Request) plan(ctx context.Context, l executor.RunReader, exists bool) (p *plan.Plan, planned bool, err error) {
	switch {
	case req.Plan != nil:
		return req.Plan, false, nil
	case req.Identity != nil && req.Identity.Plan != nil:
		return req.Identity.Plan, false, nil
	case exists:
		// Revision 1 is the plan the run was created with (later revisions
		// are replays).
		if p, err = l.Plan(ctx, req.RunID, 1); err != nil {
			return nil, false, fmt.Errorf("runs: reading the plan of run %s: %w", req.RunID, err)
		}
		return p, false, nil
	}
	if p, err = req.Planner(ctx); err != nil {
		return nil, true, err
	}
	if p == nil {
		return nil, true, fmt.Errorf("runs: run %s: the planner returned no plan", req.RunID)
	}
	p.RunID = req.RunID
	return p, true, nil
}
