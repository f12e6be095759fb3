package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// windowStep is what one request to a windowStore does.
type windowStep int

const (
	// lostUncommitted: the request times out on the client and never commits.
	lostUncommitted windowStep = iota
	// commitLate: the request commits at the last moment before the client's
	// timeout and shows up in searches lag after that; the client sees a
	// timeout (outcome unknown).
	commitLate
	// answered: the request commits at once and answers.
	answered
)

// windowStore is a provider behind a tool with a lookup. A request that
// times out takes the tool's timeout on the fake clock. Every commit is a new
// effect (a lookup-class create, or a keyed call past the provider's key_ttl).
type windowStore struct {
	clock  *fakeClock
	spec   tools.Spec
	lag    time.Duration
	script []windowStep // by request number; the last step repeats

	mu        sync.Mutex
	sent      []time.Time // when each request was sent
	attempts  []int       // the attempt number each request carried
	visibleAt []time.Time // one per effect
}

func (s *windowStore) Spec() tools.Spec { return s.spec }

func (s *windowStore) Call(ctx context.Context, c tools.Call) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sent = append(s.sent, now)
	s.attempts = append(s.attempts, c.Attempt)
	step := s.script[min(len(s.sent), len(s.script))-1]
	switch step {
	case lostUncommitted:
		s.clock.Advance(s.spec.Timeout)
		return nil, errLost
	case commitLate:
		s.visibleAt = append(s.visibleAt, now.Add(s.spec.Timeout+s.lag))
		s.clock.Advance(s.spec.Timeout)
		return nil, errLost
	default:
		s.visibleAt = append(s.visibleAt, now.Add(s.lag))
		return json.RawMessage(fmt.Sprintf(`{"id":"obj-%d"}`, len(s.visibleAt))), nil
	}
}

func (s *windowStore) Lookup(ctx context.Context, c tools.Call) (json.RawMessage, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for i, at := range s.visibleAt {
		if !now.Before(at) {
			return json.RawMessage(fmt.Sprintf(`{"id":"obj-%d"}`, i+1)), true, nil
		}
	}
	return nil, false, nil
}

func (s *windowStore) effects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.visibleAt)
}

// TestLookupWindowCountsFromTheWrite is the executor-level reproduction of
// the chaos harness's duplicate leads (seed 2, runs 21 and 35): attempt 1 is
// lost uncommitted; attempt 2 must wait in the lookup for attempt 1's window,
// then writes, and its write commits late and shows up lag later; attempt 3
// (in the same process, or after a crash right after attempt 2's call) must
// find it. When attempt 2's claim is taken before its wait, attempt 3 trusts
// "not found" from a time seconds before attempt 2's write and writes again.
// Also checked directly: every attempt's claim is recorded at the moment its
// request is sent (the fake clock does not move in between), so "claim +
// timeout + visibility_lag + skew" bounds the attempt's write.
func TestLookupWindowCountsFromTheWrite(t *testing.T) {
	t.Parallel()
	for _, class := range []tools.Class{tools.Lookup, tools.Keyed} {
		for _, restart := range []bool{false, true} {
			name := string(class)
			if restart {
				name += "/restart_after_attempt_2"
			} else {
				name += "/in_process"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				sp := spec("create", class)
				sp.Timeout = time.Second
				sp.VisibilityLag = time.Second
				if class == tools.Keyed {
					sp.KeyTTL = time.Nanosecond // the provider forgot the key: fall back to the lookup
				}
				store := &windowStore{spec: sp, lag: sp.VisibilityLag, script: []windowStep{lostUncommitted, commitLate, answered}}
				var b *bundle
				var crashed atomic.Bool
				b = setup(t, []tools.Tool{store}, func(c *Config) {
					if restart {
						c.Hooks.AfterCall = func(string) {
							store.mu.Lock()
							n := len(store.sent)
							store.mu.Unlock()
							if n == 2 && crashed.CompareAndSwap(false, true) {
								b.led.Close()
							}
						}
					}
				})
				store.clock = b.clock
				p := mkPlan(t, pa("a", "create", `{"name":"x"}`))
				var doc ledger.RunDoc
				if restart {
					if _, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll}); err == nil {
						t.Fatal("Run survived the crash")
					}
					if !crashed.Load() {
						t.Fatal("no crash after attempt 2: the test does not exercise the restart")
					}
					b.restart()
					doc = b.resume("r1")
				} else {
					doc = b.run("r1", p, PolicyAll)
				}
				wantStatus(t, doc, ledger.RunCompleted)
				a := wantAction(t, doc, "a", ledger.StatusSucceeded)
				if n := store.effects(); n != 1 {
					t.Fatalf("%d effects, want 1: a lookup trusted \"not found\" before attempt 2's write could be visible (requests sent at %v, attempts %v)",
						n, store.sent, store.attempts)
				}
				if string(a.Output) != `{"id":"obj-1"}` {
					t.Fatalf("output %s, want the object attempt 2 created", a.Output)
				}
				claimedAt := map[int]time.Time{}
				for _, ev := range b.events("r1") {
					var d struct{ Attempt int }
					json.Unmarshal(ev.Data, &d)
					if ev.Type == "action.claimed" && ev.ActionID == "a" {
						claimedAt[d.Attempt] = ev.At
					}
				}
				store.mu.Lock()
				defer store.mu.Unlock()
				if len(store.sent) != 2 {
					t.Fatalf("%d requests, want 2 (attempts %v)", len(store.sent), store.attempts)
				}
				for i, at := range store.sent {
					n := store.attempts[i]
					c, ok := claimedAt[n]
					if !ok {
						t.Fatalf("request %d carried attempt %d, which has no action.claimed event", i+1, n)
					}
					if !c.Equal(at) {
						t.Errorf("attempt %d was claimed at %v but its request was sent at %v (%v later): the claim does not bound the write",
							n, c.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), at.Sub(c))
					}
				}
			})
		}
	}
}

// failingLooker is a lookup tool whose writes are lost and whose lookups fail.
type failingLooker struct {
	spec    tools.Spec
	mu      sync.Mutex
	calls   int
	lookups int
}

func (f *failingLooker) Spec() tools.Spec { return f.spec }
func (f *failingLooker) Call(ctx context.Context, c tools.Call) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return nil, errLost
}
func (f *failingLooker) Lookup(ctx context.Context, c tools.Call) (json.RawMessage, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	return nil, false, errors.New("search unavailable")
}

// TestLookupFailingAfterRestartParksTheDeadClaim: the process dies after
// attempt 1's call; the next one looks before claiming attempt 2, every
// lookup fails, and the action is parked for a person on attempt 1's claim
// (no attempt 2 is claimed, nothing is called again).
func TestLookupFailingAfterRestartParksTheDeadClaim(t *testing.T) {
	t.Parallel()
	sp := spec("create", tools.Lookup)
	sp.Timeout = time.Second
	tool := &failingLooker{spec: sp}
	var b *bundle
	var crashed atomic.Bool
	b = setup(t, []tools.Tool{tool}, func(c *Config) {
		c.Hooks.AfterCall = func(string) {
			if crashed.CompareAndSwap(false, true) {
				b.led.Close()
			}
		}
	})
	if _, err := b.eng.Run(context.Background(), "r1", mkPlan(t, pa("a", "create", `{}`)), &RunOptions{Policy: PolicyAll}); err == nil {
		t.Fatal("Run survived the crash")
	}
	b.restart()
	doc := b.resume("r1")
	wantStatus(t, doc, ledger.RunPaused)
	a := wantAction(t, doc, "a", ledger.StatusNeedsReview)
	if a.Attempts != 1 || tool.calls != 1 || tool.lookups != b.cfg.Retry.WithDefaults().MaxAttempts {
		t.Fatalf("attempts %d, calls %d, lookups %d: want the dead claim parked after %d lookups and no new call",
			a.Attempts, tool.calls, tool.lookups, b.cfg.Retry.WithDefaults().MaxAttempts)
	}
	if n := b.count("r1", "action.claimed"); n != 1 {
		t.Fatalf("%d claims, want 1", n)
	}
}
