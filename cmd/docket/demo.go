package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

func init() {
	register("demo", "show exactly-once execution through a crash, against a simulated world", func(env Env) command { return &demoCmd{env: env} })
}

// demoChildEnv carries the demo child's instructions (JSON demoChild). Only
// the demo sets it, for the process it starts and kills.
const demoChildEnv = "DOCKET_DEMO_CHILD"

// demoChild is what the demo tells the child process to do.
type demoChild struct {
	Args  []string `json:"args"`  // a docket command line (a `run`)
	Crash string   `json:"crash"` // POINT:ACTION to stop at
}

// demoCrash is where the demo kills its child: right after the CRM created
// the contact and before docket recorded that it did.
const demoCrash = "after_call:contact"

// demoCmd is `docket demo`.
type demoCmd struct{ env Env }

func (c *demoCmd) Run(ctx context.Context, args []string) error {
	if spec := c.env.Getenv(demoChildEnv); spec != "" {
		return c.child(ctx, spec)
	}
	fs := newFlags("demo", "demo [--data DIR]", c.env.Stderr)
	data := fs.String("data", "", "data directory (default: a temporary one, removed afterwards)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("demo takes no arguments")
	}
	work, err := os.MkdirTemp("", "docket-demo-")
	if err != nil {
		return fmt.Errorf("making the demo's temporary directory: %w", err)
	}
	defer os.RemoveAll(work)
	dir := *data
	if dir == "" {
		dir = filepath.Join(work, "data")
	}
	d := &demo{env: c.env, out: c.env.Stdout, data: dir, work: work}
	return d.run(ctx)
}

// child runs the docket command line it was given with crash hooks, so that
// its parent can kill it at the crash point.
func (c *demoCmd) child(ctx context.Context, spec string) error {
	var ch demoChild
	if err := json.Unmarshal([]byte(spec), &ch); err != nil {
		return fmt.Errorf("%s: %w", demoChildEnv, err)
	}
	point, action, err := parseCrashSpec(ch.Crash)
	if err != nil {
		return err
	}
	env := c.env
	if env.Hooks, err = crashHooks(ctx, point, action, env.Stderr); err != nil {
		return err
	}
	return runEnv(ctx, ch.Args, env)
}

// demo is one run of the demo.
type demo struct {
	env       Env
	out       io.Writer
	data      string // ledger directory
	work      string // temporary directory for the tools and plan files
	world     *demoworld.World
	toolsPath string
	planPath  string
	runID     string
	seen      uint64 // last event printed
}

func (d *demo) say(format string, a ...any) { fmt.Fprintf(d.out, format+"\n", a...) }

func (d *demo) run(ctx context.Context) error {
	d.world = demoworld.Start()
	defer d.world.Close()
	d.toolsPath = filepath.Join(d.work, "tools.json")
	d.planPath = filepath.Join(d.work, "plan.json")
	if err := os.WriteFile(d.toolsPath, d.world.ToolsFile(demoworld.ToolsOptions{}), 0o600); err != nil {
		return fmt.Errorf("writing the demo's tools file: %w", err)
	}
	if err := os.WriteFile(d.planPath, demoworld.OnboardingPlan(), 0o600); err != nil {
		return fmt.Errorf("writing the demo's plan: %w", err)
	}
	id, err := newRunID()
	if err != nil {
		return err
	}
	d.runID = "demo_" + strings.TrimPrefix(id, "run_")

	d.say("docket demo: exactly once in effect, through a crash")
	d.say("")
	d.say("A simulated world runs on 127.0.0.1: a catalogue (read_only), a CRM (lookup by our key),")
	d.say("payments (keyed: honours Idempotency-Key), account settings (idempotent PUT) and an email")
	d.say("sender (at_most_once: no key, no search). The plan: %s.", demoworld.OnboardingGoal)
	d.say("Tools file: %s  Data: %s  Run: %s", d.toolsPath, d.data, d.runID)

	d.say("")
	d.say("1. A child process runs the plan: docket run --tools %s --plan %s --run-id %s", filepath.Base(d.toolsPath), filepath.Base(d.planPath), d.runID)
	d.say("   It is killed with SIGKILL right after the CRM created the contact, before docket recorded that.")
	if err := d.crashChild(ctx); err != nil {
		return err
	}
	d.say("   The world now holds: %s", d.world.Describe())

	l, err := openLedger(ctx, d.data, envKey(d.env.Getenv), d.env.Stderr)
	if err != nil {
		return err
	}
	defer l.Close()
	d.say("")
	d.say("2. What the child made durable before it died (the ledger's events):")
	if err := d.printEvents(ctx, l); err != nil {
		return err
	}

	doc, err := d.resume(ctx, l)
	if err != nil {
		return err
	}
	return d.report(doc)
}

// resume resumes the crashed run in this process (step 3), where the email
// waits for a person, and approves it (step 4). It returns the run as it
// ended.
func (d *demo) resume(ctx context.Context, l ledger.Store) (ledger.RunDoc, error) {
	p, err := plan.Decode(demoworld.OnboardingPlan())
	if err != nil {
		return ledger.RunDoc{}, fmt.Errorf("the built-in plan: %w", err)
	}
	reg, closeTools, err := loadTools(ctx, d.toolsPath, d.env)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	defer closeTools()
	quiet := d.env
	quiet.Hooks = executor.Hooks{}
	eng, err := newEngine(quiet, l, reg)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	d.say("")
	d.say("3. Resuming the same run in this process. The contact's claim belongs to a dead process, so its")
	d.say("   outcome is unknown: the CRM is searched by the action's key before anything is written again.")
	_, doc, err := runs.Run(ctx, eng, l, runs.Request{RunID: d.runID, Plan: p, Options: &executor.RunOptions{Policy: executor.PolicySafe}})
	if err != nil {
		return ledger.RunDoc{}, fmt.Errorf("resuming run %s: %w", d.runID, err)
	}
	if err := d.printEvents(ctx, l); err != nil {
		return ledger.RunDoc{}, err
	}
	if doc.Run.Status == ledger.RunCompleted {
		return ledger.RunDoc{}, fmt.Errorf("run %s completed without asking a person about the email (at_most_once under the safe policy)", d.runID)
	}
	d.say("   The run is %s: the welcome email is at_most_once, and the default policy (safe) lets a person decide.", doc.Run.Status)

	d.say("")
	d.say("4. A person approves it: docket approve %s welcome", d.runID)
	if err := eng.Approve(ctx, d.runID, []string{"welcome"}, "demo reviewer"); err != nil {
		return ledger.RunDoc{}, fmt.Errorf("approving the welcome email: %w", err)
	}
	doc, err = eng.Resume(ctx, d.runID, nil)
	if err != nil {
		return ledger.RunDoc{}, fmt.Errorf("resuming run %s after the approval: %w", d.runID, err)
	}
	if err := d.printEvents(ctx, l); err != nil {
		return ledger.RunDoc{}, err
	}
	return doc, nil
}

// report shows the run and the world's counters (step 5) and fails unless
// every effect happened exactly once.
func (d *demo) report(doc ledger.RunDoc) error {
	d.say("")
	d.say("5. The run, and the world's own counters:")
	var summary strings.Builder
	if err := writeRunSummary(&summary, doc); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(summary.String(), "\n"), "\n") {
		d.say("   %s", line)
	}
	d.say("")
	bad := 0
	for _, name := range demoworld.OnboardingEffects {
		n := d.world.Effect(name)
		mark := "once"
		if n != 1 {
			mark = "WRONG"
			bad++
		}
		d.say("   %-42s %d  %s", name, n, mark)
	}
	d.say("   (requests the systems served: catalogue %d, crm %d, payments %d, settings %d, email %d)",
		d.world.Requests("catalogue"), d.world.Requests("crm"), d.world.Requests("payments"),
		d.world.Requests("settings"), d.world.Requests("email"))
	if doc.Run.Status != ledger.RunCompleted {
		return withCode(exitFailed, fmt.Errorf("run %s ended %s, not completed", d.runID, doc.Run.Status))
	}
	if bad > 0 {
		return withCode(exitFailed, fmt.Errorf("%d effects did not happen exactly once", bad))
	}
	d.say("")
	d.say("Every effect happened exactly once, although the process died in the middle of the run.")
	return nil
}

// crashChild runs the plan in a child process (this binary) and kills it with
// SIGKILL when it reports reaching the crash point.
func (d *demo) crashChild(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start the child: %w", err)
	}
	spec, err := json.Marshal(demoChild{
		Args:  []string{"run", "--data", d.data, "--tools", d.toolsPath, "--plan", d.planPath, "--run-id", d.runID},
		Crash: demoCrash,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "demo")
	cmd.Env = append(os.Environ(), demoChildEnv+"="+string(spec))
	cmd.Stdout = io.Discard // it never gets to print its Run JSON
	c, err := startCrashChild(cmd)
	if err != nil {
		return fmt.Errorf("starting the child: %w", err)
	}
	reached, where := c.untilCrashPoint(func(line string) { d.say("   child | %s", line) })
	if reached {
		d.say("   child %d: reached the crash point (%s); sending SIGKILL", cmd.Process.Pid, where)
		if err := c.kill(); err != nil {
			return fmt.Errorf("killing the child: %w", err)
		}
	}
	werr := c.wait(io.Discard)
	if ctx.Err() != nil {
		return fmt.Errorf("the child did not reach the crash point in time: %w", ctx.Err())
	}
	if !reached {
		return fmt.Errorf("the child ended (%v) without reaching the crash point %s", werr, demoCrash)
	}
	sig, ok := deathSignal(werr)
	if !ok || sig != syscall.SIGKILL {
		return fmt.Errorf("the child was not killed by the signal: %v", werr)
	}
	d.say("   child %d: dead (%v): it recorded nothing more", cmd.Process.Pid, sig)
	return nil
}

// printEvents prints the run's events that were not printed yet.
func (d *demo) printEvents(ctx context.Context, l ledger.Store) error {
	evs, err := l.Events(ctx, d.runID, d.seen, 0)
	if err != nil {
		return fmt.Errorf("reading the run's events: %w", err)
	}
	for _, e := range evs {
		d.say("   %s", describeEvent(e))
		d.seen = e.Seq
	}
	return nil
}

// describeEvent formats an event on one line for people.
func describeEvent(e ledger.Event) string {
	s := fmt.Sprintf("#%-3d %-22s %-9s", e.Seq, e.Type, e.ActionID)
	if len(e.Data) > 0 && string(e.Data) != "null" && string(e.Data) != "{}" {
		s += " " + clip(oneLine(string(e.Data)), 100)
	}
	return strings.TrimRight(s, " ")
}
