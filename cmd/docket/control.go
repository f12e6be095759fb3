package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/tools"
)

func init() {
	register("pause", "pause a run: nothing new starts (in-flight actions finish) until docket resume", func(env Env) command { return &pauseCmd{env: env} })
	register("resume", "resume a run a person paused and continue it", func(env Env) command { return &resumeCmd{env: env} })
	exitMappers = append(exitMappers, busyCode)
}

// busyCode: a change refused because the run has work in progress (an edit
// or a replay while it is driven, a replay over an unresolved action) is bad
// input for now (2), with a message that says what to do first.
func busyCode(err error) (int, bool) {
	if errors.Is(err, executor.ErrBusy) {
		return exitBad, true
	}
	return 0, false
}

// pauseCmd is `docket pause RUN`.
type pauseCmd struct{ env Env }

func (c *pauseCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("pause", "pause [--data DIR] RUN [--server URL --token T]", c.env.Stderr)
	f := addRunFlags(fs, c.env.Getenv)
	pos, err := parseArgs(fs, args)
	c.env.As = *f.as
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("pause needs exactly one run id")
	}
	runID := pos[0]
	if f.srv.remote() {
		return f.remote(ctx, c.env, runID, "/pause", map[string]any{})
	}
	// Pausing runs nothing: the tools file is optional.
	reg, err := tools.NewRegistry()
	if err != nil {
		return err
	}
	closeTools := func() {}
	if *f.tools != "" {
		if reg, closeTools, err = loadTools(ctx, *f.tools, c.env); err != nil {
			return err
		}
	}
	defer closeTools()
	l, err := openRecorded(ctx, *f.data, f.key, c.env.Stderr)
	if err != nil {
		return err
	}
	defer l.Close()
	eng, err := newEngine(c.env, l, reg)
	if err != nil {
		return err
	}
	if err := eng.Pause(ctx, runID, reviewer(c.env)); err != nil {
		return notFound(fmt.Errorf("pausing run %s: %w", runID, err), runID)
	}
	doc, err := l.Doc(ctx, runID)
	return finish(c.env, doc, err, *f.data, *f.tools)
}

// resumeCmd is `docket resume RUN`: it lifts a person's pause and drives the
// run on. It is the only command that does: run, step, approve and resolve
// leave a person's pause in place.
type resumeCmd struct{ env Env }

func (c *resumeCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("resume", "resume [--data DIR] --tools FILE RUN [--accept-tools-change] [--server URL --token T]", c.env.Stderr)
	f := addDriveFlags(fs, c.env.Getenv)
	pos, err := parseArgs(fs, args)
	c.env.As = *f.as
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("resume needs exactly one run id")
	}
	runID := pos[0]
	if f.srv.remote() {
		return f.remote(ctx, c.env, runID, "/resume", map[string]any{})
	}
	s, err := f.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.engine.Unpause(ctx, runID, reviewer(c.env)); err != nil {
		return notFound(fmt.Errorf("resuming run %s: %w", runID, err), runID)
	}
	return f.resume(ctx, c.env, s, runID)
}
