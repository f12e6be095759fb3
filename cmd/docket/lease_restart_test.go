package main

import (
	"strings"
	"testing"
)

// A `docket run` on the shared ledger SIGKILLed while an action is claimed
// leaves its claim "in flight" until its process's lease expires. The same
// command run again at once waits for that lease, says what it waits for and
// until when, then takes the run over: a keyed action is called again with
// its key and the run completes (exit 0), each write once; an at-most-once
// action whose outcome is unknown waits for a person (exit 3), never a
// failure.
func TestSharedRunRestartWaitsForLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    crashClass
		code int
	}{
		{crashClasses[2], exitOK},     // keyed
		{crashClasses[4], exitPaused}, // at_most_once
	} {
		t.Run(tc.c.class, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			url, _ := sharedLedger(t)
			args := []string{"run", "--ledger", url, "--tools", b.tools, "--plan", b.plan(t, "plan", crashPlan(tc.c)), "--approve", "all"}

			first := child(t, "after_call:t", args...)
			if !first.killed {
				t.Fatalf("the first run never reached the call of t:\n%s", first)
			}
			if n := b.world.Effect(tc.c.effect); n != 1 {
				t.Fatalf("%d effects of %s before the kill, want 1", n, tc.c.effect)
			}
			second := child(t, "", args...)
			wantCode(t, second, tc.code)
			for _, w := range []string{"waiting up to", "for the lease of a previous process (incarnation inc_", "on action t to expire (at ", "database's clock"} {
				if !strings.Contains(second.stderr, w) {
					t.Fatalf("the restart does not say what it waits for (%q)\n%s", w, second)
				}
			}
			d := doc(t, second)
			if n := b.world.Effect(tc.c.effect); n != 1 {
				t.Fatalf("%s took effect %d times, want once\n%s", tc.c.effect, n, second)
			}
			switch tc.code {
			case exitOK:
				if d.Status != "completed" || d.action("t").Status != "succeeded" || d.action("t").Attempts != 2 {
					t.Fatalf("want the run completed with t taken over as attempt 2\n%s", second)
				}
				if n := b.world.Effect("payments/ref-next"); n != 1 {
					t.Fatalf("the dependent invoice took effect %d times, want once", n)
				}
			case exitPaused:
				if d.Status != "paused" || d.action("t").Status != "needs_review" {
					t.Fatalf("want the run paused with t in needs_review\n%s", second)
				}
				if n := b.world.Effect("payments/ref-next"); n != 0 {
					t.Fatalf("the dependent invoice ran while t waits for a person (%d)", n)
				}
			}
		})
	}
}

// With --lease-wait 0 the restart does not wait: it exits 4 (busy, retry
// later), says until when the lease holds, and starts nothing; a process
// that is alive and performing the action renews its lease while the
// restart waits: that is busy too (exit 4), and its claim is never taken.
func TestSharedRunLeaseBusy(t *testing.T) {
	t.Parallel()
	t.Run("no wait", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		url, _ := sharedLedger(t)
		args := []string{"run", "--ledger", url, "--tools", b.tools, "--plan", b.plan(t, "plan", crashPlan(crashClasses[2])), "--approve", "all"}
		if first := child(t, "after_claim:t", args...); !first.killed {
			t.Fatalf("the first run never claimed t:\n%s", first)
		}
		r := child(t, "", append(args, "--lease-wait", "0")...)
		wantCode(t, r, exitBusy)
		if !strings.Contains(r.stderr, "action t is claimed by another process (incarnation inc_") || !strings.Contains(r.stderr, "--lease-wait") {
			t.Fatalf("want a message naming the claim and --lease-wait\n%s", r)
		}
		if d := doc(t, r); d.action("t").Status != "claimed" || d.action("t").Attempts != 1 {
			t.Fatalf("the refused restart changed t\n%s", r)
		}
		if n := b.world.Requests("payments"); n != 0 {
			t.Fatalf("the payments API saw %d requests", n)
		}
	})
	t.Run("alive", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		url, _ := sharedLedger(t)
		args := []string{"run", "--ledger", url, "--tools", b.tools, "--plan", b.plan(t, "plan", crashPlan(crashClasses[4])), "--approve", "all"}
		holder := startBlocked(t, "after_claim:t", args...) // alive: its heartbeat renews its lease
		defer holder.finish(t, true)
		r := child(t, "", args...)
		wantCode(t, r, exitBusy)
		if !strings.Contains(r.stderr, "waiting up to") || !strings.Contains(r.stderr, "being performed by another process that is alive") {
			t.Fatalf("want a wait, then busy: the process is alive\n%s", r)
		}
		if d := doc(t, r); d.action("t").Status != "claimed" {
			t.Fatalf("the live process's claim was taken\n%s", r)
		}
		if n := b.world.Requests("email"); n != 0 {
			t.Fatalf("the email API saw %d requests", n)
		}
	})
}

// The commands that drive a run on after a person acts (resume, approve,
// reject, resolve, run-now) wait for the lease of a killed process's claim
// as docket run does. `docket approve` right after the process performing an
// at-most-once action was SIGKILLed: with --lease-wait 0 it exits 4 (busy)
// and changes nothing; then it says what it waits for, takes the run over,
// and the action whose outcome is unknown waits for a person (exit 3),
// taking effect once. Before, it failed (exit 1) on the live claim.
func TestSharedApproveWaitsForLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := sharedLedger(t)
	c := crashClasses[4] // at_most_once
	plan := b.plan(t, "plan", crashPlan(c))
	base := []string{"--ledger", url, "--tools", b.tools}
	first := child(t, "after_call:t", append([]string{"run", "--plan", plan, "--approve", "all", "--run-id", "r1"}, base...)...)
	if !first.killed {
		t.Fatalf("the first run never reached the call of t:\n%s", first)
	}
	busy := child(t, "", append([]string{"approve", "--lease-wait", "0"}, append(base, "r1")...)...)
	wantCode(t, busy, exitBusy)
	if !strings.Contains(busy.stderr, "action t is claimed by another process (incarnation inc_") {
		t.Fatalf("want a message naming the claim\n%s", busy)
	}
	if d := doc(t, busy); d.action("t").Status != "claimed" || d.action("t").Attempts != 1 {
		t.Fatalf("the refused approve changed t\n%s", busy)
	}
	r := child(t, "", append([]string{"approve"}, append(base, "r1")...)...)
	wantCode(t, r, exitPaused)
	if !strings.Contains(r.stderr, "waiting up to") || !strings.Contains(r.stderr, "on action t to expire") {
		t.Fatalf("approve does not say what it waits for\n%s", r)
	}
	d := doc(t, r)
	if d.Status != "paused" || d.action("t").Status != "needs_review" {
		t.Fatalf("want the run paused with t in needs_review\n%s", r)
	}
	if n := b.world.Effect(c.effect); n != 1 {
		t.Fatalf("%s took effect %d times, want once", c.effect, n)
	}
	if n := b.world.Effect("payments/ref-next"); n != 0 {
		t.Fatalf("the dependent invoice ran while t waits for a person (%d)", n)
	}
	if neg := child(t, "", append([]string{"resume", "--lease-wait", "-1s"}, append(base, "r1")...)...); neg.code != exitBad || !strings.Contains(neg.stderr, "must not be negative") {
		t.Fatalf("a negative --lease-wait: exit %d, want %d saying it must not be negative\n%s", neg.code, exitBad, neg)
	}
}
