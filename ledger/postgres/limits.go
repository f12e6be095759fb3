package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// The service's per-token limits, shared by every node of the ledger: a
// token bucket per (kind, name) in the limits table, taken from in one
// statement by the database's clock, and the cap on a token's page
// sessions (sessions table). The limits table is unlogged: a take writes
// no WAL and waits for no flush; a crash or failover of the database
// refills every bucket. The service (ui) uses them through its own
// interface when its ledger offers them, so a token spread over several
// nodes has one budget, not one per node.

// limitQueries are the statements of limits.go for one schema.
type limitQueries struct{ take, left, sweep, capSessions string }

func makeLimitQueries(schema string) limitQueries {
	t := func(q string) string { return strings.ReplaceAll(q, "{S}", pgx.Identifier{schema}.Sanitize()) }
	// $1 kind, $2 name, $3 n, $4 rate per second, $5 burst. A new bucket
	// starts full. now() is the statement's time (one transaction), the
	// same in every use below. full_at is when the bucket is full again:
	// a row past it says nothing a missing row does not (sweep).
	const (
		refill = `least($5::float8, l.tokens + greatest(0, extract(epoch FROM now() - l.at))::float8 * $4::float8)`
		took   = refill + ` >= $3::float8`
		after  = `CASE WHEN ` + took + ` THEN ` + refill + ` - $3::float8 ELSE ` + refill + ` END`
		first  = `CASE WHEN $3::float8 <= $5::float8 THEN $5::float8 - $3::float8 ELSE $5::float8 END`
	)
	// (at most a century ahead: an absurdly slow rate stays in range)
	fullAt := func(tokens string) string {
		return `now() + make_interval(secs => least(3.2e9, ($5::float8 - ` + tokens + `) / $4::float8))`
	}
	return limitQueries{
		take: t(`INSERT INTO {S}.limits AS l (kind, name, tokens, at, took, full_at)
			VALUES ($1, $2, ` + first + `, now(), $3::float8 <= $5::float8, ` + fullAt(first) + `)
			ON CONFLICT (kind, name) DO UPDATE SET
				tokens = ` + after + `,
				at = greatest(l.at, now()),
				took = ` + took + `,
				full_at = ` + fullAt(after) + `
			RETURNING tokens, took`),
		// $3 rate, $4 burst.
		left:  t(`SELECT least($4::float8, tokens + greatest(0, extract(epoch FROM now() - at))::float8 * $3::float8) FROM {S}.limits WHERE kind = $1 AND name = $2`),
		sweep: t(`DELETE FROM {S}.limits WHERE full_at < now()`),
		// The token's expired sessions and its live ones past the newest
		// $2 (by expiry: the latest signed in) end.
		capSessions: t(`DELETE FROM {S}.sessions WHERE token_name = $1 AND (expires <= clock_timestamp() OR hash IN (
			SELECT hash FROM {S}.sessions WHERE token_name = $1 AND expires > clock_timestamp() ORDER BY expires DESC, hash OFFSET $2))`),
	}
}

// TakeTokens takes n from the token bucket (kind, name) that holds at
// most burst and refills at rate per second, for every node of the ledger
// (judged by the database's clock; a bucket seen first starts full). When
// it holds fewer than n it takes nothing and answers false and how long
// until it holds n. rate <= 0 or n <= 0: no limit. Errors: ErrClosed,
// ErrInvalid (a negative burst, a NaN), database errors.
func (s *Store) TakeTokens(ctx context.Context, kind, name string, n, rate, burst float64) (wait time.Duration, ok bool, err error) {
	if rate <= 0 || n <= 0 {
		return 0, true, nil
	}
	if burst < 0 || math.IsNaN(n+rate+burst) || math.IsInf(n+rate+burst, 0) {
		return 0, false, fmt.Errorf("%w: token bucket %s/%s: n %v, rate %v, burst %v", ledger.ErrInvalid, kind, name, n, rate, burst)
	}
	if s.takes.Add(1)%sweepEvery == 0 {
		// Buckets full again are forgotten (a sign-in bucket per client
		// address would otherwise pile up); a failed sweep waits for the next.
		s.pool.Exec(ctx, s.lq.sweep)
	}
	var tokens float64
	err = s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, s.lq.take, kind, name, n, rate, burst).Scan(&tokens, &ok)
	})
	if err != nil || ok {
		return 0, ok, err
	}
	return time.Duration((n - tokens) / rate * float64(time.Second)), false, nil
}

// sweepEvery is how many takes of a Store pass between sweeps of the
// buckets that are full again.
const sweepEvery = 512

// TokensLeft is what the token bucket (kind, name) of TakeTokens holds now,
// taking nothing (burst for a bucket never taken from, or full again).
// Errors: ErrClosed, ErrInvalid, database errors.
func (s *Store) TokensLeft(ctx context.Context, kind, name string, rate, burst float64) (float64, error) {
	if burst < 0 || rate < 0 || math.IsNaN(rate+burst) || math.IsInf(rate+burst, 0) {
		return 0, fmt.Errorf("%w: token bucket %s/%s: rate %v, burst %v", ledger.ErrInvalid, kind, name, rate, burst)
	}
	left := burst
	err := s.read(ctx, func(q querier) error {
		err := q.QueryRow(ctx, s.lq.left, kind, name, rate, burst).Scan(&left)
		if errors.Is(err, pgx.ErrNoRows) {
			left = burst
			return nil
		}
		return err
	})
	return left, err
}

// CapSessions ends the sessions of tokenName (PutSession) past the keep
// newest live ones, and its expired ones, on every node. Errors:
// ErrClosed, database errors.
func (s *Store) CapSessions(ctx context.Context, tokenName string, keep int) error {
	return s.read(ctx, func(q querier) error {
		_, err := q.Exec(ctx, s.lq.capSessions, tokenName, max(keep, 0))
		return err
	})
}
