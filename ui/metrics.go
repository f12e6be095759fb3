package ui

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	webhooks        atomic.Int64
	webhookFailures atomic.Int64
	reviews         counterVec
	// from the executor's log records (countingHandler)
	adopted     atomic.Int64 // a succeeded key returned its stored output: a duplicate prevented
	lookupFound atomic.Int64 // a lookup found the effect of an earlier attempt
	retries     atomic.Int64

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
	return &metrics{planSeconds: make([]float64, len(planBuckets)), reviews: counterVec{m: map[string]int64{}}}
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

// countingHandler counts the executor's records that metrics need and passes
// every record the inner handler wants on to it.
type countingHandler struct {
	inner slog.Handler
	m     *metrics
}

func (h countingHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "action succeeded":
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "adopted" && a.Value.Kind() == slog.KindBool && a.Value.Bool() {
				h.m.adopted.Add(1)
			}
			return true
		})
	case "lookup found the effect; not calling again":
		h.m.lookupFound.Add(1)
	case "attempt failed, retrying":
		h.m.retries.Add(1)
	}
	if h.inner.Enabled(ctx, r.Level) {
		return h.inner.Handle(ctx, r)
	}
	return nil
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{inner: h.inner.WithAttrs(as), m: h.m}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{inner: h.inner.WithGroup(name), m: h.m}
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
	counter("docket_duplicates_prevented_total", "Actions whose key had already succeeded: the stored output was returned, the tool not called.")
	fmt.Fprintf(&b, "docket_duplicates_prevented_total %d\n", m.adopted.Load())
	counter("docket_lookups_found_total", "Lookups that found the effect of an earlier attempt (no second write).")
	fmt.Fprintf(&b, "docket_lookups_found_total %d\n", m.lookupFound.Load())
	counter("docket_attempt_retries_total", "Attempts that failed and were retried.")
	fmt.Fprintf(&b, "docket_attempt_retries_total %d\n", m.retries.Load())
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
