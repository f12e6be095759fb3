package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/docketrun/docket/evals/chaos"
	"github.com/docketrun/docket/ledger/postgres"
)

// chaosNodesFlags are the flags of `docket chaos` on a shared ledger: the
// nodes experiment (chaos.RunNodes).
type chaosNodesFlags struct {
	ledger    *string
	nodes     *int
	lease     *time.Duration
	killEvery *time.Duration
	restartDB *string
	control   *bool
}

func addChaosNodesFlags(fs *flag.FlagSet) *chaosNodesFlags {
	f := &chaosNodesFlags{ledger: new(string)}
	fs.Var(ledgerValue{f.ledger}, "ledger", "run the nodes experiment on this shared ledger (postgres://…): --nodes docket serve processes on one database, random nodes SIGKILLed")
	f.nodes = fs.Int("nodes", 0, "with --ledger: how many docket serve nodes (default 3)")
	f.lease = fs.Duration("lease", 2*time.Second, "with --ledger: each node's --lease (how soon a killed node's runs are adopted)")
	f.killEvery = fs.Duration("kill-every", 2*time.Second, "with --ledger: mean time between two SIGKILLs of a node")
	f.restartDB = fs.String("restart-db", "", "with --ledger: a shell command that restarts the database, run once when half of the runs ended (e.g. 'pg_ctl -D DIR restart -m immediate')")
	f.control = fs.Bool("control", false, "with --ledger: a person acts on about half of the runs through a node other than the one driving each (pause and resume, edit and approve, reject, approve runs submitted with approve none), checked against the ledger's events and the world")
	return f
}

func (f *chaosNodesFlags) on() bool { return *f.ledger != "" || *f.nodes != 0 || *f.control }

// runNodes is `docket chaos --ledger URL --nodes N`.
func (c *chaosCmd) runNodes(ctx context.Context, f *chaosNodesFlags, docket chaos.Docket, seed uint64, fs *flag.FlagSet, minKills int, asJSON bool) error {
	if *f.ledger == "" {
		return usageError("--nodes and --control need --ledger postgres://… (the database the nodes share)")
	}
	if *f.nodes < 0 || *f.lease < time.Second || *f.killEvery <= 0 {
		return usageError("--nodes must not be negative, --lease must be at least 1s, --kill-every positive")
	}
	if *f.control && *f.nodes == 1 {
		return usageError("--control needs at least 2 nodes: the person acts through a node other than the one driving the run")
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["resume"] {
		return usageError("--resume is not available with --ledger: run the experiment again (--seed replays its plans and kill schedule)")
	}
	cfg := chaos.NodesConfig{
		Seed:      seed,
		Docket:    docket,
		Ledger:    *f.ledger,
		Nodes:     *f.nodes,
		Lease:     *f.lease,
		KillEvery: *f.killEvery,
		MinKills:  minKills,
		Control:   *f.control,
		Dir:       fs.Lookup("runs-dir").Value.String(),
		Progress:  c.env.Stderr,
	}
	if set["actions"] {
		cfg.Actions, _ = strconv.Atoi(fs.Lookup("actions").Value.String())
	}
	if set["workers"] {
		cfg.Workers, _ = strconv.Atoi(fs.Lookup("workers").Value.String())
	}
	for name, d := range map[string]*time.Duration{"timeout": &cfg.Timeout, "lag": &cfg.Lag} {
		if set[name] {
			*d, _ = time.ParseDuration(fs.Lookup(name).Value.String())
		}
	}
	if cmd := *f.restartDB; cmd != "" {
		cfg.RestartDB = func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "sh", "-c", cmd).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(string(out)))
			}
			return nil
		}
	}
	fmt.Fprintf(c.env.Stderr, "docket chaos: seed %d (rerun with --seed %d), ledger %s\n", seed, seed, postgres.Redact(*f.ledger))
	rep, err := chaos.RunNodes(ctx, cfg)
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
		return withCode(exitFailed, errors.New("chaos: the nodes experiment shows duplicates, losses, at-most-once re-executions, runs that ended otherwise than planned, nodes that died by themselves or (with --control) a person's pause, edit, reject or approval not honoured (see the report)"))
	}
	return nil
}
