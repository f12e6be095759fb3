package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/plan"
)

func init() {
	register("replay", "record an edited plan as the next revision of a run and perform what changed", func(env Env) command { return &replayCmd{env: env} })
	register("fork", "start a new run from a run's plan: everything runs again, on purpose", func(env Env) command { return &forkCmd{env: env} })
}

// replayCmd is `docket replay RUN --plan FILE`.
type replayCmd struct{ env Env }

func (c *replayCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("replay", "replay [--data DIR] --tools FILE RUN --plan FILE", c.env.Stderr)
	f := addRunFlags(fs, c.env.Getenv)
	planPath := fs.String("plan", "", "the edited plan (JSON)")
	dryRun := fs.Bool("dry-run", false, "record nothing: print what the replay would do with each action (keep its output, run, wait for approvals, mirror a failure, be denied or skipped)")
	pos, err := parseArgs(fs, args)
	c.env.As = *f.as
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("replay needs exactly one run id")
	}
	runID := pos[0]
	p, err := readPlan(*planPath)
	if err != nil {
		return err
	}
	if *dryRun {
		return c.preview(ctx, f, runID, p, *planPath)
	}
	if f.srv.remote() {
		return f.remote(ctx, c.env, runID, "/replay", map[string]any{"plan": p})
	}
	s, err := f.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer s.close()
	if err := checkPlan(p, *planPath, s.tools); err != nil {
		return err
	}
	doc, err := s.engine.Replay(ctx, runID, p, &executor.RunOptions{AcceptToolsChange: *f.acceptTools})
	return finish(c.env, doc, notFound(toolsChanged(err, runID), runID), *f.data, *f.tools)
}

// forkCmd is `docket fork RUN [--run-id NEW]`.
type forkCmd struct{ env Env }

func (c *forkCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("fork", "fork [--data DIR] --tools FILE RUN [--run-id NEW] [--approve all|safe|none]", c.env.Stderr)
	f := addRunFlags(fs, c.env.Getenv)
	newID := fs.String("run-id", "", "id of the new run (default: a new random id, printed; pass it again to resume the fork)")
	approve := fs.String("approve", "", "approval policy of the new run (default: the original run's)")
	pos, err := parseArgs(fs, args)
	c.env.As = *f.as
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("fork needs exactly one run id")
	}
	runID := pos[0]
	var policy executor.Policy
	if *approve != "" {
		if policy, err = parsePolicy(*approve); err != nil {
			return err
		}
	}
	if *newID == runID {
		return usageError("--run-id of a fork must differ from the run it forks (to run the same run again, use docket run)")
	}
	if f.srv.remote() {
		return c.remote(ctx, f, runID, *newID, policy)
	}
	s, err := f.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer s.close()
	orig, err := s.ledger.GetRun(ctx, runID)
	if err != nil {
		return notFound(fmt.Errorf("reading run %s: %w", runID, err), runID)
	}
	if policy == "" {
		policy = executor.Policy(orig.Policy)
	}
	if *newID == "" {
		*newID, err = newRunID()
		if err != nil {
			return err
		}
		fmt.Fprintf(c.env.Stderr, "docket: forking run %s as run %s\n", runID, *newID)
	}
	doc, err := s.engine.Fork(ctx, runID, *newID, &executor.RunOptions{Policy: policy, AcceptToolsChange: *f.acceptTools})
	return finish(c.env, doc, notFound(toolsChanged(err, *newID), runID), *f.data, *f.tools)
}

// newRunID returns a fresh random run id ("run_" + 16 hex digits).
func newRunID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a run id: %w", err)
	}
	return "run_" + hex.EncodeToString(b[:]), nil
}

// remote forks through the service (--server) and reports the new run once
// it stops.
func (c *forkCmd) remote(ctx context.Context, f runFlags, runID, newID string, policy executor.Policy) error {
	cl, err := f.srv.client(c.env)
	if err != nil {
		return err
	}
	var created struct {
		RunID string `json:"run_id"`
	}
	if err := cl.do(ctx, "POST", "/v1/runs/"+url.PathEscape(runID)+"/fork", map[string]any{"run_id": newID, "approve": string(policy)}, nil, &created); err != nil {
		return err
	}
	if newID == "" {
		fmt.Fprintf(c.env.Stderr, "docket: forked run %s as run %s\n", runID, created.RunID)
	}
	doc, err := cl.settled(ctx, created.RunID)
	return remoteFinish(c.env, doc, err, *f.srv.url)
}

// preview is `docket replay --dry-run`: the replay's preview as JSON
// ({"run_id", "dry_run": true, "actions": [{"action_id", "tool", "outcome",
// "key"?, "approval"?, "undone"?, "why"}]}), locally or through the service;
// nothing is recorded. The outcomes are executor.PreviewStep's.
func (c *replayCmd) preview(ctx context.Context, f runFlags, runID string, p *plan.Plan, planPath string) error {
	var out struct {
		RunID   string                 `json:"run_id"`
		DryRun  bool                   `json:"dry_run"`
		Actions []executor.PreviewStep `json:"actions"`
	}
	if f.srv.remote() {
		cl, err := f.srv.client(c.env)
		if err != nil {
			return err
		}
		if err := cl.do(ctx, "POST", "/v1/runs/"+url.PathEscape(runID)+"/replay", map[string]any{"plan": p, "dry_run": true}, nil, &out); err != nil {
			return err
		}
	} else {
		s, err := f.open(ctx, c.env)
		if err != nil {
			return err
		}
		defer s.close()
		if err := checkPlan(p, planPath, s.tools); err != nil {
			return err
		}
		steps, err := s.engine.PreviewReplay(ctx, runID, p)
		if err != nil {
			return notFound(err, runID)
		}
		out.RunID, out.DryRun, out.Actions = runID, true, steps
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = c.env.Stdout.Write(append(b, '\n'))
	return err
}
