package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/ui"
)

// streamModel is an OpenAI-compatible chat completions server that streams
// a scripted tool-calling plan over SSE in the wire format (data: {chunk}
// lines with delta.content and delta.tool_calls[i].function.arguments
// pieces, then data: [DONE]). Its turn is read from the request (the number
// of tool results so far), so a retried request gets the same answer.
//
// A goal about ACME plans three actions over three turns: the second turn
// holds its stream open after the invoice call is complete and the email
// call has begun, until the test closes release. A goal about Globex
// streams some text and a complete call, then an error mid-stream.
type streamModel struct {
	t        *testing.T
	srv      *httptest.Server
	held     chan struct{} // closed when the ACME stream reaches its hold
	release  chan struct{} // closed by the test to let it go on
	heldOnce sync.Once
	relOnce  sync.Once
}

const streamFailure = "scripted: the model server ran out of memory"

func startStreamModel(t *testing.T) *streamModel {
	m := &streamModel{t: t, held: make(chan struct{}), release: make(chan struct{})}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	t.Cleanup(m.let) // before the server closes: no handler stays held
	return m
}

func (m *streamModel) let() { m.relOnce.Do(func() { close(m.release) }) }

func (m *streamModel) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream   bool `json:"stream"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !req.Stream {
		m.t.Errorf("the planner asked without streaming")
		http.Error(w, `{"error": {"message": "this test server only streams"}}`, http.StatusBadRequest)
		return
	}
	turn, goal := 1, ""
	for _, msg := range req.Messages {
		switch msg.Role {
		case "tool":
			turn++
		case "user":
			goal += msg.Content
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	s := &sse{w: w, f: w.(http.Flusher)}
	s.delta(map[string]any{"role": "assistant", "content": ""}, "")
	switch {
	case strings.Contains(goal, "Globex"):
		s.text("Looking at Globex: the contact comes first.")
		s.call(0, "call_g1", "crm_create_contact", `{"company": "Globex", `, `"email": "ops@globex.example"}`)
		s.call(1, "call_g2", "payments_create_invoice", `{"customer": `)
		s.data(`{"error": {"message": "` + streamFailure + `", "type": "server_error", "code": null}}`)
		return // cut off: no [DONE]
	case turn == 1:
		s.text("I will set up ACME step by step. First the CRM contact.")
		s.call(0, "call_1", "crm_create_contact", `{"company": "ACME", `, `"email": "billing@acme.example"}`)
		s.delta(map[string]any{}, "tool_calls")
	case turn == 2:
		s.text("Now the invoice for that contact, then the welcome email.")
		s.call(0, "call_2", "payments_create_invoice", `{"customer": "${a1.output.id}", "amount": 1200, `, `"currency": "EUR", "reference": "onboarding-acme"}`)
		s.call(1, "call_3", "email_send", `{"to": "billing@acme.example", `)
		m.heldOnce.Do(func() { close(m.held) })
		select {
		case <-m.release:
		case <-r.Context().Done():
			return
		}
		s.call(1, "", "", `"template": "welcome-pack", "contact_id": "${a1.output.id}"}`)
		s.delta(map[string]any{}, "tool_calls")
	default:
		s.text("Done: the contact, the invoice and the welcome email are queued.")
		s.delta(map[string]any{}, "stop")
	}
	s.data(`{"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000, "model": "scripted", "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140}}`)
	s.data("[DONE]")
}

// sse writes server-sent events, each flushed at once.
type sse struct {
	w io.Writer
	f http.Flusher
}

func (s *sse) data(payload string) {
	fmt.Fprintf(s.w, "data: %s\n\n", payload)
	s.f.Flush()
}

func (s *sse) delta(delta map[string]any, finish string) {
	choice := map[string]any{"index": 0, "delta": delta, "finish_reason": nil}
	if finish != "" {
		choice["finish_reason"] = finish
	}
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000, "model": "scripted", "choices": []any{choice}})
	s.data(string(b))
}

// text streams a text a few words at a time.
func (s *sse) text(text string) {
	words := strings.SplitAfter(text, " ")
	for i := 0; i < len(words); i += 3 {
		s.delta(map[string]any{"content": strings.Join(words[i:min(i+3, len(words))], "")}, "")
	}
}

// call streams tool call i: its id and name (when given) with the first
// piece of its arguments, then each further piece.
func (s *sse) call(i int, id, name string, args ...string) {
	for n, a := range args {
		tc := map[string]any{"index": i, "function": map[string]any{"arguments": a}}
		if n == 0 && id != "" {
			tc["id"], tc["type"] = id, "function"
			tc["function"].(map[string]any)["name"] = name
		}
		s.delta(map[string]any{"tool_calls": []any{tc}}, "")
	}
}

// The review page shows a plan as the model writes it: a goal submitted
// from the page opens a planning panel at once; while the scripted model
// holds its stream, the first queued action, the pending call after it and
// the model's text are on the page, and the run is not recorded; released,
// the recorded run replaces the preview. A model error mid-stream shows
// on the page and records nothing.
func TestBrowserPlanningStream(t *testing.T) {
	m := startStreamModel(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := setup(t, options{tune: func(c *ui.Config) {
		pl, err := planner.New(planner.Config{BaseURL: m.srv.URL + "/v1", Model: "scripted", Tools: c.Tools, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		c.Planner = pl
	}})
	bp := openBrowser(t, 1280, 900)
	ctx, cancel := context.WithTimeout(bp.ctx, 60*time.Second)
	defer cancel()
	bp.ctx = ctx
	p := &reviewPage{browserPage: bp, dir: artifactDir(t)}
	if js, err := os.ReadFile(axePath); err == nil {
		p.axe = string(js)
	}
	notRecorded := func(runID string) {
		t.Helper()
		var e errorBody
		if code := b.call("GET", "/v1/runs/"+runID, nil, &e); code != http.StatusNotFound {
			t.Fatalf("GET /v1/runs/%s = %d (%s), want 404 while it is not recorded", runID, code, e.Error.Message)
		}
		if _, err := b.led.GetRun(context.Background(), runID); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("the ledger has run %s (err %v)", runID, err)
		}
	}
	p.signIn(b.hs.URL)

	// Plan a goal with the keyboard: the panel opens at once, focused.
	p.do("plan a goal",
		chromedp.SetValue(chromedp.CSS("#policy"), "none"),
		chromedp.SendKeys(chromedp.CSS("#goal"), "onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack"),
		chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
	p.poll("the planning panel, focused", `!document.getElementById("planning-view").hidden && document.activeElement === document.getElementById("planning-title")`)
	select {
	case <-m.held:
	case <-ctx.Done():
		p.snap("stream-failed")
		t.Fatal("the model's stream never reached its hold")
	}
	runID := p.eval(`document.getElementById("planning-view").dataset.run`)
	if !strings.HasPrefix(runID, "run_") {
		t.Fatalf("the panel's run id %q", runID)
	}
	p.poll("the first queued action, the pending call and the streamed text", `(() => {
		const log = document.getElementById("planning-log");
		const a1 = log.querySelector('[data-kind="action"][data-action="a1"]');
		const call = log.querySelector('[data-kind="call"][data-tool="payments_create_invoice"]');
		const turns = [...log.querySelectorAll(".plan-round:not([hidden]) [data-role=text]")].map(e => e.textContent);
		return a1 !== null && a1.textContent.includes("billing@acme.example") && a1.textContent.includes("crm_create_contact") &&
			call !== null && call.textContent.includes("onboarding-acme") &&
			turns.length === 2 && turns[0] === "I will set up ACME step by step. First the CRM contact." &&
			turns[1] === "Now the invoice for that contact, then the welcome email.";
	})()`)
	if n := p.eval(`String(document.querySelectorAll('#planning-log [data-kind="action"]').length)`); n != "1" {
		t.Fatalf("%s queued actions shown while the second call is only written, want 1", n)
	}
	if got := p.eval(`document.getElementById("planning-status").textContent`); got != "Planning… model turn 2, 1 action queued so far." {
		t.Fatalf("the status line says %q", got)
	}
	if got := p.eval(`(() => { const b = document.querySelector('#planning-runs [data-run="` + runID + `"]'); return b ? b.getAttribute("aria-current") + " " + b.querySelector("[data-role=status]").textContent : ""; })()`); got != "true planning" {
		t.Fatalf("the run list's entry for %s: %q, want the current one, planning", runID, got)
	}
	notRecorded(runID)
	p.snap("stream-1-planning")
	p.checkA11y(t, "planning")

	// Released: the rest of the plan streams, it is recorded, and the
	// recorded run replaces the preview.
	m.let()
	p.poll("the recorded run", `document.getElementById("planning-view").hidden && !document.getElementById("run-view").hidden &&
		document.getElementById("run-title").textContent === "`+runID+`" &&
		document.querySelectorAll("#actions [data-action][data-status=pending]").length === 3 &&
		document.getElementById("run-status").dataset.status === "awaiting_approval" &&
		document.querySelector('#planning-runs [data-run="`+runID+`"]') === null &&
		document.querySelector('#runs [data-run="`+runID+`"]') !== null`)
	var doc runDoc
	if code := b.call("GET", "/v1/runs/"+runID, nil, &doc); code != http.StatusOK || len(doc.Actions) != 3 {
		t.Fatalf("the recorded run: %d, %d actions", code, len(doc.Actions))
	}
	if email := doc.Actions[2]; email.Tool != "email_send" || !strings.Contains(string(email.Args), "welcome-pack") {
		t.Fatalf("the third action: %s %s", email.Tool, email.Args)
	}
	if n := b.world.Requests("crm") + b.world.Requests("payments") + b.world.Requests("email"); n != 0 {
		t.Fatalf("%d requests before approval", n)
	}
	p.snap("stream-2-recorded")

	// A model error mid-stream: the panel says so, nothing is recorded, and
	// the goal stays in the form to try again.
	p.do("plan a goal the model fails",
		chromedp.SendKeys(chromedp.CSS("#goal"), "onboard Globex: create the CRM contact"),
		chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
	p.poll("the planning error", `(() => {
		const v = document.getElementById("planning-view");
		return !v.hidden && v.dataset.run !== "`+runID+`" &&
			document.getElementById("planning-badge").dataset.status === "planning_failed" &&
			document.getElementById("planning-error").textContent.includes("`+streamFailure+`") &&
			document.getElementById("planning-status").textContent === "Planning failed: nothing was recorded." &&
			document.querySelector("#planning-log [data-role=text]").textContent === "Looking at Globex: the contact comes first.";
	})()`)
	failed := p.eval(`document.getElementById("planning-view").dataset.run`)
	notRecorded(failed)
	if got := p.eval(`document.getElementById("goal").value`); got != "onboard Globex: create the CRM contact" {
		t.Fatalf("after the failure the goal field holds %q", got)
	}
	if got := p.eval(`document.querySelector('#planning-runs [data-run="` + failed + `"] [data-role=status]').textContent`); got != "planning failed" {
		t.Fatalf("the run list says %q for the failed planning", got)
	}
	p.snap("stream-3-failed")
	p.checkA11y(t, "planning failed")
}
