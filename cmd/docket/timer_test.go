package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger/badgerdb"
)

// timerPlan: an invoice, then a second invoice 2 seconds after the first
// succeeded. Both keyed: a kill at any point is recovered by calling again
// with the same key.
const timerPlan = `{"goal": "a timer under kills", "actions": [
  {"id": "inv1", "tool": "payments_create_invoice", "args": {"customer": "c_1", "amount": 10, "currency": "EUR", "reference": "ref-1"}},
  {"id": "inv2", "tool": "payments_create_invoice", "depends_on": ["inv1"], "after": "2s",
   "args": {"customer": "c_1", "amount": 20, "currency": "EUR", "reference": "ref-2"}}]}`

// untilLine reads p's stderr until a line contains s (true), or stderr
// closes (false).
func (p *proc) untilLine(s string) bool {
	for p.c.sc.Scan() {
		line := p.c.sc.Text()
		p.errb.WriteString(line + "\n")
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// TestTimerFiresOnceAcrossKills: `docket run` holds a timer (it sleeps
// until the action's time); SIGKILL it while it waits, or at each point of
// the woken action, then run the same command again: the action takes
// effect exactly once, and it was never claimed before its time (by the
// ledger's record of the first invoice's success).
func TestTimerFiresOnceAcrossKills(t *testing.T) {
	t.Parallel()
	for _, point := range append([]string{"waiting"}, crashPoints[1:]...) {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			args := b.runArgs(b.plan(t, "plan", timerPlan), "--approve", "all", "--run-id", "tm")
			var first result
			if point == "waiting" {
				p := start(t, "", args...)
				if !p.untilLine("waits until") {
					t.Fatalf("the child never said it waits:\n%s", p.finish(t, false))
				}
				first = p.finish(t, true)
				if n := b.world.Effect("payments/ref-2"); n != 0 {
					t.Fatalf("the waiting invoice took effect %d times before its time", n)
				}
			} else if first = child(t, point+":inv2", args...); !first.killed {
				t.Fatalf("the child never reached %s of inv2:\n%s", point, first)
			}
			var last result
			for step := 0; ; step++ {
				if step > 3 {
					t.Fatalf("the run did not complete:\n%s", last)
				}
				last = child(t, "", args...)
				if doc(t, last).Status == "completed" {
					break
				}
			}
			wantCode(t, last, exitOK)
			for _, e := range []string{"payments/ref-1", "payments/ref-2"} {
				if n := b.world.Effect(e); n != 1 {
					t.Fatalf("%s took effect %d times, want once\n%s", e, n, last)
				}
			}
			d := doc(t, last)
			l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: b.data})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			inv1, err := l.Key(context.Background(), d.action("inv1").Key)
			if err != nil {
				t.Fatal(err)
			}
			inv2, err := l.Key(context.Background(), d.action("inv2").Key)
			if err != nil {
				t.Fatal(err)
			}
			if due := inv1.UpdatedAt.Add(2 * time.Second); inv2.FirstClaimedAt.Before(due) {
				t.Fatalf("inv2 was first claimed at %s, before its time %s", inv2.FirstClaimedAt, due)
			}
		})
	}
}

// TestRunNowCommand: `docket run --wait-timers=false` leaves a run that
// waits 30 days (exit 3, waiting_until in the Run JSON); `docket run-now`
// runs the action at once.
func TestRunNowCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	plan := strings.Replace(timerPlan, `"after": "2s"`, `"after": "30d"`, 1)
	args := b.runArgs(b.plan(t, "plan", plan), "--approve", "all", "--run-id", "rn", "--wait-timers=false")
	first := inproc(t, args...)
	wantCode(t, first, exitPaused)
	if d := doc(t, first); d.Status != "running" || d.WaitingUntil == "" || d.action("inv2").Status != "approved" {
		t.Fatalf("run %s waiting_until %q inv2 %s\n%s", d.Status, d.WaitingUntil, d.action("inv2").Status, first)
	}
	if !strings.Contains(first.stderr, "waits until") || !strings.Contains(first.stderr, "docket run-now") {
		t.Fatalf("the message does not say until when the run waits and how to run it now:\n%s", first)
	}
	bad := inproc(t, "run-now", "--data", b.data, "--tools", b.tools, "rn", "inv1")
	wantCode(t, bad, exitBad)
	now := inproc(t, "run-now", "--data", b.data, "--tools", b.tools, "--as", "alice", "rn", "inv2")
	wantCode(t, now, exitOK)
	if d := doc(t, now); d.Status != "completed" || d.WaitingUntil != "" {
		t.Fatalf("after run-now: run %s waiting_until %q\n%s", d.Status, d.WaitingUntil, now)
	}
	if n := b.world.Effect("payments/ref-2"); n != 1 {
		t.Fatalf("the invoice took effect %d times", n)
	}
}
