package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/executor/schedule"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
)

// Schedules: the /v1/schedules API and the scheduler loop (RunScheduler).
// A schedule is a ledger record (ledger.ScheduleKeeper); each slot it
// fires is a run created through executor/runs with the id
// schedule.RunID(schedule, slot), the same on every node and after every
// restart, so the ledger's run ids make a slot fire once however many
// nodes run the loop.

// DefaultSchedulerPoll is how often RunScheduler reads the schedules again
// when no slot is due sooner (new schedules, resumed ones, previous runs
// that ended, changes by other nodes).
const DefaultSchedulerPoll = time.Second

// schedulerBacklog caps the slots one look at a schedule lists (a long
// downtime of a schedule firing every second): the rest are listed by the
// next look.
const schedulerBacklog = 100_000

// scheduleCreator is the created_by of a schedule's runs.
func scheduleCreator(id string) string { return "schedule:" + id }

// RunScheduler fires the ledger's schedules until ctx ends: it wakes at
// the next slot of any schedule (and every poll, DefaultSchedulerPoll when
// zero), and for each schedule due decides what to fire and skip
// (schedule.Decide) and fires it: a run created as POST /v1/runs creates
// one, with created_by "schedule:ID", driven by this server. Slots due
// more than schedule.Grace before it started were missed while no
// scheduler ran, and are treated by the schedule's catch-up policy. It
// returns nil when ctx ends, an error at once when the ledger keeps no
// schedules. Every node of a shared ledger may run it.
func (s *Server) RunScheduler(ctx context.Context, poll time.Duration) error {
	sk, ok := s.cfg.Ledger.(ledger.ScheduleKeeper)
	if !ok {
		return fmt.Errorf("ui: the ledger (%T) keeps no schedules", s.cfg.Ledger)
	}
	if poll <= 0 {
		poll = DefaultSchedulerPoll
	}
	sc := &scheduler{s: s, sk: sk, started: s.cfg.Now(), busy: map[string]bool{}, log: s.log.With("component", "ui/scheduler")}
	defer sc.wg.Wait()
	for {
		next := sc.tick(ctx)
		wait := poll
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(s.cfg.Now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// scheduler is one RunScheduler's state.
type scheduler struct {
	s       *Server
	sk      ledger.ScheduleKeeper
	started time.Time
	log     *slog.Logger
	wg      sync.WaitGroup
	mu      sync.Mutex
	busy    map[string]bool // schedules whose slot is being fired in the background (planning a goal)
}

// tick looks at every schedule once and returns the earliest next slot of
// the active ones (zero: none).
func (sc *scheduler) tick(ctx context.Context) time.Time {
	all, err := sc.sk.Schedules(ctx)
	if err != nil {
		if ctx.Err() == nil {
			sc.log.Warn("reading the schedules failed; trying again", "err", err)
		}
		return time.Time{}
	}
	var earliest time.Time
	for _, rec := range all {
		if ctx.Err() != nil {
			return time.Time{}
		}
		if rec.Paused {
			continue
		}
		spec, err := schedule.Parse(rec.Spec)
		if err != nil {
			continue // refused when it was created; a record written otherwise
		}
		loc, err := schedule.LoadLocation(rec.TZ)
		if err != nil {
			continue
		}
		sc.mu.Lock()
		busy := sc.busy[rec.ID]
		sc.mu.Unlock()
		if !busy {
			// A few steps: one fires a slot, the next may find the run it
			// created and move on.
			for range 3 {
				if rec, err = sc.step(ctx, rec, spec, loc); err != nil || rec.ID == "" {
					break
				}
			}
		}
		if n := spec.Next(sc.s.cfg.Now(), loc); !n.IsZero() && (earliest.IsZero() || n.Before(earliest)) {
			earliest = n
		}
	}
	return earliest
}

// step decides for one schedule and does what it decided. It returns the
// record as it wrote it when there may be more to do now, else the zero
// Schedule.
func (sc *scheduler) step(ctx context.Context, rec ledger.Schedule, spec *schedule.Spec, loc *time.Location) (ledger.Schedule, error) {
	now := sc.s.cfg.Now()
	due, _ := spec.Between(rec.Handled, now, loc, schedulerBacklog)
	if len(due) == 0 {
		return ledger.Schedule{}, nil
	}
	// The first due slot's run may exist: a node fired it and stopped (or
	// lost a race to record it) before the mark moved. It counts as fired.
	first := schedule.RunID(rec.ID, due[0])
	if _, err := sc.s.led.GetRun(ctx, first); err == nil {
		next := rec
		next.Handled, next.LastFired, next.LastRunID, next.LastError = due[0], due[0], first, ""
		return sc.swap(ctx, next)
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return ledger.Schedule{}, err
	}
	prevActive, err := sc.active(ctx, rec.LastRunID)
	if err != nil {
		return ledger.Schedule{}, err
	}
	d := schedule.Decide(schedule.Facts{Due: due, Started: sc.started, Grace: spec.Grace(), PrevActive: prevActive,
		Overlap: schedule.Overlap(rec.Overlap), CatchUp: schedule.CatchUp(rec.CatchUp)})
	next := rec
	if len(d.Skipped) > 0 {
		next.Skipped += int64(len(d.Skipped))
		next.LastSkipped = d.Skipped[len(d.Skipped)-1]
		sc.log.Info("schedule skipped slots", "schedule", rec.ID, "slots", len(d.Skipped), "last", next.LastSkipped,
			"overlap", rec.Overlap, "catch_up", rec.CatchUp)
	}
	if d.CancelPrevious {
		if err := sc.s.eng.Cancel(ctx, rec.LastRunID, scheduleCreator(rec.ID)); err != nil {
			sc.log.Warn("cancelling the previous run of a schedule failed", "schedule", rec.ID, "run_id", rec.LastRunID, "err", err)
		}
	}
	if d.Fire.IsZero() {
		if d.Handled.IsZero() {
			return ledger.Schedule{}, nil
		}
		next.Handled = d.Handled
		_, err := sc.swap(ctx, next)
		return ledger.Schedule{}, err
	}
	// Skipped slots (all before the one to fire) are recorded first:
	// firing may take a while (planning a goal).
	if len(d.Skipped) > 0 {
		next.Handled = d.Skipped[len(d.Skipped)-1]
		if next, err = sc.swap(ctx, next); err != nil || next.ID == "" {
			return ledger.Schedule{}, err
		}
	}
	runID := schedule.RunID(rec.ID, d.Fire)
	if rec.Goal != "" {
		// Planning takes the model's time: fire in the background, and
		// leave the schedule alone until it is done.
		sc.mu.Lock()
		sc.busy[rec.ID] = true
		sc.mu.Unlock()
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			defer func() {
				sc.mu.Lock()
				delete(sc.busy, rec.ID)
				sc.mu.Unlock()
			}()
			sc.fired(ctx, next, d.Fire, runID, sc.s.fireSlot(ctx, next, runID))
		}()
		return ledger.Schedule{}, nil
	}
	return sc.fired(ctx, next, d.Fire, runID, sc.s.fireSlot(ctx, next, runID))
}

// fired records what firing slot did: the mark moves past it when its run
// was created (or exists), and when it cannot be fired at all (its plan
// is no longer valid, planning failed): then it is skipped with the error
// kept. A failure that may pass (the ledger unavailable, another node
// firing the same slot) leaves the mark: the slot is tried again.
func (sc *scheduler) fired(ctx context.Context, rec ledger.Schedule, slot time.Time, runID string, err error) (ledger.Schedule, error) {
	switch {
	case err == nil:
		rec.Handled, rec.LastFired, rec.LastRunID, rec.LastError = slot, slot, runID, ""
	case errors.Is(err, errFiringElsewhere), ctx.Err() != nil, errors.Is(err, errShuttingDown), errors.Is(err, ledger.ErrUnavailable),
		errors.Is(err, ledger.ErrNoSpace), errors.Is(err, ledger.ErrLeaseExpired), errors.Is(err, ledger.ErrClosed):
		if ctx.Err() == nil && !errors.Is(err, errFiringElsewhere) {
			sc.log.Warn("firing a schedule's slot failed; trying again", "schedule", rec.ID, "slot", slot, "err", err)
		}
		return ledger.Schedule{}, err
	default:
		sc.log.Warn("a schedule's slot could not fire and is skipped", "schedule", rec.ID, "slot", slot, "err", err)
		rec.Handled, rec.LastSkipped, rec.LastError = slot, slot, err.Error()
		rec.Skipped++
	}
	return sc.swap(ctx, rec)
}

// swap writes rec; when another writer (a node, a person pausing it)
// changed it first, nothing is written and the zero Schedule is returned:
// the next look decides again from what is stored.
func (sc *scheduler) swap(ctx context.Context, rec ledger.Schedule) (ledger.Schedule, error) {
	out, err := sc.sk.SwapSchedule(ctx, rec)
	if errors.Is(err, ledger.ErrConflict) || errors.Is(err, ledger.ErrNotFound) {
		return ledger.Schedule{}, nil
	}
	if err != nil && ctx.Err() == nil {
		sc.log.Warn("recording a schedule's progress failed; trying again", "schedule", rec.ID, "err", err)
	}
	return out, err
}

// active says whether run runID has not ended ("" and a run that is gone:
// no).
func (sc *scheduler) active(ctx context.Context, runID string) (bool, error) {
	if runID == "" {
		return false, nil
	}
	r, err := sc.s.led.GetRun(ctx, runID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	switch r.Status {
	case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled:
		return false, nil
	}
	return true, nil
}

// errFiringElsewhere: another request or node holds the slot's run id
// (it is firing the same slot).
var errFiringElsewhere = errors.New("ui: the slot's run is being created elsewhere")

// fireSlot creates the run of a schedule's slot, as POST /v1/runs creates
// one (the same identity: its plan or its goal, and its policy), and
// drives it. A run that exists already (fired before a restart, or by
// another node) is driven too, never created twice.
func (s *Server) fireSlot(ctx context.Context, rec ledger.Schedule, runID string) error {
	policy := executor.Policy(rec.Approve)
	ident := executor.Request{Policy: policy}
	req := runs.Request{RunID: runID, Options: &executor.RunOptions{Policy: policy, Creator: scheduleCreator(rec.ID)}}
	if rec.Goal != "" {
		if s.pl == nil {
			return errors.New("this server has no model configured to plan the schedule's goal")
		}
		preq := planner.Request{Goal: rec.Goal}
		conv, err := preq.Conversation()
		if err != nil {
			return err
		}
		ident.Goal, ident.Messages = rec.Goal, conv
		req.Planner = func(ctx context.Context) (*plan.Plan, error) { return s.plan(ctx, runID, preq) }
	} else {
		p, err := plan.Decode(rec.Plan)
		if err != nil {
			return err
		}
		if err := p.Validate(s.reg); err != nil {
			return err
		}
		p.RunID = runID
		ident.Plan = p
	}
	req.Identity = &ident
	// The same run id on another node of a shared ledger: one creates it.
	if s.reserver != nil {
		release, held, err := s.reserver.Reserve(ctx, "run:"+runID)
		if err != nil {
			return err
		}
		if !held {
			return errFiringElsewhere
		}
		defer release()
	}
	s.mu.Lock()
	if s.accepting[runID] {
		s.mu.Unlock()
		return errFiringElsewhere
	}
	s.accepting[runID] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.accepting, runID)
		s.mu.Unlock()
	}()
	if _, err := runs.Create(ctx, s.eng, s.led, req); err != nil {
		return err
	}
	s.Drive(runID)
	return nil
}

// scheduleRequest is the body of POST /v1/schedules.
type scheduleRequest struct {
	ID      string          `json:"id,omitempty"`
	Spec    string          `json:"spec"`
	TZ      string          `json:"tz,omitempty"`
	Overlap string          `json:"overlap,omitempty"`
	CatchUp string          `json:"catch_up,omitempty"`
	Plan    json.RawMessage `json:"plan,omitempty"`
	Goal    string          `json:"goal,omitempty"`
	Approve string          `json:"approve,omitempty"`
	Paused  bool            `json:"paused,omitempty"`
}

// ScheduleView is a schedule as the API answers it (GET
// /v1/schedules/{id}): the record and its next slots (none while paused).
type ScheduleView struct {
	ledger.Schedule
	Next []time.Time `json:"next"`
}

// ScheduleList is the answer of GET /v1/schedules.
type ScheduleList struct {
	Schedules []ScheduleView `json:"schedules"`
}

// ViewSchedule is rec with its next three slots after now (and after its
// mark).
func ViewSchedule(rec ledger.Schedule, now time.Time) ScheduleView {
	v := ScheduleView{Schedule: rec, Next: []time.Time{}}
	spec, err := schedule.Parse(rec.Spec)
	loc, lerr := schedule.LoadLocation(rec.TZ)
	if err != nil || lerr != nil || rec.Paused {
		return v
	}
	at := now
	if rec.Handled.After(at) {
		at = rec.Handled
	}
	for range 3 {
		if at = spec.Next(at, loc); at.IsZero() {
			break
		}
		v.Next = append(v.Next, at)
	}
	return v
}

// keeper is the ledger's ScheduleKeeper; it answers 501 itself when there
// is none.
func (s *Server) keeper(w http.ResponseWriter) (ledger.ScheduleKeeper, bool) {
	sk, ok := s.cfg.Ledger.(ledger.ScheduleKeeper)
	if !ok {
		writeError(w, http.StatusNotImplemented, "no_schedules", "this server's ledger keeps no schedules", nil)
	}
	return sk, ok
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) {
	sk, ok := s.keeper(w)
	if !ok {
		return
	}
	body, ok := s.readSubmitted(w, r) // a plan as large as POST /v1/runs takes
	if !ok {
		return
	}
	var req scheduleRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	rec, status, err := s.newSchedule(r, req)
	if err != nil {
		writeError(w, status, "invalid", err.Error(), nil)
		return
	}
	if executor.Policy(rec.Approve) == executor.PolicyAll && !s.needs(w, r, ScopeReview, `create a schedule with "approve": "all" (that approves the whole plan of every run it fires)`) {
		return
	}
	out, err := sk.CreateSchedule(r.Context(), rec)
	switch {
	case errors.Is(err, ledger.ErrConflict):
		writeError(w, http.StatusConflict, "conflict", err.Error(), nil)
		return
	case err != nil:
		s.fail(w, err)
		return
	}
	status = http.StatusCreated
	if out.Version != 1 || !out.CreatedAt.Equal(rec.CreatedAt) {
		status = http.StatusOK // the same schedule, created before
	}
	writeJSON(w, status, ViewSchedule(out, s.cfg.Now()))
}

// newSchedule checks a create request and builds its record; the status
// is the refusal's.
func (s *Server) newSchedule(r *http.Request, req scheduleRequest) (ledger.Schedule, int, error) {
	if req.ID == "" {
		id, err := randomHex(8)
		if err != nil {
			return ledger.Schedule{}, http.StatusInternalServerError, err
		}
		req.ID = "sch_" + id
	}
	overlap, catchUp, err := schedule.Check(req.Spec, req.TZ, req.Overlap, req.CatchUp)
	if err != nil {
		return ledger.Schedule{}, http.StatusUnprocessableEntity, err
	}
	switch executor.Policy(req.Approve) {
	case "", executor.PolicySafe, executor.PolicyAll, executor.PolicyNone:
	default:
		return ledger.Schedule{}, http.StatusBadRequest, fmt.Errorf("approve must be all, safe or none, not %q", req.Approve)
	}
	hasPlan := len(req.Plan) > 0 && string(req.Plan) != "null"
	switch {
	case hasPlan == (strings.TrimSpace(req.Goal) != ""):
		return ledger.Schedule{}, http.StatusBadRequest, errors.New("give either a plan or a goal")
	case !hasPlan && s.pl == nil:
		return ledger.Schedule{}, http.StatusNotImplemented, errors.New("this server has no model configured: give a plan instead of a goal")
	case hasPlan:
		p, err := plan.Decode(req.Plan)
		if err == nil {
			err = p.Validate(s.reg)
		}
		if err != nil {
			return ledger.Schedule{}, http.StatusUnprocessableEntity, fmt.Errorf("the schedule's plan: %w", err)
		}
	}
	now := s.cfg.Now().UTC()
	rec := ledger.Schedule{ID: req.ID, Spec: strings.TrimSpace(req.Spec), TZ: req.TZ, Overlap: string(overlap), CatchUp: string(catchUp),
		Goal: req.Goal, Approve: req.Approve, CreatedBy: who(r), CreatedAt: now, Handled: now, Paused: req.Paused}
	if hasPlan {
		rec.Plan = req.Plan
	}
	if err := ledger.CheckSchedule(rec); err != nil {
		return ledger.Schedule{}, http.StatusUnprocessableEntity, err
	}
	return rec, 0, nil
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	sk, ok := s.keeper(w)
	if !ok {
		return
	}
	all, err := sk.Schedules(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	out := ScheduleList{Schedules: []ScheduleView{}}
	now := s.cfg.Now()
	for _, rec := range all {
		out.Schedules = append(out.Schedules, ViewSchedule(rec, now))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) {
	sk, ok := s.keeper(w)
	if !ok {
		return
	}
	rec, err := sk.Schedule(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ViewSchedule(rec, s.cfg.Now()))
}

func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.setSchedulePaused(w, r, true)
}
func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	s.setSchedulePaused(w, r, false)
}

// setSchedulePaused pauses or resumes a schedule. Resuming moves its mark
// to now: the slots that came due while it was paused do not fire.
func (s *Server) setSchedulePaused(w http.ResponseWriter, r *http.Request, paused bool) {
	sk, ok := s.keeper(w)
	if !ok {
		return
	}
	rec, err := SetSchedulePaused(r.Context(), sk, r.PathValue("id"), paused, s.cfg.Now())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ViewSchedule(rec, s.cfg.Now()))
}

// SetSchedulePaused pauses or resumes schedule id (already so: nothing is
// written). Resuming moves its mark to now, so the slots that came due
// while it was paused do not fire. A concurrent change (the scheduler
// recording a slot) is read again and the change applied to it. Errors:
// ledger.ErrNotFound, the ledger's.
func SetSchedulePaused(ctx context.Context, sk ledger.ScheduleKeeper, id string, paused bool, now time.Time) (ledger.Schedule, error) {
	for {
		rec, err := sk.Schedule(ctx, id)
		if err != nil || rec.Paused == paused {
			return rec, err
		}
		rec.Paused = paused
		if !paused && rec.Handled.Before(now) {
			rec.Handled = now.UTC()
		}
		out, err := sk.SwapSchedule(ctx, rec)
		if errors.Is(err, ledger.ErrConflict) {
			continue
		}
		return out, err
	}
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	sk, ok := s.keeper(w)
	if !ok {
		return
	}
	if err := sk.DeleteSchedule(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
