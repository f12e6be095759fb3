package executor

import (
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/tools"
)

// TestDefaultRetrySchedule computes the default policy's schedule: the
// waits double from 200ms to 10s, each drawn between half and all of its
// cap, so even the shortest draws outlast the one-minute budget before the
// attempts run out. Against an API that refuses every connection, an
// action gives up exactly one minute after its first attempt, after 12 to
// 18 attempts (the package doc says so), never after a second or two.
func TestDefaultRetrySchedule(t *testing.T) {
	t.Parallel()
	r := RetryPolicy{}.WithDefaults()
	if r.MaxElapsed < 30*time.Second {
		t.Fatalf("default budget %v: does not ride out an outage of tens of seconds", r.MaxElapsed)
	}
	wantCaps := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 10 * time.Second, 10 * time.Second}
	var least, most time.Duration
	for k := 1; k < r.MaxAttempts; k++ {
		lo, hi := r.backoffRange(k)
		if k <= len(wantCaps) && hi != wantCaps[k-1] {
			t.Errorf("retry %d: cap %v, want %v", k, hi, wantCaps[k-1])
		}
		if lo != hi/2 || hi > r.Max {
			t.Errorf("retry %d: range [%v, %v]", k, lo, hi)
		}
		least, most = least+lo, most+hi
	}
	if least < r.MaxElapsed {
		t.Errorf("the shortest waits of %d attempts sum to %v, less than the budget %v: attempts, not time, would end the retries",
			r.MaxAttempts, least, r.MaxElapsed)
	}
	t.Logf("default: %d attempts, waits sum to %v..%v, budget %v", r.MaxAttempts, least, most, r.MaxElapsed)

	// The decision core and the backoff as the driver uses them, each
	// attempt refused at once (not sent), with seeded jitter.
	seed := uint64(time.Now().UnixNano())
	t.Logf("jitter seed %d", seed)
	e := &Engine{cfg: Config{Rand: mrand.New(mrand.NewPCG(seed, 2))}}
	for run := 0; run < 200; run++ {
		began := t0
		f := facts{stage: afterFailure, now: began, class: tools.Keyed, timeout: 30 * time.Second, retry: r,
			began: began, claimAt: began, first: began, attempt: 1, tries: 1, failure: tools.NotSentOutcome, msg: "connection refused"}
		for {
			d := decide(f)
			if d.verb != doWait {
				if d.verb != doFail {
					t.Fatalf("seed %d: verb %v after %d attempts", seed, d.verb, f.tries)
				}
				elapsed := f.now.Sub(began)
				if elapsed != r.MaxElapsed || f.tries < 12 || f.tries > 18 {
					t.Fatalf("seed %d: gave up after %d attempts over %v, want 12 to 18 attempts over exactly %v", seed, f.tries, elapsed, r.MaxElapsed)
				}
				want := fmt.Sprintf("gave up after %d attempts (not_sent) over 1m0s, the end of its retry budget (20 attempts within 1m0s): connection refused", f.tries)
				if d.reason != want {
					t.Fatalf("seed %d: reason %q, want %q", seed, d.reason, want)
				}
				break
			}
			wait := waitWithin(e.backoff(r, d.backoff, d.floor), d.floor, f.now, d.retryBy)
			if lo, hi := r.backoffRange(d.backoff); wait > hi || (wait < lo && f.now.Add(wait) != d.retryBy) {
				t.Fatalf("seed %d: wait %v before attempt %d outside [%v, %v] and not cut at the budget", seed, wait, f.tries+1, lo, hi)
			}
			f.now = f.now.Add(wait)
			f.tries++
			f.attempt++
			f.claimAt = f.now
		}
	}
}

// TestToolRetryOverridesTheEngine: a tool's own settings replace the
// engine's, field by field; the first backoff never exceeds the tool's cap.
func TestToolRetryOverridesTheEngine(t *testing.T) {
	t.Parallel()
	eng := RetryPolicy{}.WithDefaults()
	for _, c := range []struct {
		tool tools.Retry
		want RetryPolicy
	}{
		{tools.Retry{}, eng},
		{tools.Retry{Attempts: 8, MaxBackoff: 30 * time.Second, Budget: 2 * time.Minute},
			RetryPolicy{MaxAttempts: 8, Base: eng.Base, Max: 30 * time.Second, MaxElapsed: 2 * time.Minute}},
		{tools.Retry{Budget: 5 * time.Minute}, RetryPolicy{MaxAttempts: eng.MaxAttempts, Base: eng.Base, Max: eng.Max, MaxElapsed: 5 * time.Minute}},
		{tools.Retry{MaxBackoff: 50 * time.Millisecond}, RetryPolicy{MaxAttempts: eng.MaxAttempts, Base: 50 * time.Millisecond, Max: 50 * time.Millisecond, MaxElapsed: eng.MaxElapsed}},
	} {
		if got := eng.forTool(c.tool); got != c.want {
			t.Errorf("tool %+v: %+v, want %+v", c.tool, got, c.want)
		}
	}
	// The decision core sees the tool's policy: out of its attempts, with
	// the engine's left.
	f := base(afterFailure, tools.Idempotent)
	f.retry, f.failure, f.tries, f.msg = eng.forTool(tools.Retry{Attempts: 2}), tools.NotSentOutcome, 2, "refused"
	if d := decide(f); d.verb != doFail || !strings.Contains(d.reason, "gave up after 2 attempts (not_sent) over 1s, the end of its retry budget (2 attempts within 1m0s): refused") {
		t.Errorf("decision %+v", d)
	}
}
