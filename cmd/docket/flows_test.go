package main

import (
	"os"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
)

// TestDemo runs `docket demo` as the README's first command does: it must
// crash its child, resume, approve and end with every effect exactly once.
func TestDemo(t *testing.T) {
	t.Parallel()
	r := inproc(t, "demo", "--data", t.TempDir())
	wantCode(t, r, exitOK)
	for _, w := range []string{"sending SIGKILL", "dead (killed)", "action.claimed", "run.completed", "Every effect happened exactly once"} {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("demo output lacks %q\n%s", w, r)
		}
	}
	for _, name := range demoworld.OnboardingEffects {
		if !strings.Contains(r.stdout, name) {
			t.Fatalf("demo output does not report %s\n%s", name, r)
		}
	}
}

// TestApproveAndReject: under the default policy (safe) the at_most_once
// email waits for a person (exit 3); approving it finishes the run (exit 0),
// rejecting it ends the run without the email (exit 1).
func TestApproveAndReject(t *testing.T) {
	t.Parallel()
	for _, decide := range []string{"approve", "reject"} {
		t.Run(decide, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			args := b.runArgs(b.plan(t, "onboard", string(demoworld.OnboardingPlan())))
			first := inproc(t, args...)
			wantCode(t, first, exitPaused)
			d := doc(t, first)
			if d.Status != "awaiting_approval" && d.Status != "paused" {
				t.Fatalf("status %q, want awaiting_approval\n%s", d.Status, first)
			}
			if s := d.action("welcome").Status; s != "pending" {
				t.Fatalf("welcome is %q, want pending (waiting for approval)\n%s", s, first)
			}
			if !strings.Contains(first.stderr, "docket approve") || !strings.Contains(first.stderr, "welcome") {
				t.Fatalf("stderr should say how to approve welcome:\n%s", first)
			}
			if n := b.world.Effect("email/billing@acme.example/welcome-pack"); n != 0 {
				t.Fatalf("the email went out before approval (%d)", n)
			}
			for _, name := range demoworld.OnboardingEffects[:3] {
				if n := b.world.Effect(name); n != 1 {
					t.Fatalf("%s = %d before the email, want 1", name, n)
				}
			}

			var second result
			if decide == "approve" {
				second = inproc(t, "approve", "--data", b.data, "--tools", b.tools, d.RunID, "welcome")
				wantCode(t, second, exitOK)
				if d := doc(t, second); d.Status != "completed" || d.action("welcome").Status != "succeeded" {
					t.Fatalf("after approval: %+v", d)
				}
			} else {
				second = inproc(t, "reject", d.RunID, "welcome", "--reason", "not this week", "--data", b.data, "--tools", b.tools)
				wantCode(t, second, exitFailed)
				if d := doc(t, second); d.Status != "failed" || d.action("welcome").Status != "rejected" {
					t.Fatalf("after rejection: %+v", d)
				}
			}
			want := 0
			if decide == "approve" {
				want = 1
			}
			if n := b.world.Effect("email/billing@acme.example/welcome-pack"); n != want {
				t.Fatalf("emails sent: %d, want %d", n, want)
			}
			for _, name := range demoworld.OnboardingEffects[:3] {
				if n := b.world.Effect(name); n != 1 {
					t.Fatalf("%s = %d, want exactly once", name, n)
				}
			}
			// Deciding again is refused: the action is no longer waiting.
			again := inproc(t, decide, "--data", b.data, "--tools", b.tools, d.RunID, "welcome")
			if again.code != exitBad && again.code != exitOK && again.code != exitFailed {
				t.Fatalf("deciding twice: %s", again)
			}
			if n := b.world.Effect("email/billing@acme.example/welcome-pack"); n != want {
				t.Fatalf("deciding twice changed the emails sent: %d, want %d", n, want)
			}
		})
	}
}

// TestReplay: replaying an edited plan records revision 2 of the same run
// and runs only the changed action (the unchanged one keeps its key).
func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	planA := crashPlan(crashClasses[2]) // keyed "t", then keyed "next"
	first := inproc(t, b.runArgs(b.plan(t, "a", planA), "--run-id", "orig", "--approve", "all")...)
	wantCode(t, first, exitOK)

	edited := strings.Replace(planA, `"amount": 5`, `"amount": 6`, 1)
	replay := inproc(t, "replay", "orig", "--plan", b.plan(t, "edited", edited), "--data", b.data, "--tools", b.tools)
	wantCode(t, replay, exitOK)
	d := doc(t, replay)
	if d.RunID != "orig" || d.Revision != 2 || d.Status != "completed" {
		t.Fatalf("replay: %+v", d)
	}
	if k := d.action("t").Key; k == "" || k != doc(t, first).action("t").Key {
		t.Fatalf("replay should keep the key of the unchanged action: %q, was %q\n%s", k, doc(t, first).action("t").Key, replay)
	}
	if n := b.world.Effect("payments/ref-t"); n != 1 {
		t.Fatalf("replay re-ran the unchanged action: %d", n)
	}
	if n := b.world.Effect("payments/ref-next"); n != 2 {
		t.Fatalf("replay should run the edited action once more: %d effects, want 2\n%s", n, replay)
	}
}

// TestFork: forking runs everything again under a new run id and new keys,
// with the original run's policy.
func TestFork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := inproc(t, b.runArgs(b.plan(t, "a", crashPlan(crashClasses[2])), "--run-id", "orig", "--approve", "all")...)
	wantCode(t, first, exitOK)

	fork := inproc(t, "fork", "orig", "--run-id", "copy", "--data", b.data, "--tools", b.tools)
	wantCode(t, fork, exitOK)
	f := doc(t, fork)
	if f.RunID != "copy" || f.Status != "completed" || f.Policy != "all" {
		t.Fatalf("fork: %+v", f)
	}
	if n := b.world.Effect("payments/ref-t"); n != 2 {
		t.Fatalf("a fork runs everything again: ref-t %d, want 2", n)
	}
	if f.action("t").Key == doc(t, first).action("t").Key {
		t.Fatalf("a fork must use new keys")
	}

	// Without --run-id the fork gets a new id, said on stderr.
	again := inproc(t, "fork", "orig", "--data", b.data, "--tools", b.tools)
	wantCode(t, again, exitOK)
	if g := doc(t, again); g.RunID == "orig" || g.RunID == "copy" || !strings.Contains(again.stderr, g.RunID) {
		t.Fatalf("fork without --run-id: run %q\n%s", g.RunID, again)
	}
	if n := b.world.Effect("payments/ref-t"); n != 3 {
		t.Fatalf("a second fork runs everything again: ref-t %d, want 3", n)
	}
}

// TestToolsChanged: resuming a run whose tool definitions changed is refused
// (exit 2, saying what to do) until --accept-tools-change is given.
func TestToolsChanged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	args := b.runArgs(b.plan(t, "onboard", string(demoworld.OnboardingPlan())))
	wantCode(t, inproc(t, args...), exitPaused) // the email waits for approval

	if err := os.WriteFile(b.tools, b.world.ToolsFile(demoworld.ToolsOptions{Timeout: "3s"}), 0o600); err != nil {
		t.Fatal(err)
	}
	changed := inproc(t, args...)
	wantCode(t, changed, exitBad)
	doc(t, changed)
	if !strings.Contains(changed.stderr, "--accept-tools-change") {
		t.Fatalf("the refusal should say how to accept the change:\n%s", changed)
	}
	accepted := inproc(t, append(args, "--accept-tools-change")...)
	wantCode(t, accepted, exitPaused)
	if d := doc(t, accepted); d.action("welcome").Status != "pending" {
		t.Fatalf("after accepting the change: %+v", d)
	}
	for _, name := range demoworld.OnboardingEffects[:3] {
		if n := b.world.Effect(name); n != 1 {
			t.Fatalf("%s = %d, want exactly once", name, n)
		}
	}
}

// TestResolveSkip: a person who decides to leave out an action whose outcome
// is unknown skips it; nothing is sent again.
func TestResolveSkip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := crashClasses[4] // at_most_once
	args := b.runArgs(b.plan(t, "plan", crashPlan(c)), "--approve", "all")
	if r := child(t, "after_call:t", args...); !r.killed {
		t.Fatalf("never reached the crash point:\n%s", r)
	}
	paused := child(t, "", args...)
	wantCode(t, paused, exitPaused)
	skip := inproc(t, "resolve", "--data", b.data, "--tools", b.tools, doc(t, paused).RunID, "t", "--skip")
	d := doc(t, skip)
	if d.action("t").Status != "skipped" {
		t.Fatalf("t is %q, want skipped\n%s", d.action("t").Status, skip)
	}
	// The dependent cannot run without t's output: it is skipped too, and the
	// run ends, completed, with nothing left to do.
	wantCode(t, skip, exitOK)
	if d.Status != "completed" || d.action("next").Status != "skipped" {
		t.Fatalf("run %s, next %s; want completed and skipped\n%s", d.Status, d.action("next").Status, skip)
	}
	if n := b.world.Effect(c.effect); n != 1 {
		t.Fatalf("emails: %d, want the one sent before the crash", n)
	}
	if n := b.world.Effect("payments/ref-next"); n != 0 {
		t.Fatalf("the skipped dependent took effect %d times", n)
	}
}
