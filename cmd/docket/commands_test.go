package main

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	r := inproc(t, "version")
	wantCode(t, r, exitOK)
	if !strings.HasPrefix(r.stdout, "docket ") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Fatalf("version output:\n%s", r)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		err  string // in stderr
	}{
		{nil, exitBad, "usage: docket"},
		{[]string{"frobnicate"}, exitBad, `unknown command "frobnicate"`},
		{[]string{"help"}, exitOK, "usage: docket"},
		{[]string{"run", "-h"}, exitOK, "--plan"},
		{[]string{"runs"}, exitBad, "list or show"},
		{[]string{"runs", "list", "--status", "sleeping"}, exitBad, "--status must be one of"},
		{[]string{"runs", "list", "--limit", "0"}, exitBad, "--limit"},
		{[]string{"runs", "show"}, exitBad, "exactly one run id"},
		{[]string{"approve", "--tools", "x.json"}, exitBad, "needs the run id"},
		{[]string{"reject", "--tools", "x.json", "r1"}, exitBad, "one action id"},
		{[]string{"resolve", "--tools", "x.json", "r1", "a1"}, exitBad, "exactly one of --done"},
		{[]string{"resolve", "--tools", "x.json", "r1", "a1", "--retry", "--skip"}, exitBad, "exactly one of --done"},
		{[]string{"resolve", "--tools", "x.json", "r1", "a1", "--done", "{oops"}, exitBad, "--done must be"},
		{[]string{"fork", "--tools", "x.json", "r1", "--run-id", "r1"}, exitBad, "must differ"},
		{[]string{"fork", "--tools", "x.json", "r1", "--approve", "some"}, exitBad, "--approve must be"},
		{[]string{"approve", "--bogus"}, exitBad, "flag provided but not defined"},
	} {
		r := inproc(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.err) {
			t.Errorf("want exit %d and %q in stderr\n%s", c.code, c.err, r)
		}
	}
}

// TestRunBadInput: every refusal of `docket run` exits 2 and says why on
// stderr; there is no run, so stdout stays empty (no made-up Run JSON with a
// status nobody knows); nothing touches the world.
func TestRunBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.plan(t, "good", crashPlan(crashClasses[2]))
	broken := b.plan(t, "broken", `{"actions": [
  {"id": "a", "tool": "payments_create_invoice", "args": {"customer": "c", "amount": 1, "currency": "EUR", "reference": "r"}},
  {"id": "a", "tool": "payments_create_invoice", "args": {}},
  {"id": "b", "tool": "payments_create_invoice", "args": {}, "depends_on": ["nowhere"]}]}`)
	misfit := b.plan(t, "misfit", `{"actions": [
  {"id": "a", "tool": "payments_create_invoice", "args": {"customer": "c", "amount": "lots", "currency": "EUR", "reference": "r"}},
  {"id": "b", "tool": "no_such_tool", "args": {}}]}`)
	badTools := b.plan(t, "tools-broken", `{"version": 1, "tools": [{"name": "x", "effect": "sometimes"}]}`)
	for _, c := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"goal needs the planner", []string{"run", "--data", b.data, "--tools", b.tools, "--goal", "onboard ACME"}, []string{"planner", "--plan"}},
		{"no plan", []string{"run", "--data", b.data, "--tools", b.tools}, []string{"--plan FILE is required"}},
		{"no tools", []string{"run", "--data", b.data, "--plan", good}, []string{"--tools FILE is required"}},
		{"bad policy", b.runArgs(good, "--approve", "most"), []string{"--approve must be"}},
		{"missing plan file", b.runArgs(b.dir + "/nope.json"), []string{"reading plan"}},
		{"invalid plan lists every problem", b.runArgs(broken), []string{"is invalid", "action a", "nowhere"}},
		{"plan that does not fit the tools", b.runArgs(misfit), []string{"does not fit the tools", "no_such_tool", "amount"}},
		{"invalid tools file", []string{"run", "--data", b.data, "--tools", badTools, "--plan", good}, []string{"sometimes"}},
		{"stray argument", append(b.runArgs(good), "extra"), []string{"no positional arguments"}},
		{"unknown flag", append(b.runArgs(good), "--frobnicate"), []string{"flag provided but not defined"}},
	} {
		r := inproc(t, c.args...)
		if r.code != exitBad {
			t.Errorf("%s: exit %d, want 2\n%s", c.name, r.code, r)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q\n%s", c.name, w, r)
			}
		}
		if r.stdout != "" {
			t.Errorf("%s: a refusal printed a Run JSON for a run that does not exist:\n%s", c.name, r)
		}
	}
	if n := b.world.Requests("payments"); n != 0 {
		t.Fatalf("a refused run called the payments API %d times", n)
	}
}

// seedRuns records runs directly in a ledger, as the executor would.
func seedRuns(t *testing.T, dir string, runs map[string]ledger.RunStatus) {
	t.Helper()
	ctx := context.Background()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p, err := plan.Decode([]byte(`{"goal": "say hello", "actions": [{"id": "a1", "tool": "email_send", "args": {"to": "x@y", "template": "hi"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for id, st := range runs {
		if _, _, err := l.CreateRun(ctx, ledger.Run{ID: id, Status: st, Policy: "safe", Goal: "say hello"}, p, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRunsListAndShow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := inproc(t, "runs", "list", "--data", dir)
	wantCode(t, empty, exitOK)
	if !strings.Contains(empty.stdout, "no runs") {
		t.Fatalf("empty list:\n%s", empty)
	}
	seedRuns(t, dir, map[string]ledger.RunStatus{"r1": ledger.RunRunning, "r2": ledger.RunPaused, "r3": ledger.RunRunning})

	table := inproc(t, "runs", "list", "--data", dir)
	wantCode(t, table, exitOK)
	for _, id := range []string{"RUN", "r1", "r2", "r3", "say hello"} {
		if !strings.Contains(table.stdout, id) {
			t.Fatalf("table lacks %q:\n%s", id, table)
		}
	}

	list := func(args ...string) runList {
		t.Helper()
		r := inproc(t, append([]string{"runs", "list", "--json", "--data", dir}, args...)...)
		wantCode(t, r, exitOK)
		var l runList
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("runs list --json: %v\n%s", err, r)
		}
		return l
	}
	if l := list(); len(l.Runs) != 3 || l.Next != "" {
		t.Fatalf("all runs: %+v", l)
	}
	if l := list("--status", "paused"); len(l.Runs) != 1 || l.Runs[0].ID != "r2" {
		t.Fatalf("paused runs: %+v", l)
	}
	if l := list("--limit", "2"); len(l.Runs) != 2 || l.Next == "" {
		t.Fatalf("first page of 2: %+v", l)
	}

	show := inproc(t, "runs", "show", "--json", "--data", dir, "r2")
	wantCode(t, show, exitOK)
	d := doc(t, show)
	if d.RunID != "r2" || d.Status != "paused" || len(d.Actions) != 1 || d.Actions[0].Tool != "email_send" {
		t.Fatalf("runs show --json: %+v", d)
	}
	human := inproc(t, "runs", "show", "r1", "--data", dir) // flags after the run id work too
	wantCode(t, human, exitOK)
	for _, w := range []string{"run", "r1", "status", "running", "ACTION", "a1", "email_send"} {
		if !strings.Contains(human.stdout, w) {
			t.Fatalf("summary lacks %q:\n%s", w, human)
		}
	}
	missing := inproc(t, "runs", "show", "--data", dir, "nope")
	wantCode(t, missing, exitBad)
	if !strings.Contains(missing.stderr, "no run nope") {
		t.Fatalf("missing run message:\n%s", missing)
	}
}
