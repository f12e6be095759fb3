package main

import (
	"context"
	"fmt"
	"net/url"
)

func init() {
	register("run-now", "run an action that waits for its time (not_before, after) at once, and continue the run", func(env Env) command { return &runNowCmd{env: env} })
}

// runNowCmd is `docket run-now RUN ACTION`: a person makes a waiting action
// due at once (recorded with who), then the run continues.
type runNowCmd struct{ env Env }

func (c *runNowCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("run-now", "run-now [--data DIR] --tools FILE RUN ACTION [--server URL --token T]", c.env.Stderr)
	f := addDriveFlags(fs, c.env.Getenv)
	runID, action, err := f.runAndAction(fs, "run-now", args, &c.env)
	if err != nil {
		return err
	}
	if f.srv.remote() {
		return f.remote(ctx, c.env, runID, "/actions/"+url.PathEscape(action)+"/run_now", map[string]any{})
	}
	s, err := f.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.engine.RunNow(ctx, runID, action, reviewer(c.env)); err != nil {
		return notFound(fmt.Errorf("running action %s of run %s now: %w", action, runID, err), runID)
	}
	return f.resume(ctx, c.env, s, runID)
}
