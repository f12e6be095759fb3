package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// end says how a worker finished with an action.
type end int

const (
	endSucceeded end = iota // output to be recorded (or adopted)
	endRecorded             // an outcome other than success was recorded (or the action is parked)
	endStopped              // not started or interrupted; nothing more to do in this drive
)

// work performs a and, after each success, the actions that became ready with it.
func (d *driver) work(ctx context.Context, a *act) {
	for a != nil {
		out, how := d.execute(ctx, a)
		if how != endSucceeded {
			d.release(a)
			d.done(a.n)
			d.poke()
			return
		}
		next := d.succeed(ctx, a, out)
		if len(next) == 0 {
			d.poke()
			return
		}
		for _, b := range next[1:] {
			d.spawn(ctx, b)
		}
		a = next[0]
	}
}

func (d *driver) release(a *act) {
	if a.release != nil {
		a.release()
		a.release = nil
	}
}

// succeed records a's output together with the claims of the actions it makes
// ready, and returns those.
//
// a stays in flight until its row holds its outcome: a join that depends on
// a and on an action finishing at the same time must find one of the two
// settled, or the scheduler still waiting for the other.
func (d *driver) succeed(ctx context.Context, a *act, out json.RawMessage) []*act {
	defer d.leave()
	var lead []ledger.Op
	if !(a.adopted && d.linked(a)) {
		lead = []ledger.Op{ledger.Succeed(a.key, a.attempt, out)}
	}
	if len(lead) > 0 && len(out) <= maxMergedOutput && d.isLast(a) && d.completeWith(ctx, a, lead[0], out) {
		return nil
	}
	d.mu.Lock()
	a.n.done = true
	d.mu.Unlock()
	acts, res, err := d.start(ctx, lead, a, out)
	if err != nil {
		d.release(a)
		return nil
	}
	if len(lead) > 0 && res[0].Err != nil {
		// The output was not recorded. Claims written with it must not go ahead.
		for _, b := range acts {
			d.abandon(ctx, b, "not started: the output of "+a.n.id+" could not be recorded")
			d.done(b.n)
		}
		defer d.release(a)
		err := res[0].Err
		switch {
		case errors.Is(err, ledger.ErrTooLarge):
			d.park(ctx, a, fmt.Sprintf("the call succeeded but its output could not be recorded: %v", err))
		case conflictRecord(err) != nil && conflictRecord(err).State == ledger.StatusSucceeded:
			cur := conflictRecord(err)
			d.setSucceeded(a, cur.Output)
		default:
			d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record output", Err: err})
		}
		return nil
	}
	d.setSucceeded(a, out)
	d.reportEnded(a)
	d.release(a)
	if h := d.e.cfg.Hooks.AfterOutcome; h != nil {
		h(a.n.id)
	}
	if a.adopted {
		d.e.obs.Adopted(d.info(a))
	}
	d.e.log.Debug("action succeeded", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", a.attempt, "adopted", a.adopted)
	return acts
}

// isLast reports whether a is the run's last open action as this drive
// knows it: nothing else in flight, every other action succeeded.
func (d *driver) isLast(a *act) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight != 1 || d.failErr != "" || d.fatal != nil || len(d.undo) > 0 {
		return false
	}
	for _, n := range d.nodes {
		if n != a.n && n.row.Status != ledger.StatusSucceeded {
			return false
		}
	}
	return true
}

// completeWith records the last action's outcome and the run's completion in
// one Apply (one sync less per run). It reports false, having written
// nothing, when the run's status forbids it (paused or cancelled meanwhile).
func (d *driver) completeWith(ctx context.Context, a *act, succeed ledger.Op, out json.RawMessage) bool {
	d.g.claimMu.Lock()
	defer d.g.claimMu.Unlock()
	switch d.g.status {
	case ledger.RunRunning, ledger.RunPaused, ledger.RunAwaitingApproval:
		if d.g.pausedByPerson {
			return false
		}
	default:
		return false
	}
	d.mu.Lock()
	a.n.done = true
	d.mu.Unlock()
	defer d.release(a)
	res, err := d.e.led.Apply(context.WithoutCancel(ctx), succeed,
		ledger.SetRunStatus(d.runID, ledger.RunCompleted, "run.completed", "", nil))
	if err != nil {
		d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record output", Err: err})
		return true
	}
	if res[0].Err != nil {
		// The status went through without the output: take it back; the
		// drive's end sets the right one.
		if _, err := apply(context.WithoutCancel(ctx), d.e.led, ledger.SetRunStatus(d.runID, ledger.RunRunning, "", "", nil)); err != nil {
			d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record output", Err: errors.Join(err, res[0].Err)})
			return true
		}
		d.g.status = ledger.RunRunning
		if errors.Is(res[0].Err, ledger.ErrTooLarge) {
			d.park(ctx, a, fmt.Sprintf("the call succeeded but its output could not be recorded: %v", res[0].Err))
		} else {
			d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record output", Err: res[0].Err})
		}
		return true
	}
	d.g.status = ledger.RunCompleted
	d.setSucceeded(a, out)
	d.reportEnded(a)
	d.e.obs.RunStatus(d.runID, ledger.RunCompleted)
	d.mu.Lock()
	d.settled = true
	d.mu.Unlock()
	if h := d.e.cfg.Hooks.AfterOutcome; h != nil {
		h(a.n.id)
	}
	d.e.log.Info("run status", "run_id", d.runID, "status", string(ledger.RunCompleted))
	return true
}

func (d *driver) setSucceeded(a *act, out json.RawMessage) {
	d.updateRow(a.n, func(row *ledger.Action) {
		row.Status, row.Key, row.Output, row.Error = ledger.StatusSucceeded, a.key, out, ""
		if a.attempt > row.Attempts {
			row.Attempts = a.attempt
		}
	})
}

// abandon gives up a claim we hold but will not act on: the key goes back to
// pending (retryable) and a later attempt or drive decides again.
func (d *driver) abandon(ctx context.Context, a *act, why string) {
	if a.attempt > 0 {
		d.record(ctx, a, ledger.Fail(a.key, a.attempt, why, true, mustJSON(map[string]string{"outcome": "not_sent"})))
		d.updateRow(a.n, func(row *ledger.Action) { row.Status = ledger.StatusPending })
	}
	d.release(a)
}

// park records needs_review for the attempt we hold.
func (d *driver) park(ctx context.Context, a *act, reason string) {
	if d.record(ctx, a, ledger.NeedsReview(a.key, a.attempt, reason)) {
		d.e.obs.NeedsReview(d.info(a), reason)
		d.updateRow(a.n, func(row *ledger.Action) { row.Status, row.Error = ledger.StatusNeedsReview, reason })
		d.e.log.Warn("action needs review", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", a.attempt, "reason", reason)
	}
}

// record writes ops for a (its outcome) durably, even when ctx has ended. It
// reports whether every op went through.
func (d *driver) record(ctx context.Context, a *act, ops ...ledger.Op) bool {
	if _, err := apply(context.WithoutCancel(ctx), d.e.led, ops...); err != nil {
		d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record outcome", Err: err})
		return false
	}
	d.reportEnded(a)
	if h := d.e.cfg.Hooks.AfterOutcome; h != nil {
		h(a.n.id)
	}
	return true
}

// info names a's current attempt for the Observer.
func (d *driver) info(a *act) AttemptInfo {
	return AttemptInfo{RunID: d.runID, ActionID: a.n.id, Tool: a.n.spec.Name, Class: a.n.spec.Class, Key: a.key, Attempt: a.attempt}
}

// reportEnded tells the Observer how a's latest call ended, once its outcome
// is recorded.
func (d *driver) reportEnded(a *act) {
	if a.ended != nil {
		d.e.obs.AttemptEnded(d.info(a), *a.ended)
		a.ended = nil
	}
}

func (d *driver) timeout(s tools.Spec) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return d.e.cfg.CallTimeout
}

// execute brings a to an end: it holds or takes the key's claim, then calls
// the tool by its class, retrying what is safe to retry.
func (d *driver) execute(ctx context.Context, a *act) (json.RawMessage, end) {
	for {
		if a.attempt == 0 {
			out, how, held := d.acquire(ctx, a)
			if !held {
				return out, how
			}
		}
		out, how, again := d.attemptCall(ctx, a)
		if !again {
			return out, how
		}
	}
}

// acquire takes the claim of a.key (held=true), or ends the action from what
// its record says.
func (d *driver) acquire(ctx context.Context, a *act) (out json.RawMessage, how end, held bool) {
	for {
		if ctx.Err() != nil {
			return nil, endStopped, false
		}
		if a.release == nil {
			rel, wait, ok := takeKey(d.e.led, a.key)
			if !ok {
				// Another goroutine of this process is performing this key: wait
				// for its outcome, then look at the record.
				select {
				case <-wait:
				case <-ctx.Done():
					return nil, endStopped, false
				}
				a.rec = nil
				continue
			}
			a.release = rel
			a.rec = nil // re-read now that no one in this process holds it
		}
		if a.fresh && a.rec == nil {
			// First claim under this key, approval already checked.
			a.fresh = false
			if ok, how := d.claim(ctx, a, 1); ok || how != endSucceeded {
				return nil, how, ok
			}
			continue // a.rec set from the conflict
		}
		rec := a.rec
		if rec == nil {
			r, err := d.e.led.Key(ctx, a.key)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				if ok, how := d.claim(ctx, a, 1); ok || how != endSucceeded {
					return nil, how, ok
				}
				continue
			case err != nil:
				if ctx.Err() != nil {
					return nil, endStopped, false
				}
				d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "read key", Err: err})
				return nil, endStopped, false
			}
			rec = &r
		}
		a.rec = nil
		if rec.Key != a.key {
			d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim",
				Err: fmt.Errorf("the action is held under another key %q (state %q)", rec.Key, rec.State)})
			return nil, endStopped, false
		}
		spec := a.n.spec
		if rec.State == ledger.StatusClaimed && rec.Owner == d.inc {
			// Claimed by this process, yet no goroutine holds it (we have the
			// reservation): its outcome was never recorded. Close that attempt
			// as unknown and continue as after a crash.
			a.attempt = rec.Attempt
			if spec.Class == tools.AtMostOnce {
				d.park(ctx, a, fmt.Sprintf("outcome unknown: attempt %d of this process was never recorded (at-most-once: not retried)", rec.Attempt))
				return nil, endRecorded, false
			}
			if !d.record(ctx, a, ledger.Fail(a.key, rec.Attempt, "outcome of this attempt was never recorded", true,
				mustJSON(map[string]string{"outcome": tools.Unknown.String()}))) {
				return nil, endStopped, false
			}
			a.attempt = 0
			a.maybeDone = true
			a.unknownAt = rec.ClaimedAt
			cp := *rec
			cp.State = ledger.StatusPending
			rec = &cp
		}
		switch rec.State {
		case ledger.StatusSucceeded, ledger.StatusCompensated:
			if rec.State == ledger.StatusCompensated && a.undoOf == "" && !d.linked(a) {
				// A new revision meets a key whose effect was undone: its
				// output describes nothing that exists. Never build on it.
				d.fail(fmt.Sprintf("action %s: its key was compensated (undone) in an earlier revision; change its arguments to run it again, or fork the run", a.n.id))
				return nil, endStopped, false
			}
			a.attempt = rec.Attempt
			a.adopted = true
			if !d.linked(a) {
				d.link(ctx, a, rec)
			}
			return rec.Output, endSucceeded, false
		case ledger.StatusNeedsReview:
			d.updateRow(a.n, func(row *ledger.Action) { row.Status, row.Key = ledger.StatusNeedsReview, a.key })
			return nil, endRecorded, false
		case ledger.StatusFailed:
			d.updateRow(a.n, func(row *ledger.Action) { row.Status, row.Key, row.Error = ledger.StatusFailed, a.key, rec.Error })
			if a.undoOf == "" {
				d.fail(fmt.Sprintf("action %s failed: %s", a.n.id, rec.Error))
			}
			return nil, endRecorded, false
		case ledger.StatusSkipped:
			d.updateRow(a.n, func(row *ledger.Action) { row.Status = ledger.StatusSkipped })
			return nil, endRecorded, false
		case ledger.StatusClaimed, ledger.StatusPending:
			// Claimed by a process that is gone (we hold the in-process
			// reservation, so no goroutine here owns it), or pending after a
			// failed attempt or a person's "retry".
			stale := rec.State == ledger.StatusClaimed
			next := rec.Attempt + 1
			if stale {
				a.maybeDone = true
				a.unknownAt = rec.ClaimedAt
			} else if rec.Attempt > 0 && !a.maybeDone {
				a.maybeDone = d.earlierUnknown(ctx, a)
			}
			var lookFrom time.Time
			switch spec.Class {
			case tools.AtMostOnce:
				if stale {
					a.attempt = rec.Attempt
					d.park(ctx, a, fmt.Sprintf("outcome unknown: attempt %d was claimed by a process that is gone (at-most-once: not retried)", rec.Attempt))
					return nil, endRecorded, false
				}
			case tools.Lookup:
				lookFrom = rec.ClaimedAt
			case tools.Keyed:
				if d.pastKeyTTL(ctx, a, rec) {
					if _, ok := a.n.tool.(tools.Looker); ok {
						lookFrom = rec.ClaimedAt
					} else if stale {
						a.attempt = rec.Attempt
						d.park(ctx, a, fmt.Sprintf("outcome unknown and the provider's key_ttl (%v) has passed since the first claim: a new call could repeat the effect", spec.KeyTTL))
						return nil, endRecorded, false
					} else {
						d.needsReviewPending(ctx, a, rec)
						return nil, endRecorded, false
					}
				}
			}
			if rec.Attempt == 0 {
				next = 1
			}
			out, found, how, held := d.claimNext(ctx, a, next, stale && rec.Attempt > 0, lookFrom)
			switch {
			case held:
				return nil, how, true
			case how != endSucceeded:
				return nil, how, false
			case found:
				return out, endSucceeded, false
			}
			continue // a.rec set from a conflict
		default:
			d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim",
				Err: fmt.Errorf("unexpected key state %q", rec.State)})
			return nil, endStopped, false
		}
	}
}

// linked reports whether the action's row already mirrors its key's outcome.
func (d *driver) linked(a *act) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := a.n.row
	return r.Key == a.key && (r.Status == ledger.StatusSucceeded || r.Status == ledger.StatusCompensated)
}

// link points the current revision's row at a key that already has an
// outcome (replay of an unchanged action): a claim of such a key conflicts
// and links the row.
func (d *driver) link(ctx context.Context, a *act, rec *ledger.KeyRecord) {
	res, err := d.e.led.Apply(context.WithoutCancel(ctx), ledger.Claim(d.runID, a.n.id, a.n.row.Tool, a.key, a.args, rec.Attempt+1))
	if err != nil {
		d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "link row to key", Err: err})
		return
	}
	if r := res[0]; r.Action.ID == a.n.id {
		d.updateRow(a.n, func(row *ledger.Action) { *row = r.Action })
	}
}

// needsReviewPending parks a keyed action whose key is pending after an
// unknown outcome once key_ttl has passed: claim it and park the claim.
func (d *driver) needsReviewPending(ctx context.Context, a *act, rec *ledger.KeyRecord) {
	if ok, _ := d.claim(ctx, a, rec.Attempt+1); ok {
		d.park(ctx, a, fmt.Sprintf("the provider's key_ttl (%v) has passed since the first claim: a new call could repeat the effect", a.n.spec.KeyTTL))
	}
}

// claim writes the claim of attempt n. ok: we hold it. Otherwise how is
// endSucceeded with a.rec set when the claim met another record (decide again),
// or the action is stopped.
func (d *driver) claim(ctx context.Context, a *act, n int) (ok bool, how end) {
	if h := d.e.cfg.Hooks.BeforeClaim; h != nil {
		h(a.n.id)
	}
	if !d.resumedDone() {
		if err := d.markRunning(ctx); err != nil {
			d.setFatal(err)
			return false, endStopped
		}
	}
	ops := append(a.preOps, ledger.Claim(d.runID, a.n.id, a.n.row.Tool, a.key, a.args, n))
	d.g.claimMu.RLock()
	if d.g.halted() {
		cancelled := d.g.status == ledger.RunCancelled
		d.g.claimMu.RUnlock()
		if cancelled && n > 1 {
			return false, d.concludeOnCancel(ctx, a, n)
		}
		return false, endStopped
	}
	res, err := d.e.led.Apply(context.WithoutCancel(ctx), ops...)
	d.g.claimMu.RUnlock()
	if err != nil {
		d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: err})
		return false, endStopped
	}
	for _, r := range res[:len(ops)-1] {
		if r.Err != nil {
			d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: r.Err})
			return false, endStopped
		}
	}
	a.preOps = nil
	r := res[len(ops)-1]
	if r.Err != nil {
		if cur := conflictRecord(r.Err); cur != nil {
			a.rec = cur
			return false, endSucceeded
		}
		d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: r.Err})
		return false, endStopped
	}
	d.claimed(a, n, r.Key.ClaimedAt)
	return true, endSucceeded
}

// pastKeyTTL reports whether a keyed action's provider may have forgotten the key.
func (d *driver) pastKeyTTL(ctx context.Context, a *act, rec *ledger.KeyRecord) bool {
	ttl := a.n.spec.KeyTTL
	if ttl <= 0 {
		return false
	}
	first := d.firstClaimAt(ctx, a.key)
	if first.IsZero() {
		if rec != nil && rec.Attempt <= 1 && !rec.ClaimedAt.IsZero() {
			first = rec.ClaimedAt
		} else {
			return true // unknown: assume the worst
		}
	}
	return d.e.clock.Now().Sub(first) > ttl
}

// firstClaimAt returns when attempt 1 of key was claimed: from this drive, or
// from the run's events (action.claimed {"attempt":1,"key"}).
func (d *driver) firstClaimAt(ctx context.Context, key string) time.Time {
	d.mu.Lock()
	t, ok := d.firstClaim[key]
	d.mu.Unlock()
	if ok {
		return t
	}
	evs, err := d.e.led.Events(ctx, d.runID, 0, 0)
	if err != nil {
		return time.Time{}
	}
	for _, ev := range evs {
		if ev.Type != "action.claimed" {
			continue
		}
		var data struct {
			Attempt int    `json:"attempt"`
			Key     string `json:"key"`
		}
		if json.Unmarshal(ev.Data, &data) == nil && data.Key == key && data.Attempt == 1 {
			d.mu.Lock()
			d.firstClaim[key] = ev.At
			d.mu.Unlock()
			return ev.At
		}
	}
	return time.Time{}
}

// attemptCall performs the attempt we hold (lookup first when required). again:
// a retry was claimed (or must be decided from a.rec: a.attempt is 0).
func (d *driver) attemptCall(ctx context.Context, a *act) (out json.RawMessage, how end, again bool) {
	spec := a.n.spec
	call := tools.Call{Key: a.key, RunID: d.runID, Action: a.n.id, Attempt: a.attempt, Args: a.args}
	if ctx.Err() != nil {
		d.abandon(ctx, a, "interrupted before the call")
		return nil, endStopped, false
	}
	d.e.obs.AttemptStarted(d.info(a))
	cctx, cancel := context.WithTimeout(ctx, d.timeout(spec))
	t0 := time.Now()
	out, err := a.n.tool.Call(cctx, call)
	took := time.Since(t0)
	cancel()
	a.tries++
	a.ended = &AttemptResult{OK: err == nil, Took: took}
	if err != nil {
		a.ended.Failure, _ = tools.Classify(err)
	}
	if h := d.e.cfg.Hooks.AfterCall; h != nil {
		h(a.n.id)
	}
	if err == nil {
		if len(out) == 0 {
			out = json.RawMessage("null") // a tool with nothing to say (HTTP 204)
		}
		if !json.Valid(out) {
			// A call that answered with garbage did happen: do not retry it.
			d.park(ctx, a, fmt.Sprintf("tool %s returned invalid JSON output", spec.Name))
			return nil, endRecorded, false
		}
		return out, endSucceeded, false
	}
	outcome, after := tools.Classify(err)
	msg := errText(err)
	log := d.e.log.With("run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", a.attempt, "outcome", outcome.String())

	switch outcome {
	case tools.Definite:
		if d.outputTooLarge(ctx, a, err, msg) { // large.go: it took effect
			return nil, endRecorded, false
		}
		if a.undoOf != "" {
			// An undo that cannot be done leaves the effect in place: a
			// person decides (undo by hand and mark it done, retry, or skip).
			d.park(ctx, a, fmt.Sprintf("compensation of %s refused: %s", a.undoOf, msg))
			return nil, endRecorded, false
		}
		if a.maybeDone && spec.Class != tools.ReadOnly {
			// "It did not happen" answers this attempt only: an earlier one
			// whose outcome is unknown may have taken effect, so neither
			// failing (and compensating) nor calling again is safe.
			d.park(ctx, a, fmt.Sprintf("attempt %d was refused (%s), but an earlier attempt's outcome is unknown, so its effect may exist", a.attempt, msg))
			return nil, endRecorded, false
		}
		if d.record(ctx, a, ledger.Fail(a.key, a.attempt, msg, false, mustJSON(map[string]string{"outcome": outcome.String()}))) {
			d.updateRow(a.n, func(row *ledger.Action) { row.Status, row.Error = ledger.StatusFailed, msg })
			log.Warn("action failed", "error", msg)
			if a.undoOf == "" {
				d.fail(fmt.Sprintf("action %s failed: %s", a.n.id, msg))
			}
		}
		return nil, endRecorded, false
	case tools.NotSentOutcome, tools.NotProcessed:
		if !d.canRetry(a, after) {
			final := fmt.Sprintf("gave up after %d attempts (%s): %s", a.tries, outcome, msg)
			if r := d.e.cfg.Retry; after > 0 && a.tries < r.MaxAttempts {
				final = fmt.Sprintf("the provider asked to wait %v before another attempt, beyond this run's retry budget (%v in all, %v used): %s; "+
					"nothing was processed, so running the same command again later is safe", after, r.MaxElapsed, d.e.clock.Now().Sub(a.began).Round(time.Millisecond), msg)
			}
			if a.undoOf != "" {
				d.park(ctx, a, fmt.Sprintf("compensation of %s not done: %s", a.undoOf, final))
				return nil, endRecorded, false
			}
			if a.maybeDone && spec.Class != tools.ReadOnly {
				d.park(ctx, a, final+"; an earlier attempt's outcome is unknown, so its effect may exist")
				return nil, endRecorded, false
			}
			if d.record(ctx, a, ledger.Fail(a.key, a.attempt, final, false, mustJSON(map[string]string{"outcome": outcome.String()}))) {
				d.updateRow(a.n, func(row *ledger.Action) { row.Status, row.Error = ledger.StatusFailed, final })
				log.Warn("action failed", "error", final)
				if a.undoOf == "" {
					d.fail(fmt.Sprintf("action %s failed: %s", a.n.id, final))
				}
			}
			return nil, endRecorded, false
		}
		return d.retry(ctx, a, outcome, after, msg, time.Time{})
	case tools.KeyInFlight:
		// Another request with this key is still being processed. It ends
		// within the tool's timeout of its claim: keep asking (with backoff)
		// until then, whatever the attempt budget, and only past that ask a
		// person.
		a.maybeDone = true
		since := d.inFlightSince(ctx, a)
		deadline := since.Add(d.timeout(spec) + d.e.cfg.SkewMargin)
		now := d.e.clock.Now()
		if !now.Before(deadline) || a.tries >= maxInFlightTries {
			d.park(ctx, a, fmt.Sprintf("the provider still reports the key in flight after %d attempts, %v after the earlier request was claimed (its timeout is %v): %s",
				a.tries, now.Sub(since).Round(time.Millisecond), d.timeout(spec), msg))
			return nil, endRecorded, false
		}
		if w := deadline.Sub(now); after > w {
			after = w // look again once the earlier request must have ended
		}
		return d.retry(ctx, a, outcome, max(after, d.e.cfg.Retry.Base), msg, time.Time{})
	}

	// Unknown outcome: the effect may have happened. By class.
	a.maybeDone = true
	a.unknownAt = a.claimAt
	switch spec.Class {
	case tools.AtMostOnce:
		d.park(ctx, a, "outcome unknown (at-most-once: not retried): "+msg)
		return nil, endRecorded, false
	case tools.Keyed:
		if d.pastKeyTTL(ctx, a, nil) {
			if _, ok := a.n.tool.(tools.Looker); !ok {
				d.park(ctx, a, fmt.Sprintf("outcome unknown and the provider's key_ttl (%v) has passed: %s", spec.KeyTTL, msg))
				return nil, endRecorded, false
			}
			if !d.canRetry(a, 0) {
				break
			}
			return d.retry(ctx, a, outcome, 0, msg, a.claimAt)
		}
		if !d.canRetry(a, 0) {
			break
		}
		return d.retry(ctx, a, outcome, 0, msg, time.Time{})
	case tools.Lookup:
		if !d.canRetry(a, 0) {
			break
		}
		return d.retry(ctx, a, outcome, 0, msg, a.claimAt)
	default: // read_only, idempotent
		if !d.canRetry(a, 0) {
			break
		}
		return d.retry(ctx, a, outcome, 0, msg, time.Time{})
	}
	d.park(ctx, a, fmt.Sprintf("outcome unknown after %d attempts: %s", a.tries, msg))
	return nil, endRecorded, false
}

// canRetry applies the retry budget of one drive: attempts and elapsed time.
func (d *driver) canRetry(a *act, after time.Duration) bool {
	r := d.e.cfg.Retry
	if a.tries >= r.MaxAttempts {
		return false
	}
	return d.e.clock.Now().Sub(a.began)+after <= r.MaxElapsed
}

// retry records the failed attempt (retryable, visible as
// action.attempt_failed), waits the backoff and claims the next attempt.
// lookFrom, when set, makes the next attempt look before it calls.
func (d *driver) retry(ctx context.Context, a *act, outcome tools.Outcome, after time.Duration, msg string, lookFrom time.Time) (json.RawMessage, end, bool) {
	if a.maybeDone && d.cancelled() {
		// The run was cancelled while the call was in flight: nothing more
		// is sent, and the effect may exist; a person says what happened.
		d.park(ctx, a, "the run was cancelled while this call was in flight; its outcome is unknown: "+msg)
		return nil, endRecorded, false
	}
	wait := d.e.backoff(a.tries, after)
	data := mustJSON(map[string]any{"outcome": outcome.String(), "retry_in": wait.String(), "retry_in_ms": wait.Milliseconds()})
	if !d.record(ctx, a, ledger.Fail(a.key, a.attempt, msg, true, data)) {
		return nil, endStopped, false
	}
	d.e.log.Info("attempt failed, retrying", "run_id", d.runID, "action_id", a.n.id, "key", a.key,
		"attempt", a.attempt, "outcome", outcome.String(), "retry_in", wait)
	prev := a.attempt
	d.updateRow(a.n, func(row *ledger.Action) { row.Status, row.Error = ledger.StatusPending, msg })
	if err := d.e.cfg.Sleep(ctx, wait); err != nil {
		return nil, endStopped, false
	}
	a.attempt = 0
	if d.cancelled() {
		return nil, d.concludeOnCancel(ctx, a, prev+1), false
	}
	if a.n.spec.Class == tools.Keyed && a.maybeDone && lookFrom.IsZero() && d.pastKeyTTL(ctx, a, nil) {
		// Checked after the wait, right before the next claim and call: past
		// key_ttl the provider may have forgotten the key of an attempt
		// whose outcome is unknown, and a call could repeat its effect.
		if _, ok := a.n.tool.(tools.Looker); ok {
			lookFrom = a.unknownAt
			if lookFrom.IsZero() {
				lookFrom = a.claimAt
			}
		} else {
			d.needsReviewPending(ctx, a, &ledger.KeyRecord{Attempt: prev})
			return nil, endRecorded, false
		}
	}
	out, found, how, held := d.claimNext(ctx, a, prev+1, false, lookFrom)
	switch {
	case held:
		return nil, endSucceeded, true
	case how != endSucceeded:
		return nil, how, false
	case found:
		return out, endSucceeded, false
	}
	return nil, endSucceeded, true // decide from a.rec
}

// claimNext takes the claim of attempt n of a.key. When lookFrom is set (an
// earlier attempt, claimed at lookFrom, may have taken effect), the lookup
// and its visibility wait run first, while the previous attempt's record
// still stands (pending, or claimed by a process that is gone: prevClaimed).
// So every claim is recorded immediately before its call is sent, and "the
// previous claim + timeout + visibility_lag + skew margin" bounds when the
// previous attempt's write can still commit and show up, whether that attempt
// waited in a lookup first or not. A crash during the wait leaves the previous
// claim as the bound: nothing was sent after it.
//
// held: we hold attempt n (a.attempt), call the tool now. found: the lookup
// found the effect; out is to be recorded under a.attempt (the previous
// claim, or attempt n claimed for it). Otherwise how is endSucceeded with
// a.rec set (a claim conflicted: decide again), or the action ended.
func (d *driver) claimNext(ctx context.Context, a *act, n int, prevClaimed bool, lookFrom time.Time) (out json.RawMessage, found bool, how end, held bool) {
	if !lookFrom.IsZero() {
		res, out, reason := d.lookupPhase(ctx, a, n, lookFrom)
		switch res {
		case lookStopped:
			return nil, false, endStopped, false
		case lookTrusted:
			a.maybeDone = false // the earlier attempts took no effect
		case lookFound, lookFailed:
			if prevClaimed {
				// Record on the dead process's claim (any owner may).
				a.attempt = n - 1
			} else if ok, how := d.claim(ctx, a, n); !ok {
				return nil, false, how, false
			}
			if res == lookFailed {
				d.park(ctx, a, reason)
				return nil, false, endRecorded, false
			}
			return out, true, endSucceeded, false
		}
	}
	ok, how := d.claim(ctx, a, n)
	return nil, false, how, ok
}

// lookResult is how a lookup phase ended.
type lookResult int

const (
	lookTrusted lookResult = iota // not found, and the window has passed: write
	lookFound                     // the effect exists: record it
	lookFailed                    // the lookup kept failing: a person decides
	lookStopped                   // interrupted
)

// lookupPhase runs the lookup before attempt n, holding no claim. Not found is
// trusted only once lookFrom (the previous claim) is older than the tool's
// timeout + visibility_lag + skew margin; until then it waits and looks again.
func (d *driver) lookupPhase(ctx context.Context, a *act, n int, lookFrom time.Time) (res lookResult, out json.RawMessage, reason string) {
	spec := a.n.spec
	looker, ok := a.n.tool.(tools.Looker)
	if !ok {
		return lookTrusted, nil, ""
	}
	call := tools.Call{Key: a.key, RunID: d.runID, Action: a.n.id, Attempt: n, Args: a.args}
	trustAt := lookFrom.Add(d.timeout(spec) + spec.VisibilityLag + d.e.cfg.SkewMargin)
	noted := false
	errTries := 0
	for {
		if ctx.Err() != nil {
			return lookStopped, nil, ""
		}
		lctx, cancel := context.WithTimeout(ctx, d.timeout(spec))
		out, found, err := looker.Lookup(lctx, call)
		cancel()
		if err != nil {
			errTries++
			if ctx.Err() != nil {
				return lookStopped, nil, ""
			}
			if errTries >= d.e.cfg.Retry.MaxAttempts {
				return lookFailed, nil, fmt.Sprintf("lookup failed %d times: %s", errTries, errText(err))
			}
			wait := d.e.backoff(errTries, 0)
			d.note(ctx, a, map[string]any{"attempt": n, "phase": "lookup", "outcome": "lookup_error",
				"error": errText(err), "retry_in": wait.String(), "retry_in_ms": wait.Milliseconds()})
			if err := d.e.cfg.Sleep(ctx, wait); err != nil {
				return lookStopped, nil, ""
			}
			continue
		}
		if found {
			if !json.Valid(out) {
				return lookFailed, nil, "lookup found the effect but returned invalid JSON"
			}
			d.e.log.Info("lookup found the effect; not calling again", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", n)
			d.e.obs.LookupDone(d.lookInfo(a, n), true)
			return lookFound, out, ""
		}
		now := d.e.clock.Now()
		if !now.Before(trustAt) {
			d.e.obs.LookupDone(d.lookInfo(a, n), false)
			return lookTrusted, nil, ""
		}
		wait := trustAt.Sub(now)
		if !noted {
			noted = true
			d.note(ctx, a, map[string]any{"attempt": n, "phase": "lookup", "outcome": "not_found_yet",
				"reason":   "not found, but an earlier attempt may still commit or become visible; waiting before writing",
				"retry_in": wait.String(), "retry_in_ms": wait.Milliseconds()})
			d.e.log.Info("lookup not found yet; waiting for visibility", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "wait", wait)
		}
		if err := d.e.cfg.Sleep(ctx, wait); err != nil {
			return lookStopped, nil, ""
		}
	}
}

// lookInfo names the attempt a lookup runs for (attempt n, not yet claimed).
func (d *driver) lookInfo(a *act, n int) AttemptInfo {
	i := d.info(a)
	i.Attempt = n
	return i
}

// earlierUnknown reports whether an earlier attempt of a's action (recorded
// by another drive) may have taken effect: an attempt_failed event whose
// outcome was not "not sent" or "not processed", or a person's review. When
// the events cannot be read, it assumes so.
func (d *driver) earlierUnknown(ctx context.Context, a *act) bool {
	evs, err := d.e.led.Events(ctx, d.runID, 0, 0)
	if err != nil {
		return true
	}
	unknown := false
	for _, ev := range evs {
		if ev.ActionID != a.n.id {
			continue
		}
		switch ev.Type {
		case "action.needs_review":
			unknown = true
		case "action.resolved":
			// A person looked at the external system and decided (done,
			// retry or skip): what came before is settled.
			unknown = false
		case "action.attempt_failed":
			var data struct{ Outcome, Phase string }
			if json.Unmarshal(ev.Data, &data) != nil {
				unknown = true
				continue
			}
			if data.Phase == "lookup" {
				continue // a note of a lookup wait
			}
			if data.Outcome != tools.NotSentOutcome.String() && data.Outcome != tools.NotProcessed.String() {
				unknown = true
			}
		}
	}
	return unknown
}

// note appends an informational action.attempt_failed event (no state change).
func (d *driver) note(ctx context.Context, a *act, data map[string]any) {
	res, err := d.e.led.Apply(context.WithoutCancel(ctx), ledger.Note(d.runID, "action.attempt_failed", a.n.id, mustJSON(data)))
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		d.e.log.Warn("could not record a note", "run_id", d.runID, "action_id", a.n.id, "error", err)
	}
}

// maxInFlightTries bounds the attempts of one drive that meet "key in flight"
// (the backoff grows, so the tool's timeout is normally reached first).
const maxInFlightTries = 40

// inFlightSince returns when the request that a keyed provider reports in
// flight was claimed, as well as this drive knows: the latest attempt whose
// outcome is unknown, else the key's first claim, else our own claim.
func (d *driver) inFlightSince(ctx context.Context, a *act) time.Time {
	if !a.unknownAt.IsZero() {
		return a.unknownAt
	}
	if t := d.firstClaimAt(ctx, a.key); !t.IsZero() {
		return t
	}
	return a.claimAt
}

// cancelled reports whether the run was cancelled (by this process).
func (d *driver) cancelled() bool {
	d.g.claimMu.RLock()
	defer d.g.claimMu.RUnlock()
	return d.g.status == ledger.RunCancelled
}

// claimAlways claims attempt n of a.key whatever the run's status (to park
// it: never to call). how is endSucceeded when we hold the claim.
func (d *driver) claimAlways(ctx context.Context, a *act, n int) (bool, end) {
	res, err := apply(context.WithoutCancel(ctx), d.e.led, ledger.Claim(d.runID, a.n.id, a.n.row.Tool, a.key, a.args, n))
	if err != nil {
		d.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: err})
		return false, endStopped
	}
	d.claimed(a, n, res[0].Key.ClaimedAt)
	return true, endSucceeded
}

// concludeOnCancel ends an action that was attempted before and would now
// be attempted again (attempt n) in a run that was cancelled meanwhile:
// skipped when nothing it sent took effect, needs_review when an earlier
// attempt's outcome is unknown. Never left pending where nothing concludes it.
func (d *driver) concludeOnCancel(ctx context.Context, a *act, n int) end {
	if !a.maybeDone {
		var ops []ledger.Op
		if rec, err := d.e.led.Key(ctx, a.key); err == nil && rec.State == ledger.StatusClaimed {
			// The previous attempt's claim still stands (its process is gone,
			// and a trusted lookup found no effect): close it first.
			ops = append(ops, ledger.Fail(a.key, rec.Attempt, "no effect: a lookup after the trust window found none", true,
				mustJSON(map[string]string{"outcome": tools.NotSentOutcome.String()})))
		}
		ops = append(ops, ledger.Skip(d.runID, a.n.id, "not attempted again: the run was cancelled"))
		if d.record(ctx, a, ops...) {
			d.updateRow(a.n, func(row *ledger.Action) { row.Status = ledger.StatusSkipped })
		}
		return endRecorded
	}
	if _, how := d.claimAlways(ctx, a, n); how == endSucceeded {
		d.park(ctx, a, "the run was cancelled before this action's next attempt; an earlier attempt's outcome is unknown")
	}
	return endRecorded
}
