package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// reservingLedger is a ledger shared with other nodes as the server sees
// it (ledger/postgres's Reserve): names in busy are held by another node.
type reservingLedger struct {
	ledger.Store
	mu       sync.Mutex
	busy     map[string]bool
	held     map[string]bool
	released []string
}

func (l *reservingLedger) Reserve(ctx context.Context, name string) (func(), bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[name] || l.held[name] {
		return nil, false, nil
	}
	l.held[name] = true
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.held, name)
		l.released = append(l.released, name)
	}, true, nil
}

// On a shared ledger, a run id that another node is still accepting answers
// 409 in_progress; once free, the same request creates the run, and the
// server lets the name go once the run is recorded.
func TestCreateInProgressOnAnotherNode(t *testing.T) {
	t.Parallel()
	rl := &reservingLedger{busy: map[string]bool{"run:r-other": true}, held: map[string]bool{}}
	b := setup(t, options{wrap: func(l ledger.Store) ledger.Store { rl.Store = l; return rl }})
	body := map[string]any{"run_id": "r-other", "plan": map[string]any{"goal": "g", "actions": []any{
		map[string]any{"id": "p", "tool": "catalogue_price", "args": map[string]any{"plan": "pro"}}}}}
	var e errorBody
	if code := b.call("POST", "/v1/runs", body, &e); code != http.StatusConflict || e.Error.Code != "in_progress" {
		t.Fatalf("while another node accepts it = %d %+v, want 409 in_progress", code, e)
	}
	rl.mu.Lock()
	rl.busy = nil
	rl.mu.Unlock()
	if code := b.call("POST", "/v1/runs", body, nil); code != http.StatusCreated {
		t.Fatalf("once free = %d, want 201", code)
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.held) != 0 || len(rl.released) != 1 || rl.released[0] != "run:r-other" {
		t.Fatalf("reservations after the create: held %v, released %v", rl.held, rl.released)
	}
}

// With tracing on the server reads the ledger through a wrapper that adds
// trace ids to Run JSON; the ledger's optional capabilities still count:
// a run id another node is accepting answers 409, GET /v1/budgets shows
// what claims reserved, and sessions live in the shared ledger (a
// sign-out on another node ends them here).
func TestCapabilitiesWithTracing(t *testing.T) {
	t.Parallel()
	rl := &reservingLedger{busy: map[string]bool{"run:r-other": true}, held: map[string]bool{}}
	sl := &sharedLedger{reservingLedger: rl, sessions: map[string]string{}}
	b := setup(t, options{
		wrap: func(l ledger.Store) ledger.Store { rl.Store = l; return sl },
		tune: func(c *ui.Config) { c.TraceID, c.MaxSessionsPerToken = oteltrace.TraceID, 1 },
	})
	sessionCode := func(c *http.Cookie) int {
		return b.callWith("GET", "/v1/session", nil, nil, map[string]string{"Cookie": c.Name + "=" + c.Value})
	}
	var cookies []*http.Cookie
	for i := range 2 {
		resp, c := signIn(t, b, testToken, nil)
		if resp.StatusCode != http.StatusOK || c == nil {
			t.Fatalf("sign-in %d = %d", i, resp.StatusCode)
		}
		cookies = append(cookies, c)
	}
	sl.mu.Lock()
	recorded := len(sl.sessions)
	sl.mu.Unlock()
	if recorded != 1 || sessionCode(cookies[0]) != http.StatusUnauthorized || sessionCode(cookies[1]) != http.StatusOK {
		t.Fatalf("past the cap of 1: %d sessions in the shared ledger, the first %d, the second %d; want 1, 401, 200",
			recorded, sessionCode(cookies[0]), sessionCode(cookies[1]))
	}
	sl.mu.Lock()
	clear(sl.sessions) // signed out on another node
	sl.mu.Unlock()
	if code := sessionCode(cookies[1]); code != http.StatusUnauthorized {
		t.Fatalf("a session signed out on another node = %d, want 401", code)
	}
	body := map[string]any{"run_id": "r-other", "plan": map[string]any{"goal": "g", "actions": []any{
		map[string]any{"id": "p", "tool": "catalogue_price", "args": map[string]any{"plan": "pro"}}}}}
	var e errorBody
	if code := b.call("POST", "/v1/runs", body, &e); code != http.StatusConflict || e.Error.Code != "in_progress" {
		t.Fatalf("while another node accepts it = %d %+v, want 409 in_progress", code, e)
	}
	b.createPayMail("rb")
	c := ledger.Charge{Budget: "daily-spend", Scope: "tenant:token:alice", Amount: "12", Limit: "1000"}
	res, err := b.led.Apply(context.Background(), ledger.Claim("rb", "pay", "payments_create_invoice", "k-rb-pay", json.RawMessage(`{"amount": 12}`), 1).WithCharges(c))
	if err != nil || res[0].Err != nil {
		t.Fatalf("claim: %v %v", err, res[0].Err)
	}
	var list ui.BudgetList
	if code := b.call("GET", "/v1/budgets", nil, &list); code != http.StatusOK || len(list.Budgets) != 1 || list.Budgets[0].Used != "12" {
		t.Fatalf("GET /v1/budgets = %d %+v, want the bucket the claim reserved", code, list)
	}
}

// sharedLedger is a reservingLedger that keeps sessions as a shared
// ledger does (ledger/postgres) and reads budgets from the ledger it wraps
// (Badger's).
type sharedLedger struct {
	*reservingLedger
	sessions map[string]string // cookie hash -> token name (expiry: never, here)
}

func (l *sharedLedger) PutSession(ctx context.Context, hash, tokenName string, expires time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sessions[hash] = tokenName
	return nil
}

func (l *sharedLedger) Session(ctx context.Context, hash string) (string, time.Time, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	name, ok := l.sessions[hash]
	return name, time.Now().Add(time.Hour), ok, nil
}

func (l *sharedLedger) DeleteSession(ctx context.Context, hash string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sessions, hash)
	return nil
}

func (l *sharedLedger) Budgets(ctx context.Context) ([]ledger.BudgetRecord, error) {
	return l.Store.(ledger.BudgetReader).Budgets(ctx)
}

func (l *sharedLedger) Budget(ctx context.Context, id string) (ledger.BudgetRecord, error) {
	return l.Store.(ledger.BudgetReader).Budget(ctx, id)
}

func (l *sharedLedger) Hold(ctx context.Context, key string) (ledger.Hold, error) {
	return l.Store.(ledger.BudgetReader).Hold(ctx, key)
}
