package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// end says how a worker finished with an action.
type end int

const (
	endSucceeded end = iota // output to be recorded (or adopted)
	endRecorded             // an outcome other than success was recorded (or the action is parked)
	endStopped              // not started or interrupted; nothing more to do in this drive
)

// work performs a in its own span (Config.Tracer), on a's copy of its row,
// and sends it back to the drive's loop: with the output to record when it
// succeeded, else with its outcome recorded (or the reason it stopped).
func (d *driver) work(ctx context.Context, a *act) {
	actx, end := d.e.tracer.Start(ctx, Work{Kind: WorkAction, AttemptInfo: d.info(a)})
	a.span = end
	a.out, a.how = d.execute(actx, a)
	if a.how != endSucceeded {
		a.releaseKey()
	}
	d.inbox <- a
}

// endSpan ends a's span, once the loop absorbed its outcome.
func (a *act) endSpan(done Done) {
	if a.span != nil {
		a.span(done)
		a.span = nil
	}
}

// releaseKey gives back a's reservation of its key in this process.
func (a *act) releaseKey() {
	if a.release != nil {
		a.release()
		a.release = nil
	}
}

// fail notes that a fails the run (msg).
func (a *act) fail(msg string) {
	if a.failMsg == "" {
		a.failMsg = msg
	}
}

// setFatal notes the first error that stops the drive.
func (a *act) setFatal(err error) {
	if a.fatal == nil {
		a.fatal = err
	}
}

// succeeded brings a's row to its output.
func (a *act) succeeded(out json.RawMessage) {
	a.row.Status, a.row.Key, a.row.Output, a.row.Error = ledger.StatusSucceeded, a.key, out, ""
	if a.attempt > a.row.Attempts {
		a.row.Attempts = a.attempt
	}
}

// claimed notes that a holds attempt n of its key, claimed at now.
func (a *act) claimed(n int, rec ledger.KeyRecord, now time.Time) {
	a.attempt = n
	a.claimAt = rec.ClaimedAt
	a.first = rec.FirstClaimedAt
	if a.began.IsZero() {
		a.began = now
	}
	a.row.Status, a.row.Key, a.row.Attempts, a.row.Args = ledger.StatusClaimed, a.key, n, a.args
}

// linked reports whether the action's row already mirrors its key's outcome.
func (a *act) linked() bool {
	r := a.row
	return r.Key == a.key && (r.Status == ledger.StatusSucceeded || r.Status == ledger.StatusCompensated)
}

// abandon gives up a claim we hold but will not act on: the key goes back to
// pending (retryable) and a later attempt or drive decides again.
func (d *driver) abandon(ctx context.Context, a *act, why string) {
	if a.attempt > 0 {
		d.record(ctx, a, ledger.FailWith(a.key, a.attempt, why, true, ledger.FailureNotSent, nil))
		a.row.Status = ledger.StatusPending
	}
	a.releaseKey()
}

// park records needs_review for the attempt we hold.
func (d *driver) park(ctx context.Context, a *act, reason string) {
	if d.record(ctx, a, ledger.NeedsReview(a.key, a.attempt, reason)) {
		d.e.obs.NeedsReview(d.info(a), reason)
		a.row.Status, a.row.Error = ledger.StatusNeedsReview, reason
		d.e.log.Warn("action needs review", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", a.attempt, "reason", reason)
	}
}

// record writes ops for a (its outcome) durably, even when ctx has ended. It
// reports whether every op went through.
func (d *driver) record(ctx context.Context, a *act, ops ...ledger.Op) bool {
	if _, err := apply(context.WithoutCancel(ctx), d.e.led, ops...); err != nil {
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record outcome", Err: err})
		return false
	}
	d.freedSlot(a)
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
		rec := a.rec
		if a.fresh && rec == nil {
			// First claim under this key, approval already checked.
			a.fresh = false
			if ok, how := d.claim(ctx, a, 1); ok || how != endSucceeded {
				return nil, how, ok
			}
			continue // a.rec set from the conflict
		}
		if rec == nil {
			r, err := d.e.led.Key(ctx, a.key)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				if ok, how := d.claim(ctx, a, 1); ok || how != endSucceeded {
					return nil, how, ok
				}
				continue
			case err != nil:
				if ctx.Err() == nil {
					a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "read key", Err: err})
				}
				return nil, endStopped, false
			}
			rec = &r
		}
		a.rec = nil
		if rec.Key != a.key {
			a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim",
				Err: fmt.Errorf("the action is held under another key %q (state %q)", rec.Key, rec.State)})
			return nil, endStopped, false
		}
		if out, how, held, again := d.onRecord(ctx, a, rec); !again {
			return out, how, held
		}
	}
}

// facts gathers what decide looks at for a, at stage s.
func (d *driver) facts(a *act, s stage) facts {
	spec := a.n.spec
	_, looks := a.n.tool.(tools.Looker)
	return facts{stage: s, now: d.e.clock.Now(), class: spec.Class, keyTTL: spec.KeyTTL, hasLookup: looks,
		timeout: d.timeout(spec), visibilityLag: spec.VisibilityLag, skew: d.e.cfg.SkewMargin, retry: d.e.retryOf(spec),
		undoOf: a.undoOf, maybeDone: a.maybeDone, unknownAt: a.unknownAt, claimAt: a.claimAt, first: a.first,
		tries: a.tries, began: a.began, attempt: a.attempt}
}

// onRecord performs what the decision core says about a key record read
// while no attempt is held. again: decide again from a.rec (a claim met
// another record).
func (d *driver) onRecord(ctx context.Context, a *act, rec *ledger.KeyRecord) (out json.RawMessage, how end, held, again bool) {
	f := d.facts(a, atRecord)
	f.rec, f.mine, f.linked = *rec, rec.State == ledger.StatusClaimed && rec.Owner == d.inc, a.linked()
	dec := decide(f)
	if dec.closeUnknown {
		a.attempt = rec.Attempt
		if !d.record(ctx, a, ledger.FailWith(a.key, rec.Attempt, "outcome of this attempt was never recorded", true, ledger.FailureUnknown, nil)) {
			return nil, endStopped, false, false
		}
		a.attempt = 0
	}
	a.maybeDone, a.unknownAt = dec.maybeDone, dec.unknownAt
	switch dec.verb {
	case doAdopt:
		a.attempt, a.adopted = rec.Attempt, true
		if !a.linked() {
			d.link(ctx, a, rec)
		}
		return rec.Output, endSucceeded, false, false
	case doMirror:
		d.mirror(a, rec)
		return nil, endRecorded, false, false
	case doReview:
		d.parkAt(ctx, a, dec)
		return nil, endRecorded, false, false
	case doRefuse:
		a.fail(fmt.Sprintf("action %s: %s", a.n.id, dec.reason))
		return nil, endStopped, false, false
	case doBroken:
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: errors.New(dec.reason)})
		return nil, endStopped, false, false
	}
	out, found, how, held := d.claimNext(ctx, a, dec)
	switch {
	case held:
		return nil, how, true, false
	case how != endSucceeded:
		return nil, how, false, false
	case found:
		return out, endSucceeded, false, false
	}
	return nil, endSucceeded, false, true // a.rec set from a conflict
}

// mirror brings a's row to its key's outcome, recorded by another drive.
func (d *driver) mirror(a *act, rec *ledger.KeyRecord) {
	switch rec.State {
	case ledger.StatusNeedsReview:
		a.row.Status, a.row.Key = ledger.StatusNeedsReview, a.key
	case ledger.StatusFailed:
		a.row.Status, a.row.Key, a.row.Error = ledger.StatusFailed, a.key, rec.Error
		if a.undoOf == "" {
			a.fail(fmt.Sprintf("action %s failed: %s", a.n.id, rec.Error))
		}
	case ledger.StatusSkipped:
		a.row.Status = ledger.StatusSkipped
	}
}

// parkAt performs a doReview decision: needs_review for attempt
// dec.attempt, claimed first when the key is pending (dec.claimToPark).
func (d *driver) parkAt(ctx context.Context, a *act, dec decision) {
	if dec.claimToPark {
		if ok, _ := d.claimAs(ctx, a, dec.attempt, false); ok {
			d.park(ctx, a, dec.reason)
		}
		return
	}
	a.attempt = dec.attempt
	d.park(ctx, a, dec.reason)
}

// link points the current revision's row at a key that already has an
// outcome (replay of an unchanged action): a claim of such a key conflicts
// and links the row.
func (d *driver) link(ctx context.Context, a *act, rec *ledger.KeyRecord) {
	res, err := d.e.led.Apply(context.WithoutCancel(ctx), ledger.Claim(d.runID, a.n.id, a.row.Tool, a.key, a.args, rec.Attempt+1))
	if err != nil {
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "link row to key", Err: err})
		return
	}
	if r := res[0]; r.Action.ID == a.n.id {
		a.row = r.Action
	}
}

// claim writes the claim of attempt n. ok: we hold it. Otherwise how is
// endSucceeded with a.rec set when the claim met another record (decide again),
// or the action is stopped.
func (d *driver) claim(ctx context.Context, a *act, n int) (ok bool, how end) {
	return d.claimAs(ctx, a, n, true)
}

// claimAs is claim; calls: a call follows the claim, so it carries the
// tool's limits (a claim that only records what a lookup found, or parks
// the action for a person, does not).
func (d *driver) claimAs(ctx context.Context, a *act, n int, calls bool) (ok bool, how end) {
	if d.e.draining() {
		return false, endStopped // shutting down: no new claim
	}
	if h := d.e.cfg.Hooks.BeforeClaim; h != nil {
		h(a.n.id)
	}
	if err := d.markRunning(ctx); err != nil {
		a.setFatal(err)
		return false, endStopped
	}
	claim := a.claimOp(d.runID, n)
	if !calls {
		claim = claim.WithLimits(ledger.ToolLimit{})
	}
	ops := append(a.preOps, claim)
	var freed <-chan struct{}
	if calls && !a.n.spec.Limits.IsZero() {
		freed = slotSignal(d.e.led, a.n.spec.Name) // before the claim: a slot freed after it wakes us
	}
	var res []ledger.Result
	var err error
	halted, cancelled := false, false
	d.g.read(func(h bool) {
		halted, cancelled = h, d.g.status == ledger.RunCancelled
		if !halted {
			res, err = d.e.led.Apply(context.WithoutCancel(ctx), ops...)
		}
	})
	if halted {
		if cancelled && n > 1 {
			return false, d.concludeOnCancel(ctx, a, n)
		}
		return false, endStopped
	}
	if err != nil {
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: err})
		return false, endStopped
	}
	for _, r := range res[:len(ops)-1] {
		if r.Err != nil {
			a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: r.Err})
			return false, endStopped
		}
	}
	a.preOps = nil
	r := res[len(ops)-1]
	if r.Err != nil {
		return false, d.claimRefused(ctx, a, n, r.Err, freed)
	}
	a.claimedAfterWait()
	d.claimedNow(a, n, r.Key)
	return true, endSucceeded
}

// claimRefused is what claimAs does when the ledger refused the claim of
// attempt n with err (freed: claimAs's slot signal). endSucceeded with a.rec
// set (or nil) sends the action to decide again.
func (d *driver) claimRefused(ctx context.Context, a *act, n int, err error, freed <-chan struct{}) end {
	if cur := conflictRecord(err); cur != nil {
		if cur.State == ledger.StatusClaimed && cur.Attempt == n-1 && cur.Owner != d.inc {
			// A shared ledger refused to take over another node's claim:
			// that node is alive (its lease holds) and performs the
			// attempt. Wait, then read its record again.
			if !d.waitOtherNode(ctx) {
				return endStopped
			}
			a.rec = nil
			return endSucceeded
		}
		a.rec = cur
		return endSucceeded
	}
	if due, ok := notDue(err); ok {
		d.e.log.Info(waitingMsg, "run_id", d.runID, "action_id", a.n.id, "error", err)
		a.notDue = &due
		return endStopped
	}
	if errors.Is(err, ledger.ErrStale) || errors.Is(err, ledger.ErrNotDue) { // not due, without a time: stale facts (timer.go)
		d.e.log.Info(staleMsg, "run_id", d.runID, "action_id", a.n.id, "error", err)
		a.stale = true
		return endStopped
	}
	if le := limitErr(err); le != nil {
		// The tool is full or its rate is spent: nothing was written and
		// no attempt counted. Wait, then decide again from the record.
		if !d.waitSlot(ctx, a, n, le, freed) {
			return endStopped
		}
		a.rec = nil
		return endSucceeded
	}
	if errors.Is(err, ledger.ErrBudgetExceeded) {
		if n > 1 {
			return d.overOnRetry(ctx, a, n, err)
		}
		// Another claim took the budget's room since it was read: this
		// drive leaves the action; the next one decides it again.
		d.e.log.Info("claim refused by a budget", "run_id", d.runID, "action_id", a.n.id, "error", err)
		return endStopped
	}
	a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: err})
	return endStopped
}

// otherNodeWait is how long a drive waits before it looks again at a key
// that another live node holds (shared ledger).
const otherNodeWait = 250 * time.Millisecond

// waitOtherNode waits otherNodeWait (false: ctx ended first).
func (d *driver) waitOtherNode(ctx context.Context) bool {
	t := time.NewTimer(otherNodeWait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attemptCall performs the attempt we hold (lookup first when required). again:
// a retry was claimed (or must be decided from a.rec: a.attempt is 0).
func (d *driver) attemptCall(ctx context.Context, a *act) (out json.RawMessage, how end, again bool) {
	spec := a.n.spec
	call := tools.Call{Key: a.key, RunID: d.runID, Action: a.n.id, Attempt: a.attempt, Args: a.args, ArgsValidated: a.checked}
	if ctx.Err() != nil {
		d.abandon(ctx, a, "interrupted before the call")
		return nil, endStopped, false
	}
	if d.e.draining() {
		// Shutting down: claimed, never sent. The next start calls it.
		d.abandon(ctx, a, "not called: this process is shutting down")
		return nil, endStopped, false
	}
	if lh, ok := d.e.led.(ledger.LeaseHolder); ok && !lh.LeaseValid() {
		// A shared ledger, and this node's lease may have lapsed (a pause
		// longer than it): another node may have taken the claim over.
		// The call is not made; the drive stops and starts again.
		d.abandon(ctx, a, "this node's lease may have lapsed: not called")
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "call", Err: ledger.ErrLeaseExpired})
		return nil, endStopped, false
	}
	d.e.obs.AttemptStarted(d.info(a))
	tctx, end := d.e.tracer.Start(ctx, Work{Kind: WorkAttempt, AttemptInfo: d.info(a)})
	cctx, cancel := context.WithTimeout(tctx, d.timeout(spec))
	t0 := time.Now()
	out, err := a.n.tool.Call(cctx, call)
	took := time.Since(t0)
	cancel()
	a.tries++
	a.ended = &AttemptResult{OK: err == nil, Took: took}
	if err != nil {
		a.ended.Failure, _ = tools.Classify(err)
	}
	end(Done{Err: err, Result: *a.ended})
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
	if outcome == tools.Definite && d.outputTooLarge(ctx, a, err, msg) { // large.go: it took effect
		return nil, endRecorded, false
	}
	f := d.facts(a, afterFailure)
	f.failure, f.retryAfter, f.msg, f.cancelled = outcome, after, msg, d.cancelled()
	dec := decide(f)
	a.maybeDone, a.unknownAt = dec.maybeDone, dec.unknownAt
	switch dec.verb {
	case doReview:
		d.park(ctx, a, dec.reason)
		return nil, endRecorded, false
	case doFail:
		// decide fails an action only when no attempt may have taken effect
		// (else a person reviews it): its budgets get the amount back.
		if d.record(ctx, a, ledger.FailWith(a.key, a.attempt, dec.reason, false, failureOf(outcome), nil).NoEffect()) {
			a.row.Status, a.row.Error = ledger.StatusFailed, dec.reason
			d.e.log.Warn("action failed", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", a.attempt,
				"outcome", outcome.String(), "error", dec.reason)
			if a.undoOf == "" {
				a.fail(fmt.Sprintf("action %s failed: %s", a.n.id, dec.reason))
			}
		}
		return nil, endRecorded, false
	}
	return d.retry(ctx, a, dec, msg)
}

// failureOf is the ledger's name of a failure class.
func failureOf(o tools.Outcome) ledger.Failure { return ledger.Failure(o.String()) }

// retry records the failed attempt (retryable, visible as
// action.attempt_failed), waits the backoff and starts the next attempt as
// the decision core says (dec: the doWait decision after the failure).
func (d *driver) retry(ctx context.Context, a *act, dec decision, msg string) (json.RawMessage, end, bool) {
	wait := waitWithin(d.e.backoff(d.e.retryOf(a.n.spec), dec.backoff, dec.floor), dec.floor, d.e.clock.Now(), dec.retryBy)
	data := mustJSON(map[string]any{"retry_in": wait.String(), "retry_in_ms": wait.Milliseconds()})
	if !d.record(ctx, a, ledger.FailWith(a.key, a.attempt, msg, true, failureOf(dec.failure), data)) {
		return nil, endStopped, false
	}
	if d.e.draining() {
		d.e.log.Info("attempt failed; not retried now: shutting down (the next start decides)", "run_id", d.runID, "action_id", a.n.id, "key", a.key,
			"attempt", a.attempt, "outcome", dec.failure.String())
		return nil, endStopped, false
	}
	d.e.log.Info("attempt failed, retrying", "run_id", d.runID, "action_id", a.n.id, "key", a.key,
		"attempt", a.attempt, "outcome", dec.failure.String(), "retry_in", wait)
	prev := a.attempt
	a.row.Status, a.row.Error = ledger.StatusPending, msg
	if err := d.e.sleep(ctx, wait); err != nil {
		// Interrupted, or shutting down (Drain): the failed attempt is
		// recorded; the next start decides what follows by the class.
		return nil, endStopped, false
	}
	a.attempt = 0
	if d.cancelled() {
		return nil, d.concludeOnCancel(ctx, a, prev+1), false
	}
	f := d.facts(a, afterBackoff)
	f.attempt, f.lookFrom = prev, dec.lookFrom
	next := decide(f)
	a.maybeDone, a.unknownAt = next.maybeDone, next.unknownAt
	if next.verb == doReview {
		d.parkAt(ctx, a, next)
		return nil, endRecorded, false
	}
	out, found, how, held := d.claimNext(ctx, a, next)
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

// claimNext performs a doCall or doLookup decision for attempt dec.attempt
// of a.key. For doLookup (an earlier attempt, claimed at dec.lookFrom, may
// have taken effect) the lookup and its visibility wait run first, while the
// previous attempt's record still stands (pending, or claimed by a process
// that is gone: dec.prevHeld). So every claim is recorded immediately before
// its call is sent, and "the previous claim + timeout + visibility_lag + skew
// margin" bounds when the previous attempt's write can still commit and show
// up, whether that attempt waited in a lookup first or not. A crash during
// the wait leaves the previous claim as the bound: nothing was sent after it.
//
// held: we hold attempt n (a.attempt), call the tool now. found: the lookup
// found the effect; out is to be recorded under a.attempt (the previous
// claim, or attempt n claimed for it). Otherwise how is endSucceeded with
// a.rec set (a claim conflicted: decide again), or the action ended.
func (d *driver) claimNext(ctx context.Context, a *act, dec decision) (out json.RawMessage, found bool, how end, held bool) {
	n := dec.attempt
	if dec.verb == doLookup {
		res, out, stopped := d.lookupPhase(ctx, a, dec)
		switch {
		case stopped:
			return nil, false, endStopped, false
		case res.verb == doCall:
			a.maybeDone = res.maybeDone // trusted: the earlier attempts took no effect
		default: // doAdopt, doReview
			if dec.prevHeld {
				// Record on the dead process's claim (any owner may).
				a.attempt = n - 1
			} else if ok, how := d.claimAs(ctx, a, n, false); !ok {
				return nil, false, how, false
			}
			if res.verb == doReview {
				d.park(ctx, a, res.reason)
				return nil, false, endRecorded, false
			}
			return out, true, endSucceeded, false
		}
	}
	ok, how := d.claim(ctx, a, n)
	return nil, false, how, ok
}

// lookupPhase runs the lookup before attempt dec.attempt, holding no claim,
// until the decision core says call (not found, trusted: dec.trustAt has
// passed), adopt (found) or review (the lookup kept failing); until then it
// waits and looks again. stopped: interrupted.
func (d *driver) lookupPhase(ctx context.Context, a *act, dec decision) (res decision, out json.RawMessage, stopped bool) {
	spec := a.n.spec
	looker, ok := a.n.tool.(tools.Looker)
	if !ok {
		return decision{verb: doCall, trusted: true}, nil, false
	}
	n := dec.attempt
	call := tools.Call{Key: a.key, RunID: d.runID, Action: a.n.id, Attempt: n, Args: a.args, ArgsValidated: a.checked}
	noted := false
	errs := 0
	for {
		if ctx.Err() != nil || d.e.draining() {
			return decision{}, nil, true
		}
		tctx, end := d.e.tracer.Start(ctx, Work{Kind: WorkLookup, AttemptInfo: d.lookInfo(a, n)})
		lctx, cancel := context.WithTimeout(tctx, d.timeout(spec))
		out, found, err := looker.Lookup(lctx, call)
		cancel()
		end(Done{Err: err, Found: err == nil && found})
		if err != nil && ctx.Err() != nil {
			return decision{}, nil, true
		}
		f := d.facts(a, afterLookup)
		f.attempt, f.trustAt, f.prevHeld = n, dec.trustAt, dec.prevHeld
		if err != nil {
			errs++
			f.lookupErr, f.lookupErrs, f.msg = true, errs, errText(err)
		} else {
			f.found, f.badOutput = found, found && !json.Valid(out)
		}
		res := decide(f)
		switch res.verb {
		case doAdopt:
			d.e.log.Info("lookup found the effect; not calling again", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", n)
			d.e.obs.LookupDone(d.lookInfo(a, n), true)
			return res, out, false
		case doCall:
			d.e.obs.LookupDone(d.lookInfo(a, n), false)
			return res, nil, false
		case doReview:
			return res, nil, false
		}
		var wait time.Duration
		if res.until.IsZero() {
			wait = d.e.backoff(d.e.retryOf(spec), res.backoff, 0)
			d.lookupWait(ctx, a, map[string]any{"attempt": n, "outcome": "lookup_error",
				"error": f.msg, "retry_in": wait.String(), "retry_in_ms": wait.Milliseconds()})
		} else {
			wait = res.until.Sub(f.now)
			if !noted {
				noted = true
				d.lookupWait(ctx, a, map[string]any{"attempt": n, "outcome": "not_found_yet",
					"reason":   "not found, but an earlier attempt may still commit or become visible; waiting before writing",
					"retry_in": wait.String(), "retry_in_ms": wait.Milliseconds()})
				d.e.log.Info("lookup not found yet; waiting for visibility", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "wait", wait)
			}
		}
		if err := d.e.sleep(ctx, wait); err != nil {
			return decision{}, nil, true
		}
	}
}

// lookInfo names the attempt a lookup runs for (attempt n, not yet claimed).
func (d *driver) lookInfo(a *act, n int) AttemptInfo {
	i := d.info(a)
	i.Attempt = n
	return i
}

// lookupWait appends an action.lookup_wait event (no state change): the
// lookup before an attempt waits (not found yet, or it failed).
func (d *driver) lookupWait(ctx context.Context, a *act, data map[string]any) {
	if _, err := apply(context.WithoutCancel(ctx), d.e.led, ledger.Note(d.runID, ledger.EventLookupWait, a.n.id, mustJSON(data))); err != nil {
		d.e.log.Warn("could not record a lookup wait", "run_id", d.runID, "action_id", a.n.id, "error", err)
	}
}

// cancelled reports whether the run was cancelled (by this process).
func (d *driver) cancelled() bool {
	c := false
	d.g.read(func(bool) { c = d.g.status == ledger.RunCancelled })
	return c
}

// claimedNow notes that a worker holds attempt n of a.key (Hooks.AfterClaim).
func (d *driver) claimedNow(a *act, n int, rec ledger.KeyRecord) {
	a.claimed(n, rec, d.e.clock.Now())
	if h := d.e.cfg.Hooks.AfterClaim; h != nil {
		h(a.n.id)
	}
}

// claimAlways claims attempt n of a.key whatever the run's status (to park
// it: never to call). how is endSucceeded when we hold the claim.
func (d *driver) claimAlways(ctx context.Context, a *act, n int) (bool, end) {
	res, err := apply(context.WithoutCancel(ctx), d.e.led, ledger.Claim(d.runID, a.n.id, a.row.Tool, a.key, a.args, n).WithCharges(a.charges...).Parking())
	if err != nil {
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "claim", Err: err})
		return false, endStopped
	}
	d.claimedNow(a, n, res[0].Key)
	return true, endSucceeded
}

// overOnRetry ends attempt n of an action whose earlier attempts took no
// effect and gave their budget reservation back, when taking it again would
// pass a limit (others took the room meanwhile: err). A budget that denies
// skips it (nothing happened; the run fails, as a denied action does); one
// that asks for approval parks it for a person (needs_review: resolve
// --retry goes past the limit, --skip gives up). Room found again (the
// measure says no budget is exceeded now): decide again.
func (d *driver) overOnRetry(ctx context.Context, a *act, n int, err error) end {
	bc := d.checkBudgets(ctx, a.row.Tool, a.args)
	if bc.gate == nil {
		a.rec = nil
		return endSucceeded
	}
	d.e.log.Info("retry refused by a budget", "run_id", d.runID, "action_id", a.n.id, "error", err)
	if bc.gate.Outcome != string(policy.Deny) {
		if _, how := d.claimAlways(ctx, a, n); how == endSucceeded {
			d.park(ctx, a, fmt.Sprintf("another attempt would pass a budget's limit (%s): approve going past it with a retry, or skip it", errText(err)))
		}
		return endRecorded
	}
	reason := fmt.Sprintf("not attempted again: %s", errText(err))
	if d.record(ctx, a, ledger.Skip(d.runID, a.n.id, reason).NoEffect()) {
		a.row.Status, a.row.Error = ledger.StatusSkipped, reason
		a.fail(fmt.Sprintf("action %s was %s", a.n.id, reason))
	}
	return endRecorded
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
			ops = append(ops, ledger.FailWith(a.key, rec.Attempt, "no effect: a lookup after the trust window found none", true,
				ledger.FailureNotSent, nil))
		}
		ops = append(ops, ledger.Skip(d.runID, a.n.id, "not attempted again: the run was cancelled").NoEffect())
		if d.record(ctx, a, ops...) {
			a.row.Status = ledger.StatusSkipped
		}
		return endRecorded
	}
	if _, how := d.claimAlways(ctx, a, n); how == endSucceeded {
		d.park(ctx, a, "the run was cancelled before this action's next attempt; an earlier attempt's outcome is unknown")
	}
	return endRecorded
}
