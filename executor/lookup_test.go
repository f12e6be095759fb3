package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// laggyStore is an external system behind a lookup tool: a write commits
// commitDelay after the request arrived and shows up in searches only lag
// after that. Its first write answers with a lost reply (outcome unknown).
type laggyStore struct {
	clock       *fakeClock
	commitDelay time.Duration
	lag         time.Duration
	spec        tools.Spec

	mu        sync.Mutex
	writes    map[string]int
	visibleAt map[string]time.Time
	lookups   int
	notFound  int
}

var errLost = errors.New("read timeout: the request was sent")

func (s *laggyStore) Spec() tools.Spec { return s.spec }

func (s *laggyStore) Call(ctx context.Context, c tools.Call) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes[c.Key]++
	if _, ok := s.visibleAt[c.Key]; !ok {
		s.visibleAt[c.Key] = s.clock.Now().Add(s.commitDelay + s.lag)
	}
	if s.writes[c.Key] == 1 {
		return nil, errLost
	}
	return json.RawMessage(fmt.Sprintf(`{"id":"obj-%d"}`, s.writes[c.Key])), nil
}

func (s *laggyStore) Lookup(ctx context.Context, c tools.Call) (json.RawMessage, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups++
	at, ok := s.visibleAt[c.Key]
	if !ok || s.clock.Now().Before(at) {
		s.notFound++
		return nil, false, nil
	}
	return json.RawMessage(`{"id":"obj-1"}`), true, nil
}

func TestLookupNotFoundIsNotTrustedUntilTheWindowPasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		commitDelay time.Duration // the write commits after the client's timeout
		lag         time.Duration // the search shows it late
	}{
		{"late_visibility", 0, 30 * time.Second},
		{"late_commit", 10 * time.Second, 0},
		{"late_commit_and_visibility", 10 * time.Second, 20 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sp := spec("create", tools.Lookup)
			sp.Timeout = 10 * time.Second
			sp.VisibilityLag = 30 * time.Second
			store := &laggyStore{commitDelay: tc.commitDelay, lag: tc.lag, spec: sp,
				writes: map[string]int{}, visibleAt: map[string]time.Time{}}
			b := setup(t, []tools.Tool{store})
			store.clock = b.clock
			doc := b.run("r1", mkPlan(t, pa("a", "create", `{"name":"x"}`)), PolicySafe)
			wantStatus(t, doc, ledger.RunCompleted)
			a := wantAction(t, doc, "a", ledger.StatusSucceeded)
			if store.writes[a.Key] != 1 {
				t.Fatalf("%d writes: a not-found before the window passed led to a second write", store.writes[a.Key])
			}
			if string(a.Output) != `{"id":"obj-1"}` {
				t.Fatalf("output %s, want the found object", a.Output)
			}
			if store.notFound == 0 {
				t.Fatal("the lookup never saw not-found: the test does not exercise the wait")
			}
			waited := false
			for _, ev := range b.events("r1") {
				var d struct{ Outcome string }
				json.Unmarshal(ev.Data, &d)
				if ev.Type == ledger.EventLookupWait && d.Outcome == "not_found_yet" {
					waited = true
				}
			}
			if !waited {
				t.Fatal("no event shows the visibility wait")
			}
		})
	}
}

func TestLookupNotFoundAfterWindowWritesOnce(t *testing.T) {
	t.Parallel()
	sp := spec("create", tools.Lookup)
	sp.Timeout = time.Second
	// The first request never reached the store (lost before commit): the
	// lookup keeps saying not found, and after the window the executor writes.
	store := &neverCommits{spec: sp}
	b := setup(t, []tools.Tool{store})
	store.clock = b.clock
	doc := b.run("r1", mkPlan(t, pa("a", "create", `{}`)), PolicySafe)
	wantStatus(t, doc, ledger.RunCompleted)
	a := wantAction(t, doc, "a", ledger.StatusSucceeded)
	if a.Attempts != 2 || store.calls != 2 {
		t.Fatalf("attempts %d calls %d, want 2 and 2", a.Attempts, store.calls)
	}
	if store.lastLookupAt.Sub(store.firstCallAt) < sp.Timeout+2*time.Second {
		t.Fatalf("wrote again %v after the first claim, before timeout+skew", store.lastLookupAt.Sub(store.firstCallAt))
	}
}

type neverCommits struct {
	spec         tools.Spec
	mu           sync.Mutex
	calls        int
	firstCallAt  time.Time
	lastLookupAt time.Time
	clock        *fakeClock
}

func (s *neverCommits) Spec() tools.Spec { return s.spec }
func (s *neverCommits) Call(ctx context.Context, c tools.Call) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls == 1 {
		s.firstCallAt = s.clock.Now()
		return nil, errLost
	}
	return json.RawMessage(`{"id":"new"}`), nil
}
func (s *neverCommits) Lookup(ctx context.Context, c tools.Call) (json.RawMessage, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastLookupAt = s.clock.Now()
	return nil, false, nil
}
