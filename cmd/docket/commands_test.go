package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	want := ""
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := inproc(t, args...)
		wantCode(t, r, exitOK)
		if !strings.HasPrefix(r.stdout, "docket ") || !strings.Contains(r.stdout, runtime.Version()) || r.stderr != "" {
			t.Fatalf("version output:\n%s", r)
		}
		if want == "" {
			want = r.stdout
		} else if r.stdout != want {
			t.Fatalf("docket %s printed\n%s\nbut docket version printed\n%s", args[0], r.stdout, want)
		}
	}
	// The built binary, as a person runs it.
	r := child(t, "", "--version")
	wantCode(t, r, exitOK)
	if r.stdout != want || r.stderr != "" {
		t.Fatalf("docket --version as a process:\n%s", r)
	}
	wantCode(t, inproc(t, "version", "extra"), exitBad)
	wantCode(t, inproc(t, "--version", "--bogus"), exitBad)
}

// TestVersionFrom: the module version when the build has one, "devel"
// when it has none, and the VCS revision and time when the build was made
// from a checkout.
func TestVersionFrom(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2025-01-02T03:04:05Z"}}
	for _, c := range []struct {
		name   string
		bi     *debug.BuildInfo
		module string
		commit string
	}{
		{"no build information", nil, "devel", ""},
		{"go run in a checkout without VCS stamping", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}}, "devel", ""},
		{"go install of a release", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3", ""},
		{"build in a checkout", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v0.0.0-20250102030405-0123abcd+dirty"},
			Settings: append(vcs, debug.BuildSetting{Key: "vcs.modified", Value: "true"})},
			"v0.0.0-20250102030405-0123abcd+dirty", "0123abcd (2025-01-02T03:04:05Z) dirty"},
		{"clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "devel", "0123abcd (2025-01-02T03:04:05Z)"},
	} {
		v := versionFrom(c.bi)
		if v.module != c.module || v.commit != c.commit {
			t.Errorf("%s: module %q commit %q, want %q and %q", c.name, v.module, v.commit, c.module, c.commit)
		}
		if c.bi != nil && c.bi.GoVersion != "" && v.goVersion != c.bi.GoVersion {
			t.Errorf("%s: go %q, want %q", c.name, v.goVersion, c.bi.GoVersion)
		}
	}
}

// helpLines are the command lines that have a usage of their own: every
// registered command, and the subcommands that parse their own flags.
func helpLines() [][]string {
	lines := [][]string{{"runs", "list"}, {"runs", "show"}}
	for _, sub := range []string{"import-bfcl", "score", "run", "check", "compare", "report"} {
		lines = append(lines, []string{"eval", sub})
	}
	for name := range commands {
		lines = append(lines, []string{name})
	}
	return lines
}

// TestHelp: help that was asked for goes to stdout with exit 0 and nothing
// on stderr, for docket itself and for every command, in every spelling.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}} {
		r := inproc(t, args...)
		wantCode(t, r, exitOK)
		if !strings.HasPrefix(r.stdout, "usage: docket <command>") || !strings.Contains(r.stdout, "\n  run ") || r.stderr != "" {
			t.Errorf("docket %s: want the usage on stdout only\n%s", args[0], r)
		}
	}
	for _, line := range helpLines() {
		name := strings.Join(line, " ")
		for _, args := range [][]string{
			append(append([]string(nil), line...), "-h"),
			append(append([]string(nil), line...), "--help"),
			append([]string{"help"}, line...),
		} {
			r := inproc(t, args...)
			if r.code != exitOK || !strings.HasPrefix(r.stdout, "usage: docket "+name) || r.stderr != "" {
				t.Errorf("want exit 0 and the usage of %q on stdout only\n%s", name, r)
			}
		}
	}
	// The built binary, as a person runs it.
	for _, args := range [][]string{{"--help"}, {"help", "runs", "list"}, {"serve", "-h"}} {
		r := child(t, "", args...)
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "usage: docket") || r.stderr != "" {
			t.Errorf("want exit 0 and the usage on stdout only\n%s", r)
		}
	}
}

// TestUsageOnStderr: a mistake (an unknown flag, a missing argument, no
// command) prints the usage on stderr, nothing on stdout, and exits 2, for
// every command.
func TestUsageOnStderr(t *testing.T) {
	t.Parallel()
	for _, line := range helpLines() {
		r := inproc(t, append(line, "--no-such-flag")...)
		said := "flag provided but not defined: -no-such-flag"
		if len(line) == 1 && (line[0] == "runs" || line[0] == "eval") {
			said = `subcommand "--no-such-flag"` // they take a subcommand first
		}
		if r.code != exitBad || r.stdout != "" || !strings.Contains(r.stderr, said) ||
			!strings.Contains(r.stderr, "usage: docket "+strings.Join(line, " ")) {
			t.Errorf("want exit 2 and the error and usage on stderr only\n%s", r)
		}
	}
	for _, args := range [][]string{nil, {"runs"}, {"runs", "show"}, {"eval"}, {"tools"}, {"restore"}, {"help", "nosuch"}} {
		r := inproc(t, args...)
		if r.code != exitBad || r.stdout != "" || !strings.Contains(r.stderr, "usage: docket") {
			t.Errorf("want exit 2 and the usage on stderr only\n%s", r)
		}
	}
	r := child(t, "", "runs", "list", "--no-such-flag")
	if r.code != exitBad || r.stdout != "" || !strings.Contains(r.stderr, "usage: docket runs list") {
		t.Errorf("want exit 2 and the usage on stderr only\n%s", r)
	}
}

// TestMissingDataDir: a command that reads or continues recorded runs
// refuses a data directory that does not exist (exit 2, saying so) and
// leaves it uncreated; the commands that record runs create it.
func TestMissingDataDir(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.plan(t, "plan", crashPlan(crashClasses[2]))
	missing := filepath.Join(b.dir, "typo")
	file := b.plan(t, "a-file", "{}")
	for _, line := range [][]string{
		{"runs", "list"},
		{"runs", "show", "r1"},
		{"audit", "r1"},
		{"audit", "--verify", "r1"},
		{"budgets"},
		{"backup"},
		{"gc", "--retention", "30d"},
		{"approve", "--tools", b.tools, "r1"},
		{"reject", "--tools", b.tools, "r1", "a1"},
		{"resolve", "--tools", b.tools, "r1", "a1", "--skip"},
		{"pause", "r1"},
		{"resume", "--tools", b.tools, "r1"},
		{"replay", "--tools", b.tools, "r1", "--plan", p},
		{"fork", "--tools", b.tools, "r1"},
	} {
		r := inproc(t, append(line, "--data", missing)...)
		if r.code != exitBad || !strings.Contains(r.stderr, "data directory "+missing+" does not exist") || r.stdout != "" {
			t.Errorf("want exit 2 saying the data directory does not exist\n%s", r)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("docket %s created the data directory it was refused (stat: %v)", strings.Join(line, " "), err)
		}
		r = inproc(t, append(line, "--data", file)...)
		if r.code != exitBad || !strings.Contains(r.stderr, "is not a directory") {
			t.Errorf("want exit 2 saying --data is not a directory\n%s", r)
		}
	}
	// docket run records into a new directory; then the others read it.
	wantCode(t, inproc(t, "run", "--data", missing, "--tools", b.tools, "--plan", p), exitOK)
	wantCode(t, inproc(t, "runs", "list", "--data", missing), exitOK)
}

// TestDataAndLedger: --data and --ledger both given are refused, for every
// command that takes them; $DOCKET_LEDGER with an explicit --data is not
// (--data wins).
func TestDataAndLedger(t *testing.T) {
	t.Parallel()
	url := "postgres://u:secret-pw@127.0.0.1:1/db"
	n := 0
	for _, line := range helpLines() {
		h := inproc(t, append(line, "-h")...)
		if !strings.Contains(h.stdout, "\n  -ledger value\n") || !strings.Contains(h.stdout, "\n  -data ") {
			continue
		}
		n++
		for _, args := range [][]string{
			append(append([]string(nil), line...), "--data", t.TempDir(), "--ledger", url),
			append(append([]string(nil), line...), "--ledger", url, "--data", t.TempDir()),
		} {
			r := inproc(t, args...)
			if r.code != exitBad || !strings.Contains(r.stderr, "--data and --ledger both name the ledger") || strings.Contains(r.stderr, "secret-pw") {
				t.Errorf("want exit 2 refusing --data with --ledger\n%s", r)
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d commands take --data and --ledger", n)
	}
	dir := t.TempDir()
	r := inprocEnv(t, map[string]string{"DOCKET_LEDGER": url}, "runs", "list", "--data", dir)
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, "no runs") {
		t.Fatalf("runs list --data with $DOCKET_LEDGER set:\n%s", r)
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
		{[]string{"help", "frobnicate"}, exitBad, `unknown command "frobnicate"`},
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
