package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// classWorld is an HTTP world with a tool of every effect class, each
// scripted to fail in its own way on its first call: idempotent 503
// (unknown), keyed 429 with Retry-After (not processed), lookup commits and
// then answers 500 (unknown; the lookup finds the effect), at-most-once 500
// (unknown: needs_review), and a keyed call that is always refused with 400
// (definite).
type classWorld struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[string]int      // path → write calls received
	crm     map[string]struct{} // keys of created CRM records
	lookups map[bool]int        // lookup answers: found or not
}

func newClassWorld(t *testing.T) *classWorld {
	w := &classWorld{calls: map[string]int{}, crm: map[string]struct{}{}, lookups: map[bool]int{}}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rw.Header().Set("Content-Type", "application/json")
		w.mu.Lock()
		defer w.mu.Unlock()
		if r.URL.Path == "/crm/find" {
			_, ok := w.crm[r.URL.Query().Get("key")]
			w.lookups[ok]++
			if ok {
				fmt.Fprintf(rw, `[{"id":"c-%s"}]`, r.URL.Query().Get("key")[:12])
				return
			}
			fmt.Fprint(rw, `[]`)
			return
		}
		w.calls[r.URL.Path]++
		n := w.calls[r.URL.Path]
		switch {
		case r.URL.Path == "/put" && n == 1:
			rw.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/charge" && n == 1:
			rw.Header().Set("Retry-After", "0")
			rw.WriteHeader(http.StatusTooManyRequests)
		case r.URL.Path == "/crm" && n == 1:
			w.crm[r.Header.Get("Idempotency-Key")] = struct{}{}
			rw.WriteHeader(http.StatusInternalServerError)
		case r.URL.Path == "/mail":
			rw.WriteHeader(http.StatusInternalServerError)
		case r.URL.Path == "/bad":
			rw.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(rw, `{"error":"no"}`)
		default:
			fmt.Fprint(rw, `{"ok":true}`)
		}
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *classWorld) toolsFile() []byte {
	tool := func(name, effect, path string, extra map[string]any) map[string]any {
		t := map[string]any{"name": name, "description": name, "effect": effect,
			"input_schema": map[string]any{"type": "object"},
			"request":      map[string]any{"method": "POST", "url": w.srv.URL + path, "headers": map[string]any{"Idempotency-Key": "{{key}}"}},
			"timeout":      "5s"}
		for k, v := range extra {
			t[k] = v
		}
		return t
	}
	b, _ := json.Marshal(map[string]any{"version": 1, "tools": []any{
		tool("look", "read_only", "/look", nil),
		tool("put", "idempotent", "/put", nil),
		tool("charge", "keyed", "/charge", map[string]any{"key_header": "Idempotency-Key"}),
		tool("crm", "lookup", "/crm", map[string]any{"visibility_lag": "0s", "lookup": map[string]any{
			"method": "GET", "url": w.srv.URL + "/crm/find?key={{key}}", "found": "nonempty"}}),
		tool("mail", "at_most_once", "/mail", nil),
		tool("bad", "keyed", "/bad", map[string]any{"key_header": "Idempotency-Key"}),
	}})
	return b
}

const classPlan = `{"goal":"every class","actions":[
 {"id":"l","tool":"look","args":{}},
 {"id":"p","tool":"put","args":{"v":1},"depends_on":["l"]},
 {"id":"c","tool":"charge","args":{"amount":5},"depends_on":["p"]},
 {"id":"r","tool":"crm","args":{"name":"acme"},"depends_on":["c"]}]}`

// TestMetricsCountWhatTheEventsSay drives real runs through the service and
// checks every counter the engine feeds against the runs' recorded events:
// the counters come from the executor's Observer, so no log record (its
// level, its wording) can change them; the server has no log handler of its
// own any more (TestNoLogScraping).
func TestMetricsCountWhatTheEventsSay(t *testing.T) {
	t.Parallel()
	w := newClassWorld(t)
	// Every log level is disabled: no record is built, none is handled, and
	// the counters still count (they do not come from logs).
	var handled atomic.Int64
	b := setup(t, options{
		toolsFile: func(*demoworld.World) []byte { return w.toolsFile() },
		tune:      func(c *ui.Config) { c.Logger = slog.New(offHandler{&handled}) },
	})

	create := func(id, planJSON string) {
		t.Helper()
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": id, "plan": json.RawMessage(planJSON), "approve": "all"}, nil); code != http.StatusCreated {
			t.Fatalf("create %s = %d", id, code)
		}
	}
	settle := func(id string, want ledger.RunStatus) {
		t.Helper()
		var d runDoc
		if code := b.call("GET", "/v1/runs/"+id+"?wait=60s", nil, &d); code != http.StatusOK || d.Status != string(want) {
			t.Fatalf("run %s = %d %s, want %s", id, code, d.Status, want)
		}
	}
	create("all-classes", classPlan)
	settle("all-classes", ledger.RunCompleted)
	// A scrape now: the gauges read every run once, and afterwards only the
	// runs that changed (the final scrape must still count what follows).
	scrape(t, b)
	create("unknown-mail", `{"goal":"mail","actions":[{"id":"m","tool":"mail","args":{}}]}`)
	settle("unknown-mail", ledger.RunPaused)
	create("refused", `{"goal":"bad","actions":[{"id":"x","tool":"bad","args":{}}]}`)
	settle("refused", ledger.RunFailed)
	// A replay that changes only the last action: the three before it keep
	// their keys, their recorded outputs are adopted (duplicates prevented).
	replayed := strings.Replace(classPlan, `"name":"acme"`, `"name":"acme2"`, 1)
	if code := b.call("POST", "/v1/runs/all-classes/replay", map[string]any{"plan": json.RawMessage(replayed)}, nil); code != http.StatusOK {
		t.Fatalf("replay = %d", code)
	}
	settle("all-classes", ledger.RunCompleted)

	// A request no route takes, with an id-like path: counted as
	// "unmatched", its path never a label value.
	if code := b.call("GET", "/v1/nothing/all-classes", nil, nil); code != http.StatusNotFound {
		t.Fatalf("unknown path = %d", code)
	}

	got := scrape(t, b)
	want := expectFromEvents(t, b, []string{"all-classes", "unknown-mail", "refused"})
	// Every call's duration is observed once, under the same labels as its
	// outcome.
	for name, n := range want {
		if rest, ok := strings.CutPrefix(name, "docket_attempts_ended_total{"); ok {
			want["docket_tool_call_duration_seconds_count{"+rest] = n
		}
	}
	// The gauges count every run of the ledger, as its rows say.
	runs, acts := ledgerGauges(t, b)
	for name, n := range runs {
		want[name] = n
	}
	for name, n := range acts {
		want[name] = n
	}
	// The HTTP requests this test made before the scrape, by route pattern.
	for name, n := range map[string]int64{
		`docket_http_requests_total{route="/v1/runs",method="POST",code="201"}`:             3,
		`docket_http_request_duration_seconds_count{route="/v1/runs",method="POST"}`:        3,
		`docket_http_requests_total{route="/v1/runs/{id}/replay",method="POST",code="200"}`: 1,
		`docket_http_requests_total{route="/v1/runs/{id}",method="GET",code="200"}`:         4,
		`docket_http_requests_total{route="unmatched",method="GET",code="404"}`:             1,
		`docket_http_requests_total{route="/metrics",method="GET",code="200"}`:              1, // the first scrape
	} {
		want[name] = n
	}
	// The world agrees on what the lookups found.
	w.mu.Lock()
	want["docket_lookups_found_total"] = int64(w.lookups[true])
	w.mu.Unlock()
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s = %d, the events say %d", name, got[name], n)
		}
	}
	for name, n := range got {
		if _, ok := want[name]; !ok && engineMetric(name) && n != 0 {
			t.Errorf("%s = %d, the events say nothing of it", name, n)
		}
		if strings.Contains(name, "all-classes") {
			t.Errorf("a label holds a run id: %s", name)
		}
	}
	// The Go runtime's and the process's collectors are there.
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if _, ok := got[name]; !ok && !hasSample(got, name) {
			t.Errorf("no %s in /metrics", name)
		}
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("%d log records were handled with every level disabled", n)
	}
	lintMetrics(t, scrapeText(t, b))
	if t.Failed() {
		t.Logf("metrics:\n%v\nfrom events:\n%v", got, want)
	}
	// The scenario covers what it claims to.
	for _, name := range []string{
		`docket_attempts_ended_total{tool="put",class="idempotent",outcome="unknown"}`,
		`docket_attempts_ended_total{tool="charge",class="keyed",outcome="not_processed"}`,
		`docket_attempts_ended_total{tool="bad",class="keyed",outcome="definite"}`,
		`docket_lookups_total{tool="crm",found="true"}`,
		`docket_needs_review_total{tool="mail",class="at_most_once"}`,
		"docket_duplicates_prevented_total",
		"docket_attempt_retries_total",
	} {
		if got[name] == 0 {
			t.Errorf("%s is 0: the scenario does not exercise it", name)
		}
	}
}

// offHandler is a log handler with every level disabled; it counts the
// records handed to it anyway.
type offHandler struct{ handled *atomic.Int64 }

func (offHandler) Enabled(context.Context, slog.Level) bool { return false }
func (h offHandler) Handle(context.Context, slog.Record) error {
	h.handled.Add(1)
	return nil
}
func (h offHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h offHandler) WithGroup(string) slog.Handler      { return h }

// hasSample reports whether got holds a sample of metric name (integer or
// not: scrape keeps only integer values, so look at the name alone).
func hasSample(got map[string]int64, name string) bool {
	for k := range got {
		if k == name || strings.HasPrefix(k, name+"{") {
			return true
		}
	}
	return false
}

// ledgerGauges counts every run of the ledger by status and every action
// by class and status, from the rows: what docket_runs and docket_actions
// must say.
func ledgerGauges(t *testing.T, b *bundle) (runs, acts map[string]int64) {
	t.Helper()
	runs, acts = map[string]int64{}, map[string]int64{}
	for _, st := range []ledger.RunStatus{ledger.RunPlanning, ledger.RunAwaitingApproval, ledger.RunRunning, ledger.RunPaused, ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled} {
		runs[`docket_runs{status="`+string(st)+`"}`] = 0
	}
	after := ""
	for {
		page, next, err := b.led.ListRuns(t.Context(), ledger.ListOptions{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			runs[`docket_runs{status="`+string(r.Status)+`"}`]++
			rows, err := b.led.Actions(t.Context(), r.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range rows {
				acts[`docket_actions{class="`+a.Class+`",status="`+string(a.Status)+`"}`]++
			}
		}
		if next == "" {
			return runs, acts
		}
		after = next
	}
}

// engineMetric: the series that come from the engine's Observer, and the
// gauges over the ledger.
func engineMetric(name string) bool {
	for _, p := range []string{"docket_plans_recorded_total", "docket_attempts_", "docket_attempt_retries_total", "docket_lookups_",
		"docket_duplicates_prevented_total", "docket_needs_review_total", "docket_run_status_changes_total",
		"docket_tool_call_duration_seconds_count", "docket_runs{", "docket_actions{", "docket_http_requests_total{"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	labelOrder = []string{"tool", "class", "outcome", "found", "status", "kind", "scope", "route", "method", "code"}
)

// canonical writes a sample's labels in the order the tests name them
// (labelOrder, then the rest as served: le, quantile, ...); the text format
// sorts them by name.
func canonical(name, labels string) string {
	if labels == "" {
		return name
	}
	pairs := labelPair.FindAllStringSubmatch(labels, -1)
	rank := func(l string) int {
		if i := slices.Index(labelOrder, l); i >= 0 {
			return i
		}
		return len(labelOrder)
	}
	slices.SortStableFunc(pairs, func(a, b []string) int { return rank(a[1]) - rank(b[1]) })
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[1] + `="` + p[2] + `"`
	}
	return name + "{" + strings.Join(out, ",") + "}"
}

// scrape reads /metrics into name{labels} → value for the integer-valued
// samples (counters, histogram counts, gauges of runs and actions).
func scrape(t *testing.T, b *bundle) map[string]int64 {
	t.Helper()
	req, _ := http.NewRequest("GET", b.hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a sample line: %q", line)
		}
		if f, err := strconv.ParseFloat(m[3], 64); err == nil && f == float64(int64(f)) {
			out[canonical(m[1], m[2])] = int64(f)
		}
	}
	return out
}

// expectFromEvents derives the engine counters from the runs' events and
// action rows (tool and class of every action id).
func expectFromEvents(t *testing.T, b *bundle, runs []string) map[string]int64 {
	t.Helper()
	want := map[string]int64{}
	add := func(name string, n int64) { want[name] += n }
	for _, runID := range runs {
		var el struct {
			Events []ledger.Event `json:"events"`
		}
		if code := b.call("GET", "/v1/runs/"+runID+"/events?limit=10000", nil, &el); code != http.StatusOK {
			t.Fatalf("events of %s = %d", runID, code)
		}
		var plan struct {
			Actions []struct{ ID, Tool string } `json:"actions"`
		}
		b.call("GET", "/v1/runs/"+runID+"/plan?revision=1", nil, &plan)
		toolOf := map[string]string{}
		for _, a := range plan.Actions {
			toolOf[a.ID] = a.Tool
		}
		classOf := map[string]string{}
		for _, name := range []string{"look", "put", "charge", "crm", "mail", "bad"} {
			spec, ok := b.reg.Spec(name)
			if !ok {
				t.Fatalf("no tool %s", name)
			}
			classOf[name] = string(spec.Class)
		}
		// lastClaim: the attempt each action's latest claim holds and
		// whether it was a call (a lookup-class action claimed after an
		// unknown attempt looked first and found the effect: the world's
		// lookup answers confirm it).
		type claimState struct {
			attempt int
			call    bool
		}
		lastClaim := map[string]claimState{}
		unknownBefore := map[string]bool{}
		status := ""
		for _, ev := range el.Events {
			tool := toolOf[ev.ActionID]
			tc := fmt.Sprintf(`tool="%s",class="%s"`, tool, classOf[tool])
			var data struct {
				Attempt int    `json:"attempt"`
				Outcome string `json:"outcome"`
			}
			json.Unmarshal(ev.Data, &data)
			switch ev.Type {
			case "plan.recorded":
				add("docket_plans_recorded_total", 1)
			case "action.claimed":
				// A lookup-class action claimed after an unknown attempt
				// looked first; the lookup's find is recorded under the
				// claim without a call.
				looked := classOf[tool] == "lookup" && data.Attempt > 1 && unknownBefore[ev.ActionID]
				call := !looked
				lastClaim[ev.ActionID] = claimState{data.Attempt, call}
				if looked {
					add(fmt.Sprintf(`docket_lookups_total{tool="%s",found="true"}`, tool), 1)
					continue
				}
				add("docket_attempts_started_total{"+tc+"}", 1)
				if data.Attempt > 1 {
					add("docket_attempt_retries_total", 1)
				}
			case "action.succeeded":
				c, ok := lastClaim[ev.ActionID]
				switch {
				case !ok: // no claim in this revision: the key's output was adopted
				case c.call:
					add("docket_attempts_ended_total{"+tc+`,outcome="ok"}`, 1)
				}
				delete(lastClaim, ev.ActionID)
			case "action.attempt_failed", "action.failed": // a lookup's wait is action.lookup_wait
				add("docket_attempts_ended_total{"+tc+`,outcome="`+data.Outcome+`"}`, 1)
				unknownBefore[ev.ActionID] = data.Outcome == "unknown"
				delete(lastClaim, ev.ActionID)
			case "action.needs_review":
				if _, ok := lastClaim[ev.ActionID]; ok && classOf[tool] == "at_most_once" {
					// An at-most-once attempt whose outcome is unknown.
					add("docket_attempts_ended_total{"+tc+`,outcome="unknown"}`, 1)
				}
				add("docket_needs_review_total{"+tc+"}", 1)
				delete(lastClaim, ev.ActionID)
			case "run.created":
				status = "running"
			case "run.completed", "run.failed", "run.paused", "run.cancelled", "run.awaiting_approval":
				status = strings.TrimPrefix(string(ev.Type), "run.")
				add(`docket_run_status_changes_total{status="`+status+`"}`, 1)
			case "run.replayed", "run.resumed":
				if ev.Type == "run.replayed" {
					add("docket_plans_recorded_total", 1)
				}
				// A new revision (or a resume) runs whatever the run was.
				if status != "running" {
					status = "running"
					add(`docket_run_status_changes_total{status="running"}`, 1)
				}
			}
		}
	}
	// Outputs adopted by key: rows of the current revision that succeeded
	// under a key claimed before the replay and never claimed after it.
	for _, runID := range runs {
		evs, err := b.led.Events(t.Context(), runID, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		before, after := map[string]bool{}, map[string]bool{}
		replayed := false
		for _, ev := range evs {
			switch ev.Type {
			case "run.replayed":
				replayed = true
			case "action.claimed":
				var d struct{ Key string }
				json.Unmarshal(ev.Data, &d)
				if replayed {
					after[d.Key] = true
				} else {
					before[d.Key] = true
				}
			}
		}
		if !replayed {
			continue
		}
		rows, err := b.led.Actions(t.Context(), runID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Status == ledger.StatusSucceeded && before[r.Key] && !after[r.Key] {
				add("docket_duplicates_prevented_total", 1)
			}
		}
	}
	return want
}

// TestNoLogScraping: no metric depends on log text. The ui package builds
// no slog handler (it hands its logger on as it is), and nothing in it
// matches on a log record's message.
func TestNoLogScraping(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"slog.Handler", "slog.Record", "countingHandler", "Hooks"} {
			if strings.Contains(string(src), bad) {
				t.Errorf("%s uses %s: metrics and signals come from the executor's Observer, not from log records or test hooks", f, bad)
			}
		}
	}
}

// scrapeText reads /metrics as served, in Prometheus' text format.
func scrapeText(t *testing.T, b *bundle) string {
	t.Helper()
	req, _ := http.NewRequest("GET", b.hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics Content-Type = %q", ct)
	}
	return string(raw)
}

// lintMetrics checks an exposition with client_golang's linter (the rules
// promtool applies) and, when it is installed, with `promtool check
// metrics` itself (Debian's prometheus package ships it; make test installs
// it).
func lintMetrics(t *testing.T, text string) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	path, err := exec.LookPath("promtool")
	if err != nil {
		testextra.Missing(t, "promtool ("+err.Error()+")", "apt-get install -y prometheus (Debian's package ships promtool; make test installs it when it runs as root)")
		return
	}
	cmd := exec.CommandContext(t.Context(), path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
