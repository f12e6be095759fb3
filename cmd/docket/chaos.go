package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/docketrun/docket/evals/chaos"
)

func init() {
	register("chaos", "crash harness: random plans, SIGKILLs and a simulated world; reports duplicates and losses", func(env Env) command { return &chaosCmd{env: env} })
}

// chaosCmd is `docket chaos`. The same command, started by the harness with
// chaos.WorldEnv or chaos.ChildEnv set, serves the simulated world or runs a
// docket command line with a crash point armed.
type chaosCmd struct{ env Env }

const chaosUsage = "chaos [--seed N] [--actions N] [--json] [--runs-dir DIR [--resume]] [--workers N] [--timeout D] [--lag D] [--lag-declared D] [--protected-only] [--min-kills N] [--ledger postgres://… --nodes N [--lease D] [--kill-every D] [--restart-db CMD]]"

func (c *chaosCmd) Run(ctx context.Context, args []string) error {
	if spec := c.env.Getenv(chaos.WorldEnv); spec != "" {
		var cfg chaos.WorldConfig
		if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
			return fmt.Errorf("%s: %w", chaos.WorldEnv, err)
		}
		return chaos.ServeWorld(ctx, cfg, c.env.Stdin, c.env.Stdout)
	}
	if spec := c.env.Getenv(chaos.ChildEnv); spec != "" {
		return c.child(ctx, spec)
	}

	fs := newFlags("chaos", chaosUsage, c.env.Stderr)
	seed := fs.Uint64("seed", 0, "seed of the plans, kill schedule and world faults (default: random, printed)")
	actions := fs.Int("actions", 2000, "actions per workload (the protected one and the unprotected one)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	runsDir := fs.String("runs-dir", "", "keep data, plans and results here (default: a temporary directory, removed)")
	resume := fs.Bool("resume", false, "continue the experiment in --runs-dir (its stored settings apply)")
	workers := fs.Int("workers", 4, "runs driven at once")
	timeout := fs.Duration("timeout", time.Second, "every tool's call timeout")
	lag := fs.Duration("lag", time.Second, "the leads service's real visibility lag bound")
	lagDeclared := fs.Duration("lag-declared", -1, "the visibility_lag the tools file declares for leads (default: --lag)")
	protectedOnly := fs.Bool("protected-only", false, "skip the workload with protections switched off")
	minKills := fs.Int("min-kills", 0, "run the seed's next plans past --actions until each workload saw this many SIGKILLs (at most twice the runs; with --nodes, until that many nodes were killed, at most ten times the runs)")
	nf := addChaosNodesFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("chaos takes no positional arguments (got %q)", pos)
	}
	if *resume && *runsDir == "" {
		return usageError("--resume needs --runs-dir")
	}
	if *actions < 1 || *workers < 1 || *timeout <= 0 || *lag <= 0 {
		return usageError("--actions, --workers, --timeout and --lag must be positive")
	}
	if *minKills < 0 {
		return usageError("--min-kills must not be negative")
	}
	seedSet := false
	fs.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "seed" })
	if !seedSet && !*resume {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		*seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	docket, err := chaosDocket()
	if err != nil {
		return err
	}
	if nf.on() {
		return c.runNodes(ctx, nf, docket, *seed, fs, *minKills, *asJSON)
	}
	cfg := chaos.Config{
		Seed:          *seed,
		Actions:       *actions,
		Docket:        docket,
		RunsDir:       *runsDir,
		Resume:        *resume,
		Workers:       *workers,
		Timeout:       *timeout,
		Lag:           *lag,
		ProtectedOnly: *protectedOnly,
		MinKills:      *minKills,
		Progress:      c.env.Stderr,
	}
	if *lagDeclared >= 0 {
		cfg.LagDeclared = lagDeclared
	}
	if !*resume {
		fmt.Fprintf(c.env.Stderr, "docket chaos: seed %d (rerun with --seed %d)\n", *seed, *seed)
	}
	rep, err := chaos.Run(ctx, cfg)
	return c.report(rep, *asJSON, err)
}

// chaosDocket says how the harness starts docket children: this binary.
// The command tests replace it with the test binary acting as docket.
var chaosDocket = func() (chaos.Docket, error) {
	exe, err := os.Executable()
	if err != nil {
		return chaos.Docket{}, fmt.Errorf("finding the docket binary to start children: %w", err)
	}
	return chaos.Docket{Exe: exe}, nil
}

// report prints the report and maps it to the exit code: 0 when the
// protected workload kept the promise, 1 otherwise.
func (c *chaosCmd) report(rep *chaos.Report, asJSON bool, err error) error {
	if rep != nil {
		var werr error
		if asJSON {
			werr = writeJSONLine(c.env.Stdout, rep)
		} else {
			werr = rep.WriteTable(c.env.Stdout)
		}
		if werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return withCode(exitFailed, errors.New("chaos: the protected workload shows duplicates, losses, at-most-once re-executions or unfinished runs (see the report)"))
	}
	return nil
}

// child runs the command line of a chaos.ChildSpec with its crash point
// armed: at the point it prints the crash marker on stderr and blocks until
// the harness kills it.
func (c *chaosCmd) child(ctx context.Context, spec string) error {
	var ch chaos.ChildSpec
	if err := json.Unmarshal([]byte(spec), &ch); err != nil {
		return fmt.Errorf("%s: %w", chaos.ChildEnv, err)
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
