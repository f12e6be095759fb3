package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// Budgets (ledger/budget.go) live in the tables budgets (one row per
// bucket, usage as numeric) and budget_holds (one row per key that
// reserved), written in the Apply's transaction like every other record:
// rows read FOR UPDATE, so two nodes reserving from one bucket take turns,
// and two creating it race on the primary key (the loser's transaction is
// retried).

var (
	_ ledger.BudgetTx     = (*tx)(nil)
	_ ledger.BudgetReader = (*Store)(nil)
)

const budgetCols = `id, budget, scope, window_start, every_ms, grp, used::text, count, lim::text, updated_at`

type budgetCache struct {
	buckets map[string]*budgetEntry
	holds   map[string]*holdEntry
}

type budgetEntry struct {
	rec   ledger.BudgetRecord
	found bool // a row exists (UPDATE, not INSERT)
}

type holdEntry struct {
	h     ledger.Hold
	found bool
}

func (s *Store) bq(q string) string {
	return strings.ReplaceAll(q, "{S}", pgx.Identifier{s.cfg.Schema}.Sanitize())
}

func (t *tx) budgetCache() *budgetCache {
	if t.bud == nil {
		t.bud = &budgetCache{buckets: map[string]*budgetEntry{}, holds: map[string]*holdEntry{}}
	}
	return t.bud
}

func scanBudget(row pgx.Row, r *ledger.BudgetRecord) error {
	var window *time.Time
	var everyMS int64
	if err := row.Scan(&r.ID, &r.Budget, &r.Scope, &window, &everyMS, &r.Group, &r.Used, &r.Count, &r.Limit, &r.UpdatedAt); err != nil {
		return err
	}
	r.Window, r.Every, r.UpdatedAt = utcOrZero(window), time.Duration(everyMS)*time.Millisecond, r.UpdatedAt.UTC()
	return nil
}

// Budget returns a budget bucket, locked for this transaction (ledger.BudgetTx).
func (t *tx) Budget(id string) (ledger.BudgetRecord, bool, error) {
	c := t.budgetCache()
	if e, ok := c.buckets[id]; ok {
		return e.rec, e.found, nil
	}
	if t.spec {
		return ledger.BudgetRecord{}, false, t.missed()
	}
	e := &budgetEntry{}
	err := scanBudget(t.ptx.QueryRow(t.ctx, t.s.bq(`SELECT `+budgetCols+` FROM {S}.budgets WHERE id = $1 FOR UPDATE`), id), &e.rec)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return ledger.BudgetRecord{}, false, err
	default:
		e.found = true
	}
	c.buckets[id] = e
	return e.rec, e.found, nil
}

// PutBudget writes a budget bucket (ledger.BudgetTx).
func (t *tx) PutBudget(r ledger.BudgetRecord) error {
	if _, _, err := t.Budget(r.ID); err != nil {
		return err
	}
	e := t.budgetCache().buckets[r.ID]
	if e.found {
		t.batch.Queue(t.s.bq(`UPDATE {S}.budgets SET used = CAST($2::text AS numeric), count = $3, lim = CAST($4::text AS numeric), updated_at = $5 WHERE id = $1`),
			r.ID, r.Used, r.Count, r.Limit, r.UpdatedAt.UTC())
	} else {
		t.batch.Queue(t.s.bq(`INSERT INTO {S}.budgets (id, budget, scope, window_start, every_ms, grp, used, count, lim, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, CAST($7::text AS numeric), $8, CAST($9::text AS numeric), $10)`),
			r.ID, r.Budget, r.Scope, timeOrNil(r.Window), r.Every.Milliseconds(), r.Group, r.Used, r.Count, r.Limit, r.UpdatedAt.UTC())
	}
	e.rec, e.found = r, true
	return nil
}

const holdCols = `key, run_id, action_id, charges, at, released, released_at`

func scanHold(row pgx.Row, h *ledger.Hold) error {
	var charges []byte
	var releasedAt *time.Time
	if err := row.Scan(&h.Key, &h.RunID, &h.ActionID, &charges, &h.At, &h.Released, &releasedAt); err != nil {
		return err
	}
	h.At, h.ReleasedAt = h.At.UTC(), utcOrZero(releasedAt)
	if err := json.Unmarshal(charges, &h.Charges); err != nil {
		return fmt.Errorf("ledger: budget hold of key %s: %w", h.Key, err)
	}
	return nil
}

// Hold returns a key's budget hold, locked for this transaction (ledger.BudgetTx).
func (t *tx) Hold(key string) (ledger.Hold, bool, error) {
	c := t.budgetCache()
	if e, ok := c.holds[key]; ok {
		return e.h, e.found, nil
	}
	e := &holdEntry{}
	if t.spec {
		if t.s.recent.hasHold(key) {
			return ledger.Hold{}, false, t.missed()
		}
		// Taken as absent; the pipeline checks that it is.
		t.ver.holds = append(t.ver.holds, key)
		c.holds[key] = e
		return e.h, false, nil
	}
	err := scanHold(t.ptx.QueryRow(t.ctx, t.s.bq(`SELECT `+holdCols+` FROM {S}.budget_holds WHERE key = $1 FOR UPDATE`), key), &e.h)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return ledger.Hold{}, false, err
	default:
		e.found = true
	}
	c.holds[key] = e
	return e.h, e.found, nil
}

// PutHold writes a key's budget hold (ledger.BudgetTx).
func (t *tx) PutHold(h ledger.Hold) error {
	if _, _, err := t.Hold(h.Key); err != nil {
		return err
	}
	charges, err := json.Marshal(h.Charges)
	if err != nil {
		return err
	}
	e := t.budgetCache().holds[h.Key]
	if e.found {
		t.batch.Queue(t.s.bq(`UPDATE {S}.budget_holds SET charges = $2, released = $3, released_at = $4 WHERE key = $1`),
			h.Key, string(charges), h.Released, timeOrNil(h.ReleasedAt))
	} else {
		t.batch.Queue(t.s.bq(`INSERT INTO {S}.budget_holds (`+holdCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`),
			h.Key, h.RunID, h.ActionID, string(charges), h.At.UTC(), h.Released, timeOrNil(h.ReleasedAt))
	}
	e.h, e.found = h, true
	return nil
}

// Budgets returns every budget bucket, sorted (ledger.SortBudgets).
// Errors: ErrClosed, database errors.
func (s *Store) Budgets(ctx context.Context) ([]ledger.BudgetRecord, error) {
	var out []ledger.BudgetRecord
	err := s.read(ctx, func(q querier) error {
		out = out[:0]
		rows, err := q.Query(ctx, s.bq(`SELECT `+budgetCols+` FROM {S}.budgets`))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r ledger.BudgetRecord
			if err := scanBudget(rows, &r); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	ledger.SortBudgets(out)
	return out, err
}

// Hold returns the budget hold of key. Errors: ErrNotFound (the key
// reserved nothing), ErrClosed, database errors.
func (s *Store) Hold(ctx context.Context, key string) (ledger.Hold, error) {
	var h ledger.Hold
	err := s.read(ctx, func(q querier) error {
		err := scanHold(q.QueryRow(ctx, s.bq(`SELECT `+holdCols+` FROM {S}.budget_holds WHERE key = $1`), key), &h)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no budget hold for key %s", ledger.ErrNotFound, key)
		}
		return err
	})
	return h, err
}

// Budget returns one budget bucket. Errors: ErrNotFound (nothing was
// reserved from it), ErrClosed, database errors.
func (s *Store) Budget(ctx context.Context, id string) (ledger.BudgetRecord, error) {
	var r ledger.BudgetRecord
	err := s.read(ctx, func(q querier) error {
		err := scanBudget(q.QueryRow(ctx, s.bq(`SELECT `+budgetCols+` FROM {S}.budgets WHERE id = $1`), id), &r)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: budget bucket %s", ledger.ErrNotFound, id)
		}
		return err
	})
	return r, err
}
