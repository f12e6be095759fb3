package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// Schedules (ledger.ScheduleKeeper) are rows of the schedules table: the
// record as ledger.EncodeSchedule writes it and its version. A write reads
// the row FOR UPDATE and writes it in one transaction, so writers of one
// schedule on any node take turns and a swap at a stale version is
// ErrConflict.

var _ ledger.ScheduleKeeper = (*Store)(nil)

func (s *Store) schedQ(q string) string {
	return strings.ReplaceAll(q, "{S}", pgx.Identifier{s.cfg.Schema}.Sanitize())
}

func (s *Store) scheduleRow(ctx context.Context, q querier, id string, lock bool) (ledger.Schedule, bool, error) {
	stmt := `SELECT doc FROM {S}.schedules WHERE id = $1`
	if lock {
		stmt += ` FOR UPDATE`
	}
	var doc []byte
	err := q.QueryRow(ctx, s.schedQ(stmt), id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Schedule{}, false, nil
	}
	if err != nil {
		return ledger.Schedule{}, false, err
	}
	sc, err := s.decodeSchedule(doc)
	return sc, true, err
}

// decodeSchedule opens a schedule's document (sealed like the runs' plans,
// ledger/README.md, Encryption at rest) and decodes it.
func (s *Store) decodeSchedule(doc []byte) (ledger.Schedule, error) {
	doc, err := s.env.open("schedules.doc", doc)
	if err != nil {
		return ledger.Schedule{}, err
	}
	return ledger.DecodeSchedule(doc)
}

// writeSchedule runs fn in a read-write transaction, retried like every
// write while the database is unreachable; the ledger's own errors are
// returned as they are.
func (s *Store) writeSchedule(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if s.closed.Load() {
		return ledger.ErrClosed
	}
	err := s.retry(ctx, func(ctx context.Context) error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, fn)
	})
	if err == nil || errors.Is(err, ledger.ErrConflict) || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalid) ||
		errors.Is(err, ledger.ErrTooLarge) || errors.Is(err, ledger.ErrClosed) || errors.Is(err, ledger.ErrFormat) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return s.explain("writing a schedule", err)
}

func (s *Store) putScheduleRow(ctx context.Context, tx pgx.Tx, sc ledger.Schedule, insert bool) error {
	doc, err := ledger.EncodeSchedule(sc)
	if err != nil {
		return err
	}
	stmt := `UPDATE {S}.schedules SET version = $2, doc = $3 WHERE id = $1`
	if insert {
		stmt = `INSERT INTO {S}.schedules (id, version, doc) VALUES ($1, $2, $3)`
	}
	_, err = tx.Exec(ctx, s.schedQ(stmt), sc.ID, sc.Version, s.env.seal("schedules.doc", doc))
	return err
}

// CreateSchedule stores a new schedule (ledger.ScheduleKeeper). Two nodes
// creating one id at once: one inserts, the other's insert fails on the
// key and is retried, and then finds it.
func (s *Store) CreateSchedule(ctx context.Context, sc ledger.Schedule) (out ledger.Schedule, err error) {
	err = s.writeSchedule(ctx, func(tx pgx.Tx) error {
		stored, found, err := s.scheduleRow(ctx, tx, sc.ID, true)
		if err != nil {
			return err
		}
		var write bool
		if out, write, err = ledger.ScheduleCreate(stored, found, sc); err != nil || !write {
			return err
		}
		return s.putScheduleRow(ctx, tx, out, true)
	})
	return out, err
}

// Schedule returns a schedule (ledger.ScheduleKeeper). Errors: ErrNotFound,
// ErrClosed, database errors.
func (s *Store) Schedule(ctx context.Context, id string) (sc ledger.Schedule, err error) {
	err = s.read(ctx, func(q querier) error {
		var found bool
		if sc, found, err = s.scheduleRow(ctx, q, id, false); err == nil && !found {
			err = fmt.Errorf("%w: schedule %q", ledger.ErrNotFound, id)
		}
		return err
	})
	return sc, err
}

// Schedules returns every schedule, by id (ledger.ScheduleKeeper).
func (s *Store) Schedules(ctx context.Context) ([]ledger.Schedule, error) {
	var all []ledger.Schedule
	err := s.read(ctx, func(q querier) error {
		all = all[:0]
		rows, err := q.Query(ctx, s.schedQ(`SELECT doc FROM {S}.schedules ORDER BY id`))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var doc []byte
			if err := rows.Scan(&doc); err != nil {
				return err
			}
			sc, err := s.decodeSchedule(doc)
			if err != nil {
				return err
			}
			all = append(all, sc)
		}
		return rows.Err()
	})
	ledger.SortSchedules(all)
	return all, err
}

// SwapSchedule replaces a schedule at its version (ledger.ScheduleKeeper).
func (s *Store) SwapSchedule(ctx context.Context, sc ledger.Schedule) (out ledger.Schedule, err error) {
	err = s.writeSchedule(ctx, func(tx pgx.Tx) error {
		stored, found, err := s.scheduleRow(ctx, tx, sc.ID, true)
		if err != nil {
			return err
		}
		if out, err = ledger.ScheduleSwap(stored, found, sc); err != nil {
			return err
		}
		return s.putScheduleRow(ctx, tx, out, false)
	})
	return out, err
}

// DeleteSchedule removes a schedule (ledger.ScheduleKeeper). Errors:
// ErrNotFound, ErrClosed, database errors.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	return s.writeSchedule(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.schedQ(`DELETE FROM {S}.schedules WHERE id = $1`), id)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: schedule %q", ledger.ErrNotFound, id)
		}
		return err
	})
}
