package executor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// The decision core's tables: no ledger, no disk, no clock. Every row of
// the class table (tools/README.md, Effect classes) meets every failure class, key_ttl, the lookup
// window, exhausted retries, earlier unknown outcomes and compensation.

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

var budget = RetryPolicy{MaxAttempts: 5, Base: 200 * time.Millisecond, Max: 10 * time.Second, MaxElapsed: 2 * time.Minute}

// base is attempt 2 of a drive that began a second ago, claimed now.
func base(s stage, class tools.Class) facts {
	return facts{stage: s, now: t0, class: class, timeout: 30 * time.Second, visibilityLag: 5 * time.Second,
		skew: 2 * time.Second, retry: budget, claimAt: t0.Add(-time.Second), first: t0.Add(-10 * time.Second),
		tries: 1, began: t0.Add(-time.Second), attempt: 2}
}

// want is what a row expects; zero fields are not checked except verb.
type want struct {
	verb        verb
	attempt     int
	reason      string // a substring of the reason
	lookFrom    time.Time
	floor       time.Duration
	until       time.Time
	maybeDone   *bool
	claimToPark bool
	close       bool
	prevHeld    bool
}

var (
	yes = func() *bool { b := true; return &b }()
	no  = func() *bool { b := false; return &b }()
)

func check(t *testing.T, name string, f facts, w want) {
	t.Helper()
	d := decide(f)
	var errs []string
	if d.verb != w.verb {
		errs = append(errs, fmt.Sprintf("verb %v, want %v", d.verb, w.verb))
	}
	if w.attempt != 0 && d.attempt != w.attempt {
		errs = append(errs, fmt.Sprintf("attempt %d, want %d", d.attempt, w.attempt))
	}
	if !strings.Contains(d.reason, w.reason) {
		errs = append(errs, fmt.Sprintf("reason %q, want it to contain %q", d.reason, w.reason))
	}
	if !d.lookFrom.Equal(w.lookFrom) {
		errs = append(errs, fmt.Sprintf("lookFrom %v, want %v", d.lookFrom, w.lookFrom))
	}
	if w.floor != 0 && d.floor != w.floor {
		errs = append(errs, fmt.Sprintf("floor %v, want %v", d.floor, w.floor))
	}
	if !d.until.Equal(w.until) {
		errs = append(errs, fmt.Sprintf("until %v, want %v", d.until, w.until))
	}
	if w.maybeDone != nil && d.maybeDone != *w.maybeDone {
		errs = append(errs, fmt.Sprintf("maybeDone %v, want %v", d.maybeDone, *w.maybeDone))
	}
	if d.claimToPark != w.claimToPark || d.closeUnknown != w.close || d.prevHeld != w.prevHeld {
		errs = append(errs, fmt.Sprintf("claimToPark %v closeUnknown %v prevHeld %v, want %v %v %v",
			d.claimToPark, d.closeUnknown, d.prevHeld, w.claimToPark, w.close, w.prevHeld))
	}
	if d.verb == doLookup && !d.trustAt.Equal(d.lookFrom.Add(f.timeout+f.visibilityLag+f.skew)) {
		errs = append(errs, fmt.Sprintf("trustAt %v, want lookFrom %v + timeout + visibility_lag + skew", d.trustAt, d.lookFrom))
	}
	if len(errs) > 0 {
		t.Errorf("%s: %s (decision %+v)", name, strings.Join(errs, "; "), d)
	}
}

var classes = []tools.Class{tools.ReadOnly, tools.Idempotent, tools.Keyed, tools.Lookup, tools.AtMostOnce}

// Every class meets every failure class, with retries left and nothing
// unknown before.
func TestDecideFailureByClass(t *testing.T) {
	t.Parallel()
	for _, c := range classes {
		fail := func(o tools.Outcome, after time.Duration) facts {
			f := base(afterFailure, c)
			f.failure, f.retryAfter, f.msg = o, after, "boom"
			return f
		}
		check(t, string(c)+" not sent", fail(tools.NotSentOutcome, 0), want{verb: doWait, maybeDone: no})
		check(t, string(c)+" not processed, Retry-After 3s", fail(tools.NotProcessed, 3*time.Second), want{verb: doWait, floor: 3 * time.Second, maybeDone: no})
		check(t, string(c)+" not processed, Retry-After past the budget", fail(tools.NotProcessed, time.Hour),
			want{verb: doFail, attempt: 2, reason: "beyond this run's retry budget"})
		check(t, string(c)+" definite", fail(tools.Definite, 0), want{verb: doFail, attempt: 2, reason: "boom"})

		kif := fail(tools.KeyInFlight, 0)
		check(t, string(c)+" key in flight within the bound", kif, want{verb: doWait, floor: budget.Base, maybeDone: yes})
		kif.retryAfter = time.Hour
		check(t, string(c)+" key in flight, Retry-After capped at the bound", kif,
			want{verb: doWait, floor: kif.first.Add(kif.timeout + kif.skew).Sub(t0), maybeDone: yes})
		kif.now = kif.first.Add(kif.timeout + kif.skew)
		check(t, string(c)+" key in flight past the bound", kif, want{verb: doReview, attempt: 2, reason: "still reports the key in flight", maybeDone: yes})
		kif = fail(tools.KeyInFlight, 0)
		kif.tries = maxInFlightTries
		check(t, string(c)+" key in flight, too many tries", kif, want{verb: doReview, reason: "still reports the key in flight"})

		unk := fail(tools.Unknown, 0)
		switch c {
		case tools.AtMostOnce:
			check(t, string(c)+" unknown", unk, want{verb: doReview, attempt: 2, reason: "at-most-once: not retried", maybeDone: yes})
		case tools.Lookup:
			check(t, string(c)+" unknown", unk, want{verb: doWait, lookFrom: unk.claimAt, maybeDone: yes})
		default: // read_only, idempotent, keyed within key_ttl (none declared)
			check(t, string(c)+" unknown", unk, want{verb: doWait, maybeDone: yes})
		}
		if d := decide(unk); !d.unknownAt.Equal(unk.claimAt) {
			t.Errorf("%s unknown: unknownAt %v, want this attempt's claim %v", c, d.unknownAt, unk.claimAt)
		}
	}
}

// Retries that run out: unknown ends in needs_review, definite and not
// sent in failed, unless an earlier attempt may have taken effect.
func TestDecideExhaustedAndEarlierUnknown(t *testing.T) {
	t.Parallel()
	for _, c := range classes {
		f := base(afterFailure, c)
		f.tries, f.msg = budget.MaxAttempts, "boom"

		f.failure = tools.Unknown
		w := want{verb: doReview, reason: "outcome unknown after 5 attempts"}
		if c == tools.AtMostOnce {
			w.reason = "at-most-once"
		}
		check(t, string(c)+" unknown, out of attempts", f, w)
		g := f
		g.tries, g.began = 1, t0.Add(-budget.MaxElapsed-time.Second)
		if c != tools.AtMostOnce {
			w.reason = "outcome unknown after 1 attempts"
		}
		check(t, string(c)+" unknown, out of time", g, w)

		f.failure = tools.NotSentOutcome
		check(t, string(c)+" not sent, out of attempts", f, want{verb: doFail, reason: "gave up after 5 attempts (not_sent)"})

		// An earlier attempt's outcome is unknown: no failure (and no
		// compensation) for what may exist, except for read_only.
		f.maybeDone = true
		earlier := want{verb: doReview, reason: "an earlier attempt's outcome is unknown"}
		if c == tools.ReadOnly {
			earlier = want{verb: doFail, reason: "gave up"}
		}
		check(t, string(c)+" not sent after an earlier unknown, out of attempts", f, earlier)
		f.failure, f.tries = tools.Definite, 1
		if c == tools.ReadOnly {
			earlier = want{verb: doFail, reason: "boom"}
		} else {
			earlier.reason = "attempt 2 was refused (boom), but an earlier attempt's outcome is unknown"
		}
		check(t, string(c)+" definite after an earlier unknown", f, earlier)

		// With retries left, not sent after an unknown retries.
		f.failure = tools.NotSentOutcome
		check(t, string(c)+" not sent after an earlier unknown, retries left", f, want{verb: doWait, maybeDone: yes})
		// ... unless the run was cancelled meanwhile: a person decides.
		f.cancelled = true
		check(t, string(c)+" cancelled, earlier unknown", f, want{verb: doReview, reason: "the run was cancelled while this call was in flight"})
		f.maybeDone = false
		check(t, string(c)+" cancelled, nothing unknown", f, want{verb: doWait, maybeDone: no})
	}
}

// key_ttl: a keyed call whose outcome is unknown is called again with the
// same key while the provider remembers it; past key_ttl it looks first if
// it can, else a person decides.
func TestDecideKeyTTL(t *testing.T) {
	t.Parallel()
	f := base(afterFailure, tools.Keyed)
	f.failure, f.msg, f.keyTTL = tools.Unknown, "timeout", time.Minute
	check(t, "within key_ttl", f, want{verb: doWait, maybeDone: yes})
	f.first = t0.Add(-2 * time.Minute)
	check(t, "past key_ttl, no lookup", f, want{verb: doReview, attempt: 2, reason: "key_ttl (1m0s) has passed"})
	f.hasLookup = true
	check(t, "past key_ttl, lookup", f, want{verb: doWait, lookFrom: f.claimAt, maybeDone: yes})
	f.hasLookup, f.first = false, time.Time{}
	check(t, "first claim unknown counts as past", f, want{verb: doReview, reason: "key_ttl"})

	// After the backoff, right before the next claim.
	b := base(afterBackoff, tools.Keyed)
	b.keyTTL, b.maybeDone, b.unknownAt = time.Minute, true, t0.Add(-5*time.Second)
	check(t, "backoff within key_ttl", b, want{verb: doCall, attempt: 3, maybeDone: yes})
	b.first = t0.Add(-2 * time.Minute)
	check(t, "backoff past key_ttl, no lookup", b, want{verb: doReview, attempt: 3, claimToPark: true, reason: "key_ttl (1m0s) has passed since the first claim"})
	b.hasLookup = true
	check(t, "backoff past key_ttl, lookup", b, want{verb: doLookup, attempt: 3, lookFrom: b.unknownAt, maybeDone: yes})
	b.maybeDone = false
	check(t, "backoff past key_ttl, nothing unknown", b, want{verb: doCall, attempt: 3})
	b.lookFrom = t0.Add(-3 * time.Second)
	check(t, "backoff with a lookup asked for", b, want{verb: doLookup, attempt: 3, lookFrom: b.lookFrom})
}

// What a key record read with no attempt held leads to.
func TestDecideRecord(t *testing.T) {
	t.Parallel()
	claimed := t0.Add(-time.Minute)
	rec := func(st ledger.Status, attempt int) ledger.KeyRecord {
		return ledger.KeyRecord{State: st, Attempt: attempt, Owner: "gone", ClaimedAt: claimed, FirstClaimedAt: claimed.Add(-time.Minute)}
	}
	at := func(c tools.Class, r ledger.KeyRecord) facts {
		f := base(atRecord, c)
		f.rec, f.attempt, f.tries, f.began, f.claimAt, f.first = r, 0, 0, time.Time{}, time.Time{}, time.Time{}
		return f
	}
	for _, c := range classes {
		check(t, string(c)+" succeeded", at(c, rec(ledger.StatusSucceeded, 2)), want{verb: doAdopt, attempt: 2})
		for _, st := range []ledger.Status{ledger.StatusNeedsReview, ledger.StatusFailed, ledger.StatusSkipped} {
			check(t, string(c)+" "+string(st), at(c, rec(st, 1)), want{verb: doMirror})
		}
		f := at(c, rec(ledger.StatusCompensated, 1))
		check(t, string(c)+" compensated, reused by a new revision", f, want{verb: doRefuse, reason: "compensated (undone)"})
		f.linked = true
		check(t, string(c)+" compensated, row linked", f, want{verb: doAdopt})
		check(t, string(c)+" unknown state", at(c, rec("bogus", 1)), want{verb: doBroken, reason: "bogus"})

		// Claimed by this process, never recorded.
		f = at(c, rec(ledger.StatusClaimed, 1))
		f.mine = true
		switch c {
		case tools.AtMostOnce:
			check(t, string(c)+" own unrecorded claim", f, want{verb: doReview, attempt: 1, reason: "never recorded"})
		case tools.Lookup:
			check(t, string(c)+" own unrecorded claim", f, want{verb: doLookup, attempt: 2, lookFrom: claimed, close: true, maybeDone: yes})
		default:
			check(t, string(c)+" own unrecorded claim", f, want{verb: doCall, attempt: 2, close: true, maybeDone: yes})
		}

		// Claimed by a process that is gone.
		f = at(c, rec(ledger.StatusClaimed, 1))
		switch c {
		case tools.AtMostOnce:
			check(t, string(c)+" dead claim", f, want{verb: doReview, attempt: 1, reason: "claimed by a process that is gone"})
		case tools.Lookup:
			check(t, string(c)+" dead claim", f, want{verb: doLookup, attempt: 2, lookFrom: claimed, prevHeld: true, maybeDone: yes})
		default:
			check(t, string(c)+" dead claim", f, want{verb: doCall, attempt: 2, maybeDone: yes})
		}

		// Pending after a failed attempt: what the record says about earlier attempts.
		p := rec(ledger.StatusPending, 1)
		w := want{verb: doCall, attempt: 2, maybeDone: no}
		if c == tools.Lookup {
			w = want{verb: doLookup, attempt: 2, lookFrom: claimed, maybeDone: no}
		}
		check(t, string(c)+" pending, nothing unknown", at(c, p), w)
		p.MaybeTookEffect = true
		w.maybeDone = yes
		check(t, string(c)+" pending, an earlier attempt may have taken effect", at(c, p), w)
		p.MaybeTookEffect, p.FirstClaimedAt = false, time.Time{}
		check(t, string(c)+" pending, record from before the safety facts", at(c, p), w)
	}

	// key_ttl counted from the record's first claim.
	k := at(tools.Keyed, rec(ledger.StatusPending, 2))
	k.keyTTL = 3 * time.Minute
	check(t, "keyed pending within key_ttl", k, want{verb: doCall, attempt: 3})
	k.keyTTL = time.Minute
	check(t, "keyed pending past key_ttl", k, want{verb: doReview, attempt: 3, claimToPark: true, reason: "key_ttl (1m0s) has passed"})
	k.hasLookup = true
	check(t, "keyed pending past key_ttl, lookup", k, want{verb: doLookup, attempt: 3, lookFrom: claimed})
	k = at(tools.Keyed, rec(ledger.StatusClaimed, 2))
	k.keyTTL = time.Minute
	check(t, "keyed dead claim past key_ttl", k, want{verb: doReview, attempt: 2, reason: "outcome unknown and the provider's key_ttl", maybeDone: yes})
	k.hasLookup = true
	check(t, "keyed dead claim past key_ttl, lookup", k, want{verb: doLookup, attempt: 3, lookFrom: claimed, prevHeld: true, maybeDone: yes})
	// Attempt 1 of a record without FirstClaimedAt: its claim is the first.
	old := rec(ledger.StatusClaimed, 1)
	old.FirstClaimedAt = time.Time{}
	k = at(tools.Keyed, old)
	k.keyTTL = 90 * time.Second
	check(t, "old record, attempt 1 within key_ttl", k, want{verb: doCall, attempt: 2, maybeDone: yes})
	old.Attempt = 2
	k.rec = old
	check(t, "old record, attempt 2: first claim unknown, key_ttl counts as passed", k, want{verb: doReview, attempt: 2, reason: "key_ttl"})
}

// The lookup window: "not found" before the trust time waits until then;
// after it, it is trusted and the call goes ahead.
func TestDecideLookupWindow(t *testing.T) {
	t.Parallel()
	f := base(afterLookup, tools.Lookup)
	f.attempt, f.maybeDone = 3, true
	f.trustAt = t0.Add(10 * time.Second)
	check(t, "not found before the trust time", f, want{verb: doWait, until: f.trustAt, maybeDone: yes})
	f.now = f.trustAt
	check(t, "not found at the trust time", f, want{verb: doCall, attempt: 3, maybeDone: no})
	if !decide(f).trusted {
		t.Error("a trusted not-found is not marked trusted")
	}
	f.found = true
	check(t, "found", f, want{verb: doAdopt, attempt: 3, maybeDone: yes})
	f.badOutput = true
	check(t, "found, bad output", f, want{verb: doReview, reason: "invalid JSON"})
	f.found, f.badOutput, f.lookupErr, f.msg = false, false, true, "503"
	f.lookupErrs = 1
	if d := decide(f); d.verb != doWait || d.backoff != 1 || !d.until.IsZero() {
		t.Errorf("lookup error with tries left: %+v, want a backoff wait", d)
	}
	f.lookupErrs = budget.MaxAttempts
	check(t, "lookup error, out of tries", f, want{verb: doReview, attempt: 3, reason: "lookup failed 5 times: 503"})
}

// Compensation: an undo that is refused or cannot be sent leaves the effect
// in place: a person decides, it never fails quietly.
func TestDecideCompensation(t *testing.T) {
	t.Parallel()
	for _, c := range classes {
		f := base(afterFailure, c)
		f.undoOf, f.msg = "a1", "403 forbidden"
		f.failure = tools.Definite
		check(t, string(c)+" undo refused", f, want{verb: doReview, attempt: 2, reason: "compensation of a1 refused: 403 forbidden"})
		f.failure, f.tries = tools.NotSentOutcome, budget.MaxAttempts
		check(t, string(c)+" undo not sent, out of attempts", f, want{verb: doReview, reason: "compensation of a1 not done"})
		f.tries = 1
		check(t, string(c)+" undo not sent, retries left", f, want{verb: doWait})
	}
}
