package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Durable timers. An action with not_before or after is due when the
// ledger says so: its first claim is refused (ledger.NotDueError) until
// then, whatever this process believes. The drive takes a refused action
// off the scan as waiting, goes on with the actions that are ready, and
// when nothing else can start records the run's wake time (ledger.Wait):
// the run stays running, no goroutine waits for it, and whatever wakes
// runs (the service's wake loop, Engine.WakeDue) drives it again then.

// waitingMsg is logged when the ledger refuses a claim because the action
// is not due yet.
const waitingMsg = "action waits for its time"

// notDue reports whether err refuses a claim because its action is not due
// yet, and when it is. A refusal without a due time (a dependency has not
// succeeded, as the ledger sees it) is not a wait: the drive read stale
// facts, and is driven again (ledger.ErrStale's path).
func notDue(err error) (time.Time, bool) {
	var nd *ledger.NotDueError
	if !errors.As(err, &nd) || nd.DueAt.IsZero() {
		return time.Time{}, false
	}
	return nd.DueAt, true
}

// wait takes n, picked and refused by the ledger as not due until due, out
// of the flight: it waits, and no drive of this run picks it again.
func (s *sched) wait(n *node, due time.Time) {
	n.started = false
	n.waiting, n.dueAt = true, due
	s.inflight--
	s.gen++
}

// waits returns the earliest due time of the drive's waiting actions and
// each one's (by action id); zero when none waits.
func (s *sched) waits() (time.Time, map[string]time.Time) {
	var first time.Time
	var due map[string]time.Time
	for id, n := range s.nodes {
		if !n.waiting || (n.row.Status != ledger.StatusPending && n.row.Status != ledger.StatusApproved) {
			continue
		}
		if due == nil {
			due = map[string]time.Time{}
		}
		due[id] = n.dueAt
		if first.IsZero() || n.dueAt.Before(first) {
			first = n.dueAt
		}
	}
	return first, due
}

// woken clears the run's wake time when it has come (run.woken): this
// drive takes the run up (woke: a commit cleared it). A drive before the
// wake time leaves it.
func (d *driver) woken(ctx context.Context) (bool, error) {
	if d.run.WakeAt.IsZero() || d.e.led.Now().Before(d.run.WakeAt) {
		return false, nil
	}
	if _, err := apply(ctx, d.e.led, ledger.Wait(d.runID, time.Time{}, nil)); err != nil {
		return false, fmt.Errorf("executor: run %s: clear its wake time: %w", d.runID, err)
	}
	d.run.WakeAt = time.Time{}
	return true, nil
}

// recordWake records the run's wake time once a drive that does not end
// the run is over: the earliest due time of its waiting actions, or none
// (then a wake time the run had is cleared: run.woken). Nothing is written
// when the run had none and nothing waits.
func (d *driver) recordWake(ctx context.Context) error {
	first, due := d.waits()
	if first.IsZero() && d.run.WakeAt.IsZero() {
		return nil
	}
	d.endDoc = ledger.RunDoc{} // the run's wake time changes
	if _, err := apply(context.WithoutCancel(ctx), d.e.led, ledger.Wait(d.runID, first, due)); err != nil {
		return fmt.Errorf("executor: run %s: record its wake time: %w", d.runID, err)
	}
	if !first.IsZero() {
		d.e.log.Info("run waits", "run_id", d.runID, "until", first.UTC().Format(time.RFC3339Nano), "actions", len(due))
	}
	return nil
}

// RunNow makes a waiting action due at once, as by (ledger.RunNow: the
// person's decision is recorded with an event). It does not drive the run:
// call Resume (the service wakes it by itself). Errors: *ActionError with
// ledger.ErrNotFound, ledger.ErrInvalid (the action does not wait for a
// time), or ErrNotReviewable (it already started).
func (e *Engine) RunNow(ctx context.Context, runID, actionID, by string) error {
	return e.applyReview(ctx, runID, "run now", []string{actionID}, []ledger.Op{ledger.RunNow(runID, actionID, by)})
}

// wakeParallel bounds the runs WakeDue drives at once.
const wakeParallel = 16

// WakeDue drives the runs whose wake time has come by the ledger's clock
// (the store must implement ledger.WakeIndex: else it does nothing), up to
// 16 at once, and returns once they stopped, with the earliest wake time
// still ahead (zero: none). The drives' errors are joined.
func (e *Engine) WakeDue(ctx context.Context) (time.Time, error) {
	wi, ok := e.led.(ledger.WakeIndex)
	if !ok {
		return time.Time{}, nil
	}
	ws, err := wi.Wakes(ctx, e.led.Now(), 0)
	if err != nil {
		return time.Time{}, fmt.Errorf("executor: find runs to wake: %w", err)
	}
	errs := make([]error, len(ws))
	sem := make(chan struct{}, wakeParallel)
	var wg sync.WaitGroup
	for i, w := range ws {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, errs[i] = e.Resume(ctx, w.RunID, nil)
		}()
	}
	wg.Wait()
	var next time.Time
	w, ok, err := ledger.NextWake(ctx, e.led)
	if err != nil {
		errs = append(errs, fmt.Errorf("executor: find the next wake: %w", err))
	}
	if ok {
		next = w.At
	}
	return next, errors.Join(errs...)
}
