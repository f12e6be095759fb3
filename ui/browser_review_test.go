package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/evals/testextra"
)

// axePath is where .ci/extras installs the pinned axe-core (npm ci from
// ui/testdata/axe), relative to this package's directory.
const axePath = "../.axe-core/node_modules/axe-core/axe.min.js"

// artifactDir is where screenshots go: $DOCKET_ARTIFACTS when set, else the
// test's artifact directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("DOCKET_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err == nil {
			return d
		}
	}
	return t.ArtifactDir()
}

// reviewPage is a browserPage whose screenshots go to artifactDir and that
// runs axe-core on a screen when it is installed.
type reviewPage struct {
	*browserPage
	axe  string // axe.min.js, "" when not installed
	dir  string
	seen []string // screens checked by axe
}

func (p *reviewPage) snap(name string) {
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.dir, "review-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot: %s", path)
}

// poll waits like browserPage.poll; on a timeout it leaves a screenshot in
// the artifact directory and the inbox's message.
func (p *reviewPage) poll(what, predicate string) {
	p.t.Helper()
	if err := pollPage(p.ctx, predicate); err != nil {
		p.snap("failed")
		msg, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`[...document.querySelectorAll(".error")].map(e => e.textContent).filter(Boolean).join(" | ")`))
		// What the screen said, for a failure on a machine whose
		// screenshots are gone (CI).
		seen, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 4000)`))
		p.t.Fatalf("waiting for %s: %v (messages on the page: %q)\nthe page's text:\n%s", what, err, msg, seen)
	}
}

// checkA11y runs axe-core on the screen as it is and fails on serious or
// critical violations.
func (p *reviewPage) checkA11y(t *testing.T, screen string) {
	t.Helper()
	if p.axe == "" {
		return
	}
	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`typeof axe !== "undefined" || (() => { `+p.axe+`; return true; })()`)); err != nil {
		t.Fatalf("injecting axe-core: %v", err)
	}
	got, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(
		r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v => ({
			id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.slice(0, 4).map(n => n.target.join(" ") + ": " + n.failureSummary)}))))`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("running axe-core on %s: %v", screen, err)
	}
	p.seen = append(p.seen, screen)
	if got != "[]" {
		p.snap("a11y-" + screen)
		var pretty []any
		json.Unmarshal([]byte(got), &pretty)
		b, _ := json.MarshalIndent(pretty, "", "  ")
		t.Fatalf("axe-core on the %s screen: serious or critical violations:\n%s", screen, b)
	}
}

// diamondPlan is four settings writes: top, then left and right, then bottom.
func diamondPlan(tag string, right int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"goal": "diamond %[1]s", "actions": [
		{"id": "top", "tool": "settings_put", "args": {"account": "%[1]s-top", "settings": {"n": 1}}},
		{"id": "left", "tool": "settings_put", "args": {"account": "%[1]s-left", "settings": {"n": 1}}, "depends_on": ["top"]},
		{"id": "right", "tool": "settings_put", "args": {"account": "%[1]s-right", "settings": {"n": %[2]d}}, "depends_on": ["top"]},
		{"id": "bottom", "tool": "settings_put", "args": {"account": "%[1]s-bottom", "settings": {"n": 1}}, "depends_on": ["left", "right"]}]}`, tag, right))
}

// The reviewer's page in a real headless Chromium, one browser for every
// screen: the inbox across three runs driven by the keyboard alone, the
// plan as a graph with live colours, the timeline's sentences, the replay
// diff, the run list's filters; axe-core on each screen.
func TestBrowserReviewer(t *testing.T) {
	var emailURL string
	b := setup(t, options{toolsFile: func(w *demoworld.World) []byte {
		emailURL = flakyEmail(t, w)
		return []byte(strings.Replace(string(w.ToolsFile(demoworld.ToolsOptions{Timeout: "2s"})), w.Email.URL, emailURL, 1))
	}})
	bp := openBrowser(t, 1280, 900)
	p := &reviewPage{browserPage: bp, dir: artifactDir(t)}
	tab := bp.ctx
	// Each screen has its own deadline, so one that fails leaves the others
	// their time.
	screen := func(t *testing.T) {
		ctx, cancel := context.WithTimeout(tab, 40*time.Second)
		t.Cleanup(cancel)
		p.t, p.ctx = t, ctx
	}
	if js, err := os.ReadFile(axePath); err == nil {
		p.axe = string(js)
	}
	create := func(runID string, planJSON json.RawMessage, approve string) {
		t.Helper()
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": runID, "plan": planJSON, "approve": approve}, nil); code != 201 {
			t.Fatalf("creating %s: %d", runID, code)
		}
	}
	// Three runs wait for a person: a diamond (four approvals), an email
	// whose outcome is unknown (needs review), a settings write (approval).
	create("inbox-diamond", diamondPlan("inbox", 1), "none")
	create("inbox-globex", json.RawMessage(`{"goal": "welcome Globex", "actions": [
		{"id": "welcome", "tool": "email_send", "args": {"to": "billing@globex.example", "template": "welcome-pack"}}]}`), "all")
	create("inbox-single", json.RawMessage(`{"goal": "settings for Initech", "actions": [
		{"id": "prefs", "tool": "settings_put", "args": {"account": "initech", "settings": {"plan": "team"}}}]}`), "none")

	p.signIn(b.hs.URL)

	t.Run("inbox", func(t *testing.T) {
		screen(t)
		p.do("open the inbox by its key", chromedp.KeyEvent("i"))
		p.poll("six waiting actions across three runs", `document.querySelectorAll("#inbox-list .inbox-item").length === 6 &&
			document.querySelector('#inbox-list .inbox-item[data-kind=needs_review]') !== null &&
			new Set([...document.querySelectorAll("#inbox-list .inbox-item")].map(e => e.dataset.run)).size === 3`)
		if c, title := p.eval(`document.getElementById("inbox-count").textContent`), p.eval(`document.title`); c != "6" || !strings.HasPrefix(title, "(6) ") {
			t.Fatalf("count %q, title %q: want 6 in both", c, title)
		}
		if got := p.eval(`document.querySelector('#inbox-list [data-run="inbox-single"] .preview pre').textContent`); !strings.HasPrefix(got, "PUT "+b.world.Settings.URL+"/accounts/initech/settings") {
			t.Fatalf("request preview = %q", got)
		}
		p.snap("1-inbox")
		p.checkA11y(t, "inbox")

		sel := `(() => { const e = document.querySelector("#inbox-list .inbox-item.selected"); return e && document.activeElement === e ? e.dataset.run + "/" + e.dataset.action + "/" + e.dataset.kind : ""; })()`
		first := p.eval(sel)
		p.do("next", chromedp.KeyEvent("j"))
		if second := p.eval(sel); second == first || second == "" {
			t.Fatalf("j moved the selection from %q to %q", first, second)
		}
		p.do("previous", chromedp.KeyEvent("k"))
		if again := p.eval(sel); again != first {
			t.Fatalf("k moved the selection to %q, want %q", again, first)
		}
		// Settle every item with single keys: approve the diamond, reject
		// the settings write with a typed reason, record the email's output.
		for n := 6; n > 0; n-- {
			cur := p.eval(sel)
			if cur == "" {
				p.poll("a focused selection", sel+` !== ""`)
				cur = p.eval(sel)
			}
			parts := strings.Split(cur, "/")
			switch {
			case parts[2] == "needs_review":
				p.do("it happened", chromedp.KeyEvent("d"))
				p.poll("the output form", `document.activeElement && document.activeElement.tagName === "TEXTAREA"`)
				p.do("type half the output",
					chromedp.KeyEvent("a", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
					chromedp.KeyEvent(`{"message_id": `))
				// A live update of this very item while the person types
				// must keep the form, the text and the focus: before, the
				// item was rebuilt, the focus went to the list, and the "s"
				// typed next skipped the action.
				p.eval(`(() => { inbox.items = inbox.items.map(x => x.kind === "needs_review" ? {...x, error: (x.error || "") + " "} : x); renderInbox(); return ""; })()`)
				p.poll("the output still being typed", `document.activeElement && document.activeElement.tagName === "TEXTAREA" && document.activeElement.value === '{"message_id": '`)
				p.do("type the rest",
					chromedp.KeyEvent(`"msg_by_hand"}`),
					chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
			case parts[0] == "inbox-single":
				p.do("reject", chromedp.KeyEvent("x"))
				p.poll("the reason field", `document.activeElement && document.activeElement.tagName === "INPUT"`)
				p.do("type the reason", chromedp.KeyEvent("not this quarter\r"))
			default:
				p.do("approve", chromedp.KeyEvent("a"))
			}
			p.poll(fmt.Sprintf("%d left after %s", n-1, cur), fmt.Sprintf(`document.querySelectorAll("#inbox-list .inbox-item").length === %d && document.getElementById("inbox-count").textContent === "%d"`, n-1, n-1))
		}
		p.poll("the empty inbox", `document.title === "docket — review" && document.querySelector("#inbox-list .empty") !== null`)
		p.snap("2-inbox-done")
		var diamond runDoc
		b.call("GET", "/v1/runs/inbox-diamond?wait=10s", nil, &diamond)
		for _, e := range []string{"settings/inbox-top", "settings/inbox-left", "settings/inbox-right", "settings/inbox-bottom"} {
			if n := b.world.Effect(e); n != 1 {
				t.Fatalf("effect %s = %d, want 1 (the diamond is %s)", e, n, diamond.Status)
			}
		}
		if n := b.world.Effect("settings/initech"); n != 0 {
			t.Fatalf("the rejected write happened %d times", n)
		}
		var doc runDoc
		b.call("GET", "/v1/runs/inbox-globex?wait=10s", nil, &doc)
		if doc.Status != "completed" || !strings.Contains(string(doc.Actions[0].Output), "msg_by_hand") {
			t.Fatalf("the email's run: %s, output %s", doc.Status, doc.Actions[0].Output)
		}
	})

	t.Run("graph", func(t *testing.T) {
		screen(t)
		create("graph-diamond", diamondPlan("graph", 1), "none")
		p.do("open the run", chromedp.Navigate("about:blank"), chromedp.Navigate(b.hs.URL+"/#run=graph-diamond"))
		p.poll("the run", `document.getElementById("run-title").textContent === "graph-diamond" && document.querySelectorAll("#actions [data-action]").length === 4`)
		p.do("the graph tab", chromedp.Click(chromedp.CSS("#tab-graph")))
		p.poll("four nodes", `document.querySelectorAll("#graph .node[data-action]").length === 4`)
		edges := p.eval(`[...document.querySelectorAll("#graph .edge")].map(e => e.dataset.from + ">" + e.dataset.to).sort().join(" ")`)
		if edges != "left>bottom right>bottom top>left top>right" {
			t.Fatalf("edges %q", edges)
		}
		// Layers: top above left and right (side by side), bottom below.
		if !p.truth(`(() => { const y = id => document.querySelector('#graph .node[data-action="' + id + '"]').getBoundingClientRect().y;
			return y("top") < y("left") && y("left") === y("right") && y("right") < y("bottom"); })()`) {
			t.Fatal("the diamond is not laid out in three layers")
		}
		fill := func(id string) string {
			return p.eval(fmt.Sprintf(`getComputedStyle(document.querySelector('#graph .node[data-action=%q] rect')).fill`, id))
		}
		pending := fill("bottom")
		if got := p.eval(`document.querySelector('#graph .node[data-action="bottom"]').textContent`); !strings.Contains(got, "pending") || !strings.Contains(got, "idempotent") {
			t.Fatalf("the node's text %q does not say its status and class", got)
		}
		p.snap("3-graph-pending")
		p.checkA11y(t, "graph")
		if code := b.call("POST", "/v1/runs/graph-diamond/approve", map[string]any{"all": true}, nil); code != 200 {
			t.Fatalf("approve: %d", code)
		}
		p.poll("live colours", `[...document.querySelectorAll("#graph .node")].every(n => n.dataset.status === "succeeded")`)
		if done := fill("bottom"); done == pending {
			t.Fatalf("the node's colour stayed %s when it succeeded", done)
		}
		p.snap("4-graph-succeeded")
		p.do("open an action from the graph", chromedp.Focus(chromedp.CSS(`#graph .node[data-action="right"]`)), chromedp.KeyEvent("\r"))
		p.poll("the action", `!document.getElementById("panel-actions").hidden && document.activeElement && document.activeElement.dataset.action === "right"`)
	})

	t.Run("timeline", func(t *testing.T) {
		screen(t)
		p.do("open the email's run", chromedp.Navigate("about:blank"), chromedp.Navigate(b.hs.URL+"/#run=inbox-globex"))
		p.poll("the run", `document.getElementById("run-title").textContent === "inbox-globex" && document.getElementById("run-status").dataset.status === "completed"`)
		p.do("the timeline tab", chromedp.Click(chromedp.CSS("#tab-timeline")))
		p.poll("the timeline", `document.querySelector('#timeline .tl-item[data-type="run.completed"]') !== null`)
		got := p.eval(`document.querySelector('#timeline [data-group="welcome"] .tl-item[data-type="action.needs_review"] .sentence').textContent`)
		if !strings.HasPrefix(got, "welcome needs review: outcome unknown after 1 attempt") {
			t.Fatalf("the needs-review sentence: %q", got)
		}
		claimed := p.eval(`document.querySelector('#timeline [data-group="welcome"] .tl-item[data-type="action.claimed"] .sentence').textContent`)
		if !strings.HasPrefix(claimed, "welcome claimed (attempt 1, key dk1_") {
			t.Fatalf("the claim sentence: %q", claimed)
		}
		if got := p.eval(`document.querySelector('#timeline [data-group="welcome"] .tl-item[data-type="action.resolved"] .sentence').textContent`); got != "welcome resolved by token:alice: it happened, output recorded" {
			t.Fatalf("the resolution sentence: %q", got)
		}
		p.do("copy the key", chromedp.Focus(chromedp.CSS(`#timeline [data-group="welcome"] [data-copy=key]`)), chromedp.KeyEvent("\r"))
		p.poll("the copied key", `(document.querySelector('#timeline [data-group="welcome"] [data-copy=key]').dataset.copied || "").startsWith("dk1_")`)
		// Clicked in the page: a live re-render between finding the node and
		// clicking it would leave chromedp a node that is gone.
		p.eval(`(() => { document.querySelector('#timeline .tl-item[data-type="action.needs_review"] summary').click(); return ""; })()`)
		if got := p.eval(`document.querySelector('#timeline .tl-item[data-type="action.needs_review"] pre').textContent`); !strings.Contains(got, `"type": "action.needs_review"`) {
			t.Fatalf("the event's JSON: %s", got)
		}
		p.snap("5-timeline")
		p.checkA11y(t, "timeline")
	})

	t.Run("replay diff", func(t *testing.T) {
		screen(t)
		p.do("open the diamond", chromedp.Navigate("about:blank"), chromedp.Navigate(b.hs.URL+"/#run=graph-diamond"))
		p.poll("the completed diamond", `document.getElementById("run-status").dataset.status === "completed"`)
		p.do("open the replay editor", chromedp.Click(chromedp.CSS("#replay")), chromedp.WaitVisible(chromedp.CSS("#replay-plan")))
		p.eval(`(() => { const t = document.getElementById("replay-plan"); const plan = JSON.parse(t.value);
			plan.actions.find(a => a.id === "right").args.settings.n = 2; t.value = JSON.stringify(plan, null, 2); return ""; })()`)
		p.do("preview", chromedp.Focus(chromedp.CSS("#replay-preview")), chromedp.KeyEvent("\r"))
		p.poll("the preview", `document.querySelector('#replay-diff [data-action="right"]') !== null`)
		preview := p.eval(`[...document.querySelectorAll("#replay-diff .diff-item")].map(e => e.dataset.action + ":" + e.dataset.change).join(" ")`)
		if preview != "top:kept left:kept right:changed bottom:kept" {
			t.Fatalf("the diff before recording: %s", preview)
		}
		if got := p.eval(`document.querySelector('#replay-diff [data-action="right"] .argdiff tbody').textContent`); !strings.Contains(got, "settings.n12") {
			t.Fatalf("the argument diff: %q", got)
		}
		p.snap("6-replay-preview")
		p.do("record the revision", chromedp.Focus(chromedp.CSS("#replay-plan")), chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
		p.poll("revision 2", `document.getElementById("run-rev").textContent.startsWith("revision 2")`)
		p.do("the diff tab", chromedp.Click(chromedp.CSS("#tab-diff")))
		p.poll("the recorded diff", `document.querySelector('#diff [data-action="right"]') !== null`)
		if !p.truth(`document.querySelector('#diff [data-action="right"]').dataset.change === "changed" && document.querySelector('#diff [data-action="top"]').dataset.change === "kept"`) {
			t.Fatalf("the recorded diff: %s", p.eval(`[...document.querySelectorAll("#diff .diff-item")].map(e => e.dataset.action + ":" + e.dataset.change).join(" ")`))
		}
		if got := p.eval(`document.querySelector('#diff [data-action="top"] .why').textContent`); !strings.Contains(got, "recorded output is reused") {
			t.Fatalf("why top is kept: %q", got)
		}
		p.snap("7-replay-diff")
		p.checkA11y(t, "replay diff")
	})

	t.Run("run list", func(t *testing.T) {
		screen(t)
		p.do("filter by text", chromedp.SendKeys(chromedp.CSS("#run-q"), "globex"))
		p.poll("one run", `document.querySelectorAll("#runs .run-item").length === 1 && document.querySelector("#runs .run-item").dataset.run === "inbox-globex"`)
		pick := func(id, value string) {
			p.eval(fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event("change")); return ""; })()`, id, value))
		}
		p.eval(`(() => { const q = document.getElementById("run-q"); q.value = ""; q.dispatchEvent(new Event("input")); return ""; })()`)
		pick("run-tool-filter", "settings_put")
		p.poll("the settings runs", `[...document.querySelectorAll("#runs .run-item")].map(e => e.dataset.run).sort().join(" ") === "graph-diamond inbox-diamond inbox-single"`)
		pick("run-status-filter", "failed")
		p.poll("the rejected run", `[...document.querySelectorAll("#runs .run-item")].map(e => e.dataset.run).join(" ") === "inbox-single"`)
		p.snap("8-run-list")
		p.checkA11y(t, "run list")
	})

	t.Run("accessibility", func(t *testing.T) {
		if p.axe == "" {
			testextra.Missing(t, "axe-core at "+axePath, "run .ci/extras (npm ci of ui/testdata/axe into .axe-core)")
		}
		if len(p.seen) != 5 {
			t.Fatalf("axe-core checked %v, want every screen", p.seen)
		}
	})
}
