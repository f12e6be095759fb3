package ui

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/planner"
)

// metricsRuns bounds how many of the newest runs the per-action gauges of
// /metrics look at, so a scrape stays cheap on a large ledger.
const metricsRuns = 200

// metrics are the server's counters, served in Prometheus' text format.
type metrics struct {
	subscribers     atomic.Int64
	eventsSent      atomic.Int64
	lagged          atomic.Int64
	drives          atomic.Int64
	authFailures    atomic.Int64
	rateLimited     atomic.Int64
	forbidden       counterVec // by missing scope
	webhooks        atomic.Int64
	webhookFailures atomic.Int64
	reviews         counterVec
	engine          *engineCounts // what the engine reports (executor.Observer)

	mu              sync.Mutex
	planSeconds     []float64 // histogram bucket counts, per planBuckets
	planCount       int64
	planSum         float64
	planFailures    int64
	promptTokens    int64
	completionToken int64
}

var planBuckets = []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120}

func newMetrics() *metrics {
	return &metrics{planSeconds: make([]float64, len(planBuckets)), reviews: counterVec{m: map[string]int64{}}, forbidden: counterVec{m: map[string]int64{}}, engine: newEngineCounts()}
}

type counterVec struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counterVec) add(label string) {
	c.mu.Lock()
	c.m[label]++
	c.mu.Unlock()
}

func (c *counterVec) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

func (m *metrics) observePlanning(d time.Duration, res *planner.Result, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sec := d.Seconds()
	m.planCount++
	m.planSum += sec
	for i, b := range planBuckets {
		if sec <= b {
			m.planSeconds[i]++
		}
	}
	if err != nil {
		m.planFailures++
	}
	if res != nil {
		m.promptTokens += int64(res.Usage.PromptTokens)
		m.completionToken += int64(res.Usage.CompletionTokens)
	}
}

// engineCounts counts what the engine reports through executor.Observer:
// every metric about attempts, lookups, reviews, plans and run statuses comes
// from here, none from log records (the executor's log text can change
// freely).
type engineCounts struct {
	mu          sync.Mutex
	plans       int64
	started     map[toolClass]int64
	ended       map[endedKey]int64
	lookups     map[lookupKey]int64
	adopted     int64
	retries     int64
	needsReview map[toolClass]int64
	statuses    map[ledger.RunStatus]int64
}

var _ executor.Observer = (*engineCounts)(nil)

type toolClass struct{ tool, class string }

type endedKey struct {
	toolClass
	outcome string // "ok" or the failure class (tools.Outcome)
}

type lookupKey struct {
	tool  string
	found bool
}

func newEngineCounts() *engineCounts {
	return &engineCounts{
		started:     map[toolClass]int64{},
		ended:       map[endedKey]int64{},
		lookups:     map[lookupKey]int64{},
		needsReview: map[toolClass]int64{},
		statuses:    map[ledger.RunStatus]int64{},
	}
}

func (c *engineCounts) PlanRecorded(string, int, int) {
	c.mu.Lock()
	c.plans++
	c.mu.Unlock()
}

func (c *engineCounts) AttemptStarted(a executor.AttemptInfo) {
	c.mu.Lock()
	c.started[toolClass{a.Tool, string(a.Class)}]++
	if a.Attempt > 1 {
		c.retries++
	}
	c.mu.Unlock()
}

func (c *engineCounts) AttemptEnded(a executor.AttemptInfo, r executor.AttemptResult) {
	k := endedKey{toolClass{a.Tool, string(a.Class)}, "ok"}
	if !r.OK {
		k.outcome = r.Failure.String()
	}
	c.mu.Lock()
	c.ended[k]++
	c.mu.Unlock()
}

func (c *engineCounts) LookupDone(a executor.AttemptInfo, found bool) {
	c.mu.Lock()
	c.lookups[lookupKey{a.Tool, found}]++
	c.mu.Unlock()
}

func (c *engineCounts) Adopted(executor.AttemptInfo) {
	c.mu.Lock()
	c.adopted++
	c.mu.Unlock()
}

func (c *engineCounts) NeedsReview(a executor.AttemptInfo, _ string) {
	c.mu.Lock()
	c.needsReview[toolClass{a.Tool, string(a.Class)}]++
	c.mu.Unlock()
}

func (c *engineCounts) RunStatus(_ string, st ledger.RunStatus) {
	c.mu.Lock()
	c.statuses[st]++
	c.mu.Unlock()
}

// write appends the engine's counters in Prometheus' text format.
func (c *engineCounts) write(b *strings.Builder, counter func(name, help string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counter("docket_plans_recorded_total", "Plan revisions recorded (a new run's plan, a replay's revision).")
	fmt.Fprintf(b, "docket_plans_recorded_total %d\n", c.plans)
	counter("docket_attempts_started_total", "Tool calls started (an attempt claimed, its tool about to be called), by tool and effect class.")
	for _, k := range sortedKeys(c.started, func(a, b toolClass) int {
		return cmp.Or(strings.Compare(a.tool, b.tool), strings.Compare(a.class, b.class))
	}) {
		fmt.Fprintf(b, "docket_attempts_started_total{tool=\"%s\",class=\"%s\"} %d\n", labelValue(k.tool), labelValue(k.class), c.started[k])
	}
	counter("docket_attempts_ended_total", "Tool calls whose outcome is recorded, by tool, effect class and outcome (ok, not_sent, not_processed, definite, unknown, key_in_flight).")
	for _, k := range sortedKeys(c.ended, func(a, b endedKey) int {
		return cmp.Or(strings.Compare(a.tool, b.tool), strings.Compare(a.class, b.class), strings.Compare(a.outcome, b.outcome))
	}) {
		fmt.Fprintf(b, "docket_attempts_ended_total{tool=\"%s\",class=\"%s\",outcome=\"%s\"} %d\n", labelValue(k.tool), labelValue(k.class), labelValue(k.outcome), c.ended[k])
	}
	counter("docket_attempt_retries_total", "Attempts after an action's first: retries after a failed or unknown attempt, in this process or after a restart.")
	fmt.Fprintf(b, "docket_attempt_retries_total %d\n", c.retries)
	counter("docket_lookups_total", "Lookups before a write, by tool and whether they found the effect.")
	found := int64(0)
	for _, k := range sortedKeys(c.lookups, func(a, b lookupKey) int {
		return cmp.Or(strings.Compare(a.tool, b.tool), cmp.Compare(boolInt(a.found), boolInt(b.found)))
	}) {
		fmt.Fprintf(b, "docket_lookups_total{tool=\"%s\",found=\"%t\"} %d\n", labelValue(k.tool), k.found, c.lookups[k])
		if k.found {
			found += c.lookups[k]
		}
	}
	counter("docket_lookups_found_total", "Lookups that found the effect of an earlier attempt (no second write).")
	fmt.Fprintf(b, "docket_lookups_found_total %d\n", found)
	counter("docket_duplicates_prevented_total", "Actions whose key had already succeeded: the stored output was returned, the tool not called.")
	fmt.Fprintf(b, "docket_duplicates_prevented_total %d\n", c.adopted)
	counter("docket_needs_review_total", "Actions that came to need a person (outcome unknown, retries spent, ...), by tool and effect class.")
	for _, k := range sortedKeys(c.needsReview, func(a, b toolClass) int {
		return cmp.Or(strings.Compare(a.tool, b.tool), strings.Compare(a.class, b.class))
	}) {
		fmt.Fprintf(b, "docket_needs_review_total{tool=\"%s\",class=\"%s\"} %d\n", labelValue(k.tool), labelValue(k.class), c.needsReview[k])
	}
	counter("docket_run_status_changes_total", "Run status changes made by the engine, by the new status.")
	for _, st := range sortedKeys(c.statuses, func(a, b ledger.RunStatus) int { return strings.Compare(string(a), string(b)) }) {
		fmt.Fprintf(b, "docket_run_status_changes_total{status=\"%s\"} %d\n", labelValue(string(st)), c.statuses[st])
	}
}

func sortedKeys[K comparable, V any](m map[K]V, cmpf func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpf)
	return keys
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// labelValue escapes a label value for Prometheus' text format (backslash,
// double quote and newline; Go's %q would also escape what the format keeps).
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var b strings.Builder
	m := s.metrics
	gauge := func(name, help string) { fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name) }
	counter := func(name, help string) { fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name) }

	gauge("docket_runs", "Runs by status.")
	statuses := []ledger.RunStatus{ledger.RunPlanning, ledger.RunAwaitingApproval, ledger.RunRunning, ledger.RunPaused, ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled}
	paused := 0
	for _, st := range statuses {
		n, err := s.countRuns(ctx, st)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "ledger", err.Error(), nil)
			return
		}
		fmt.Fprintf(&b, "docket_runs{status=%q} %d\n", st, n)
		if st == ledger.RunPaused {
			paused = n
		}
	}
	gauge("docket_paused_runs", "Runs paused for a person (an action needs review, or a person paused it).")
	fmt.Fprintf(&b, "docket_paused_runs %d\n", paused)
	gauge("docket_actions", fmt.Sprintf("Actions of the %d newest runs by effect class and status.", metricsRuns))
	byClass, err := s.countActions(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "ledger", err.Error(), nil)
		return
	}
	keys := make([]string, 0, len(byClass))
	for k := range byClass {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		class, status, _ := strings.Cut(k, "\x00")
		fmt.Fprintf(&b, "docket_actions{class=%q,status=%q} %d\n", class, status, byClass[k])
	}
	m.engine.write(&b, counter)
	counter("docket_reviews_total", "Review decisions made through this server, by kind.")
	rv := m.reviews.snapshot()
	for _, k := range []string{"approve", "reject", "edit", "resolve"} {
		fmt.Fprintf(&b, "docket_reviews_total{kind=%q} %d\n", k, rv[k])
	}
	gauge("docket_websocket_subscribers", "Open WebSocket subscriptions.")
	fmt.Fprintf(&b, "docket_websocket_subscribers %d\n", m.subscribers.Load())
	counter("docket_websocket_events_sent_total", "Events written to WebSocket clients.")
	fmt.Fprintf(&b, "docket_websocket_events_sent_total %d\n", m.eventsSent.Load())
	counter("docket_websocket_lagged_total", "WebSocket clients disconnected for falling behind.")
	fmt.Fprintf(&b, "docket_websocket_lagged_total %d\n", m.lagged.Load())
	counter("docket_drives_total", "Background drives of runs.")
	fmt.Fprintf(&b, "docket_drives_total %d\n", m.drives.Load())
	counter("docket_auth_failures_total", "Requests refused for a missing or wrong token or session.")
	fmt.Fprintf(&b, "docket_auth_failures_total %d\n", m.authFailures.Load())
	counter("docket_forbidden_total", "Requests and socket messages refused (403) for a scope their token lacks, by that scope.")
	fb := m.forbidden.snapshot()
	for _, sc := range Scopes {
		fmt.Fprintf(&b, "docket_forbidden_total{scope=%q} %d\n", sc, fb[string(sc)])
	}
	counter("docket_rate_limited_total", "Requests, socket messages and upgrades refused (429) over a token's rate limit or socket cap.")
	fmt.Fprintf(&b, "docket_rate_limited_total %d\n", m.rateLimited.Load())
	counter("docket_webhooks_total", "Webhook calls by outcome.")
	fmt.Fprintf(&b, "docket_webhooks_total{outcome=\"ok\"} %d\ndocket_webhooks_total{outcome=\"failed\"} %d\n", m.webhooks.Load(), m.webhookFailures.Load())

	m.mu.Lock()
	fmt.Fprintf(&b, "# HELP docket_model_planning_seconds Time to plan a goal with the model.\n# TYPE docket_model_planning_seconds histogram\n")
	for i, le := range planBuckets {
		fmt.Fprintf(&b, "docket_model_planning_seconds_bucket{le=\"%g\"} %g\n", le, m.planSeconds[i])
	}
	fmt.Fprintf(&b, "docket_model_planning_seconds_bucket{le=\"+Inf\"} %d\ndocket_model_planning_seconds_sum %g\ndocket_model_planning_seconds_count %d\n", m.planCount, m.planSum, m.planCount)
	counter("docket_model_planning_failures_total", "Plannings that ended without a plan.")
	fmt.Fprintf(&b, "docket_model_planning_failures_total %d\n", m.planFailures)
	counter("docket_model_tokens_total", "Model tokens used for planning, by kind.")
	fmt.Fprintf(&b, "docket_model_tokens_total{kind=\"prompt\"} %d\ndocket_model_tokens_total{kind=\"completion\"} %d\n", m.promptTokens, m.completionToken)
	m.mu.Unlock()

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}

func (s *Server) countRuns(ctx context.Context, st ledger.RunStatus) (int, error) {
	n, after := 0, ""
	for {
		runs, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: st, After: after, Limit: 1000})
		if err != nil {
			return 0, err
		}
		n += len(runs)
		if next == "" {
			return n, nil
		}
		after = next
	}
}

func (s *Server) countActions(ctx context.Context) (map[string]int, error) {
	runs, _, err := s.led.ListRuns(ctx, ledger.ListOptions{Limit: metricsRuns})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range runs {
		acts, err := s.led.Actions(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		for _, a := range acts {
			out[a.Class+"\x00"+string(a.Status)]++
		}
	}
	return out, nil
}
