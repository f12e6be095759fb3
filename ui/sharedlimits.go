package ui

import (
	"context"
	"sync/atomic"
	"time"
)

// SharedLimits is a ledger shared by several processes (ledger/postgres)
// that keeps the service's limits for every node: with it, a token's
// requests, submitted bytes and page sessions, and a client address's
// failed sign-ins, spread over several `docket serve` nodes count against
// one budget, not one per node. Without it (Badger, memory) each server
// counts in its own memory.
type SharedLimits interface {
	// TakeTokens takes n from the token bucket (kind, name) that holds at
	// most burst and refills at rate per second; when it holds fewer it
	// takes nothing and answers false and how long until it holds n.
	TakeTokens(ctx context.Context, kind, name string, n, rate, burst float64) (wait time.Duration, ok bool, err error)
	// TokensLeft is what the bucket (kind, name) holds now, taking
	// nothing.
	TokensLeft(ctx context.Context, kind, name string, rate, burst float64) (float64, error)
	// CapSessions ends the sessions of tokenName past its keep newest.
	CapSessions(ctx context.Context, tokenName string, keep int) error
}

// sharedTakeTimeout bounds one shared take: a request does not wait on a
// slow ledger to learn its rate limit (it falls back to the server's own
// bucket).
const sharedTakeTimeout = 2 * time.Second

// sharedBuckets is the ledger's side of a buckets: its kind names the
// bucket family in the ledger ("requests", "submit_bytes", "signin").
type sharedBuckets struct {
	kind   string
	limits SharedLimits
	failed func(error) // a take that failed (the local bucket answered)
}

// shareLimits makes the request rate, the submitted-bytes budget and the
// failed sign-ins' allowance count in the ledger when it is shared
// (SharedLimits), for every node at once.
// A take the ledger cannot answer (unreachable, slow) falls back to this
// server's own bucket, logged at most once a minute.
func (s *Server) shareLimits() {
	sl, ok := s.cfg.Ledger.(SharedLimits)
	if !ok {
		return
	}
	var logged atomic.Int64
	failed := func(err error) {
		now := time.Now().UnixNano()
		if last := logged.Load(); now-last > int64(time.Minute) && logged.CompareAndSwap(last, now) {
			s.log.Warn("the shared rate limits could not be read from the ledger; this node counts on its own meanwhile", "err", err)
		}
	}
	s.limits.reqs.shared = &sharedBuckets{kind: "requests", limits: sl, failed: failed}
	s.submits.shared = &sharedBuckets{kind: "submit_bytes", limits: sl, failed: failed}
	s.signins.shared = &sharedBuckets{kind: "signin", limits: sl, failed: failed}
}

// take is buckets.take in the ledger; ok false with a nil error: refused.
func (sb *sharedBuckets) take(name string, n, rate, burst float64) (time.Duration, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTakeTimeout)
	defer cancel()
	return sb.limits.TakeTokens(ctx, sb.kind, name, n, rate, burst)
}

// left is what name's bucket holds in the ledger, taking nothing.
func (sb *sharedBuckets) left(name string, rate, burst float64) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTakeTimeout)
	defer cancel()
	return sb.limits.TokensLeft(ctx, sb.kind, name, rate, burst)
}
