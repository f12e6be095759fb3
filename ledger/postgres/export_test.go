package postgres

import (
	"context"
	"sync/atomic"
)

// PauseHeartbeat stops (true) or resumes (false) the lease renewals, as a
// stalled process would: tests simulate a pause longer than the lease.
func (s *Store) PauseHeartbeat(paused bool) { s.heartbeat.Store(!paused) }

// LeaseExpired reports whether incarnation inc's lease expired, by the
// database's clock.
func (s *Store) LeaseExpired(ctx context.Context, inc string) (bool, error) {
	var gone bool
	err := s.pool.QueryRow(ctx, s.q.ownerGone, inc).Scan(&gone)
	return gone, err
}

// CountTrips returns ctx with a counter of the round trips the Store's
// statements run with it make (a batch is one; see countTrips).
func CountTrips(ctx context.Context, n *atomic.Int64) context.Context { return countTrips(ctx, n) }
