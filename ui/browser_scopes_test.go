package ui_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/docketrun/docket/ledger"
)

// signInAs opens the page at url (loaded afresh) and signs in with tok,
// whose session says who.
func (p *browserPage) signInAs(url, tok, who string) {
	p.t.Helper()
	p.do("open the page", chromedp.Navigate("about:blank"), chromedp.Navigate(url))
	p.poll("the sign-in form", `!document.getElementById("signin").hidden`)
	p.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), tok), chromedp.KeyEvent("\r"))
	p.poll("the signed-in page as "+who, `!document.getElementById("app").hidden && document.getElementById("who").textContent === "token:`+who+`"`)
}

// click clicks the element sel selects, in the page: the run view renders
// again on every live event, so a node chromedp found may be gone by the
// time it clicks it.
func (p *browserPage) click(sel string) {
	p.t.Helper()
	p.poll("something to click at "+sel, `(() => { const e = document.querySelector(`+"`"+sel+"`"+`); if (!e) return false; e.click(); return true; })()`)
}

// TestBrowserPageHidesWhatTheTokenMayNotDo: the agent's token (read,
// submit) sees a run waiting for approval but no control to approve,
// reject, pause or replay it, cannot approve the whole plan at creation, and
// the inbox's single keys refuse with a reason; a person's token (read,
// review, control) sees them and approves from the page. The page is served
// over HTTPS with a certificate the test made (Chromium trusts its key
// only, trustBundleCerts), so the Secure session cookie, the page's fetches
// and its wss:// socket are proven over TLS; the other browser tests serve
// plain HTTP.
func TestBrowserPageHidesWhatTheTokenMayNotDo(t *testing.T) {
	b := setup(t, options{tune: withScopedTokens, tls: true})
	plan := json.RawMessage(`{"goal": "settings for Initech", "actions": [
		{"id": "prefs", "tool": "settings_put", "args": {"account": "initech", "settings": {"plan": "team"}}}]}`)
	if code := b.callWith("POST", "/v1/runs", map[string]any{"run_id": "scoped", "plan": plan, "approve": "none"}, nil, bearerOf(agentToken)); code != 201 {
		t.Fatalf("the agent's token creating a run: %d, want 201", code)
	}
	p := openBrowser(t, 1280, 900)
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	p.ctx = ctx

	visible := func(sel string) string {
		return `(() => { const e = document.querySelector(` + "`" + sel + "`" + `); return !!e && e.offsetParent !== null; })()`
	}
	p.signInAs(b.hs.URL+"/#run=scoped", agentToken, "agent")
	if proto := p.eval(`location.protocol`); proto != "https:" {
		t.Fatalf("the page is served over %q, want https:", proto)
	}
	p.poll("the waiting action", `document.querySelector('#actions [data-action="prefs"]') !== null`)
	for _, sel := range []string{`#approve-all`, `#reject-all`, `#pause`, `#cancel`, `#replay`, `#fork`, `[data-op="approve"]`, `[data-op="reject"]`, `[data-op="edit"]`} {
		if p.truth(visible(sel)) {
			t.Errorf("the agent's token sees %s", sel)
		}
	}
	if !p.truth(visible(`#new-run`)) {
		t.Errorf("the agent's token (submit) does not see the new-run form")
	}
	if !p.truth(`document.querySelector('#policy option[value="all"]').disabled`) {
		t.Errorf(`the agent's token may choose "approve the whole plan now"`)
	}
	p.do("open the inbox", chromedp.KeyEvent("i"))
	p.poll("the waiting action in the inbox", `document.querySelectorAll("#inbox-list .inbox-item").length === 1`)
	if p.truth(visible(`#inbox-list [data-op="approve"]`)) {
		t.Errorf("the agent's token sees the inbox's approve button")
	}
	p.do("focus the item", chromedp.Focus(`#inbox-list .inbox-item`))
	p.do("try to approve by its key", chromedp.KeyEvent("a"))
	p.poll("the refusal", `document.getElementById("inbox-msg").textContent.includes("may not approve")`)
	var doc runDoc
	b.call("GET", "/v1/runs/scoped", nil, &doc)
	if st, _ := doc.action("prefs"); st != "pending" {
		t.Fatalf("after the agent's attempt the action is %q, want pending", st)
	}

	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`fetch("/v1/session", {method: "DELETE"}).then(r => r.status)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("sign out: %v", err)
	}
	p.signInAs(b.hs.URL+"/#run=scoped", personToken, "rita")
	p.poll("the approve button", visible(`[data-op="approve"]`))
	for _, sel := range []string{`#pause`, `#replay`, `[data-op="reject"]`} {
		if !p.truth(visible(sel)) {
			t.Errorf("the person's token does not see %s", sel)
		}
	}
	if p.truth(visible(`#new-run`)) {
		t.Errorf("the person's token (no submit) sees the new-run form")
	}
	// What a person types in an editor survives the re-render a live event
	// makes (before, the editor came back with the recorded arguments).
	p.click(`[data-op="edit"]`)
	p.poll("the arguments editor", `document.activeElement && document.activeElement.id === "ed-edit-prefs"`)
	// What was typed (the editor's input event) survives a re-render.
	const typed = `{"account": "ini`
	p.poll("typing in the editor", `(() => { const ta = document.getElementById("ed-edit-prefs"); if (!ta) return false;
		ta.value = '`+typed+`'; ta.setSelectionRange(ta.value.length, ta.value.length); ta.dispatchEvent(new Event("input")); return true; })()`)
	p.eval(`(() => { render(state.doc); return ""; })()`)
	p.poll("the typed text after a re-render", `document.activeElement && document.activeElement.id === "ed-edit-prefs" && document.activeElement.value === '{"account": "ini'`)
	// Escape gives up the edit. A live event that renders the view again
	// between the focus and the key moves the focus for a moment (the
	// editor takes it back at once), and the key then goes to the page:
	// press it again, in the editor, until the editor is gone.
	for deadline := time.Now().Add(20 * time.Second); !p.truth(`document.getElementById("ed-edit-prefs") === null`); {
		if time.Now().After(deadline) {
			p.shot("failed")
			t.Fatal("Escape in the editor never closed it")
		}
		p.eval(`(() => { const ta = document.getElementById("ed-edit-prefs"); if (ta) ta.focus(); return ""; })()`)
		p.do("give up the edit", chromedp.KeyEvent("\x1b"))
		time.Sleep(50 * time.Millisecond)
	}
	p.click(`[data-op="approve"]`)
	b.waitStatus("scoped", ledger.RunCompleted)
}
