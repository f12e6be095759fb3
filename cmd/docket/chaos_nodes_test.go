package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/chaos"
	"github.com/docketrun/docket/ledger/postgres/pgtest"
)

// runChaosNodes runs the nodes experiment on a throwaway cluster of its own
// (restarted in the middle, so not the package's shared one) and checks
// that the promise held.
func runChaosNodes(t *testing.T, actions, minKills int, control bool) *chaos.NodesReport {
	t.Helper()
	var own pgtest.Shared
	c := own.Get(t)
	t.Cleanup(own.Stop)
	ctx := context.Background()
	url, err := c.CreateDatabase(ctx, "chaos")
	if err != nil {
		t.Fatal(err)
	}
	seed := chaosSeed(t)
	start := time.Now()
	rep, err := chaos.RunNodes(ctx, chaos.NodesConfig{
		Seed: seed, Actions: actions, Docket: testDocket(), Ledger: url, Nodes: 3,
		Lease: 2 * time.Second, KillEvery: time.Second, MinKills: minKills, Control: control,
		RestartDB: func(ctx context.Context) error { return c.Restart(ctx, "immediate") },
		Progress:  testLogWriter{t},
	})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	t.Logf("seed %d, %s:\n%s", seed, time.Since(start).Round(time.Second), b.String())
	if strings.Contains(b.String(), c.Password) {
		t.Fatal("the report shows the database password")
	}
	for _, e := range rep.Errors {
		t.Errorf("seed %d: %s", seed, e)
	}
	for _, f := range rep.Findings {
		t.Errorf("seed %d: %s", seed, f)
	}
	if !rep.OK() || rep.Actions < actions || rep.NodeKills < minKills || rep.DBRestarts != 1 {
		t.Errorf("seed %d: %d actions, %d node kills, %d database restarts, OK %v: want at least %d actions and %d kills, one restart, OK",
			seed, rep.Actions, rep.NodeKills, rep.DBRestarts, rep.OK(), actions, minKills)
	}
	if c := rep.Control; control && (c == nil || c.Runs == 0 || c.RunsChecked != rep.Runs || c.BudgetChecked != rep.Runs || c.Violations != 0) {
		t.Errorf("seed %d: the person's report %+v: want runs acted on, every run checked, 0 violations", seed, c)
	}
	return rep
}

// Three `docket serve` nodes on one database, runs submitted to random
// nodes, a node SIGKILLed about every second (and started again), the
// database restarted (immediate) when half of the runs ended: every run
// ends as planned, 0 duplicates, 0 lost, 0 automatic at-most-once
// re-executions; what waits for a person is resolved as a person would.
func TestChaosNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a PostgreSQL cluster and three services")
	}
	t.Parallel()
	runChaosNodes(t, 80, 4, false)
}

// The same with a person on a second node: on about half of the runs a
// person acts through a node other than the one the run was submitted to
// (and driven by, until a kill moves it), at random moments, while nodes
// keep being killed: pauses, holds and resumes; edits an action that has
// not started and approves the new arguments; rejects one; approves, a few
// at a time, the actions of runs submitted with approve none. Checked for
// every run against the ledger's events and the world's log of requests:
// no action started while the pause held, no effect with arguments an edit
// replaced, no rejected action started, none without an approval, the
// charges budget's usage equal to the world's charges.
func TestChaosNodesControl(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a PostgreSQL cluster and three services")
	}
	t.Parallel()
	rep := runChaosNodes(t, 500, 10, true)
	if c := rep.Control; c != nil && c.Pauses+c.Edits+c.Rejects+c.Approvals == 0 {
		t.Errorf("the person did nothing that was acknowledged: %+v", c)
	}
}

// The soak run's nodes experiment (DOCKET_SOAK=1, make soak).
func TestChaosNodesSoak(t *testing.T) {
	soak(t)
	runChaosNodes(t, 1000, 60, true)
}

// docket chaos --nodes takes a shared ledger, and refuses --resume; --control
// needs a shared ledger and a second node.
func TestChaosNodesFlags(t *testing.T) {
	t.Parallel()
	r := inproc(t, "chaos", "--nodes", "3")
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "--ledger postgres://") {
		t.Fatalf("--nodes without --ledger:\n%s", r)
	}
	r = inproc(t, "chaos", "--ledger", "/tmp/dir", "--nodes", "3")
	wantCode(t, r, exitBad)
	r = inproc(t, "chaos", "--control")
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "--ledger postgres://") {
		t.Fatalf("--control without --ledger:\n%s", r)
	}
	r = inproc(t, "chaos", "--ledger", "postgres://u:secret-pw@127.0.0.1:1/db", "--nodes", "1", "--control")
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "at least 2 nodes") || strings.Contains(r.stdout+r.stderr, "secret-pw") {
		t.Fatalf("--control with one node:\n%s", r)
	}
	r = inproc(t, "chaos", "--ledger", "postgres://u:secret-pw@127.0.0.1:1/db", "--runs-dir", t.TempDir(), "--resume")
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "--resume") || strings.Contains(r.stdout+r.stderr, "secret-pw") {
		t.Fatalf("--resume with --ledger:\n%s", r)
	}
}

// testLogWriter sends each line written to it to the test's log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// docket chaos --ledger URL --nodes 3 end to end (a small experiment, no
// database restart: the package's cluster is shared): exit 0, the JSON
// report, the password never printed.
func TestChaosNodesCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts three services")
	}
	t.Parallel()
	url, pw := sharedLedger(t)
	r := inproc(t, "chaos", "--ledger", url, "--nodes", "3", "--actions", "30", "--workers", "3", "--min-kills", "1", "--kill-every", "1s", "--json")
	wantCode(t, r, exitOK)
	if strings.Contains(r.stdout+r.stderr, pw) {
		t.Fatalf("the password was printed:\n%s", r)
	}
	var rep chaos.NodesReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("the report: %v\n%s", err, r)
	}
	if rep.Nodes != 3 || rep.Workers != 3 || rep.Actions < 30 || rep.NodeKills < 1 || !rep.OK() {
		t.Fatalf("report %+v", rep)
	}
}
