package postgres

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/internal/blobref"
	"github.com/docketrun/docket/plan"
)

// querier is what reads need: the pool, or a read-only transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// read runs fn against the pool, waiting out an unreachable database (up to
// Config.Outage). Errors: ErrClosed, what fn returns.
func (s *Store) read(ctx context.Context, fn func(q querier) error) error {
	if s.closed.Load() {
		return ledger.ErrClosed
	}
	err := s.retry(ctx, func(ctx context.Context) error { return fn(s.pool) })
	return s.readErr(err)
}

// readTx runs fn in a REPEATABLE READ read-only transaction (one snapshot).
func (s *Store) readTx(ctx context.Context, fn func(q querier) error) error {
	if s.closed.Load() {
		return ledger.ErrClosed
	}
	err := s.retry(ctx, func(ctx context.Context) error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
			func(tx pgx.Tx) error { return fn(tx) })
	})
	return s.readErr(err)
}

// readErr passes the ledger's own errors and context errors through and
// explains the database's.
func (s *Store) readErr(err error) error {
	if err == nil || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrClosed) || errors.Is(err, ledger.ErrInvalid) ||
		errors.Is(err, ledger.ErrFormat) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return s.explain("reading", err)
}

func (s *Store) resolver(ctx context.Context, q querier, runID string) *blobref.Resolver {
	return &blobref.Resolver{Get: func(hash string) (json.RawMessage, error) {
		var v []byte
		err := q.QueryRow(ctx, s.q.blobRead, runID, hash).Scan(&v)
		if err == nil {
			err = s.env.openInto("blobs.value", (*[]byte)(&v))
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: run %q refers to blob %s, which is missing", ledger.ErrFormat, runID, hash)
		}
		return v, err
	}}
}

// getRun reads a run header; UpdatedAt is the later of the header's and the
// run's last event's.
func (s *Store) getRun(ctx context.Context, q querier, runID string) (ledger.Run, error) {
	var r ledger.RunRecord
	var last *time.Time
	err := scanRun(s.env, q.QueryRow(ctx, s.q.getRun, runID), &r, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Run{}, fmt.Errorf("%w: run %q", ledger.ErrNotFound, runID)
	}
	if err != nil {
		return ledger.Run{}, err
	}
	if last != nil && last.After(r.UpdatedAt) {
		r.UpdatedAt = last.UTC()
	}
	return r.Run, nil
}

// GetRun returns a run's header. Errors: ErrNotFound, ErrClosed, database
// errors.
func (s *Store) GetRun(ctx context.Context, runID string) (ledger.Run, error) {
	var r ledger.Run
	err := s.read(ctx, func(q querier) (err error) {
		r, err = s.getRun(ctx, q, runID)
		return err
	})
	return r, err
}

// listCursor is ListRuns' cursor: the last run's CreatedAt (unix micros,
// inverted, big-endian) and id, in hex.
func listCursor(r ledger.Run) string {
	b := binary.BigEndian.AppendUint64(nil, ^uint64(r.CreatedAt.UnixMicro()))
	return hex.EncodeToString(append(b, r.ID...))
}

// ListRuns pages through runs newest first (by CreatedAt, then run id);
// next is "" on the last page. Errors: ErrInvalid (bad cursor or status),
// ErrClosed, database errors.
func (s *Store) ListRuns(ctx context.Context, o ledger.ListOptions) (runs []ledger.Run, next string, err error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	if o.Status != "" && !o.Status.Valid() {
		return nil, "", fmt.Errorf("%w: run status %q", ledger.ErrInvalid, o.Status)
	}
	var afterAt *time.Time
	var afterID string
	if o.After != "" {
		c, err := hex.DecodeString(o.After)
		if err != nil || len(c) < 9 {
			return nil, "", fmt.Errorf("%w: cursor %q", ledger.ErrInvalid, o.After)
		}
		at := time.UnixMicro(int64(^binary.BigEndian.Uint64(c[:8]))).UTC()
		afterAt, afterID = &at, string(c[8:])
	}
	err = s.read(ctx, func(q querier) error {
		runs = runs[:0]
		sql, args := s.q.listRuns, []any{afterAt, afterID, limit + 1}
		if o.Status != "" {
			sql, args = s.q.listRunsStatus, append(args, string(o.Status))
		}
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r ledger.RunRecord
			var last *time.Time
			if err := scanRun(s.env, rows, &r, &last); err != nil {
				return err
			}
			if last != nil && last.After(r.UpdatedAt) {
				r.UpdatedAt = last.UTC()
			}
			runs = append(runs, r.Run)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", err
	}
	if len(runs) > limit {
		runs = runs[:limit]
		next = listCursor(runs[limit-1])
	}
	return runs, next, nil
}

// Plan returns revision rev of a run's plan (0 = current). Errors:
// ErrNotFound, ErrClosed, database errors.
func (s *Store) Plan(ctx context.Context, runID string, rev int) (*plan.Plan, error) {
	var p *plan.Plan
	err := s.readTx(ctx, func(q querier) error {
		if rev <= 0 {
			r, err := s.getRun(ctx, q, runID)
			if err != nil {
				return err
			}
			rev = r.Revision
		}
		var pj []byte
		var refsJSON []byte
		err := q.QueryRow(ctx, s.q.plan, runID, rev).Scan(&pj, &refsJSON)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: plan revision %d of run %q", ledger.ErrNotFound, rev, runID)
		}
		if err != nil {
			return err
		}
		if pj, err = s.env.open("revisions.plan", pj); err != nil {
			return err
		}
		var refs map[string]string
		if len(refsJSON) > 0 {
			if err := json.Unmarshal(refsJSON, &refs); err != nil {
				return fmt.Errorf("%w: arg refs of run %q revision %d: %v", ledger.ErrFormat, runID, rev, err)
			}
		}
		if p, err = ledger.DecodePlan(pj, refs, s.resolver(ctx, q, runID)); err != nil {
			return fmt.Errorf("ledger: reading plan of run %q: %w", runID, err)
		}
		return nil
	})
	return p, err
}

// Actions returns the rows of the run's current revision in plan order,
// followed by compensating rows in the order they were added. Errors:
// ErrNotFound, ErrClosed, database errors.
func (s *Store) Actions(ctx context.Context, runID string) ([]ledger.Action, error) {
	d, err := s.Doc(ctx, runID)
	return d.Actions, err
}

// Doc returns the Run JSON document, read from one snapshot. Errors:
// ErrNotFound, ErrClosed, database errors.
func (s *Store) Doc(ctx context.Context, runID string) (ledger.RunDoc, error) {
	var d docRead
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, s.q.doc, runID)
		if err != nil {
			return err
		}
		if d, err = s.scanDoc(rows); err != nil || len(d.doc.Actions) > 0 {
			return err
		}
		// No row: no run, or (never written so) a run without rows.
		r, err := s.getRun(ctx, q, runID)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: rows of run %q revision %d", ledger.ErrNotFound, runID, r.Revision)
	})
	if err != nil {
		return ledger.RunDoc{}, err
	}
	return s.resolveDoc(ctx, runID, d)
}

// docRead is a run's document as its statement (queries.doc) returns it:
// the outputs of its rows apart, not yet resolved.
type docRead struct {
	doc     ledger.RunDoc
	outputs [][]byte
}

// scanDoc reads the rows of queries.doc and closes them: no row (a zero
// docRead) when the run does not exist or has no rows.
func (s *Store) scanDoc(rows pgx.Rows) (docRead, error) {
	defer rows.Close()
	var d docRead
	skip := leadingCols{rows, make([]any, docRunCols)} // a later row's run columns: skipped (nil)
	for rows.Next() {
		var r ledger.RunRecord
		var last *time.Time
		var row ledger.RowRecord
		var output []byte
		var src pgx.Row = runThen{rows, s.env, &r, &last}
		if len(d.doc.Actions) > 0 {
			src = skip
		}
		if err := scanRow(s.env, src, &row, &output); err != nil {
			return docRead{}, err
		}
		if len(d.doc.Actions) == 0 {
			if last != nil && last.After(r.UpdatedAt) {
				r.UpdatedAt = last.UTC()
			}
			d.doc.Run = r.Run
		}
		d.doc.Actions = append(d.doc.Actions, row.Action(d.doc.Run.ID))
		d.outputs = append(d.outputs, output)
	}
	return d, rows.Err()
}

// resolveDoc sets the outputs of d's rows and resolves their blobs (blobs
// never change once written: read outside d's snapshot).
func (s *Store) resolveDoc(ctx context.Context, runID string, d docRead) (ledger.RunDoc, error) {
	blobs := s.resolver(ctx, s.pool, runID)
	for i := range d.doc.Actions {
		d.doc.Actions[i].Output = d.outputs[i]
		if err := ledger.ResolveAction(blobs, &d.doc.Actions[i]); err != nil {
			return ledger.RunDoc{}, s.readErr(fmt.Errorf("ledger: reading args of run %q action %q: %w", runID, d.doc.Actions[i].ID, err))
		}
	}
	return d.doc, nil
}

// runThen scans a doc row: the run's columns and its last event's time into
// run and last, then the rest into the destinations it is given.
type runThen struct {
	rows pgx.Rows
	env  *envelope
	run  *ledger.RunRecord
	last **time.Time
}

func (r runThen) Scan(dest ...any) error {
	return scanRun(r.env, trailingScan{r.rows, dest}, r.run, r.last)
}

// trailingScan is a row whose Scan is given the leading destinations and
// scans them together with rest.
type trailingScan struct {
	rows pgx.Rows
	rest []any
}

func (l trailingScan) Scan(dest ...any) error { return l.rows.Scan(append(dest, l.rest...)...) }

// docRunCols is how many columns of a doc row are the run's (runCols and
// its last event's time).
var docRunCols = strings.Count(runCols, ",") + 2

// Key returns the record of an idempotency key. Errors: ErrNotFound,
// ErrClosed, database errors.
func (s *Store) Key(ctx context.Context, key string) (ledger.KeyRecord, error) {
	var rec ledger.KeyRecord
	err := s.readTx(ctx, func(q querier) error {
		rec = ledger.KeyRecord{}
		err := scanKey(s.env, q.QueryRow(ctx, s.q.key, key), &rec)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: key %s", ledger.ErrNotFound, key)
		}
		if err != nil {
			return err
		}
		return ledger.ResolveKey(s.resolver(ctx, q, rec.RunID), &rec)
	})
	return rec, err
}

// Events returns up to limit events of a run with seq > after (limit <= 0:
// all), in seq order. Errors: ErrClosed, database errors.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]ledger.Event, error) {
	var out []ledger.Event
	err := s.read(ctx, func(q querier) error {
		out = out[:0]
		var lim any
		if limit > 0 {
			lim = limit
		}
		rows, err := q.Query(ctx, s.q.events, runID, int64(after), lim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			ev := ledger.Event{RunID: runID}
			var seq int64
			var typ string
			var data []byte
			if err := rows.Scan(&seq, &typ, &ev.ActionID, &ev.At, &data, &ev.Hash); err != nil {
				return err
			}
			if data, err = s.env.open("events.data", data); err != nil {
				return err
			}
			ev.Seq, ev.Type, ev.At = uint64(seq), ledger.EventType(typ), ev.At.UTC()
			if len(data) > 0 {
				ev.Data = data
			}
			out = append(out, ev)
		}
		return rows.Err()
	})
	return out, err
}

// Subscribe streams a run's events after seq after, gap-free, then live,
// whichever node commits them; a reader more than Config.SubscriberBuffer
// events behind is ended with ErrLagged. Errors: ErrNotFound, ErrClosed.
func (s *Store) Subscribe(ctx context.Context, runID string, after uint64) (*ledger.Subscription, error) {
	if _, err := s.GetRun(ctx, runID); err != nil {
		return nil, err
	}
	return s.hub.Subscribe(ctx, runID, after, s.cfg.SubscriberBuffer, s.Events)
}
