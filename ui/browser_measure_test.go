package ui_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// measureEnv turns on TestBrowserMeasurePage (kept out of make test: it
// records 1,500 actions and takes a minute).
const measureEnv = "DOCKET_MEASURE_PAGE"

// independentPlan is n settings writes that wait for nothing.
func independentPlan(tag string, n int) json.RawMessage {
	var acts []string
	for i := range n {
		acts = append(acts, fmt.Sprintf(`{"id": "a%d", "tool": "settings_put", "args": {"account": "%s-%d", "settings": {"n": %d}}}`, i, tag, i, i))
	}
	return json.RawMessage(`{"goal": "measure ` + tag + `", "actions": [` + strings.Join(acts, ",") + `]}`)
}

// layeredPlan is n actions in layers of width: each depends on two of the
// layer before (joins and fan-outs).
func layeredPlan(n, width int) json.RawMessage {
	var acts []string
	for i := range n {
		deps := ""
		if i >= width {
			l := i/width - 1
			a, b := l*width+i%width, l*width+(i*7+3)%width
			deps = fmt.Sprintf(`, "depends_on": ["g%d"`, a)
			if b != a {
				deps += fmt.Sprintf(`, "g%d"`, b)
			}
			deps += "]"
		}
		acts = append(acts, fmt.Sprintf(`{"id": "g%d", "tool": "settings_put", "args": {"account": "g-%d", "settings": {}}%s}`, i, i, deps))
	}
	return json.RawMessage(`{"goal": "a 500-action graph", "actions": [` + strings.Join(acts, ",") + `]}`)
}

// The page under load, measured in the browser with the Performance API:
// an inbox of 1,000 waiting actions (first render and each live update) and
// a 500-action graph (layout, first render, a live colour update). Opt-in:
// DOCKET_MEASURE_PAGE=1; it reports figures, it asserts no time limit.
func TestBrowserMeasurePage(t *testing.T) {
	if os.Getenv(measureEnv) == "" {
		t.Skipf("set %s=1 to measure the page under load", measureEnv)
	}
	b := setup(t, options{})
	for i := range 2 {
		id := fmt.Sprintf("measure-%d", i)
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": id, "plan": independentPlan(id, 500), "approve": "none"}, nil); code != 201 {
			t.Fatalf("creating %s: %d", id, code)
		}
	}
	p := openBrowser(t, 1366, 900)
	p.signIn(b.hs.URL)
	measures := func(name string) string {
		return p.eval(fmt.Sprintf(`JSON.stringify(performance.getEntriesByName(%q).map(e => Math.round(e.duration * 10) / 10))`, name))
	}

	// The inbox: first render after a fresh load.
	p.do("open the inbox", chromedp.Navigate("about:blank"), chromedp.Navigate(b.hs.URL+"/#inbox"))
	p.poll("1,000 waiting actions", `document.querySelectorAll("#inbox-list .inbox-item").length === 1000`)
	first := p.eval(`String(Math.round(performance.getEntriesByName("docket:inbox-first-render")[0].startTime))`)
	t.Logf("inbox of 1000: first render done %s ms after navigation; render passes (ms): %s", first, measures("docket:inbox-render"))
	// Live updates: approve ten actions through the API, one at a time; each
	// reaches the page over /v1/ws and leaves the inbox.
	p.eval(`(performance.clearMeasures("docket:inbox-update"), "")`)
	for i := range 10 {
		if code := b.call("POST", fmt.Sprintf("/v1/runs/measure-1/actions/a%d/approve", i), map[string]any{}, nil); code != 200 {
			t.Fatalf("approve a%d: %d", i, code)
		}
		p.poll("the update", fmt.Sprintf(`document.querySelectorAll("#inbox-list .inbox-item").length === %d`, 999-i))
	}
	t.Logf("inbox live updates, event to updated list (ms): %s", measures("docket:inbox-update"))

	// The graph: 500 actions, a live colour update.
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "measure-graph", "plan": layeredPlan(500, 25), "approve": "none"}, nil); code != 201 {
		t.Fatal("creating the graph run")
	}
	p.do("open the graph", chromedp.Navigate("about:blank"), chromedp.Navigate(b.hs.URL+"/#run=measure-graph"))
	p.poll("the run", `document.querySelectorAll("#actions [data-action]").length === 500`)
	p.do("the graph tab", chromedp.Click(chromedp.CSS("#tab-graph")))
	p.poll("500 nodes", `document.querySelectorAll("#graph .node").length === 500`)
	t.Logf("graph of 500: layout %s ms, layout and SVG %s ms; %s layers", measures("docket:graph-layout"), measures("docket:graph-render"), p.eval(`document.getElementById("graph").dataset.layers`))
	p.eval(`(performance.clearMeasures("docket:graph-update"), "")`)
	if code := b.call("POST", "/v1/runs/measure-graph/actions/g0/approve", map[string]any{}, nil); code != 200 {
		t.Fatal("approve g0")
	}
	p.poll("a live colour", `document.querySelector('#graph .node[data-action="g0"]').dataset.status === "succeeded"`)
	t.Logf("graph live colour updates (ms): %s", measures("docket:graph-update"))
}
