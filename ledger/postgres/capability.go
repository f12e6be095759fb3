package postgres

import "github.com/docketrun/docket/ledger"

// The optional capabilities of package ledger that the shared ledger has.
var (
	_ ledger.Store         = (*Store)(nil)
	_ ledger.BudgetReader  = (*Store)(nil)
	_ ledger.LeaseHolder   = (*Store)(nil)
	_ ledger.LeaseReader   = (*Store)(nil)
	_ ledger.Reserver      = (*Store)(nil)
	_ ledger.SessionKeeper = (*Store)(nil)
)
