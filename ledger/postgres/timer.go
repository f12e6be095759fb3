package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

var _ ledger.WakeIndex = (*Store)(nil)

// wakesQuery lists waiting runs by wake time through the partial index
// runs_wake (migration 6): never a read of the runs that wait for nothing.
const wakesQuery = `SELECT run_id, wake_at FROM {S}.runs WHERE wake_at IS NOT NULL AND wake_at <= $1 ORDER BY wake_at, run_id LIMIT $2`

// wakeArg is a wake time as a parameter: NULL for none.
func wakeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

// Wakes lists the runs whose wake time is at or before before, earliest
// first, at most limit (1000 when limit <= 0). Errors: ErrClosed, database
// errors.
func (s *Store) Wakes(ctx context.Context, before time.Time, limit int) ([]ledger.Wake, error) {
	if limit <= 0 {
		limit = 1000
	}
	q := strings.ReplaceAll(wakesQuery, "{S}", pgx.Identifier{s.cfg.Schema}.Sanitize())
	var out []ledger.Wake
	err := s.read(ctx, func(db querier) error {
		out = out[:0]
		rows, err := db.Query(ctx, q, before.UTC(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w ledger.Wake
			if err := rows.Scan(&w.RunID, &w.At); err != nil {
				return err
			}
			w.At = w.At.UTC()
			out = append(out, w)
		}
		return rows.Err()
	})
	return out, err
}
