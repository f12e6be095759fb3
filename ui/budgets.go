package ui

import (
	"context"
	"errors"
	"math/big"
	"net/http"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Budget is one budget bucket's usage as GET /v1/budgets and `docket
// budgets --json` show it.
type Budget struct {
	Budget string `json:"budget"`
	// Scope is "run:ID", "tenant:IDENTITY" or "all".
	Scope string `json:"scope"`
	// Window and WindowEnd bound the window (RFC 3339 UTC); absent for a
	// budget without a window.
	Window    *time.Time `json:"window,omitempty"`
	WindowEnd *time.Time `json:"window_end,omitempty"`
	Group     string     `json:"group,omitempty"`
	// Used, Limit and Remaining (Limit - Used; negative when approvals took
	// it past the limit) are exact decimals.
	Used      string    `json:"used"`
	Limit     string    `json:"limit"`
	Remaining string    `json:"remaining"`
	Count     int       `json:"count"` // actions holding a reservation
	UpdatedAt time.Time `json:"updated_at"`
}

// BudgetList is the body of GET /v1/budgets.
type BudgetList struct {
	Budgets []Budget `json:"budgets"`
}

// ErrNoBudgets: the ledger does not keep budgets.
var ErrNoBudgets = errors.New("ui: the ledger does not keep budgets")

// ReadBudgets reads every budget bucket of l, as the API shows them.
func ReadBudgets(ctx context.Context, l ledger.Store) (BudgetList, error) {
	br, ok := l.(ledger.BudgetReader)
	if !ok {
		return BudgetList{}, ErrNoBudgets
	}
	recs, err := br.Budgets(ctx)
	if err != nil {
		return BudgetList{}, err
	}
	out := BudgetList{Budgets: make([]Budget, 0, len(recs))}
	for _, r := range recs {
		b := Budget{Budget: r.Budget, Scope: r.Scope, Group: r.Group, Used: r.Used, Limit: r.Limit, Remaining: r.Limit,
			Count: r.Count, UpdatedAt: r.UpdatedAt.UTC()}
		if !r.Window.IsZero() {
			w, end := r.Window.UTC(), r.Window.Add(r.Every).UTC()
			b.Window, b.WindowEnd = &w, &end
		}
		if u, err1 := ledger.ParseAmount(r.Used); err1 == nil {
			if l, err2 := ledger.ParseAmount(r.Limit); err2 == nil {
				b.Remaining = ledger.FormatAmount(new(big.Rat).Sub(l, u))
			}
		}
		out.Budgets = append(out.Budgets, b)
	}
	return out, nil
}

// budgets is GET /v1/budgets: every budget's usage per scope, window and
// group (ledger.SortBudgets order).
func (s *Server) budgets(w http.ResponseWriter, r *http.Request) {
	list, err := ReadBudgets(r.Context(), s.cfg.Ledger) // the ledger itself: s.led may wrap it
	if errors.Is(err, ErrNoBudgets) {
		writeJSON(w, http.StatusOK, BudgetList{Budgets: []Budget{}})
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}
