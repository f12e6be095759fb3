package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashClass is one effect class under test: the action that exercises it
// and the world's counter of its effect ("" for read_only: no effect).
type crashClass struct {
	class  string
	action string // JSON of the action with id "t"
	effect string
}

var crashClasses = []crashClass{
	{"read_only", `{"id": "t", "tool": "catalogue_price", "args": {"plan": "pro"}}`, ""},
	{"idempotent", `{"id": "t", "tool": "settings_put", "args": {"account": "acct-1", "settings": {"plan": "pro"}}}`, "settings/acct-1"},
	{"keyed", `{"id": "t", "tool": "payments_create_invoice", "args": {"customer": "c_9", "amount": 1200, "currency": "EUR", "reference": "ref-t"}}`, "payments/ref-t"},
	{"lookup", `{"id": "t", "tool": "crm_create_contact", "args": {"company": "ACME", "email": "t@acme.example"}}`, "crm/t@acme.example"},
	{"at_most_once", `{"id": "t", "tool": "email_send", "args": {"to": "t@acme.example", "template": "welcome"}}`, "email/t@acme.example/welcome"},
}

// crashPlan is the action under test followed by a keyed action that depends
// on it, so the test also sees the run go on after the crashed action.
func crashPlan(c crashClass) string {
	return `{"goal": "crash ` + c.class + `", "actions": [` + c.action + `,
  {"id": "next", "tool": "payments_create_invoice", "depends_on": ["t"],
   "args": {"customer": "c_next", "amount": 5, "currency": "EUR", "reference": "ref-next"}}]}`
}

// TestCrashMatrix kills a real docket process (SIGKILL) at every crash point
// of an action of every effect class, runs the same command again, and checks
// the world: keyed, idempotent and lookup effects happened exactly once and
// the run completed; an at_most_once effect happened at most once, and when
// its outcome is unknown the run waits for a person (exit 3, needs_review)
// whose resolution then finishes it correctly.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	for _, c := range crashClasses {
		for _, point := range crashPoints {
			t.Run(c.class+"/"+point, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				args := b.runArgs(b.plan(t, "plan", crashPlan(c)), "--approve", "all")

				first := child(t, point+":t", args...)
				if !first.killed {
					t.Fatalf("the child never reached %s of action t:\n%s", point, first)
				}
				countAfterKill := 0
				if c.effect != "" {
					countAfterKill = b.world.Effect(c.effect)
				}
				wantSent := point == "after_call" || point == "after_outcome"
				if c.effect != "" && (countAfterKill == 1) != wantSent || countAfterKill > 1 {
					t.Fatalf("after a kill at %s the world counted %d effects of %s", point, countAfterKill, c.effect)
				}

				second := child(t, "", args...)
				d := doc(t, second)
				unknown := c.class == "at_most_once" && (point == "after_claim" || point == "after_call")
				if unknown {
					wantCode(t, second, exitPaused)
					if d.Status != "paused" {
						t.Fatalf("run status %q, want paused\n%s", d.Status, second)
					}
					if s := d.action("t").Status; s != "needs_review" {
						t.Fatalf("action t is %q, want needs_review\n%s", s, second)
					}
					if n := b.world.Effect(c.effect); n != countAfterKill {
						t.Fatalf("the rerun sent the at_most_once request again: %d effects, %d before", n, countAfterKill)
					}
					if n := b.world.Effect("payments/ref-next"); n != 0 {
						t.Fatalf("the dependent action ran while t waits for a person (%d effects)", n)
					}
					// The person checks the email system: after_claim never sent
					// it (retry), after_call did (mark it done with its output).
					resolve := []string{"resolve", "--data", b.data, "--tools", b.tools, d.RunID, "t", "--retry"}
					if point == "after_call" {
						resolve[len(resolve)-1] = "--done"
						resolve = append(resolve, `{"message_id": "msg_1", "to": "t@acme.example"}`)
					}
					second = child(t, "", resolve...)
					d = doc(t, second)
				}
				wantCode(t, second, exitOK)
				if d.Status != "completed" {
					t.Fatalf("run status %q, want completed\n%s", d.Status, second)
				}
				for _, a := range d.Actions {
					if a.Status != "succeeded" {
						t.Fatalf("action %s is %q, want succeeded\n%s", a.ID, a.Status, second)
					}
				}
				if c.effect != "" {
					if n := b.world.Effect(c.effect); n != 1 {
						t.Fatalf("%s took effect %d times, want exactly once\n%s", c.effect, n, second)
					}
				}
				if n := b.world.Effect("payments/ref-next"); n != 1 {
					t.Fatalf("the dependent invoice took effect %d times, want once", n)
				}
				if c.class == "lookup" && point == "after_call" && b.world.Requests("crm") != 2 {
					t.Fatalf("the CRM served %d requests; want 2 (the create, then one lookup that found it)", b.world.Requests("crm"))
				}
			})
		}
	}
}

// TestBusyDataDirectory: while one process holds the data directory, a second
// `docket run` exits 4, says so and how to act through a running service,
// and prints no Run JSON (it cannot read the run); so does a read command.
func TestBusyDataDirectory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	args := b.runArgs(b.plan(t, "plan", crashPlan(crashClasses[2])), "--approve", "all")
	// The holder stops before claiming t and keeps the directory until killed.
	holder := startBlocked(t, "before_claim:t", args...)
	defer holder.finish(t, true)

	busy := child(t, "", args...)
	wantCode(t, busy, exitBusy)
	if busy.stdout != "" || !strings.Contains(busy.stderr, "busy") || !strings.Contains(busy.stderr, "--server URL") {
		t.Fatalf("busy: want no Run JSON and a message that says busy and suggests --server URL\n%s", busy)
	}
	list := inproc(t, "runs", "list", "--data", b.data)
	wantCode(t, list, exitBusy)
	if !strings.Contains(list.stderr, "--server URL") {
		t.Fatalf("busy read command should suggest --server URL\n%s", list)
	}
}

// TestPlanMismatchAndRerun: the same run id with another plan is refused
// (exit 2); rerunning a completed run prints the same Run JSON and repeats no
// effect; stdout is Run JSON for every exit code.
func TestPlanMismatchAndRerun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	planA := b.plan(t, "a", crashPlan(crashClasses[2]))
	first := inproc(t, b.runArgs(planA, "--approve", "all")...)
	wantCode(t, first, exitOK)
	d := doc(t, first)
	if d.Status != "completed" || !strings.HasPrefix(d.RunID, "run_") {
		t.Fatalf("first run: %+v", d)
	}
	for _, a := range d.Actions {
		if !strings.HasPrefix(a.Key, "dk1_") || a.Attempts != 1 {
			t.Fatalf("action %s: key %q attempts %d", a.ID, a.Key, a.Attempts)
		}
	}

	again := inproc(t, b.runArgs(planA, "--approve", "all")...)
	wantCode(t, again, exitOK)
	if again.stdout != first.stdout {
		t.Fatalf("rerun of a completed run printed another Run JSON:\nfirst:\n%s\nagain:\n%s", first.stdout, again.stdout)
	}
	if n := b.world.Effect("payments/ref-t"); n != 1 {
		t.Fatalf("rerun repeated an effect: %d", n)
	}
	if n := b.world.Requests("payments"); n != 2 {
		t.Fatalf("rerun called the payments API again: %d requests, want 2", n)
	}

	other := strings.Replace(crashPlan(crashClasses[2]), `"amount": 1200`, `"amount": 1300`, 1)
	mismatch := inproc(t, b.runArgs(b.plan(t, "b", other), "--run-id", d.RunID)...)
	wantCode(t, mismatch, exitBad)
	doc(t, mismatch)
	if !strings.Contains(mismatch.stderr, "different plan") {
		t.Fatalf("mismatch message should say the plan differs:\n%s", mismatch)
	}
	if n := b.world.Effect("payments/ref-t"); n != 1 {
		t.Fatalf("a refused plan took effect: %d", n)
	}
}

// TestRandomKills runs a plan of ten actions of mixed classes, with
// references between them, and SIGKILLs the process at random crash points
// of the actions it is about to run (seeded; the seed is printed), resolving
// what waits for a person the way a person would (by checking the world),
// until the run completes; every effect must have happened exactly once.
// Rounds with a fresh world repeat until at least five kills happened (a
// kill lets concurrent actions finish, so one round may see few).
func TestRandomKills(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DOCKET_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (rerun with DOCKET_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	kills := 0
	for round := 1; kills < 5; round++ {
		if round > 10 {
			t.Fatalf("seed %d: only %d kills in 10 rounds", seed, kills)
		}
		kills += killRound(t, seed, round, rng)
	}
}

// killRound runs the mixed plan to completion in a fresh world with random
// kills and checks the world; it returns the number of kills.
func killRound(t *testing.T, seed uint64, round int, rng *rand.Rand) int {
	t.Helper()
	b := setup(t)
	planPath := b.plan(t, "mixed", mixedPlan)
	args := b.runArgs(planPath, "--approve", "all", "--run-id", "mixed")
	emails := map[string]string{"e1": "email/a@acme.example/welcome", "e2": "email/b@globex.example/welcome"}
	deps := map[string][]string{}
	var roots []string
	var p struct {
		Actions []struct {
			ID        string   `json:"id"`
			DependsOn []string `json:"depends_on"`
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(mixedPlan), &p); err != nil {
		t.Fatal(err)
	}
	for _, a := range p.Actions {
		deps[a.ID] = a.DependsOn
		if len(a.DependsOn) == 0 {
			roots = append(roots, a.ID)
		}
	}

	kills, steps := 0, 0
	var last result
	for ; steps < 40; steps++ {
		var d runJSON
		// The frontier: actions not done whose dependencies are done; the
		// next command certainly reaches them (unless it pauses first).
		frontier := roots
		if steps > 0 {
			show := inproc(t, "runs", "show", "--json", "--data", b.data, "mixed")
			wantCode(t, show, exitOK)
			d = doc(t, show)
			if d.Status == "completed" {
				break
			}
			frontier = nil
			for _, a := range d.Actions {
				ready := a.Status != "succeeded"
				for _, dep := range deps[a.ID] {
					ready = ready && d.action(dep).Status == "succeeded"
				}
				if ready {
					frontier = append(frontier, a.ID)
				}
			}
		}
		crash := ""
		if len(frontier) > 0 && rng.IntN(5) > 0 {
			crash = crashPoints[rng.IntN(len(crashPoints))] + ":" + frontier[rng.IntN(len(frontier))]
		}
		cmd := args
		for _, a := range d.Actions {
			if a.Status != "needs_review" {
				continue
			}
			// A person checks the email system and says what happened.
			cmd = []string{"resolve", "--data", b.data, "--tools", b.tools, "mixed", a.ID, "--retry"}
			if b.world.Effect(emails[a.ID]) > 0 {
				cmd[len(cmd)-1] = "--done"
				cmd = append(cmd, `{"message_id": "recovered", "to": "someone"}`)
			}
			break
		}
		last = child(t, crash, cmd...)
		if last.killed {
			kills++
			t.Logf("seed %d round %d step %d: killed at %s (docket %s)", seed, round, steps, crash, cmd[0])
			continue
		}
		doc(t, last)
		if last.code != exitOK && last.code != exitPaused {
			t.Fatalf("seed %d round %d step %d: unexpected exit\n%s", seed, round, steps, last)
		}
	}
	if steps == 40 {
		t.Fatalf("seed %d round %d: the run did not complete in 40 steps; last:\n%s", seed, round, last)
	}
	eff := b.world.Effects()
	want := []string{
		"crm/a@acme.example", "crm/b@globex.example",
		"payments/r1", "payments/r2", "payments/r3",
		"email/a@acme.example/welcome", "email/b@globex.example/welcome",
	}
	settings := 0
	for name, n := range eff {
		if n != 1 {
			t.Errorf("seed %d round %d: %s took effect %d times, want exactly once", seed, round, name, n)
		}
		if strings.HasPrefix(name, "settings/") {
			settings++
		} else if !slices.Contains(want, name) {
			t.Errorf("seed %d round %d: unexpected effect %s", seed, round, name)
		}
	}
	for _, name := range want {
		if eff[name] == 0 {
			t.Errorf("seed %d round %d: %s never took effect", seed, round, name)
		}
	}
	if settings != 2 {
		t.Errorf("seed %d round %d: %d settings changes, want 2 (%v)", seed, round, settings, eff)
	}
	t.Logf("seed %d round %d: %d kills in %d steps; effects %v", seed, round, kills, steps, eff)
	return kills
}

const mixedPlan = `{"goal": "onboard two customers", "actions": [
  {"id": "p1", "tool": "catalogue_price", "args": {"plan": "pro"}},
  {"id": "c1", "tool": "crm_create_contact", "args": {"company": "ACME", "email": "a@acme.example"}},
  {"id": "i1", "tool": "payments_create_invoice", "depends_on": ["p1", "c1"],
   "args": {"customer": "${c1.output.id}", "amount": "${p1.output.amount}", "currency": "${p1.output.currency}", "reference": "r1"}},
  {"id": "s1", "tool": "settings_put", "depends_on": ["c1", "i1"],
   "args": {"account": "${c1.output.id}", "settings": {"plan": "pro", "invoice": "${i1.output.id}"}}},
  {"id": "c2", "tool": "crm_create_contact", "args": {"company": "Globex", "email": "b@globex.example"}},
  {"id": "i2", "tool": "payments_create_invoice", "depends_on": ["c2"],
   "args": {"customer": "${c2.output.id}", "amount": 300, "currency": "EUR", "reference": "r2"}},
  {"id": "s2", "tool": "settings_put", "depends_on": ["c2"],
   "args": {"account": "${c2.output.id}", "settings": {"plan": "starter"}}},
  {"id": "e1", "tool": "email_send", "depends_on": ["c1", "s1"],
   "args": {"to": "a@acme.example", "template": "welcome", "contact_id": "${c1.output.id}"}},
  {"id": "i3", "tool": "payments_create_invoice", "depends_on": ["c1", "i1"],
   "args": {"customer": "${c1.output.id}", "amount": 50, "currency": "EUR", "reference": "r3"}},
  {"id": "e2", "tool": "email_send", "depends_on": ["s2"],
   "args": {"to": "b@globex.example", "template": "welcome"}}
]}`
