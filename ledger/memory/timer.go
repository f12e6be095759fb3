package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/docketrun/docket/ledger"
)

var _ ledger.WakeIndex = (*Store)(nil)

// Wakes lists the runs whose wake time is at or before before, earliest
// first (a scan of the runs: this store is for tests and evals). Errors:
// ErrClosed.
func (s *Store) Wakes(ctx context.Context, before time.Time, limit int) ([]ledger.Wake, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []ledger.Wake
	err := s.read(ctx, func(st *state) error {
		for id := range st.runs {
			r, err := st.run(id)
			if err != nil {
				return err
			}
			if !r.WakeAt.IsZero() && !r.WakeAt.After(before) {
				out = append(out, ledger.Wake{RunID: r.ID, At: r.WakeAt})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ledger.Wake) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.RunID, b.RunID)) })
	return out[:min(len(out), limit)], nil
}
