package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
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
// waits 30 days (exit 7, waiting_until in the Run JSON); `docket run-now`
// runs the action at once.
func TestRunNowCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	plan := strings.Replace(timerPlan, `"after": "2s"`, `"after": "30d"`, 1)
	args := b.runArgs(b.plan(t, "plan", plan), "--approve", "all", "--run-id", "rn", "--wait-timers=false")
	first := inproc(t, args...)
	wantCode(t, first, exitWaiting)
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

// getRun reads a run through a service's API.
func getRun(t *testing.T, base, token, runID string) runJSON {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/runs/"+runID, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET run %s: %v", runID, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET run %s = %d: %s", runID, resp.StatusCode, body)
	}
	return doc(t, result{stdout: string(body)})
}

// waitRun polls a service until cond holds for the run (or fails the test
// after a minute).
func waitRun(t *testing.T, base, token, runID, what string, cond func(runJSON) bool) runJSON {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		d := getRun(t, base, token, runID)
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %s did not happen: %+v", runID, what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeWakesTimer: `docket run --wait-timers=false` leaves a run
// waiting (exit 7); `docket serve` on the same data directory wakes it at
// its time and it completes, each effect once.
func TestServeWakesTimer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	args := b.runArgs(b.plan(t, "plan", timerPlan), "--approve", "all", "--run-id", "sw", "--wait-timers=false")
	wantCode(t, inproc(t, args...), exitWaiting)
	s := startServe(t, nil, "--data", b.data, "--tools", b.tools)
	d := waitRun(t, s.base, s.token, "sw", "completed", func(d runJSON) bool { return d.Status == "completed" })
	if d.WaitingUntil != "" {
		t.Fatalf("a completed run waits until %s", d.WaitingUntil)
	}
	for _, e := range []string{"payments/ref-1", "payments/ref-2"} {
		if n := b.world.Effect(e); n != 1 {
			t.Fatalf("%s took effect %d times, want once", e, n)
		}
	}
	if !strings.Contains(s.stderr.String(), "waking a run") {
		t.Fatalf("the service's log does not say it woke the run:\n%s", s.stderr)
	}
}

// TestSharedTimerNodes: two `docket serve` nodes on one PostgreSQL ledger.
// A run that waits, recorded through node A: when A is SIGKILLed while it
// holds the run, node B wakes it at its time; when both are up, both look
// for due runs. Either way the delayed invoice takes effect exactly once.
func TestSharedTimerNodes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := sharedLedger(t)
	const tok = "timer-nodes-token-0123456789"
	node := func() *servedChild {
		return startServeChild(t, "--ledger", url, "--tools", b.tools, "--token", tok, "--lease", "2s")
	}
	a, bb := node(), node()
	var p map[string]any
	if err := json.Unmarshal([]byte(timerPlan), &p); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		run  string
		kill bool
		ref  string
	}{{"kill", true, "ref-k"}, {"both", false, "ref-b"}} {
		acts := p["actions"].([]any)
		for i, a := range acts {
			a.(map[string]any)["args"].(map[string]any)["reference"] = tc.ref + "-" + string(rune('1'+i))
		}
		body, _ := json.Marshal(map[string]any{"run_id": tc.run, "plan": p, "approve": "all"})
		if code, _, _ := a.call(t, "POST", "/v1/runs", tok, string(body)); code != http.StatusCreated {
			t.Fatalf("create %s = %d\n%s", tc.run, code, a.output())
		}
		waitRun(t, a.base, tok, tc.run, "a wake time", func(d runJSON) bool { return d.WaitingUntil != "" })
		if tc.kill {
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-a.done
			a.done <- nil // for the cleanup
		}
		d := waitRun(t, bb.base, tok, tc.run, "completed", func(d runJSON) bool { return d.Status == "completed" })
		for _, ref := range []string{tc.ref + "-1", tc.ref + "-2"} {
			if n := b.world.Effect("payments/" + ref); n != 1 {
				t.Fatalf("run %s: payments/%s took effect %d times, want once", tc.run, ref, n)
			}
		}
		if d.action("inv2").Attempts != 1 {
			t.Fatalf("run %s: inv2 took %d attempts, want 1", tc.run, d.action("inv2").Attempts)
		}
		if tc.kill {
			a = node()
		}
	}
}

// TestStepWaitingForATime: `docket step` on a run that only waits for an
// action's time exits 7 (not 3: no person needs to act) with the Run JSON
// saying until when; the same request again before that time performs
// nothing more and says the same.
func TestStepWaitingForATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	plan := strings.Replace(timerPlan, `"after": "2s"`, `"after": "30d"`, 1)
	req, _ := json.Marshal(map[string]any{"run_id": "st", "plan": json.RawMessage(plan), "approve": "all"})
	step := func() result {
		t.Helper()
		var out, errb bytes.Buffer
		e := testEnv(&out, &errb)
		e.Stdin = bytes.NewReader(req)
		code := report(runEnv(context.Background(), append([]string{"step"}, b.stepArgs()...), e), &errb)
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	for range 2 {
		r := step()
		wantCode(t, r, exitWaiting)
		if d := doc(t, r); d.Status != "running" || d.WaitingUntil == "" || d.action("inv1").Status != "succeeded" || d.action("inv2").Status != "approved" {
			t.Fatalf("step: run %s waiting_until %q inv1 %s inv2 %s\n%s", d.Status, d.WaitingUntil, d.action("inv1").Status, d.action("inv2").Status, r)
		}
	}
	if n := b.world.Effect("payments/ref-1"); n != 1 {
		t.Fatalf("the first invoice took effect %d times, want 1", n)
	}
}
