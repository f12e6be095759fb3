package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
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

func init() { countingTrips = true }

// SendBuf turns the connections' own pipeline buffers (sendBuf) on or off.
func SendBuf(on bool) { noSendBuf.Store(!on) }

// RawPipelines turns the commit pipelines this package writes itself
// (rawpipe.go) on or off; RawSends counts those written so far.
func RawPipelines(on bool) { noRaw.Store(!on) }
func RawSends() int64      { return rawSends.Load() }

// Unsettled returns the runs whose unsettled column is set (the adopt
// sweep's candidates among cancelled runs), sorted.
func (s *Store) Unsettled(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, s.bq(`SELECT run_id FROM {S}.runs WHERE unsettled ORDER BY run_id`))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CountTrips returns ctx with a counter of the round trips the Store's
// statements run with it make (a batch is one; see countTrips).
func CountTrips(ctx context.Context, n *atomic.Int64) context.Context { return countTrips(ctx, n) }

// LoadRuns adds n runs of three actions each (and their keys) with
// generate_series, and vacuums and analyzes the tables (as autovacuum
// does): finished runs (completed,
// failed, cancelled in turn), except that run i is cancelled with its
// first action claimed by a node that is gone when i is a multiple of
// 10,000, and running with a driver that is gone when i % 25,000 is 1.
func (s *Store) LoadRuns(ctx context.Context, n int) error {
	for _, q := range []string{
		`INSERT INTO {S}.runs (run_id, status, revision, goal, policy, plan_hash, tools_hash, created_at, updated_at, error, paused_by, rows, rev_hash, last_seq, driver)
		SELECT 'f' || i, CASE WHEN i % 10000 = 0 THEN 'cancelled' WHEN i % 25000 = 1 THEN 'running' ELSE (ARRAY['completed', 'failed', 'cancelled'])[i % 3 + 1] END,
			1, 'load', 'all', 'h', '', now() - make_interval(secs => i), now() - make_interval(secs => i), '', '', 3, 'h', 0, 'inc_gone'
		FROM generate_series(1, $1::int) AS i`,
		`INSERT INTO {S}.actions (run_id, revision, action_id, ord, tool, class, key, status, attempts, error, undo)
		SELECT 'f' || i, 1, 'a' || j, j, 't', '', 'k' || i || '_' || j,
			CASE WHEN i % 10000 = 0 AND j = 0 THEN 'claimed' WHEN i % 3 = 2 THEN 'skipped' ELSE 'succeeded' END, 1, '', false
		FROM generate_series(1, $1::int) AS i, generate_series(0, 2) AS j`,
		`INSERT INTO {S}.keys (key, run_id, action_id, tool, state, attempt, owner, claimed_at, error, retryable, updated_at, first_claimed_at, maybe_took_effect, failure)
		SELECT key, run_id, action_id, tool, status, 1, 'inc_gone', now(), '', false, now(), now(), false, '' FROM {S}.actions
		WHERE run_id LIKE 'f%' AND status <> 'skipped'`,
		// The runs are written here as no Apply writes them: their
		// unsettled column as the migration that added it sets it.
		markUnsettled,
		`VACUUM ANALYZE {S}.runs, {S}.actions, {S}.keys`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, n)
		}
		if _, err := s.pool.Exec(ctx, s.bq(q), args...); err != nil {
			return err
		}
	}
	return nil
}

// Plans returns the plans PostgreSQL chooses, as generic plans of prepared
// statements (which is how the Store runs them), with their execution
// (EXPLAIN ANALYZE; the adopt sweep's rolled back): the adopt sweep, the
// inbox's list of runs of one status, the list of every run, and the
// document of one run (its header and actions).
func (s *Store) Plans(ctx context.Context) (map[string]string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range []struct{ name, sql, args string }{
		{"adopt", s.q.adoptOrphans, `('` + s.Incarnation() + `', 100)`},
		{"inbox", s.q.listRunsStatus, `(NULL, '', 1001, 'awaiting_approval')`},
		{"list", s.q.listRuns, `(NULL, '', 51)`},
		{"doc", s.q.doc, `('f5')`},
	} {
		if _, err := conn.Exec(ctx, `PREPARE explain_`+p.name+` AS `+p.sql); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
			return nil, err
		}
		rows, err := conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) EXECUTE explain_`+p.name+p.args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		var b strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return nil, err
			}
			b.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
			return nil, err
		}
		out[p.name] = b.String()
	}
	return out, nil
}

// NewTestKeyring is a keyring of n new keys, the first current, for the
// package's external tests.
var NewTestKeyring = keyring

// GroupCounts returns how many group commits the Store made, how many
// Applies they held, and how many groups failed as a whole and ran their
// Applies again one by one.
func (s *Store) GroupCounts() (groups, applies, fallbacks int64) {
	return s.group.groups.Load(), s.group.grouped.Load(), s.group.fallbacks.Load()
}

// PendingApplies is how many Applies wait for a writer.
func (s *Store) PendingApplies() int {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	return len(s.group.pending)
}

// Peers is how many other live nodes the Store knows of.
func (s *Store) Peers() int64 { return s.peers.Load() }

// SkewSpecClock moves the reading of the database's clock that one round
// trip Applies start from by d (tests of the clock check).
func (s *Store) SkewSpecClock(d time.Duration) {
	s.recent.mu.Lock()
	s.recent.clock = s.recent.clock.Add(d)
	s.recent.mu.Unlock()
}

// SetSpeculation turns one round trip Applies on (the default) or off.
func (s *Store) SetSpeculation(on bool) { s.noSpec = !on }

// PoolMax is the connection pool's size.
func (s *Store) PoolMax() int32 { return s.pool.Config().MaxConns }

// StopNodesSQL is the statement an upgrade of schema's tables marks the
// running nodes stopped with.
func StopNodesSQL(schema string) string { return stopNodes(pgx.Identifier{schema}.Sanitize()) }
