package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

var _ ledger.Collector = (*Store)(nil)

// collectBatch is how many runs one transaction of Collect deletes.
const collectBatch = 100

// runTables are the tables holding a run's records besides runs, each with
// an index that starts with run_id.
var runTables = []string{"revisions", "actions", "keys", "events", "memos", "blobs", "budget_holds"}

// Collect deletes the ended runs past their retention and the budget
// buckets past their window (ledger.Collector). Candidates come from the
// index of ended runs (runs_ended) up to the oldest end that can be due;
// each batch of up to collectBatch runs is one transaction that locks their
// rows, checks each again and deletes every record of the due ones, so a run
// is deleted whole or not at all (a writer waiting on a run's lock then
// finds no run). Bytes is not known (0). Errors: ErrInvalid, ErrClosed, the
// context's error, the database's.
func (s *Store) Collect(ctx context.Context, o ledger.CollectOptions) (ledger.CollectReport, error) {
	var rep ledger.CollectReport
	if err := o.Validate(); err != nil {
		return rep, err
	}
	if s.closed.Load() {
		return rep, ledger.ErrClosed
	}
	if o.Now.IsZero() {
		o.Now = s.Now()
	}
	upTo := o.Now.Add(-o.Retention) // no run that ended later is due
	var afterAt time.Time
	afterID := ""
	for {
		var cands []ledger.RunRecord
		err := s.read(ctx, func(q querier) error {
			cands = cands[:0]
			rows, err := q.Query(ctx, s.bq(`SELECT run_id, status, ended_at, retention_ms, keys_until FROM {S}.runs
				WHERE ended_at IS NOT NULL AND ended_at <= $1 AND (ended_at, run_id) > ($2, $3) AND ($5 OR retention_ms > 0)
				ORDER BY ended_at, run_id LIMIT $4`), upTo, afterAt, afterID, collectBatch, o.Retention > 0)
			if err != nil {
				return err
			}
			cands, err = pgx.CollectRows(rows, scanEnded)
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("ledger: collecting runs: %w", err)
		}
		if len(cands) == 0 {
			break
		}
		last := cands[len(cands)-1]
		afterAt, afterID = last.EndedAt, last.ID
		var due []string
		for _, r := range cands {
			switch {
			case ledger.Collectable(r, o.Retention, o.Now):
				due = append(due, r.ID)
			case ledger.ProtectedOnly(r, o.Retention, o.Now):
				rep.Kept++
			}
		}
		if len(due) == 0 {
			continue
		}
		part, err := s.collectRuns(ctx, o, due)
		rep.Add(part)
		if err != nil {
			return rep, fmt.Errorf("ledger: collecting runs: %w", err)
		}
	}
	n, err := s.collectBuckets(ctx, o)
	rep.Buckets = n
	if err != nil {
		return rep, fmt.Errorf("ledger: collecting budget buckets: %w", err)
	}
	return rep, nil
}

func scanEnded(row pgx.CollectableRow) (ledger.RunRecord, error) {
	var r ledger.RunRecord
	var status string
	var ended, keysUntil *time.Time
	var retentionMS int64
	if err := row.Scan(&r.ID, &status, &ended, &retentionMS, &keysUntil); err != nil {
		return r, err
	}
	r.Status, r.Retention = ledger.RunStatus(status), ledger.Duration(time.Duration(retentionMS)*time.Millisecond)
	r.EndedAt, r.KeysUntil = utcOrZero(ended), utcOrZero(keysUntil)
	return r, nil
}

// collectRuns deletes (or counts) the runs ids that are still due once
// locked, in one transaction.
func (s *Store) collectRuns(ctx context.Context, o ledger.CollectOptions, ids []string) (ledger.CollectReport, error) {
	var rep ledger.CollectReport
	err := s.retry(ctx, func(ctx context.Context) error {
		rep = ledger.CollectReport{}
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, s.bq(`SELECT run_id, status, ended_at, retention_ms, keys_until FROM {S}.runs
				WHERE run_id = ANY($1) ORDER BY run_id FOR UPDATE`), ids)
			if err != nil {
				return err
			}
			locked, err := pgx.CollectRows(rows, scanEnded)
			if err != nil {
				return err
			}
			var due []string
			for _, r := range locked {
				if ledger.Collectable(r, o.Retention, o.Now) {
					due = append(due, r.ID)
				}
			}
			if len(due) == 0 {
				return nil
			}
			rep.Runs = len(due)
			rep.Records = int64(len(due))
			for _, table := range runTables {
				var n int64
				if o.DryRun {
					err = tx.QueryRow(ctx, s.bq(`SELECT count(*) FROM {S}.`+table+` WHERE run_id = ANY($1)`), due).Scan(&n)
				} else {
					var tag interface{ RowsAffected() int64 }
					tag, err = tx.Exec(ctx, s.bq(`DELETE FROM {S}.`+table+` WHERE run_id = ANY($1)`), due)
					if err == nil {
						n = tag.RowsAffected()
					}
				}
				if err != nil {
					return fmt.Errorf("%s: %w", table, err)
				}
				rep.Records += n
			}
			if o.DryRun {
				return nil
			}
			_, err = tx.Exec(ctx, s.bq(`DELETE FROM {S}.runs WHERE run_id = ANY($1)`), due)
			return err
		})
	})
	return rep, err
}

// collectBuckets deletes (or counts) the budget buckets whose window has
// passed.
func (s *Store) collectBuckets(ctx context.Context, o ledger.CollectOptions) (int, error) {
	const where = ` FROM {S}.budgets WHERE every_ms > 0 AND window_start <= $1
		AND window_start + every_ms * interval '1 millisecond' <= $1`
	var n int64
	err := s.retry(ctx, func(ctx context.Context) error {
		if o.DryRun {
			return s.pool.QueryRow(ctx, s.bq(`SELECT count(*)`+where), o.Now).Scan(&n)
		}
		tag, err := s.pool.Exec(ctx, s.bq(`DELETE`+where), o.Now)
		n = tag.RowsAffected()
		return err
	})
	return int(n), err
}
