package ui_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ui"
)

// TestRunJSONCarriesTraceID: with tracing on (Config.TraceID), every Run
// JSON the server answers names the run's trace (the id its spans carry);
// without it the field is left out (the Run JSON of ledger/README.md, Run JSON, unchanged).
func TestRunJSONCarriesTraceID(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.TraceID = oteltrace.TraceID }})
	var created map[string]json.RawMessage
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "traced", "plan": onboardingPlan(t), "approve": "none"}, &created); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	want := `"` + oteltrace.TraceID("traced") + `"`
	if string(created["trace_id"]) != want {
		t.Fatalf("POST /v1/runs trace_id = %s, want %s", created["trace_id"], want)
	}
	var got map[string]json.RawMessage
	if code := b.call("GET", "/v1/runs/traced", nil, &got); code != http.StatusOK || string(got["trace_id"]) != want {
		t.Fatalf("GET /v1/runs/traced = %d, trace_id %s, want %s", code, got["trace_id"], want)
	}

	plain := setup(t, options{})
	var doc map[string]json.RawMessage
	plain.call("POST", "/v1/runs", map[string]any{"run_id": "untraced", "plan": onboardingPlan(t), "approve": "none"}, &doc)
	if _, ok := doc["trace_id"]; ok || doc["run_id"] == nil {
		t.Fatalf("without tracing the Run JSON has trace_id (or is no Run JSON): %v", doc)
	}
}

// TestBrowserShowsTraceID: the page shows a run's trace id (tracing on).
// Like every browser test, not parallel: one Chromium at a time.
func TestBrowserShowsTraceID(t *testing.T) {
	b := setup(t, options{tune: func(c *ui.Config) { c.TraceID = oteltrace.TraceID }})
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "traced", "plan": onboardingPlan(t), "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	p := openBrowser(t, 1100, 900)
	p.signIn(b.hs.URL)
	p.do("open the run", chromedp.Navigate("about:blank"), chromedp.Navigate(b.hs.URL+"/#run=traced"))
	p.poll("the trace id on the page", `document.getElementById("run-rev").textContent.includes("trace `+oteltrace.TraceID("traced")+`")`)
}
