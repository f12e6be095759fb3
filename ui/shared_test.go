package ui_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/docketrun/docket/ledger"
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
