package ui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger"
)

// A run whose last action waits 30 days shows "waiting until" in the Run
// JSON; POST /actions/{action}/run_now (control) makes it due at once,
// records who asked, and the service drives the run to its end.
func TestRunNowEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var p map[string]any
	if err := json.Unmarshal(demoworld.OnboardingPlan(), &p); err != nil {
		t.Fatal(err)
	}
	acts := p["actions"].([]any)
	acts[len(acts)-1].(map[string]any)["after"] = "30d"
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "wait", "plan": p, "approve": "all"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	for range 10 {
		doc := b.waitFor("wait", "a wait for a time or a person", func(d ledger.RunDoc) bool {
			return !d.Run.WakeAt.IsZero() || d.Run.Status == ledger.RunAwaitingApproval || d.Run.Status == ledger.RunFailed
		})
		if !doc.Run.WakeAt.IsZero() {
			break
		}
		if doc.Run.Status == ledger.RunFailed {
			t.Fatalf("the run failed: %s", doc.Run.Error)
		}
		b.call("POST", "/v1/runs/wait/approve", map[string]any{"all": true}, nil)
	}
	var got map[string]any
	if code := b.call("GET", "/v1/runs/wait", nil, &got); code != http.StatusOK || got["waiting_until"] == nil || got["status"] != "running" {
		t.Fatalf("GET run = %d: status %v waiting_until %v", code, got["status"], got["waiting_until"])
	}
	if n := b.world.Requests("email"); n != 0 {
		t.Fatalf("the welcome email was sent %d times before its time", n)
	}
	// The path names the action; a body that names one too is refused.
	if code := b.call("POST", "/v1/runs/wait/actions/welcome/run_now", map[string]any{"action": "welcome"}, nil); code != http.StatusBadRequest {
		t.Fatalf("run_now with an action in the body = %d, want 400", code)
	}
	if code := b.call("POST", "/v1/runs/wait/actions/price/run_now", map[string]any{}, nil); code == http.StatusOK {
		t.Fatal("run_now of an action that does not wait answered 200")
	}
	if code := b.call("POST", "/v1/runs/wait/actions/welcome/run_now", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("run_now = %d", code)
	}
	doc := b.waitStatus("wait", ledger.RunCompleted)
	if n := b.world.Effect("email/billing@acme.example/welcome-pack"); n != 1 {
		t.Fatalf("the welcome email took effect %d times", n)
	}
	if !doc.Run.WakeAt.IsZero() {
		t.Fatalf("a completed run waits until %s", doc.Run.WakeAt)
	}
	evs, err := b.led.Events(t.Context(), "wait", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		if ev.Type == ledger.EventActionRunNow && ev.ActionID == "welcome" && strings.Contains(string(ev.Data), "token:alice") {
			found = true
		}
	}
	if !found {
		t.Fatal("no action.run_now event by token:alice")
	}
}
