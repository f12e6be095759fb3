package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// NodeLease is what the nodes table says about one incarnation's lease
// (ledger.NodeLease).
type NodeLease = ledger.NodeLease

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
