package memory

import (
	"slices"

	"github.com/docketrun/docket/ledger"
)

// Tool limits (ledger/limit.go): one record per tool, kept with the rest of
// the state and written in the Apply that claims or concludes.

var _ ledger.LimitTx = (*tx)(nil)

// Limit returns a tool's limiter record as this Apply sees it (ledger.LimitTx).
func (t *tx) Limit(tool string) (ledger.LimitRecord, bool, error) {
	if r, ok := t.limits[tool]; ok {
		return r, true, nil
	}
	r, ok := t.s.st.limits[tool]
	return r, ok, nil
}

// PutLimit writes a tool's limiter record (ledger.LimitTx).
func (t *tx) PutLimit(r ledger.LimitRecord) error {
	r.Slots, r.Starts = slices.Clone(r.Slots), slices.Clone(r.Starts)
	t.limits[r.Tool] = r
	return nil
}
