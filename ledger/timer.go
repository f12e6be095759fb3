package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/docketrun/docket/plan"
)

// Durable timers: an action may wait for a time (plan.Action's not_before
// and after). The ledger decides when it is due, from recorded facts only:
// the row's Timer, its dependencies' key records (when they succeeded) and
// the run's creation. A first claim before that time is refused with a
// *NotDueError and writes nothing, whoever asks and whatever its clock says:
// the store's Now is the judge. A run whose drive ended with only waiting
// actions left records its wake time (Wait): the run stays running, and a
// store that implements WakeIndex finds it again by that time.

// ErrNotDue: a claim came before its action is due (see *NotDueError).
var ErrNotDue = errors.New("ledger: action is not due yet")

// NotDueError refuses the first claim of an action that waits for a time.
// DueAt is when the action becomes due; zero when it cannot be known yet
// (a dependency has not succeeded).
type NotDueError struct {
	RunID, ActionID string
	DueAt           time.Time
	Msg             string
}

func (e *NotDueError) Error() string {
	return fmt.Sprintf("ledger: claim of run %q action %q refused: %s", e.RunID, e.ActionID, e.Msg)
}

// Is makes errors.Is(err, ErrNotDue) true.
func (e *NotDueError) Is(target error) bool { return target == ErrNotDue }

// Timer is when an action may start, as recorded on its row.
type Timer struct {
	// NotBefore: the action does not start before it (zero: no bound).
	NotBefore time.Time `json:"not_before,omitzero"`
	// After is a duration as plan.FormatDuration writes it, counted from
	// the moment the action's dependencies all succeeded (the latest of
	// their key records' success), or from the run's creation when it has
	// none ("": no delay).
	After string `json:"after,omitempty"`
	// DueAt is when the action is due, as the last drive that found it
	// waiting recorded it (Wait); zero until then.
	DueAt time.Time `json:"due_at,omitzero"`
	// RunNowBy names the person who made the action due at once (RunNow),
	// at RunNowAt.
	RunNowBy string    `json:"run_now_by,omitempty"`
	RunNowAt time.Time `json:"run_now_at,omitzero"`
}

// TimerOf is the Timer of plan action a, nil when it has none (or an
// invalid one: plan.Check refuses those).
func TimerOf(a plan.Action) *Timer {
	if !a.HasTimer() {
		return nil
	}
	nb, after, err := a.Timer()
	if err != nil {
		return nil
	}
	t := &Timer{NotBefore: nb}
	if a.After != "" {
		t.After = plan.FormatDuration(after)
	}
	return t
}

// Event types of timers.
const (
	// EventRunWaiting: a drive ended with actions waiting for their time:
	// {"until", "actions"}. The run stays running.
	EventRunWaiting EventType = "run.waiting"
	// EventRunWoken: the run's wake time came (or a person ran a waiting
	// action now) and a drive takes it up: {"waiting_until"}.
	EventRunWoken EventType = "run.woken"
	// EventActionRunNow: a person made a waiting action due at once:
	// {"by"}.
	EventActionRunNow EventType = "action.run_now"
)

// Wake is a run's wake time.
type Wake struct {
	RunID string
	At    time.Time
}

// WakeIndex is a Store that finds runs by their wake time without reading
// every run.
type WakeIndex interface {
	// Wakes lists the runs whose wake time is at or before before, earliest
	// first, at most limit (1000 when limit <= 0). Errors: the backend's.
	Wakes(ctx context.Context, before time.Time, limit int) ([]Wake, error)
}

// NextWake returns the earliest wake time of s's runs (ok false: none, or
// s has no WakeIndex).
func NextWake(ctx context.Context, s Store) (Wake, bool, error) {
	wi, ok := s.(WakeIndex)
	if !ok {
		return Wake{}, false, nil
	}
	ws, err := wi.Wakes(ctx, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), 1)
	if err != nil || len(ws) == 0 {
		return Wake{}, false, err
	}
	return ws[0], true, nil
}

// dueAt is when row may first be claimed, judged from recorded facts:
// known false when a dependency has not succeeded (then why says which).
// A row without a timer, or one a person ran now, is due at once (zero).
func (b *batch) dueAt(runID string, run storedRun, row storedRow) (due time.Time, known bool, why string, err error) {
	t := row.Timer
	if t == nil || t.RunNowBy != "" {
		return time.Time{}, true, "", nil
	}
	due = t.NotBefore
	if t.After == "" {
		return due, true, "", nil
	}
	after, perr := plan.ParseDuration(t.After)
	if perr != nil {
		return time.Time{}, false, "", fmt.Errorf("%w: action %q: after: %v", ErrFormat, row.ID, perr)
	}
	base := run.CreatedAt
	if len(row.DependsOn) > 0 {
		base = time.Time{}
		for _, dep := range row.DependsOn {
			dr, ok, err := b.row(runID, run.Revision, dep)
			if err != nil {
				return time.Time{}, false, "", err
			}
			if !ok || dr.Key == "" {
				return time.Time{}, false, fmt.Sprintf("dependency %s has not succeeded", dep), nil
			}
			rec, ok, err := b.keyRec(runID, dr.Key)
			if err != nil {
				return time.Time{}, false, "", err
			}
			if !ok || rec.State != StatusSucceeded {
				return time.Time{}, false, fmt.Sprintf("dependency %s has not succeeded", dep), nil
			}
			if rec.UpdatedAt.After(base) {
				base = rec.UpdatedAt
			}
		}
	}
	if at := base.Add(after); at.After(due) {
		due = at
	}
	return due.UTC(), true, "", nil
}

// notDue refuses the first claim of a row that is not due at the store's
// now: nil, or the *NotDueError.
func (b *batch) notDue(o *claimOp, run storedRun, row storedRow) (error, error) {
	if row.Timer == nil {
		return nil, nil
	}
	due, known, why, err := b.dueAt(o.runID, run, row)
	if err != nil {
		return nil, err
	}
	if !known {
		return &NotDueError{RunID: o.runID, ActionID: o.actionID, Msg: "not due: " + why}, nil
	}
	if now := b.now(); now.Before(due) {
		return &NotDueError{RunID: o.runID, ActionID: o.actionID, DueAt: due,
			Msg: fmt.Sprintf("not due until %s (now %s)", due.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))}, nil
	}
	return nil, nil
}

// waitOp is Wait.
type waitOp struct {
	runID string
	until time.Time
	due   map[string]time.Time
}

// Wait records run runID's wake time: until, the earliest time one of its
// waiting actions is due, with each waiting action's due time (due, by
// action id) on its row, and appends run.waiting. A zero until clears the
// wake time: the run was taken up again (run.woken, when it had one). An
// identical rewrite writes nothing. A run that has ended (completed,
// failed, cancelled) keeps no wake time: Wait on it writes nothing. Errors:
// ErrNotFound (no such run), ErrInvalid.
func Wait(runID string, until time.Time, due map[string]time.Time) Op {
	return Op{body: &waitOp{runID: runID, until: until.UTC(), due: maps.Clone(due)}}
}

func (o *waitOp) kind() opKind               { return opWait }
func (o *waitOp) scope() (string, *bigValue) { return o.runID, nil }

func (o *waitOp) eval(bv batch) (Result, error) {
	b := &bv
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	if ended(run.Status) {
		return Result{}, nil
	}
	ids := slices.Sorted(maps.Keys(o.due))
	changed := false
	for _, id := range ids {
		row, ok, err := b.row(o.runID, run.Revision, id)
		if err != nil {
			return Result{}, err
		}
		if !ok || row.Timer == nil || row.Timer.DueAt.Equal(o.due[id]) {
			continue
		}
		t := *row.Timer
		t.DueAt = o.due[id].UTC()
		row.Timer = &t
		if err := b.putRow(o.runID, run.Revision, row); err != nil {
			return Result{}, err
		}
		changed = true
	}
	if run.WakeAt.Equal(o.until) && !changed {
		return Result{}, nil
	}
	prev := run.WakeAt
	run.WakeAt = o.until
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	switch {
	case !o.until.IsZero():
		return Result{}, b.event(o.runID, EventRunWaiting, "", obj("until", o.until, "actions", ids))
	case !prev.IsZero():
		return Result{}, b.event(o.runID, EventRunWoken, "", obj("waiting_until", prev))
	}
	return Result{}, nil
}

// noWake is the wake time of a run that waits for nothing.
var noWake time.Time

// ended reports whether a run in status s is over.
func ended(s RunStatus) bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// runNowOp is RunNow.
type runNowOp struct {
	at
	by string
}

// RunNow makes a waiting action due at once: a person (by) decided not to
// wait for its time. The row must have a timer and not have started
// (pending or approved, no key): otherwise a *ConflictError. It records who
// and when on the row's Timer, appends action.run_now {"by"} and sets the
// run's wake time to now, so that whatever wakes runs takes it up. Running
// an action now twice is success, with no second event. Errors:
// ErrNotFound, ErrInvalid (empty by, no timer), *ConflictError.
func RunNow(runID, actionID, by string) Op {
	return Op{body: &runNowOp{at: at{runID, actionID}, by: by}}
}

func (o *runNowOp) kind() opKind { return opRunNow }

func (o *runNowOp) eval(bv batch) (Result, error) {
	b := &bv
	if o.by == "" {
		return errResult(fmt.Errorf("%w: run now needs who asks for it", ErrInvalid)), nil
	}
	m, res, err := b.markRow(opRunNow, o.at)
	if m == nil {
		return res, err
	}
	if m.row.Timer == nil {
		return errResult(fmt.Errorf("%w: action %q of run %q does not wait for a time", ErrInvalid, o.actionID, o.runID)), nil
	}
	if m.row.Timer.RunNowBy != "" {
		return m.done(b)
	}
	if !m.unclaimed() {
		return m.refuse(b)
	}
	now := b.now()
	t := *m.row.Timer
	t.RunNowBy, t.RunNowAt = o.by, now
	m.row.Timer = &t
	if !ended(m.run.Status) {
		m.run.WakeAt = now
		if err := b.touch(m.run); err != nil {
			return Result{}, err
		}
	}
	return m.write(b, false, EventActionRunNow, obj("by", o.by))
}
