package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// NodeLease is what the nodes table says about one incarnation's lease, read
// with the database's clock: a claim it owns may be taken over once Live is
// false.
type NodeLease struct {
	Incarnation string
	Host        string // where the process ran (its host name)
	PID         int
	Expires     time.Time // when the lease ends (or ended), by the database's clock
	Now         time.Time // the database's clock when it was read
	Stopped     bool      // the process closed its ledger (its lease was ended at once)
}

// Live reports whether the lease still holds: another process may not take
// over its claims yet.
func (l NodeLease) Live() bool { return !l.Stopped && l.Expires.After(l.Now) }

// Left is how long the lease still holds (0 once it expired).
func (l NodeLease) Left() time.Duration {
	if !l.Live() {
		return 0
	}
	return l.Expires.Sub(l.Now)
}

// Lease reads incarnation inc's node lease. Errors: ledger.ErrNotFound (no
// node row: a claim it owns counts as gone), ledger.ErrClosed, and database
// errors.
func (s *Store) Lease(ctx context.Context, inc string) (NodeLease, error) {
	if s.closed.Load() {
		return NodeLease{}, ledger.ErrClosed
	}
	l := NodeLease{Incarnation: inc}
	query := `SELECT host, pid, lease_expires, stopped_at IS NOT NULL, clock_timestamp() FROM ` +
		pgx.Identifier{s.cfg.Schema}.Sanitize() + `.nodes WHERE incarnation = $1`
	err := s.read(ctx, func(q querier) error {
		var pid int32
		err := q.QueryRow(ctx, query, inc).Scan(&l.Host, &pid, &l.Expires, &l.Stopped, &l.Now)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: node %s", ledger.ErrNotFound, inc)
		}
		l.PID = int(pid)
		return err
	})
	if err != nil {
		return NodeLease{}, err
	}
	return l, nil
}
