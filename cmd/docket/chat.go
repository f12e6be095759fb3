package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

func init() {
	register("chat", "plan and perform actions in a conversation: each turn's plan is shown, approved by you, then performed",
		func(env Env) command { return &chatCmd{env: env} })
}

// chatCmd is `docket chat --tools FILE [--data DIR]`: an interactive session.
// Each line you type is a turn: the model plans (read-only tools may run
// while it thinks), the plan is recorded as a new run that waits for you, is
// shown with each action's tool, arguments, effect class and key, and runs
// once you approve it. Its results go back into the conversation.
type chatCmd struct{ env Env }

const chatUsage = "chat --tools FILE [--data DIR] [--model NAME] [--base-url URL] [--temperature T] [--max-tokens N] [--timeout D] [--mode tools|json_schema] [--stream auto|on|off] [--strict auto|off] [--tool-choice auto|required] [--parallel-tool-calls true|false] [--order turns|references] [--progress]"

func (c *chatCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("chat", chatUsage, c.env.Stderr)
	toolsPath := fs.String("tools", "", "tools file (JSON, version 1)")
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	mf := addModelFlags(fs)
	progress := fs.Bool("progress", false, "show each planning as it happens (default: when the output is a terminal)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("chat takes no positional arguments (got %q)", pos)
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
	l, err := openLedger(ctx, *data, key, c.env.Stderr)
	if err != nil {
		return err
	}
	defer l.Close()
	eng, err := newEngine(c.env, l, reg)
	if err != nil {
		return err
	}
	session, err := randomHex(4)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	s := &chat{env: c.env, out: c.env.Stdout, lines: readLines(c.env.Stdin, stop), p: p, eng: eng, l: l, reg: reg, session: session, data: *data, tools: *toolsPath,
		progress: *progress || isTerminal(c.env.Stdout)}
	return s.loop(ctx)
}

// line is one line of input, or the error that ended the input.
type line struct {
	text string
	err  error
}

// readLines reads r line by line on its own goroutine, so a prompt can also
// wait for the context (Ctrl-C) while the terminal waits for a line. The
// channel is closed at the end of the input; the goroutine stops delivering
// once stop is closed (a read already waiting on a terminal ends with the
// process).
func readLines(r io.Reader, stop <-chan struct{}) <-chan line {
	ch := make(chan line)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case ch <- line{text: sc.Text()}:
			case <-stop:
				return
			}
		}
		if err := sc.Err(); err != nil {
			select {
			case ch <- line{err: err}:
			case <-stop:
			}
		}
	}()
	return ch
}

// chat is one interactive session.
type chat struct {
	env     Env
	out     io.Writer
	lines   <-chan line
	p       *planner.Planner
	eng     *executor.Engine
	l       ledger.Store
	reg     *tools.Registry
	session string
	data    string
	tools   string
	turn    int
	conv    []planner.Message
	inErr   error // what ended the input, if not its end
	// progress: show the planning as it happens (the model's text as it
	// streams, each call and queued action).
	progress bool
}

func (s *chat) say(format string, a ...any) { fmt.Fprintf(s.out, format+"\n", a...) }

// prompt prints q and reads one line; ok is false at the end of the input,
// on a read error (s.inErr) or when ctx ends.
func (s *chat) prompt(ctx context.Context, q string) (string, bool) {
	fmt.Fprint(s.out, q)
	select {
	case <-ctx.Done():
		fmt.Fprintln(s.out)
		return "", false
	case l, ok := <-s.lines:
		if !ok || l.err != nil {
			s.inErr = l.err
			fmt.Fprintln(s.out)
			return "", false
		}
		return strings.TrimSpace(l.text), true
	}
}

func (s *chat) loop(ctx context.Context) error {
	s.say("docket chat: %d tools. Each request is planned, shown, and performed only once you approve it. Type exit (or end the input) to leave.", len(s.reg.Names()))
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		text, ok := s.prompt(ctx, "\nyou> ")
		if !ok || text == "exit" || text == "quit" {
			if err := ctx.Err(); err != nil {
				return err
			}
			s.say("bye")
			if s.inErr != nil {
				return fmt.Errorf("reading the input: %w", s.inErr)
			}
			return nil
		}
		if text == "" {
			continue
		}
		if err := s.handle(ctx, text); err != nil {
			if errors.Is(err, context.Canceled) || exitCode(err) == exitBad || exitCode(err) == exitBusy {
				return err
			}
			fmt.Fprintf(s.env.Stderr, "docket: %v\n", err)
		}
	}
}

// handle plans one turn, records it, asks for approval, performs it and
// feeds the results back into the conversation.
func (s *chat) handle(ctx context.Context, line string) error {
	s.turn++
	pctx, pp := withProgress(ctx, s.out, s.progress)
	res, err := s.p.Plan(pctx, planner.Request{Messages: s.conv, Goal: line})
	pp.endText()
	if err != nil {
		return err
	}
	sayWarnings(s.env.Stderr, res)
	s.conv = res.Messages
	if res.Reply != "" {
		s.say("model> %s", res.Reply)
	}
	if len(res.Plan.Actions) == 0 {
		return nil
	}
	runID := fmt.Sprintf("chat_%s_%d", s.session, s.turn)
	// Recorded first, every action waiting for you: nothing runs before the plan is durable and approved.
	_, doc, err := runs.Run(ctx, s.eng, s.l, runs.Request{RunID: runID, Plan: res.Plan, Options: &executor.RunOptions{Policy: executor.PolicyNone}})
	if err != nil {
		return fmt.Errorf("recording the plan: %w", err)
	}
	s.say("\nplan (run %s):", runID)
	s.show(runID, res.Plan.Actions, doc)
	for doc.Run.Status == ledger.RunAwaitingApproval {
		waiting := pendingIDs(doc)
		q := "approve and perform it? [y/N] "
		if len(waiting) < len(res.Plan.Actions) {
			q = fmt.Sprintf("approve %s now (arguments resolved)? [y/N] ", strings.Join(waiting, ", "))
		}
		answer, ok := s.prompt(ctx, q)
		if err := ctx.Err(); err != nil {
			return err // the plan stays recorded and waiting: docket approve/reject RUN
		}
		if !ok || !yes(answer) {
			return s.decline(ctx, runID, waiting)
		}
		if len(waiting) > 0 {
			if err := s.eng.Approve(ctx, runID, waiting, reviewer(s.env)); err != nil {
				return err
			}
		}
		if doc, err = s.eng.Resume(ctx, runID, nil); err != nil {
			return err
		}
		if doc.Run.Status == ledger.RunAwaitingApproval {
			s.say("\nresolved arguments, to approve again:")
			s.show(runID, pickActions(res.Plan.Actions, pendingIDs(doc)), doc)
		}
	}
	s.results(doc)
	s.conv = append(s.conv, planner.ResultsMessage(runID, doc.Actions))
	return nil
}

// decline rejects the waiting actions, lets the run end cleanly and tells
// the model.
func (s *chat) decline(ctx context.Context, runID string, waiting []string) error {
	for _, id := range waiting {
		if err := s.eng.Reject(ctx, runID, id, "declined in docket chat", reviewer(s.env)); err != nil {
			return err
		}
	}
	doc, err := s.eng.Resume(ctx, runID, nil)
	if err != nil {
		return err
	}
	s.say("declined: nothing more is performed (run %s %s)", runID, doc.Run.Status)
	s.conv = append(s.conv, planner.Message{Role: planner.RoleUser,
		Content: fmt.Sprintf("[docket] I declined the plan of run %s.", runID)})
	s.conv = append(s.conv, planner.ResultsMessage(runID, doc.Actions))
	return nil
}

// show prints each action: id, tool, effect class, key, dependencies, args.
func (s *chat) show(runID string, actions []plan.Action, doc ledger.RunDoc) {
	rows := map[string]ledger.Action{}
	for _, a := range doc.Actions {
		rows[a.ID] = a
	}
	for _, a := range actions {
		row := rows[a.ID]
		args := a.Args
		if len(row.Args) > 0 {
			args = row.Args // resolved once claimed or shown again
		}
		class := row.Class
		if spec, ok := s.reg.Spec(a.Tool); ok && class == "" {
			class = string(spec.Class)
		}
		key := row.Key
		if key == "" {
			key = actionKey(runID, a.ID, a.Tool, args)
		}
		s.say("  %s  %s  [%s]", a.ID, a.Tool, class)
		s.say("      key   %s", key)
		if len(a.DependsOn) > 0 {
			s.say("      after %s", strings.Join(a.DependsOn, ", "))
		}
		s.say("      args  %s", clip(string(args), 2000))
		if spec, ok := s.reg.Spec(a.Tool); ok {
			if need, why := tools.NeedsApproval(spec, args); need && why != "" {
				s.say("      needs approval: %s", why)
			}
		}
		if a.Why != "" {
			s.say("      why   %s", oneLine(clip(a.Why, 200)))
		}
	}
}

// actionKey is the key the action will run under, or says when it will be
// known: a key covers the resolved arguments.
func actionKey(runID, id, tool string, args json.RawMessage) string {
	refs, err := plan.Refs(args)
	if err == nil && len(refs) == 0 {
		if k, err := plan.Key(runID, id, tool, args); err == nil {
			return k
		}
	}
	if err == nil {
		return fmt.Sprintf("(derived once %s resolves)", refs[0].Text)
	}
	return "(unknown: " + err.Error() + ")"
}

func (s *chat) results(doc ledger.RunDoc) {
	s.say("\nrun %s %s:", doc.Run.ID, doc.Run.Status)
	for _, a := range doc.Actions {
		line := fmt.Sprintf("  %s  %s  %s", a.ID, a.Tool, a.Status)
		if len(a.Output) > 0 {
			line += "  " + clip(string(a.Output), 500)
		}
		if a.Error != "" {
			line += "  error: " + oneLine(clip(a.Error, 300))
		}
		s.say("%s", line)
	}
	if doc.Run.Status == ledger.RunPaused {
		s.say("%s", waitingMessage(doc, s.data, s.tools))
	}
}

func pendingIDs(doc ledger.RunDoc) []string {
	var ids []string
	for _, a := range doc.Actions {
		if a.Status == ledger.StatusPending && !a.Undo {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

func pickActions(all []plan.Action, ids []string) []plan.Action {
	var out []plan.Action
	for _, a := range all {
		for _, id := range ids {
			if a.ID == id {
				out = append(out, a)
			}
		}
	}
	return out
}

func yes(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	return s == "y" || s == "yes"
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a session id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
