package ui_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/docketrun/docket/ledger"
)

// TestBrowserRunNow: the review page shows a run that waits for an
// action's time ("waiting until …", on the run and on the action) and its
// Run now button runs the action; the run completes.
func TestBrowserRunNow(t *testing.T) {
	b := setup(t, options{})
	plan := json.RawMessage(`{"goal": "settings next month", "actions": [
		{"id": "prefs", "tool": "settings_put", "not_before": "2099-01-01T09:00:00Z",
		 "args": {"account": "initech", "settings": {"plan": "team"}}}]}`)
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "later", "plan": plan, "approve": "all"}, nil); code != 201 {
		t.Fatalf("create = %d", code)
	}
	b.waitFor("later", "its wake time", func(d ledger.RunDoc) bool { return !d.Run.WakeAt.IsZero() })

	p := openBrowser(t, 1280, 900)
	p.signInAs(b.hs.URL+"/#run=later", testToken, "alice")
	p.poll("the run's waiting line", `document.getElementById("run-waiting").textContent.includes("waiting until") && document.getElementById("run-waiting").textContent.includes("2099-01-01T09:00:00Z")`)
	p.poll("the action's waiting note", `(() => { const n = document.querySelector('#actions [data-action="prefs"] [data-role="waiting"]'); return !!n && n.textContent.includes("2099"); })()`)
	p.eval(`(window.confirm = () => true, "")`)
	p.click(`#actions [data-action="prefs"] [data-op="run_now"]`)
	b.waitStatus("later", ledger.RunCompleted)
	p.poll("the completed run without a waiting line", `document.getElementById("run-status").dataset.status === "completed" && document.getElementById("run-waiting").textContent === ""`)
	if n := b.world.Requests("settings"); n != 1 {
		t.Fatalf("settings served %d requests, want 1", n)
	}
}

// TestBrowserToolWait: an action held back by its tool's limits says so on
// the review page (what it waits for, since when) and in the timeline.
func TestBrowserToolWait(t *testing.T) {
	b := setup(t, options{})
	plan := json.RawMessage(`{"goal": "settings", "actions": [
		{"id": "prefs", "tool": "settings_put", "args": {"account": "initech", "settings": {"plan": "team"}}}]}`)
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "held", "plan": plan, "approve": "none"}, nil); code != 201 {
		t.Fatalf("create = %d", code)
	}
	b.waitStatus("held", ledger.RunAwaitingApproval)
	// What the executor records when the tool's limits refuse the claim.
	w := ledger.ToolWait{Tool: "settings_put", Reason: ledger.LimitInFlight}
	data := json.RawMessage(`{"attempt":1,"tool":"settings_put","reason":"max_in_flight","in_flight":2,"max_in_flight":2}`)
	if _, err := b.led.Apply(context.Background(), ledger.LimitWait("held", "prefs", w, data)); err != nil {
		t.Fatal(err)
	}
	p := openBrowser(t, 1280, 900)
	p.signInAs(b.hs.URL+"/#run=held", testToken, "alice")
	p.poll("the action's tool-wait note", `(() => { const n = document.querySelector('#actions [data-action="prefs"] [data-role="tool-wait"]'); return !!n && n.textContent.includes("free slot of settings_put"); })()`)
	p.click(`#tab-timeline`)
	p.poll("the timeline's sentence", `document.getElementById("timeline").textContent.includes("prefs waits for a free slot of settings_put (2 of 2 in flight)")`)
}
