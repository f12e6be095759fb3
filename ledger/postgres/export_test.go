package postgres

import "context"

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
