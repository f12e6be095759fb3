package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

func init() {
	register("approve", "approve actions of a run (all waiting ones by default) and continue it", func(env Env) command { return &approveCmd{env: env} })
	register("reject", "reject an action not started yet: the run then fails (actions not started are skipped, started ones finish and are recorded)", func(env Env) command { return &rejectCmd{env: env} })
	register("resolve", "settle an action whose outcome is unknown (--done, --retry or --skip) and continue the run", func(env Env) command { return &resolveCmd{env: env} })
}

// session is what a command that acts on a recorded run holds open: the
// ledger, the tools and an engine over both.
type session struct {
	ledger ledger.Store
	tools  *tools.Registry
	engine *executor.Engine
	// closeTools stops the tools file's MCP servers.
	closeTools func()
}

func (s *session) close() {
	s.ledger.Close()
	s.closeTools()
}

// runFlags are the flags shared by the commands that continue a run.
type runFlags struct {
	data        *string
	key         *ledgerKey // the ledger's encryption key
	tools       *string
	acceptTools *bool
	policy      *string
	as          *string // --as: who approves (default cli:$USER)
	srv         *serverFlags
	// leaseWait: --lease-wait of a command that drives the run on
	// (addDriveFlags); nil for the others.
	leaseWait *time.Duration
}

// runAndAction parses the arguments of a command on one action of a run
// (reject, resolve, run-now): the run id and the action id, nothing more.
// It sets env.As from --as.
func (f runFlags) runAndAction(fs *flag.FlagSet, name string, args []string, env *Env) (runID, action string, err error) {
	pos, err := parseArgs(fs, args)
	env.As = *f.as
	if err != nil {
		return "", "", err
	}
	if len(pos) != 2 {
		fs.Usage()
		return "", "", usageError("%s needs the run id and one action id", name)
	}
	return pos[0], pos[1], nil
}

func addRunFlags(fs *flag.FlagSet, getenv func(string) string) runFlags {
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, getenv)
	return runFlags{
		data:        data,
		key:         key,
		tools:       fs.String("tools", "", "tools file the run's actions are performed with (required: the run continues)"),
		acceptTools: fs.Bool("accept-tools-change", false, "continue even though the tool definitions changed since the run started"),
		policy:      policyFlag(fs),
		as:          identityFlag(fs),
		srv:         addServerFlags(fs),
	}
}

// addDriveFlags is addRunFlags with --lease-wait, for the commands that
// drive the run on after they act (resume, approve, reject, resolve,
// run-now: runFlags.resume).
func addDriveFlags(fs *flag.FlagSet, getenv func(string) string) runFlags {
	f := addRunFlags(fs, getenv)
	f.leaseWait = leaseWaitFlag(fs)
	return f
}

// remote sends one review or control request to the service (--server), then
// waits until the run stops and reports it like the local command.
func (f runFlags) remote(ctx context.Context, env Env, runID, path string, body any) error {
	cl, err := f.srv.client(env)
	if err != nil {
		return err
	}
	if err := cl.do(ctx, "POST", "/v1/runs/"+url.PathEscape(runID)+path, body, nil, nil); err != nil {
		return err
	}
	doc, err := cl.settled(ctx, runID)
	return remoteFinish(env, doc, err, *f.srv.url)
}

// open loads the tools and opens the ledger and an engine.
func (f runFlags) open(ctx context.Context, env Env) (*session, error) {
	env.PolicyFile = *f.policy
	reg, closeTools, err := loadTools(ctx, *f.tools, env)
	if err != nil {
		return nil, err
	}
	l, err := openRecorded(ctx, *f.data, f.key, env.Stderr)
	if err != nil {
		closeTools()
		return nil, err
	}
	eng, err := newEngine(env, l, reg)
	if err != nil {
		l.Close()
		closeTools()
		return nil, err
	}
	return &session{ledger: l, tools: reg, engine: eng, closeTools: closeTools}, nil
}

// resume continues the run, prints its Run JSON and returns the result its
// status calls for.
//
// On the shared ledger it first waits, up to --lease-wait, for the leases of
// other processes' claims on the run (a process killed while it performed
// an action holds its claim until its lease expires), as docket run does.
// f comes from addDriveFlags.
func (f runFlags) resume(ctx context.Context, env Env, s *session, runID string) error {
	doc, err := driveShared(ctx, s.ledger, runID, *f.leaseWait, env.Stderr, func() (ledger.RunDoc, error) {
		return s.engine.Resume(ctx, runID, &executor.RunOptions{AcceptToolsChange: *f.acceptTools})
	})
	if err != nil && doc.Run.ID == "" {
		doc, _ = storedDoc(ctx, s.ledger, runID) // the run as it is (busy: untouched)
	}
	return finish(env, doc, toolsChanged(err, runID), *f.data, *f.tools)
}

// finish prints doc (when there is one) and turns err or the run's status into
// the command's result.
func finish(env Env, doc ledger.RunDoc, err error, dataDir, toolsPath string) error {
	if doc.Run.ID != "" {
		if werr := writeDoc(env.Stdout, env.traced(doc)); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	return runOutcome(doc, dataDir, toolsPath)
}

// notFound rewrites ledger.ErrNotFound into a message naming the run.
func notFound(err error, runID string) error {
	if errors.Is(err, ledger.ErrNotFound) {
		return withCode(exitBad, fmt.Errorf("no run %s (or no such action in it) in this data directory: %w", runID, err))
	}
	return err
}

// approveCmd is `docket approve RUN [ACTION...]`.
type approveCmd struct{ env Env }

func (c *approveCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("approve", "approve [--data DIR] --tools FILE RUN [ACTION...]", c.env.Stderr)
	f := addDriveFlags(fs, c.env.Getenv)
	pos, err := parseArgs(fs, args)
	c.env.As = *f.as
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		fs.Usage()
		return usageError("approve needs the run id")
	}
	runID, actions := pos[0], pos[1:]
	if f.srv.remote() {
		return f.remote(ctx, c.env, runID, "/approve", approveBody(actions))
	}
	s, err := f.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer s.close()
	approve := func() error { return s.engine.Approve(ctx, runID, actions, reviewer(c.env)) }
	if len(actions) == 0 { // `docket approve RUN`: the whole plan, as documented
		approve = func() error { return s.engine.ApproveAll(ctx, runID, reviewer(c.env)) }
	}
	if err := approve(); err != nil {
		return notFound(fmt.Errorf("approving %s: %w", describeTargets(runID, actions), err), runID)
	}
	return f.resume(ctx, c.env, s, runID)
}

// approveBody is the body of POST /v1/runs/{id}/approve: the named actions,
// or, when none are named, the whole plan said explicitly (the service never
// reads a missing or empty list as "everything").
func approveBody(actions []string) map[string]any {
	if len(actions) == 0 {
		return map[string]any{"all": true}
	}
	return map[string]any{"actions": actions}
}

func describeTargets(runID string, actions []string) string {
	if len(actions) == 0 {
		return "every waiting action of run " + runID
	}
	return "action " + strings.Join(actions, ", ") + " of run " + runID
}

// rejectCmd is `docket reject RUN ACTION [--reason R]`.
type rejectCmd struct{ env Env }

func (c *rejectCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("reject", "reject [--data DIR] --tools FILE RUN ACTION [--reason R]", c.env.Stderr)
	f := addDriveFlags(fs, c.env.Getenv)
	reason := fs.String("reason", "", "why (recorded with the rejection)")
	runID, action, err := f.runAndAction(fs, "reject", args, &c.env)
	if err != nil {
		return err
	}
	if f.srv.remote() {
		return f.remote(ctx, c.env, runID, "/actions/"+url.PathEscape(action)+"/reject", map[string]any{"reason": *reason})
	}
	s, err := f.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.engine.Reject(ctx, runID, action, *reason, reviewer(c.env)); err != nil {
		return notFound(fmt.Errorf("rejecting action %s of run %s: %w", action, runID, err), runID)
	}
	return f.resume(ctx, c.env, s, runID)
}

// resolveCmd is `docket resolve RUN ACTION (--done OUTPUT_JSON | --retry | --skip)`.
type resolveCmd struct{ env Env }

func (c *resolveCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("resolve", "resolve [--data DIR] --tools FILE RUN ACTION (--done OUTPUT_JSON | --retry | --skip)", c.env.Stderr)
	f := addDriveFlags(fs, c.env.Getenv)
	done := fs.String("done", "", "the action did happen: record this JSON as its output")
	retry := fs.Bool("retry", false, "the action did not happen: try it once more (counts as approval of that attempt)")
	skip := fs.Bool("skip", false, "leave the action out: dependents get no output")
	runID, action, err := f.runAndAction(fs, "resolve", args, &c.env)
	if err != nil {
		return err
	}
	r := ledger.Resolution{Retry: *retry, Skip: *skip, By: reviewer(c.env)}
	n := 0
	for _, chosen := range []bool{isSet(fs, "done"), *retry, *skip} {
		if chosen {
			n++
		}
	}
	if n != 1 {
		return usageError("resolve needs exactly one of --done OUTPUT_JSON, --retry or --skip")
	}
	if isSet(fs, "done") {
		if !json.Valid([]byte(*done)) {
			return usageError("--done must be the action's output as JSON, e.g. '{\"id\":\"inv_1\"}'; got %q", *done)
		}
		r.Done = json.RawMessage(*done)
	}
	if f.srv.remote() {
		// Only the chosen field, as the service's resolve takes exactly one.
		var body map[string]any
		switch {
		case r.Done != nil:
			body = map[string]any{"done": r.Done}
		case r.Retry:
			body = map[string]any{"retry": true}
		default:
			body = map[string]any{"skip": true}
		}
		return f.remote(ctx, c.env, runID, "/actions/"+url.PathEscape(action)+"/resolve", body)
	}
	s, err := f.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.engine.Resolve(ctx, runID, action, r); err != nil {
		return notFound(fmt.Errorf("resolving action %s of run %s: %w", action, runID, err), runID)
	}
	return f.resume(ctx, c.env, s, runID)
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}
