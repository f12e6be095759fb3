package ui

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools/httpspan"
)

// metrics are the server's Prometheus metrics (github.com/prometheus/client_golang),
// in a registry of the server's own (two servers in one process never share
// a counter). What the engine does comes from executor.Observer
// (engineMetrics), the runs and actions gauges from the ledger
// (ledgerCounts), the rest from the server's own code paths; nothing comes
// from log records (TestNoLogScraping).
type metrics struct {
	reg *prometheus.Registry

	subscribers     prometheus.Gauge
	eventsSent      prometheus.Counter
	lagged          prometheus.Counter
	drives          prometheus.Counter
	authFailures    prometheus.Counter
	rateLimited     prometheus.Counter
	forbidden       counterVec // by missing scope
	webhooks        prometheus.Counter
	webhookFailures prometheus.Counter
	reviews         counterVec // by kind

	planSeconds  prometheus.Histogram
	planFailures prometheus.Counter
	tokens       *prometheus.CounterVec

	httpRequests *prometheus.CounterVec
	httpSeconds  *prometheus.HistogramVec

	engine *engineMetrics
	ledger *ledgerCounts
}

// counterVec is a counter with one label, counted by label value.
type counterVec struct{ v *prometheus.CounterVec }

func (c counterVec) add(label string) { c.v.WithLabelValues(label).Inc() }

// callBuckets are the tool call duration buckets, in seconds (a tool's
// default timeout is 30s).
var callBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

var planBuckets = []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120}

// waitBuckets are the buckets of waits, in seconds: for a drive (a few
// milliseconds) to for a person (hours).
var waitBuckets = []float64{0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}

// runBuckets are the buckets of whole runs and actions, in seconds.
var runBuckets = []float64{0.01, 0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600}

// exemplars attach a run's trace id to observations about it (when tracing
// is on): OpenMetrics scrapes show, per bucket, the trace of a run that fell
// in it.
type exemplars struct{ traceID func(runID string) string }

// observe records v in o, with runID's trace id as the exemplar when there
// is one.
func (x exemplars) observe(o prometheus.Observer, v float64, runID string) {
	if x.traceID != nil {
		if id := x.traceID(runID); id != "" {
			if eo, ok := o.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": id})
				return
			}
		}
	}
	o.Observe(v)
}

// newMetrics builds the server's metrics over led. traceID, when set, names
// a run's trace (Config.TraceID): duration observations carry it as an
// exemplar (served in OpenMetrics). now is the clock waits are measured
// with (default time.Now).
func newMetrics(led ledger.Store, traceID func(runID string) string, now func() time.Time) *metrics {
	if now == nil {
		now = time.Now
	}
	reg := prometheus.NewRegistry()
	f := factory{reg}
	ex := exemplars{traceID}
	m := &metrics{
		reg:          reg,
		subscribers:  f.gauge("docket_websocket_subscribers", "Open WebSocket subscriptions."),
		eventsSent:   f.counter("docket_websocket_events_sent_total", "Events written to WebSocket clients."),
		lagged:       f.counter("docket_websocket_lagged_total", "WebSocket clients disconnected for falling behind."),
		drives:       f.counter("docket_drives_total", "Background drives of runs."),
		authFailures: f.counter("docket_auth_failures_total", "Requests refused for a missing or wrong token or session."),
		rateLimited:  f.counter("docket_rate_limited_total", "Requests, socket messages and upgrades refused (429) over a token's rate limit or socket cap."),
		forbidden:    counterVec{f.counterVec("docket_forbidden_total", "Requests and socket messages refused (403) for a scope their token lacks, by that scope.", "scope")},
		reviews:      counterVec{f.counterVec("docket_reviews_total", "Review decisions made through this server, by kind.", "kind")},
		planSeconds:  f.histogram("docket_model_planning_seconds", "Time to plan a goal with the model.", planBuckets),
		planFailures: f.counter("docket_model_planning_failures_total", "Plannings that ended without a plan."),
		tokens:       f.counterVec("docket_model_tokens_total", "Model tokens used for planning, by kind.", "kind"),
		httpRequests: f.counterVec("docket_http_requests_total", "HTTP requests answered, by route pattern (never a raw path), method and status code (101: a WebSocket upgrade).", "route", "method", "code"),
		httpSeconds:  f.histogramVec("docket_http_request_duration_seconds", "Time to answer an HTTP request, by route pattern and method (WebSocket connections left out: they last as long as the client stays).", prometheus.DefBuckets, "route", "method"),
		engine:       newEngineMetrics(f, ex, now),
		ledger:       newLedgerCounts(led),
	}
	m.ledger.runSeconds = f.histogramVec("docket_run_duration_seconds", "Time from a run's creation to its final status (completed, failed, cancelled), as the ledger records both, for runs this server's engine ended; by that status.", runBuckets, "status")
	m.ledger.ex = ex
	webhooks := f.counterVec("docket_webhooks_total", "Webhook calls by outcome.", "outcome")
	m.webhooks, m.webhookFailures = webhooks.WithLabelValues("ok"), webhooks.WithLabelValues("failed")
	// Series that exist from the start, at zero: a rate over them needs no
	// first event, and a dashboard shows 0 rather than nothing.
	for _, sc := range Scopes {
		m.forbidden.v.WithLabelValues(string(sc))
	}
	for _, k := range []string{"approve", "reject", "edit", "resolve"} {
		m.reviews.v.WithLabelValues(k)
	}
	for _, k := range []string{"prompt", "completion"} {
		m.tokens.WithLabelValues(k)
	}
	reg.MustRegister(m.ledger,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// factory makes metrics registered in one registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

func (m *metrics) observePlanning(d time.Duration, res *planner.Result, err error) {
	m.planSeconds.Observe(d.Seconds())
	if err != nil {
		m.planFailures.Inc()
	}
	if res != nil {
		m.tokens.WithLabelValues("prompt").Add(float64(res.Usage.PromptTokens))
		m.tokens.WithLabelValues("completion").Add(float64(res.Usage.CompletionTokens))
	}
}

// engineMetrics counts what the engine reports through executor.Observer:
// every metric about attempts, lookups, reviews, plans and run statuses comes
// from here, none from log records (the executor's log text can change
// freely).
type engineMetrics struct {
	plans        prometheus.Counter
	started      *prometheus.CounterVec   // tool, class
	ended        *prometheus.CounterVec   // tool, class, outcome
	seconds      *prometheus.HistogramVec // tool, class, outcome
	retries      prometheus.Counter
	lookups      *prometheus.CounterVec // tool, found
	lookupsFound prometheus.Counter
	adopted      prometheus.Counter
	needsReview  *prometheus.CounterVec // tool, class
	statuses     *prometheus.CounterVec // status

	runQueue     prometheus.Histogram
	actionQueue  prometheus.Histogram
	approvalWait prometheus.Histogram
	actionTotal  *prometheus.HistogramVec // tool, outcome

	ex  exemplars
	now func() time.Time

	mu      sync.Mutex
	runs    map[string]*runTimes    // runs with a wait going on, or actions between claim and outcome
	actions map[actionRef]*actTimes // actions approved and not yet claimed, or claimed and without an outcome
}

// runTimes is when a run (as this process saw it) became ready to be
// claimed from, and when it stopped to wait for a person; zero: not so.
type runTimes struct {
	ready, waiting time.Time
}

type actionRef struct{ run, action string }

// actTimes is when an action was approved (zero once claimed), when it was
// first claimed (zero until then), and its tool and whether its latest
// attempt failed (an outcome that is failed when no retry follows).
type actTimes struct {
	approved, claimed, failedAt time.Time
	tool                        string
}

var (
	_ executor.Observer         = (*engineMetrics)(nil)
	_ executor.ApprovalObserver = (*engineMetrics)(nil)
)

func newEngineMetrics(f factory, ex exemplars, now func() time.Time) *engineMetrics {
	return &engineMetrics{
		ex: ex, now: now, runs: map[string]*runTimes{}, actions: map[actionRef]*actTimes{},
		runQueue:     f.histogram("docket_run_queue_wait_seconds", "Time from a run becoming ready (recorded, replayed, resumed, an action of it approved) to its next claim, as this server saw both.", waitBuckets),
		actionQueue:  f.histogram("docket_action_queue_wait_seconds", "Time from an action's approval (the one its gate needs) to its claim, as this server saw both.", waitBuckets),
		approvalWait: f.histogram("docket_action_approval_wait_seconds", "Time from its run stopping to wait for a person's approval to the action's approval, as this server saw both.", waitBuckets),
		actionTotal:  f.histogramVec("docket_action_duration_seconds", "Time from an action's first claim to its outcome (succeeded, failed, needs_review), retries included, by tool and outcome.", runBuckets, "tool", "outcome"),
		plans:        f.counter("docket_plans_recorded_total", "Plan revisions recorded (a new run's plan, a replay's revision)."),
		started:      f.counterVec("docket_attempts_started_total", "Tool calls started (an attempt claimed, its tool about to be called), by tool and effect class.", "tool", "class"),
		ended:        f.counterVec("docket_attempts_ended_total", "Tool calls whose outcome is recorded, by tool, effect class and outcome (ok, not_sent, not_processed, definite, unknown, key_in_flight).", "tool", "class", "outcome"),
		seconds:      f.histogramVec("docket_tool_call_duration_seconds", "Duration of tool calls whose outcome is recorded, by tool, effect class and outcome (as docket_attempts_ended_total).", callBuckets, "tool", "class", "outcome"),
		retries:      f.counter("docket_attempt_retries_total", "Attempts after an action's first: retries after a failed or unknown attempt, in this process or after a restart."),
		lookups:      f.counterVec("docket_lookups_total", "Lookups before a write, by tool and whether they found the effect.", "tool", "found"),
		lookupsFound: f.counter("docket_lookups_found_total", "Lookups that found the effect of an earlier attempt (no second write)."),
		adopted:      f.counter("docket_duplicates_prevented_total", "Actions whose key had already succeeded: the stored output was returned, the tool not called."),
		needsReview:  f.counterVec("docket_needs_review_total", "Actions that came to need a person (outcome unknown, retries spent, ...), by tool and effect class.", "tool", "class"),
		statuses:     f.counterVec("docket_run_status_changes_total", "Run status changes made by the engine, by the new status.", "status"),
	}
}

func (e *engineMetrics) PlanRecorded(runID string, _, n int) {
	e.plans.Inc()
	if n > 0 {
		e.mu.Lock()
		e.run(runID).ready = e.now()
		e.mu.Unlock()
	}
}

// run is runID's times (made when missing); under mu.
func (e *engineMetrics) run(runID string) *runTimes {
	r := e.runs[runID]
	if r == nil {
		r = &runTimes{}
		e.runs[runID] = r
	}
	return r
}

func (e *engineMetrics) AttemptStarted(a executor.AttemptInfo) {
	e.started.WithLabelValues(a.Tool, string(a.Class)).Inc()
	if a.Attempt > 1 {
		e.retries.Inc()
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.runs[a.RunID]; r != nil && !r.ready.IsZero() {
		e.ex.observe(e.runQueue, now.Sub(r.ready).Seconds(), a.RunID)
		r.ready = time.Time{}
	}
	ref := actionRef{a.RunID, a.ActionID}
	t := e.actions[ref]
	if t == nil {
		t = &actTimes{}
		e.actions[ref] = t
	}
	if !t.approved.IsZero() {
		e.ex.observe(e.actionQueue, now.Sub(t.approved).Seconds(), a.RunID)
		t.approved = time.Time{}
	}
	if t.claimed.IsZero() {
		t.claimed = now
	}
	t.tool, t.failedAt = a.Tool, time.Time{}
}

func (e *engineMetrics) AttemptEnded(a executor.AttemptInfo, r executor.AttemptResult) {
	outcome := "ok"
	if !r.OK {
		outcome = r.Failure.String()
	}
	e.ended.WithLabelValues(a.Tool, string(a.Class), outcome).Inc()
	e.ex.observe(e.seconds.WithLabelValues(a.Tool, string(a.Class), outcome), r.Took.Seconds(), a.RunID)
	if r.OK {
		e.actionOutcome(a.RunID, a.ActionID, "succeeded")
		return
	}
	// Failed, unless a retry follows (AttemptStarted) or it comes to need
	// a person (NeedsReview): settled when the run ends.
	e.mu.Lock()
	if t := e.actions[actionRef{a.RunID, a.ActionID}]; t != nil {
		t.failedAt = e.now()
	}
	e.mu.Unlock()
}

// actionOutcome observes the action's time from first claim to outcome,
// when this server saw its claim.
func (e *engineMetrics) actionOutcome(runID, actionID, outcome string) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	ref := actionRef{runID, actionID}
	if t := e.actions[ref]; t != nil && !t.claimed.IsZero() {
		e.ex.observe(e.actionTotal.WithLabelValues(t.tool, outcome), now.Sub(t.claimed).Seconds(), runID)
		delete(e.actions, ref)
	}
}

// Approved: the run's wait for a person ends for this action (the approval
// wait), and the action waits for its claim (the action's queue wait), as
// does the run.
func (e *engineMetrics) Approved(runID, actionID string) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.run(runID)
	if !r.waiting.IsZero() {
		e.ex.observe(e.approvalWait, now.Sub(r.waiting).Seconds(), runID)
	}
	if r.ready.IsZero() {
		r.ready = now
	}
	ref := actionRef{runID, actionID}
	t := e.actions[ref]
	if t == nil {
		t = &actTimes{}
		e.actions[ref] = t
	}
	t.approved = now
}

func (e *engineMetrics) LookupDone(a executor.AttemptInfo, found bool) {
	e.lookups.WithLabelValues(a.Tool, strconv.FormatBool(found)).Inc()
	if found {
		e.lookupsFound.Inc()
	}
}

func (e *engineMetrics) Adopted(a executor.AttemptInfo) {
	e.adopted.Inc()
	e.actionOutcome(a.RunID, a.ActionID, "succeeded") // after a claim here: a lookup found the effect
}

func (e *engineMetrics) NeedsReview(a executor.AttemptInfo, _ string) {
	e.needsReview.WithLabelValues(a.Tool, string(a.Class)).Inc()
	e.actionOutcome(a.RunID, a.ActionID, "needs_review")
}

func (e *engineMetrics) RunStatus(runID string, st ledger.RunStatus) {
	e.statuses.WithLabelValues(string(st)).Inc()
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch st {
	case ledger.RunRunning:
		if r := e.run(runID); r.ready.IsZero() {
			r.ready = now // resumed
		}
	case ledger.RunAwaitingApproval:
		r := e.run(runID)
		r.ready, r.waiting = time.Time{}, now
	case ledger.RunPaused:
		r := e.run(runID)
		r.ready, r.waiting = time.Time{}, time.Time{}
	case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled:
		delete(e.runs, runID)
		// An action whose latest attempt failed and that no retry followed
		// ended failed; the others of the run are forgotten.
		for ref, t := range e.actions {
			if ref.run != runID {
				continue
			}
			if !t.failedAt.IsZero() && !t.claimed.IsZero() {
				e.ex.observe(e.actionTotal.WithLabelValues(t.tool, "failed"), t.failedAt.Sub(t.claimed).Seconds(), runID)
			}
			delete(e.actions, ref)
		}
	}
}

// serveMetrics brings the ledger gauges up to date (503 with the error
// envelope when the ledger cannot be read) and serves the registry in
// Prometheus' text format, or in OpenMetrics (with exemplars) when the
// scraper's Accept asks for application/openmetrics-text.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if err := s.metrics.ledger.refresh(r.Context()); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ledger", err.Error(), nil)
		return
	}
	promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}).ServeHTTP(w, r)
}

// instrument counts and times every request by the route pattern it matched
// (r.Pattern, which the mux sets on the request it is given), never by its
// raw path: ids stay out of label values.
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := &httpspan.StatusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := routeLabel(r.Pattern)
		method := methodLabel(r.Method)
		code := sw.Code()
		if code == 0 {
			code = http.StatusOK
		}
		m.httpRequests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
		if !sw.Hijacked() {
			m.httpSeconds.WithLabelValues(route, method).Observe(time.Since(t0).Seconds())
		}
	})
}

// routeLabel is the path of a mux pattern ("GET /v1/runs/{id}" →
// "/v1/runs/{id}"): "unmatched" for requests no route took (404, 405, an
// unclean path), "static" for the page's files.
func routeLabel(pattern string) string {
	if pattern == "" || catchAll[pattern] {
		return "unmatched"
	}
	_, p, ok := strings.Cut(pattern, " ")
	if !ok {
		p = pattern
	}
	if p == "/" {
		return "static"
	}
	return p
}

// methodLabel keeps the method label's values few: a method no route
// serves is "other".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// ledgerCounts keeps docket_runs (runs by status) and docket_actions
// (actions by effect class and status) over ALL runs of the ledger, cheaply:
// every run is read once, at the first scrape (or the first ones, when a
// scraper gives up on a large ledger: the scan goes on where it stopped); after that a scrape reads
// again only the runs something happened to since the last one (the
// engine's Observer and the server's own reviews and drives mark them), plus
// a bounded slice of the others in turn (resyncPerScrape, so changes made by
// other processes on a shared ledger show up within a full turn). Each run
// keeps its share (its status, its actions by class and status), so a run
// read again replaces its share exactly.
type ledgerCounts struct {
	led ledger.Store

	refreshMu sync.Mutex // one refresh at a time
	cursor    string     // where the next bounded resync continues ("" = newest); under refreshMu
	scanAfter string     // where the first full scan goes on after a page; under refreshMu

	// runSeconds observes docket_run_duration_seconds for the runs in
	// ended when a refresh reads them (the ledger's created_at and
	// updated_at, the final status's time).
	runSeconds *prometheus.HistogramVec
	ex         exemplars

	mu      sync.Mutex
	loaded  bool
	ended   map[string]struct{} // runs the engine ended since they were last read
	dirty   map[string]struct{}
	runs    map[string]runShare
	byRun   map[ledger.RunStatus]int
	byClass map[classStatus]int
}

type classStatus struct{ class, status string }

type runShare struct {
	status  ledger.RunStatus
	actions []classCount
}

type classCount struct {
	classStatus
	n int
}

// resyncPerScrape bounds how many runs a scrape reads besides the changed
// ones.
const resyncPerScrape = 64

var _ executor.Observer = (*ledgerCounts)(nil)

func newLedgerCounts(led ledger.Store) *ledgerCounts {
	return &ledgerCounts{led: led, ended: map[string]struct{}{}, dirty: map[string]struct{}{}, runs: map[string]runShare{},
		byRun: map[ledger.RunStatus]int{}, byClass: map[classStatus]int{}}
}

// touch marks a run whose share must be read again.
func (c *ledgerCounts) touch(runID string) {
	c.mu.Lock()
	c.dirty[runID] = struct{}{}
	c.mu.Unlock()
}

func (c *ledgerCounts) PlanRecorded(runID string, _, _ int)   { c.touch(runID) }
func (c *ledgerCounts) AttemptStarted(a executor.AttemptInfo) { c.touch(a.RunID) }
func (c *ledgerCounts) AttemptEnded(a executor.AttemptInfo, _ executor.AttemptResult) {
	c.touch(a.RunID)
}
func (c *ledgerCounts) LookupDone(a executor.AttemptInfo, _ bool)    { c.touch(a.RunID) }
func (c *ledgerCounts) Adopted(a executor.AttemptInfo)               { c.touch(a.RunID) }
func (c *ledgerCounts) NeedsReview(a executor.AttemptInfo, _ string) { c.touch(a.RunID) }
func (c *ledgerCounts) RunStatus(runID string, st ledger.RunStatus) {
	switch st {
	case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled:
		c.mu.Lock()
		c.ended[runID] = struct{}{}
		c.mu.Unlock()
	}
	c.touch(runID)
}

// refresh brings the counts up to date (see ledgerCounts).
func (c *ledgerCounts) refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.mu.Lock()
	loaded := c.loaded
	c.mu.Unlock()
	if !loaded {
		// Marks made during the scan stay: those runs are read again below.
		// A scan cut short (the scraper gave up) goes on from the last page
		// it finished at the next scrape.
		for {
			runs, next, err := c.led.ListRuns(ctx, ledger.ListOptions{After: c.scanAfter, Limit: 1000})
			if err != nil {
				return err
			}
			for _, r := range runs {
				if err := c.readRun(ctx, r); err != nil {
					return err
				}
			}
			if next == "" {
				break
			}
			c.scanAfter = next
		}
		c.mu.Lock()
		c.loaded = true
		c.mu.Unlock()
	} else {
		runs, next, err := c.led.ListRuns(ctx, ledger.ListOptions{After: c.cursor, Limit: resyncPerScrape})
		if err != nil {
			return err
		}
		for _, r := range runs {
			if err := c.readRun(ctx, r); err != nil {
				return err
			}
		}
		c.cursor = next
	}
	c.mu.Lock()
	dirty := c.dirty
	c.dirty = map[string]struct{}{}
	c.mu.Unlock()
	for id := range dirty {
		r, err := c.led.GetRun(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err == nil {
			err = c.readRun(ctx, r)
		}
		if err != nil {
			c.mu.Lock() // read them next time
			for id := range dirty {
				c.dirty[id] = struct{}{}
			}
			c.mu.Unlock()
			return err
		}
	}
	return nil
}

// readRun reads run r's actions and replaces its share.
func (c *ledgerCounts) readRun(ctx context.Context, r ledger.Run) error {
	acts, err := c.led.Actions(ctx, r.ID)
	if err != nil {
		return err
	}
	share := runShare{status: r.Status}
	for _, a := range acts {
		k := classStatus{internClass(a.Class), string(a.Status)}
		found := false
		for i := range share.actions {
			if share.actions[i].classStatus == k {
				share.actions[i].n++
				found = true
				break
			}
		}
		if !found {
			share.actions = append(share.actions, classCount{k, 1})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.ended[r.ID]; ok {
		delete(c.ended, r.ID)
		switch r.Status {
		case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled:
			if c.runSeconds != nil && !r.CreatedAt.IsZero() && !r.UpdatedAt.Before(r.CreatedAt) {
				c.ex.observe(c.runSeconds.WithLabelValues(string(r.Status)), r.UpdatedAt.Sub(r.CreatedAt).Seconds(), r.ID)
			}
		}
	}
	if old, ok := c.runs[r.ID]; ok {
		c.byRun[old.status]--
		for _, cc := range old.actions {
			c.byClass[cc.classStatus] -= cc.n
		}
	}
	c.runs[r.ID] = share
	c.byRun[share.status]++
	for _, cc := range share.actions {
		c.byClass[cc.classStatus] += cc.n
	}
	return nil
}

// internClass returns the package's own copy of a known class name, so the
// shares of many runs do not keep the rows' strings alive.
func internClass(c string) string {
	for _, k := range []string{"read_only", "idempotent", "keyed", "lookup", "at_most_once"} {
		if c == k {
			return k
		}
	}
	return c
}

var (
	runsDesc    = prometheus.NewDesc("docket_runs", "Runs by status, over every run in the ledger.", []string{"status"}, nil)
	actionsDesc = prometheus.NewDesc("docket_actions", "Actions by effect class and status, over every run in the ledger.", []string{"class", "status"}, nil)
	runStatuses = []ledger.RunStatus{ledger.RunPlanning, ledger.RunAwaitingApproval, ledger.RunRunning, ledger.RunPaused, ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled}
)

func (c *ledgerCounts) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- actionsDesc
}

func (c *ledgerCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range runStatuses {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(c.byRun[st]), string(st))
	}
	for k, n := range c.byClass {
		if n != 0 {
			ch <- prometheus.MustNewConstMetric(actionsDesc, prometheus.GaugeValue, float64(n), k.class, k.status)
		}
	}
}
