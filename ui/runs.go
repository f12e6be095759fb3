package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// fail answers err with the status and code its kind calls for.
func (s *Server) fail(w http.ResponseWriter, err error) {
	var (
		pe  plan.Errors
		ae  *tools.ArgsError
		ple *planner.PlanningError
		me  *planner.ModelError
	)
	switch {
	case errors.As(err, &ple):
		writeError(w, http.StatusUnprocessableEntity, "planning_failed", err.Error(), map[string]any{"reason": ple.Reason, "problems": ple.Problems, "rounds": ple.Rounds, "repairs": ple.Repairs})
	case errors.As(err, &me):
		writeError(w, http.StatusBadGateway, "model_error", err.Error(), map[string]any{"status": me.Status, "attempts": me.Attempts, "retryable": me.Retryable()})
	case errors.Is(err, planner.ErrBadRequest):
		writeError(w, http.StatusUnprocessableEntity, "invalid", err.Error(), nil)
	case errors.As(err, &pe):
		writeError(w, http.StatusUnprocessableEntity, "invalid_plan", err.Error(), map[string]any{"problems": []plan.Problem(pe)})
	case errors.As(err, &ae):
		writeError(w, http.StatusUnprocessableEntity, "invalid_args", err.Error(), map[string]any{"tool": ae.Tool, "problems": ae.Problems})
	case errors.Is(err, executor.ErrInvalidPlan), errors.Is(err, tools.ErrUnknownTool), errors.Is(err, ledger.ErrInvalid):
		writeError(w, http.StatusUnprocessableEntity, "invalid", err.Error(), nil)
	case errors.Is(err, ledger.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, executor.ErrBusy):
		writeError(w, http.StatusConflict, "conflict", err.Error(), nil)
	case errors.Is(err, ledger.ErrApproverRefused):
		// The token is fine, but the action's policy does not let it
		// approve (its run's creator, or not a named approver).
		writeError(w, http.StatusForbidden, "approver_refused", err.Error(), nil)
	case errors.Is(err, executor.ErrNotReviewable), errors.Is(err, ledger.ErrConflict):
		writeError(w, http.StatusConflict, "not_reviewable", err.Error(), nil)
	case errors.Is(err, executor.ErrPlanMismatch):
		writeError(w, http.StatusUnprocessableEntity, "plan_mismatch", err.Error(), nil)
	case errors.Is(err, executor.ErrToolsChanged):
		writeError(w, http.StatusConflict, "tools_changed", err.Error(), nil)
	case errors.Is(err, errBadOp):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
	case errors.Is(err, errShuttingDown):
		writeError(w, http.StatusServiceUnavailable, "shutting_down", err.Error(), nil)
	case errors.Is(err, ledger.ErrNoSpace):
		// The data directory's disk is full: nothing was written, reads
		// still work; the same request succeeds once space is freed.
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusServiceUnavailable, "no_space", err.Error(), nil)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, "cancelled", err.Error(), nil)
	case errors.Is(err, ledger.ErrUnavailable), errors.Is(err, ledger.ErrLeaseExpired):
		// A shared ledger's database is unreachable, or cut a commit so
		// that its outcome is unknown, or this node's lease lapsed: the same
		// request again (on this node or another) finds out and answers.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
	default:
		s.log.Error("request failed", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", err.Error(), nil)
	}
}

// createRequest is the body of POST /v1/runs.
type createRequest struct {
	RunID    string            `json:"run_id,omitempty"`
	Goal     string            `json:"goal,omitempty"`
	Messages []planner.Message `json:"messages,omitempty"`
	Plan     json.RawMessage   `json:"plan,omitempty"`
	Approve  string            `json:"approve,omitempty"`
	// Retention is the new run's own retention ("30d", "12h"; plan.ParseDuration).
	Retention string `json:"retention,omitempty"`
}

func (s *Server) createRun(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readSubmitted(w, r) // a plan as large as the CLI takes
	if !ok {
		return
	}
	var req createRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	c, ok := s.newCreation(w, r, req)
	if !ok {
		return
	}
	release, ok := s.accept(w, r, c.RunID)
	if !ok {
		return
	}
	handedOff := false // once planning started, it releases the identity when the run is recorded
	defer func() {
		if !handedOff {
			release()
		}
	}()

	// A run that exists answers by identity.
	if s.answerExisting(w, r, c.RunID, *c.Identity) {
		return
	}
	if c.Planner == nil {
		s.createGiven(w, r, c, release)
		return
	}
	handedOff = true
	s.createPlanned(w, r, c, release)
}

// newCreation checks a create request and builds the run it asks for
// (executor/runs): the run id (the body's, else the Idempotency-Key header,
// else new), the request's identity (executor.Request: the rule docket run,
// docket step and docket plan share, so a run any of them created is
// recognised here), the policy it names ("" names none: a new run gets
// safe, and the request matches a run created with any policy), and the
// plan or the goal to plan. It answers the request itself when it is not
// ok.
func (s *Server) newCreation(w http.ResponseWriter, r *http.Request, req createRequest) (runs.Request, bool) {
	policy := executor.Policy(req.Approve)
	switch policy {
	case "", executor.PolicySafe, executor.PolicyAll, executor.PolicyNone:
	default:
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("approve must be all, safe or none, not %q", req.Approve), nil)
		return runs.Request{}, false
	}
	if policy == executor.PolicyAll && !s.needs(w, r, ScopeReview, `create a run with "approve": "all" (that approves its whole plan)`) {
		return runs.Request{}, false
	}
	hasPlan := len(req.Plan) > 0 && string(req.Plan) != "null"
	hasGoal := strings.TrimSpace(req.Goal) != "" || len(req.Messages) > 0
	switch {
	case hasPlan && hasGoal:
		writeError(w, http.StatusBadRequest, "bad_request", "give either a plan or a goal/messages, not both", nil)
		return runs.Request{}, false
	case !hasPlan && !hasGoal:
		writeError(w, http.StatusBadRequest, "bad_request", "give a goal, messages or a plan", nil)
		return runs.Request{}, false
	case hasGoal && s.pl == nil:
		writeError(w, http.StatusNotImplemented, "no_planner", "this server has no model configured: send a plan instead of a goal", nil)
		return runs.Request{}, false
	}
	c := runs.Request{Options: &executor.RunOptions{Policy: policy, Creator: who(r)}}
	if req.Retention != "" {
		d, err := plan.ParseDuration(req.Retention)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("retention must be a positive duration such as \"30d\" or \"12h\", not %q", req.Retention), nil)
			return runs.Request{}, false
		}
		c.Options.Retention = d
	}
	ident, err := s.identity(r, req, policy)
	if err != nil {
		s.fail(w, err)
		return runs.Request{}, false
	}
	c.Identity = &ident
	if c.RunID = cmp.Or(req.RunID, r.Header.Get("Idempotency-Key")); c.RunID == "" {
		id, err := randomHex(8)
		if err != nil {
			s.fail(w, err)
			return runs.Request{}, false
		}
		c.RunID = "run_" + id
	}
	if !runIDPattern.MatchString(c.RunID) {
		writeError(w, http.StatusBadRequest, "bad_request", "a run id is 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit", nil)
		return runs.Request{}, false
	}
	if !hasPlan {
		runID, preq := c.RunID, planner.Request{Goal: req.Goal, Messages: req.Messages}
		c.Planner = func(ctx context.Context) (*plan.Plan, error) { return s.plan(ctx, runID, preq) }
	}
	return c, true
}

// identity is the identity of a create request under policy: its plan
// (decoded, checked against the tools, its provenance the server's), or its
// goal and messages.
func (s *Server) identity(r *http.Request, req createRequest, policy executor.Policy) (executor.Request, error) {
	ident := executor.Request{Policy: policy}
	if len(req.Plan) > 0 && string(req.Plan) != "null" {
		p, err := plan.Decode(req.Plan)
		if err != nil {
			return ident, err
		}
		if err := p.Validate(s.reg); err != nil {
			return ident, err
		}
		stampSubmitted(p, r)
		ident.Plan = p
	} else {
		conv, err := (planner.Request{Goal: req.Goal, Messages: req.Messages}).Conversation()
		if err != nil {
			return ident, err
		}
		ident.Goal, ident.Messages = req.Goal, conv
	}
	_, err := ident.Hash()
	return ident, err
}

// accept holds runID for this request while it is being accepted: a second
// request for it meanwhile answers 409 in_progress, on this node or (with a
// shared ledger) another. release (idempotent) lets it go. It answers the
// request itself when it is not ok.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, runID string) (release func(), ok bool) {
	s.mu.Lock()
	if s.accepting[runID] {
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(inProgressRetry))
		writeError(w, http.StatusConflict, "in_progress", fmt.Sprintf("run %s is still being accepted by an earlier request: retry in %ds", runID, inProgressRetry), map[string]int{"retry_after": inProgressRetry})
		return nil, false
	}
	s.accepting[runID] = true
	s.mu.Unlock()
	var releaseOnce sync.Once
	unreserve := func() {}
	release = func() {
		releaseOnce.Do(func() {
			unreserve()
			s.mu.Lock()
			delete(s.accepting, runID)
			s.mu.Unlock()
		})
	}
	// A shared ledger: another node may be accepting the same id.
	if s.reserver != nil {
		rel, held, err := s.reserver.Reserve(r.Context(), "run:"+runID)
		if err != nil {
			release()
			s.fail(w, err)
			return nil, false
		}
		if !held {
			release()
			w.Header().Set("Retry-After", strconv.Itoa(inProgressRetry))
			writeError(w, http.StatusConflict, "in_progress", fmt.Sprintf("run %s is still being accepted by an earlier request (on another node): retry in %ds", runID, inProgressRetry), map[string]int{"retry_after": inProgressRetry})
			return nil, false
		}
		unreserve = rel
	}
	return release, true
}

// createGiven records a run with the plan the request gave, starts its drive
// and answers 201 with the run; 200 or 422 when another writer of the ledger
// recorded the id meanwhile.
func (s *Server) createGiven(w http.ResponseWriter, r *http.Request, c runs.Request, release func()) {
	c.Identity.Plan.RunID = c.RunID
	res, err := runs.Create(r.Context(), s.eng, s.led, c)
	if err != nil && !errors.Is(err, executor.ErrPlanMismatch) {
		s.fail(w, err)
		return
	}
	if !res.Created {
		// Another writer of the ledger recorded the id meanwhile.
		if !s.answerExisting(w, r, c.RunID, *c.Identity) {
			s.fail(w, fmt.Errorf("run %s: %w", c.RunID, ledger.ErrNotFound))
		}
		return
	}
	release()
	s.watch(c.RunID, true)
	doc, err := s.startAndWait(r.Context(), c.RunID, s.resumeFn(c.RunID), nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, doc)
}

// createPlanned plans the run with the model, records and drives it in the
// background, and answers 201 once the drive has begun. The identity is held
// until the plan is recorded (or planning failed), even when the client
// goes away meanwhile; a recorded run is followed on the all-runs stream
// from its first event.
func (s *Server) createPlanned(w http.ResponseWriter, r *http.Request, c runs.Request, release func()) {
	settled := func() {
		release()
		if _, err := s.led.GetRun(s.ctx, c.RunID); err == nil {
			s.watch(c.RunID, true)
		}
	}
	doc, err := s.startAndWait(r.Context(), c.RunID, func(ctx context.Context) error {
		defer settled()
		if _, err := runs.Create(ctx, s.eng, s.led, c); err != nil {
			return err
		}
		settled()
		_, err := s.eng.Resume(ctx, c.RunID, nil)
		return err
	}, settled)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, doc)
}

// plan plans run runID from preq with the server's planner, traced and
// measured, and says on the all-runs stream how the planning goes.
func (s *Server) plan(ctx context.Context, runID string, preq planner.Request) (*plan.Plan, error) {
	t0 := time.Now()
	pctx, end := ctx, func(executor.Done) {}
	if tr := s.cfg.Executor.Tracer; tr != nil {
		pctx, end = tr.Start(ctx, executor.Work{Kind: executor.WorkPlan, AttemptInfo: executor.AttemptInfo{RunID: runID}})
	}
	res, err := s.pl.Plan(planner.WithProgress(pctx, s.planningProgress(runID)), preq)
	end(executor.Done{Err: err})
	s.planningDone(runID, err)
	s.metrics.observePlanning(time.Since(t0), res, err)
	if err != nil {
		return nil, err
	}
	return res.Plan, nil
}

// inProgressRetry is the Retry-After (seconds) of a 409 in_progress: the
// earlier request records a given plan within milliseconds and a planned one
// once the model has answered, so a second is a fair first wait either way.
const inProgressRetry = 1

// answerExisting answers a create request for runID when the run exists: 200
// with the run when ident is the request that created it, 422 when another
// request did (executor.SameRequest). false: there is no such run, nothing
// was written.
func (s *Server) answerExisting(w http.ResponseWriter, r *http.Request, runID string, ident executor.Request) bool {
	_, err := executor.SameRequest(r.Context(), s.led, runID, ident)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return false
	case errors.Is(err, executor.ErrRequestMismatch):
		writeError(w, http.StatusUnprocessableEntity, "identity_reused", err.Error(), nil)
	case err != nil:
		s.fail(w, err)
	default:
		doc, err := s.led.Doc(r.Context(), runID)
		if err != nil {
			s.fail(w, err)
			return true
		}
		writeJSON(w, http.StatusOK, doc)
	}
	return true
}

// startAndWait starts fn as a background drive of runID and waits until the
// drive has begun (untilBegun). It returns the run as recorded, or fn's
// error when nothing was recorded.
func (s *Server) startAndWait(ctx context.Context, runID string, fn func(ctx context.Context) error, notStarted func()) (ledger.RunDoc, error) {
	ferr, err := s.untilBegun(ctx, runID, fn, notStarted)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	doc, err := s.led.Doc(ctx, runID)
	if errors.Is(err, ledger.ErrNotFound) && ferr != nil {
		return ledger.RunDoc{}, ferr
	}
	return doc, err
}

// untilBegun runs fn (a drive of runID, with the server's engine) in the
// background and returns once the drive has begun its work, as the engine
// reports it through the server's Observer (an attempt started, a recorded
// output adopted, a lookup answered, an action parked for a person), or fn
// has returned (ferr is then its error), or ctx ended. notStarted (may be
// nil) is called when fn could not be started (the server is shutting down).
func (s *Server) untilBegun(ctx context.Context, runID string, fn func(ctx context.Context) error, notStarted func()) (ferr, err error) {
	begun, stop := s.signals.begun(runID)
	defer stop()
	done := make(chan error, 1)
	caller := ctx
	if err := s.spawn(runID, func(ctx context.Context) error {
		err := fn(withCaller(ctx, caller))
		done <- err
		return err
	}); err != nil {
		if notStarted != nil {
			notStarted()
		}
		return nil, err
	}
	select {
	case <-begun:
		return nil, nil
	case ferr = <-done:
		return ferr, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runList is the answer of GET /v1/runs.
type runList struct {
	Runs []ledger.Run `json:"runs"`
	Next string       `json:"next"`
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := ledger.ListOptions{Status: ledger.RunStatus(q.Get("status")), After: q.Get("after")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "bad_request", "limit must be between 1 and 1000", nil)
			return
		}
		o.Limit = n
	}
	page, next, err := s.led.ListRuns(r.Context(), o)
	if err != nil {
		if errors.Is(err, ledger.ErrInvalid) {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
			return
		}
		s.fail(w, err)
		return
	}
	if page == nil {
		page = []ledger.Run{}
	}
	writeJSON(w, http.StatusOK, runList{Runs: page, Next: next})
}

// getRun answers the Run JSON. With ?wait=DURATION (at most 10m) it first
// waits until no drive of the run is going on in this server, so a client
// that just approved or created a run reads where it stopped.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > 10*time.Minute {
			writeError(w, http.StatusBadRequest, "bad_request", "wait must be a duration between 0s and 10m, e.g. wait=60s", nil)
			return
		}
		if _, err := s.led.GetRun(r.Context(), runID); err != nil {
			s.fail(w, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), d)
		err = s.waitIdle(ctx, runID)
		cancel()
		if err != nil && r.Context().Err() != nil {
			return // the client went away
		}
		if err != nil {
			w.Header().Set("Docket-Settled", "false")
		} else {
			w.Header().Set("Docket-Settled", "true")
		}
	}
	doc, err := s.led.Doc(r.Context(), runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

// getPlan answers the run's current plan (or ?revision=N).
func (s *Server) getPlan(w http.ResponseWriter, r *http.Request) {
	rev := 0
	if v := r.URL.Query().Get("revision"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "bad_request", "revision must be a positive integer", nil)
			return
		}
		rev = n
	}
	p, err := s.led.Plan(r.Context(), r.PathValue("id"), rev)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// eventList is the answer of GET /v1/runs/{id}/events.
type eventList struct {
	Events []ledger.Event `json:"events"`
	Last   uint64         `json:"last"` // seq of the last event returned (the next page's after)
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	after, ok := parseAfter(w, r)
	if !ok {
		return
	}
	limit := 1000
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, http.StatusBadRequest, "bad_request", "limit must be between 1 and 10000", nil)
			return
		}
		limit = n
	}
	if _, err := s.led.GetRun(r.Context(), runID); err != nil {
		s.fail(w, err)
		return
	}
	if !s.afterKnown(w, r, runID, after) {
		return
	}
	evs, err := s.led.Events(r.Context(), runID, after, limit)
	if err != nil {
		s.fail(w, err)
		return
	}
	if evs == nil {
		evs = []ledger.Event{}
	}
	last := after
	if len(evs) > 0 {
		last = evs[len(evs)-1].Seq
	}
	writeEvents(w, eventList{Events: evs, Last: last})
}

func parseAfter(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	v := r.URL.Query().Get("after")
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "after must be an event sequence number (a non-negative integer)", nil)
		return 0, false
	}
	return n, true
}

// afterKnown answers 400 (code after_past_end, details.last: the run's last
// seq) and false when after names an event the run does not have: a cursor
// past the end would otherwise wait silently for sequence numbers that the
// ledger gives to events the client then never sees. Event seqs are
// recorded before anyone is told of them, so a seq a client received always
// exists.
func (s *Server) afterKnown(w http.ResponseWriter, r *http.Request, runID string, after uint64) bool {
	if after == 0 {
		return true
	}
	evs, err := s.led.Events(r.Context(), runID, after-1, 1)
	if err != nil {
		s.fail(w, err)
		return false
	}
	if len(evs) == 1 && evs[0].Seq == after {
		return true
	}
	last, err := s.lastEventSeq(r.Context(), runID)
	if err != nil {
		s.fail(w, err)
		return false
	}
	writeError(w, http.StatusBadRequest, "after_past_end", fmt.Sprintf("after=%d is past the end of run %s's events (the last is %d): resume after a sequence number you received", after, runID, last), map[string]uint64{"after": after, "last": last})
	return false
}

// --- replay and fork (review and control ops are in review.go) ---

func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	var body struct {
		Plan json.RawMessage `json:"plan"`
		// DryRun previews the replay (executor.PreviewReplay): which
		// actions keep their outputs, which would run and whom they would
		// need; nothing is recorded.
		DryRun bool `json:"dry_run,omitempty"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	if len(body.Plan) == 0 {
		writeError(w, http.StatusBadRequest, "bad_request", "replay needs the edited plan", nil)
		return
	}
	if body.DryRun {
		p, err := plan.Decode(body.Plan)
		if err != nil {
			s.fail(w, err)
			return
		}
		steps, err := s.eng.PreviewReplay(r.Context(), runID, p)
		if err != nil {
			s.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, replayPreview{RunID: runID, DryRun: true, Actions: steps})
		return
	}
	p, err := plan.Decode(body.Plan)
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := p.Validate(s.reg); err != nil {
		s.fail(w, err)
		return
	}
	run, err := s.led.GetRun(r.Context(), runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	if executor.Policy(run.Policy) == executor.PolicyAll && !s.needs(w, r, ScopeReview, `replay a run with the policy "all" (that approves the new revision's actions)`) {
		return
	}
	s.watch(runID, false)
	// The revision is recorded before the answer, and only then driven: a
	// replay refused (a drive that does not stop, an undone action, ...) is
	// never acknowledged, whatever another drive of the run reports meanwhile.
	if _, err := s.eng.RecordReplay(r.Context(), runID, p, nil); err != nil {
		s.fail(w, err)
		return
	}
	doc, err := s.startAndWaitRevision(r.Context(), runID, run.Revision, func(ctx context.Context) error {
		_, err := s.eng.Resume(ctx, runID, nil)
		return err
	})
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

// startAndWaitRevision is startAndWait for a run that exists: nothing new was
// recorded when fn failed and the revision did not change.
func (s *Server) startAndWaitRevision(ctx context.Context, runID string, rev int, fn func(ctx context.Context) error) (ledger.RunDoc, error) {
	ferr, err := s.untilBegun(ctx, runID, fn, nil)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	doc, err := s.led.Doc(ctx, runID)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	if ferr != nil && doc.Run.Revision == rev {
		return ledger.RunDoc{}, ferr
	}
	return doc, nil
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	var body struct {
		RunID   string `json:"run_id"`
		Approve string `json:"approve"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	orig, err := s.led.GetRun(r.Context(), runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	policy := executor.Policy(body.Approve)
	switch policy {
	case "":
		policy = executor.Policy(orig.Policy)
	case executor.PolicySafe, executor.PolicyAll, executor.PolicyNone:
	default:
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("approve must be all, safe or none, not %q", body.Approve), nil)
		return
	}
	if policy == executor.PolicyAll && !s.needs(w, r, ScopeReview, `fork a run with the policy "all" (that approves the fork's whole plan)`) {
		return
	}
	newID := body.RunID
	if newID == "" {
		id, err := randomHex(8)
		if err != nil {
			s.fail(w, err)
			return
		}
		newID = "run_" + id
	}
	if !runIDPattern.MatchString(newID) || newID == runID {
		writeError(w, http.StatusBadRequest, "bad_request", "the fork's run_id must be a valid run id that differs from the original", nil)
		return
	}
	if _, err := s.led.GetRun(r.Context(), newID); err == nil {
		writeError(w, http.StatusConflict, "exists", "run "+newID+" exists already", nil)
		return
	}
	doc, err := s.startAndWait(r.Context(), newID, func(ctx context.Context) error {
		_, err := s.eng.Fork(ctx, runID, newID, &executor.RunOptions{Policy: policy})
		return err
	}, nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.watch(newID, true)
	writeJSON(w, http.StatusCreated, doc)
}

// replayPreview is the answer of POST /v1/runs/{id}/replay with dry_run.
type replayPreview struct {
	RunID   string                 `json:"run_id"`
	DryRun  bool                   `json:"dry_run"`
	Actions []executor.PreviewStep `json:"actions"`
}
