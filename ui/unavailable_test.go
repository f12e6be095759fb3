package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// downLedger is a shared ledger whose database went away: while down, every
// run it would create fails as ledger/postgres reports a COMMIT the crash
// cut (ErrUnavailable, outcome unknown).
type downLedger struct {
	ledger.Store
	down atomic.Bool
}

func (l *downLedger) CreateRun(ctx context.Context, r ledger.Run, p *plan.Plan, rows []ledger.Action) (ledger.Run, bool, error) {
	if l.down.Load() {
		return ledger.Run{}, false, fmt.Errorf("ledger: commit: the connection broke during COMMIT: the commit's outcome is unknown: %w", ledger.ErrUnavailable)
	}
	return l.Store.CreateRun(ctx, r, p, rows)
}

// A create whose commit the database cut answers 503 unavailable with
// Retry-After (not 500): the same request again creates the run, or
// answers the one the cut commit made.
func TestCreateLedgerUnavailable(t *testing.T) {
	t.Parallel()
	dl := &downLedger{}
	b := setup(t, options{wrap: func(l ledger.Store) ledger.Store { dl.Store = l; return dl }})
	dl.down.Store(true)
	body := map[string]any{"run_id": "r-down", "plan": map[string]any{"goal": "g", "actions": []any{
		map[string]any{"id": "p", "tool": "catalogue_price", "args": map[string]any{"plan": "pro"}}}}}
	var e errorBody
	if code := b.call("POST", "/v1/runs", body, &e); code != http.StatusServiceUnavailable || e.Error.Code != "unavailable" {
		t.Fatalf("while the database is down = %d %+v, want 503 unavailable", code, e)
	}
	dl.down.Store(false)
	if code := b.call("POST", "/v1/runs", body, nil); code != http.StatusCreated {
		t.Fatalf("the same request once it is back = %d, want 201", code)
	}
}
