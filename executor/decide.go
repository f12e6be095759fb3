package executor

import (
	"fmt"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// The decision core: what to do next with an action's key, as a pure
// function of the facts (tools/README.md, "Effect classes" and its failure
// classes). No ledger, no clock, no tool: the driver gathers the facts,
// asks decide, and performs the decision.

// stage says what just happened when the driver asks what to do.
type stage int

const (
	// atRecord: no attempt is held; the key's record (facts.rec) was read.
	atRecord stage = iota
	// afterFailure: the call of the held attempt (facts.attempt) failed
	// with facts.failure.
	afterFailure
	// afterBackoff: the wait after a failed attempt (facts.attempt, now
	// pending) is over; facts.lookFrom is what the failure asked for.
	afterBackoff
	// afterLookup: a lookup before attempt facts.attempt answered
	// (facts.found, facts.lookupErr); facts.trustAt is when "not found"
	// becomes trustworthy.
	afterLookup
)

// facts is everything decide looks at.
type facts struct {
	stage stage
	now   time.Time

	// The tool (its Spec) and the drive's settings.
	class         tools.Class
	keyTTL        time.Duration
	hasLookup     bool          // the tool implements tools.Looker
	timeout       time.Duration // the call timeout (tool's, else the engine's)
	visibilityLag time.Duration
	skew          time.Duration
	retry         RetryPolicy // the tool's: the engine's with the tool's own settings

	// The action in this drive.
	undoOf    string    // a compensating action: the id of the action it undoes
	linked    bool      // its row already mirrors its key's outcome
	cancelled bool      // the run was cancelled (by this process)
	maybeDone bool      // an earlier attempt may have taken effect (what this drive knows)
	unknownAt time.Time // claim time of the latest attempt whose outcome is unknown
	claimAt   time.Time // claim time of the latest attempt of this drive
	first     time.Time // when attempt 1 was claimed (zero: not known)
	tries     int       // calls made in this drive
	began     time.Time // first claim of this drive

	// atRecord
	rec  ledger.KeyRecord
	mine bool // rec's claim is owned by this handle's incarnation

	// afterFailure, afterBackoff, afterLookup
	attempt    int           // afterFailure: held; afterBackoff: pending; afterLookup: the one to claim
	failure    tools.Outcome // afterFailure
	retryAfter time.Duration // afterFailure: the server's Retry-After
	msg        string        // afterFailure, afterLookup: the error's text
	lookFrom   time.Time     // afterBackoff: look first, trusting "not found" from this claim's window

	// afterLookup
	found      bool // the lookup found the effect
	badOutput  bool // ... but its output is not JSON
	lookupErr  bool // the lookup failed
	lookupErrs int  // lookup failures so far for this attempt
	trustAt    time.Time
	prevHeld   bool // the previous attempt's claim still stands (takeover)
}

// verb is what the driver does.
type verb int

const (
	// doCall: claim attempt d.attempt (unless held) and call the tool.
	doCall verb = iota
	// doLookup: run the lookup before claiming attempt d.attempt; "not
	// found" is trusted from d.trustAt (the claim at d.lookFrom + timeout +
	// visibility_lag + skew margin), until then wait.
	doLookup
	// doWait: wait (backoff step d.backoff, at least d.floor, or until
	// d.until), then decide again. afterFailure: record the attempt as a
	// retryable failure first; the retry looks first when d.lookFrom is set.
	doWait
	// doAdopt: the key's output (the record's, or the lookup's) is the
	// action's.
	doAdopt
	// doReview: needs_review for d.attempt (claimed first when d.claimToPark).
	doReview
	// doFail: the attempt failed definitely (d.reason); the run fails.
	doFail
	// doMirror: the record has an outcome another drive recorded
	// (needs_review, failed, skipped): the row mirrors it.
	doMirror
	// doRefuse: the run fails without a record (d.reason): a new revision
	// reuses a compensated key.
	doRefuse
	// doBroken: the record is in no state the executor knows (d.reason).
	doBroken
)

// decision is what decide returns.
type decision struct {
	verb    verb
	attempt int    // doCall, doLookup: to claim; doReview: to park; doAdopt: to record under
	reason  string // doReview, doFail, doRefuse, doBroken

	// closeUnknown: first record the record's own attempt (claimed by this
	// process, never recorded) as failed with outcome unknown (atRecord).
	closeUnknown bool
	claimToPark  bool // doReview: the key is pending: claim d.attempt to park it
	prevHeld     bool // doLookup: the previous claim stands (a found effect is recorded on it)
	lookFrom     time.Time
	trustAt      time.Time
	trusted      bool          // afterLookup doCall: not found, and trusted (nothing took effect)
	failure      tools.Outcome // doWait, doFail: the class to record
	backoff      int           // doWait: backoff step (0: none)
	floor        time.Duration // doWait: least wait
	until        time.Time     // doWait (afterLookup): wait until then
	// retryBy: doWait (afterFailure, a retry the budget allows): the next
	// attempt starts by then, the end of the retry budget (zero: no bound).
	retryBy time.Time

	// The drive's facts after this decision.
	maybeDone bool
	unknownAt time.Time
}

// maxInFlightTries bounds the attempts of one drive that meet "key in flight"
// (the backoff grows, so the tool's timeout is normally reached first).
const maxInFlightTries = 40

// decide is the executor's decision core.
func decide(f facts) decision {
	switch f.stage {
	case atRecord:
		return decideRecord(f)
	case afterFailure:
		return decideFailure(f)
	case afterBackoff:
		return decideBackoff(f)
	default:
		return decideLookup(f)
	}
}

// recMaybeDone reports whether rec says an earlier attempt may have taken
// effect. A record from before the key record carried that fact (no
// FirstClaimedAt) that was attempted is assumed to.
func recMaybeDone(rec ledger.KeyRecord) bool {
	return rec.Attempt > 0 && (rec.MaybeTookEffect || rec.FirstClaimedAt.IsZero())
}

// pastKeyTTL reports whether a keyed provider may have forgotten the key:
// key_ttl counted from the first claim (unknown: assume so).
func (f facts) pastKeyTTL(first time.Time) bool {
	if f.keyTTL <= 0 {
		return false
	}
	if first.IsZero() {
		return true
	}
	return f.now.Sub(first) > f.keyTTL
}

// trustFrom is when "not found" from a lookup counts, for a previous claim at t.
func (f facts) trustFrom(t time.Time) time.Time {
	return t.Add(f.timeout + f.visibilityLag + f.skew)
}

// next decides attempt n's start: a lookup first when lookFrom is set.
func (f facts) next(d decision, n int, lookFrom time.Time, prevHeld bool) decision {
	d.attempt = n
	if lookFrom.IsZero() {
		d.verb = doCall
		return d
	}
	d.verb, d.lookFrom, d.trustAt, d.prevHeld = doLookup, lookFrom, f.trustFrom(lookFrom), prevHeld
	return d
}

func review(d decision, n int, reason string) decision {
	d.verb, d.attempt, d.reason = doReview, n, reason
	return d
}

func decideRecord(f facts) decision {
	rec := f.rec
	d := decision{maybeDone: f.maybeDone, unknownAt: f.unknownAt}
	if rec.State == ledger.StatusClaimed && f.mine {
		// Claimed by this process, yet no goroutine holds it: its outcome
		// was never recorded. Close that attempt as unknown and go on as
		// after a crash.
		if f.class == tools.AtMostOnce {
			return review(d, rec.Attempt, fmt.Sprintf("outcome unknown: attempt %d of this process was never recorded (at-most-once: not retried)", rec.Attempt))
		}
		d.closeUnknown = true
		d.maybeDone, d.unknownAt = true, rec.ClaimedAt
		rec.State, rec.MaybeTookEffect = ledger.StatusPending, true
	}
	switch rec.State {
	case ledger.StatusSucceeded, ledger.StatusCompensated:
		if rec.State == ledger.StatusCompensated && f.undoOf == "" && !f.linked {
			// Its output describes nothing that exists: never build on it.
			d.verb, d.reason = doRefuse, "its key was compensated (undone) in an earlier revision; change its arguments to run it again, or fork the run"
			return d
		}
		d.verb, d.attempt = doAdopt, rec.Attempt
		return d
	case ledger.StatusNeedsReview, ledger.StatusFailed, ledger.StatusSkipped:
		d.verb = doMirror
		return d
	case ledger.StatusClaimed, ledger.StatusPending:
	default:
		d.verb, d.reason = doBroken, fmt.Sprintf("unexpected key state %q", rec.State)
		return d
	}
	// Claimed by a process that is gone, or pending after a failed attempt
	// or a person's "retry".
	stale := rec.State == ledger.StatusClaimed
	if stale {
		d.maybeDone, d.unknownAt = true, rec.ClaimedAt
	} else if rec.Attempt > 0 && !d.maybeDone {
		d.maybeDone = recMaybeDone(rec)
	}
	return f.retakeByClass(d, rec, stale)
}

// retakeByClass decides the next attempt n of a key claimed by a process
// that is gone (stale) or pending, by the tool's class.
func (f facts) retakeByClass(d decision, rec ledger.KeyRecord, stale bool) decision {
	n := rec.Attempt + 1
	var lookFrom time.Time
	switch f.class {
	case tools.AtMostOnce:
		if stale {
			return review(d, rec.Attempt, fmt.Sprintf("outcome unknown: attempt %d was claimed by a process that is gone (at-most-once: not retried)", rec.Attempt))
		}
	case tools.Lookup:
		lookFrom = rec.ClaimedAt
	case tools.Keyed:
		first := rec.FirstClaimedAt
		if first.IsZero() && rec.Attempt <= 1 {
			first = rec.ClaimedAt
		}
		if f.pastKeyTTL(first) {
			switch {
			case f.hasLookup:
				lookFrom = rec.ClaimedAt
			case stale:
				return review(d, rec.Attempt, fmt.Sprintf("outcome unknown and the provider's key_ttl (%v) has passed since the first claim: a new call could repeat the effect", f.keyTTL))
			default:
				d.claimToPark = true
				return review(d, n, fmt.Sprintf("the provider's key_ttl (%v) has passed since the first claim: a new call could repeat the effect", f.keyTTL))
			}
		}
	}
	return f.next(d, n, lookFrom, stale && rec.Attempt > 0)
}

// canRetry applies the retry budget of one drive: attempts, and time (a
// retry starts before MaxElapsed has passed since the first attempt).
func (f facts) canRetry(after time.Duration) bool {
	if f.tries >= f.retry.MaxAttempts {
		return false
	}
	return f.now.Sub(f.began)+after < f.retry.MaxElapsed
}

// spent says how much of the retry budget the drive used, and what it is.
func (f facts) spent() string {
	r := f.retry
	return fmt.Sprintf("over %v, the end of its retry budget (%d attempts within %v)",
		f.now.Sub(f.began).Round(time.Millisecond), r.MaxAttempts, r.MaxElapsed)
}

// retryWithin is a retry canRetry allowed: as wait, and the next attempt
// starts before the retry budget ends.
func (f facts) retryWithin(d decision, floor time.Duration, lookFrom time.Time) decision {
	d = f.wait(d, floor, lookFrom)
	if d.verb == doWait {
		d.retryBy = f.began.Add(f.retry.MaxElapsed)
	}
	return d
}

// wait is a retry after the failed attempt: record it, back off, go on.
func (f facts) wait(d decision, floor time.Duration, lookFrom time.Time) decision {
	if d.maybeDone && f.cancelled {
		// The run was cancelled while the call was in flight: nothing more
		// is sent, and the effect may exist; a person says what happened.
		return review(d, f.attempt, "the run was cancelled while this call was in flight; its outcome is unknown: "+f.msg)
	}
	d.verb, d.failure, d.backoff, d.floor, d.lookFrom = doWait, f.failure, f.tries, floor, lookFrom
	return d
}

func decideFailure(f facts) decision {
	d := decision{maybeDone: f.maybeDone, unknownAt: f.unknownAt, failure: f.failure}
	switch f.failure {
	case tools.Definite:
		return f.definite(d)
	case tools.NotSentOutcome, tools.NotProcessed:
		return f.notDone(d)
	case tools.KeyInFlight:
		return f.keyInFlight(d)
	}
	return f.unknown(d)
}

// mayExist: an earlier attempt may have taken effect (what a read_only
// call does is no effect).
func (f facts) mayExist(d decision) bool { return d.maybeDone && f.class != tools.ReadOnly }

// definite decides after an answer that says the attempt did not happen.
func (f facts) definite(d decision) decision {
	switch {
	case f.undoOf != "":
		// An undo that cannot be done leaves the effect in place: a
		// person decides (undo by hand and mark it done, retry, or skip).
		return review(d, f.attempt, fmt.Sprintf("compensation of %s refused: %s", f.undoOf, f.msg))
	case f.mayExist(d):
		// "It did not happen" answers this attempt only: an earlier one
		// whose outcome is unknown may have taken effect, so neither
		// failing (and compensating) nor calling again is safe.
		return review(d, f.attempt, fmt.Sprintf("attempt %d was refused (%s), but an earlier attempt's outcome is unknown, so its effect may exist", f.attempt, f.msg))
	}
	d.verb, d.attempt, d.reason = doFail, f.attempt, f.msg
	return d
}

// notDone decides after a call that was not sent or not processed.
func (f facts) notDone(d decision) decision {
	after := f.retryAfter
	if f.canRetry(after) {
		return f.retryWithin(d, after, time.Time{})
	}
	final := fmt.Sprintf("gave up after %d attempts (%s) %s: %s", f.tries, f.failure, f.spent(), f.msg)
	if r := f.retry; after > 0 && f.tries < r.MaxAttempts {
		final = fmt.Sprintf("the provider asked to wait %v before another attempt, beyond this run's retry budget (%v in all, %v used): %s; "+
			"nothing was processed, so running the same command again later is safe", after, r.MaxElapsed, f.now.Sub(f.began).Round(time.Millisecond), f.msg)
	}
	switch {
	case f.undoOf != "":
		return review(d, f.attempt, fmt.Sprintf("compensation of %s not done: %s", f.undoOf, final))
	case f.mayExist(d):
		return review(d, f.attempt, final+"; an earlier attempt's outcome is unknown, so its effect may exist")
	}
	d.verb, d.attempt, d.reason = doFail, f.attempt, final
	return d
}

// keyInFlight decides after the provider said another request with this
// key is still being processed. It ends within the tool's timeout of its
// claim: keep asking (with backoff) until then, whatever the attempt
// budget, and only past that ask a person.
func (f facts) keyInFlight(d decision) decision {
	d.maybeDone = true
	since := f.unknownAt
	if since.IsZero() {
		since = f.first
	}
	if since.IsZero() {
		since = f.claimAt
	}
	deadline := since.Add(f.timeout + f.skew)
	if !f.now.Before(deadline) || f.tries >= maxInFlightTries {
		return review(d, f.attempt, fmt.Sprintf("the provider still reports the key in flight after %d attempts, %v after the earlier request was claimed (its timeout is %v): %s",
			f.tries, f.now.Sub(since).Round(time.Millisecond), f.timeout, f.msg))
	}
	after := f.retryAfter
	if w := deadline.Sub(f.now); after > w {
		after = w // look again once the earlier request must have ended
	}
	return f.wait(d, max(after, f.retry.Base), time.Time{})
}

// unknown decides after a call whose outcome is unknown: the effect may
// have happened. By class.
func (f facts) unknown(d decision) decision {
	d.maybeDone, d.unknownAt = true, f.claimAt
	switch f.class {
	case tools.AtMostOnce:
		return review(d, f.attempt, "outcome unknown (at-most-once: not retried): "+f.msg)
	case tools.Keyed:
		if f.pastKeyTTL(f.first) {
			if !f.hasLookup {
				return review(d, f.attempt, fmt.Sprintf("outcome unknown and the provider's key_ttl (%v) has passed: %s", f.keyTTL, f.msg))
			}
			if f.canRetry(0) {
				return f.retryWithin(d, 0, f.claimAt)
			}
		} else if f.canRetry(0) {
			return f.retryWithin(d, 0, time.Time{})
		}
	case tools.Lookup:
		if f.canRetry(0) {
			return f.retryWithin(d, 0, f.claimAt)
		}
	default: // read_only, idempotent
		if f.canRetry(0) {
			return f.retryWithin(d, 0, time.Time{})
		}
	}
	return review(d, f.attempt, fmt.Sprintf("outcome unknown after %d attempts %s: %s", f.tries, f.spent(), f.msg))
}

func decideBackoff(f facts) decision {
	d := decision{maybeDone: f.maybeDone, unknownAt: f.unknownAt}
	n := f.attempt + 1
	lookFrom := f.lookFrom
	if f.class == tools.Keyed && d.maybeDone && lookFrom.IsZero() && f.pastKeyTTL(f.first) {
		// Checked after the wait, right before the next claim and call: past
		// key_ttl the provider may have forgotten the key of an attempt
		// whose outcome is unknown, and a call could repeat its effect.
		if !f.hasLookup {
			d.claimToPark = true
			return review(d, n, fmt.Sprintf("the provider's key_ttl (%v) has passed since the first claim: a new call could repeat the effect", f.keyTTL))
		}
		lookFrom = f.unknownAt
		if lookFrom.IsZero() {
			lookFrom = f.claimAt
		}
	}
	return f.next(d, n, lookFrom, false)
}

func decideLookup(f facts) decision {
	d := decision{maybeDone: f.maybeDone, unknownAt: f.unknownAt, attempt: f.attempt, prevHeld: f.prevHeld, trustAt: f.trustAt}
	switch {
	case f.lookupErr:
		if f.lookupErrs >= f.retry.MaxAttempts {
			return review(d, f.attempt, fmt.Sprintf("lookup failed %d times: %s", f.lookupErrs, f.msg))
		}
		d.verb, d.backoff = doWait, f.lookupErrs
		return d
	case f.found && f.badOutput:
		return review(d, f.attempt, "lookup found the effect but returned invalid JSON")
	case f.found:
		d.verb = doAdopt
		return d
	case !f.now.Before(f.trustAt):
		// Not found, and trusted: the earlier attempts took no effect.
		d.verb, d.trusted, d.maybeDone = doCall, true, false
		return d
	}
	d.verb, d.until = doWait, f.trustAt
	return d
}
