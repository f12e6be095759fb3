package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/docketrun/docket/ledger"
)

// SchemaVersion is the version of the tables this binary writes. A database
// whose meta table says more is refused.
const SchemaVersion = 12

// migrations[i] upgrades version i to i+1. {S} is the schema, quoted.
var migrations = []string{
	`
CREATE TABLE {S}.nodes (
	incarnation   text PRIMARY KEY,
	host          text NOT NULL,
	pid           integer NOT NULL,
	started_at    timestamptz NOT NULL,
	renewed_at    timestamptz NOT NULL,
	lease_expires timestamptz NOT NULL,
	stopped_at    timestamptz
);
CREATE TABLE {S}.runs (
	run_id         text PRIMARY KEY,
	status         text NOT NULL,
	revision       integer NOT NULL,
	goal           text NOT NULL,
	policy         text NOT NULL,
	plan_hash      text NOT NULL,
	tools_hash     text NOT NULL,
	created_at     timestamptz NOT NULL,
	updated_at     timestamptz NOT NULL,
	error          text NOT NULL,
	paused_by      text NOT NULL,
	rows           integer NOT NULL,
	rev_hash       text NOT NULL,
	last_seq       bigint NOT NULL DEFAULT 0,
	driver         text,
	driver_expires timestamptz,
	created_by     text NOT NULL DEFAULT '',
	audit          boolean NOT NULL DEFAULT false,
	audit_hash     text NOT NULL DEFAULT '',
	audit_seq      bigint NOT NULL DEFAULT 0
);
CREATE INDEX runs_newest ON {S}.runs (created_at DESC, run_id);
CREATE INDEX runs_status ON {S}.runs (status, created_at DESC, run_id);
CREATE TABLE {S}.revisions (
	run_id   text NOT NULL,
	revision integer NOT NULL,
	plan     bytea NOT NULL,
	arg_refs jsonb,
	PRIMARY KEY (run_id, revision)
);
CREATE TABLE {S}.actions (
	run_id        text NOT NULL,
	revision      integer NOT NULL,
	action_id     text NOT NULL,
	ord           integer NOT NULL,
	tool          text NOT NULL,
	class         text NOT NULL,
	key           text NOT NULL,
	status        text NOT NULL,
	attempts      integer NOT NULL,
	args          bytea,
	depends_on    text[],
	error         text NOT NULL,
	approved_args bytea,
	undo          boolean NOT NULL,
	gate          bytea,
	approvals     bytea,
	PRIMARY KEY (run_id, revision, action_id)
);
CREATE TABLE {S}.keys (
	key               text PRIMARY KEY,
	run_id            text NOT NULL,
	action_id         text NOT NULL,
	tool              text NOT NULL,
	args              bytea,
	state             text NOT NULL,
	attempt           integer NOT NULL,
	owner             text NOT NULL,
	claimed_at        timestamptz,
	output            bytea,
	error             text NOT NULL,
	retryable         boolean NOT NULL,
	updated_at        timestamptz,
	first_claimed_at  timestamptz,
	maybe_took_effect boolean NOT NULL,
	failure           text NOT NULL
);
CREATE INDEX keys_run ON {S}.keys (run_id);
CREATE INDEX keys_claimed_owner ON {S}.keys (owner) WHERE state = 'claimed';
CREATE TABLE {S}.events (
	run_id    text NOT NULL,
	seq       bigint NOT NULL,
	type      text NOT NULL,
	action_id text NOT NULL,
	at        timestamptz NOT NULL,
	data      bytea,
	PRIMARY KEY (run_id, seq)
);
CREATE TABLE {S}.memos (
	run_id text NOT NULL,
	name   text NOT NULL,
	value  bytea NOT NULL,
	PRIMARY KEY (run_id, name)
);
CREATE TABLE {S}.reservations (
	name  text PRIMARY KEY,
	owner text NOT NULL,
	at    timestamptz NOT NULL
);
CREATE TABLE {S}.sessions (
	hash       text PRIMARY KEY,
	token_name text NOT NULL,
	expires    timestamptz NOT NULL
);
CREATE TABLE {S}.blobs (
	run_id text NOT NULL,
	hash   text NOT NULL,
	value  bytea NOT NULL,
	PRIMARY KEY (run_id, hash)
);
`,
	// 2: the audit chain (ledger.HashedAppender): each event of a chained
	// run carries its hash; events recorded before have none.
	`
ALTER TABLE {S}.events ADD COLUMN hash text;
`,
	// 3: budgets (ledger/budget.go): one row per bucket (budget, scope,
	// window, group) with its exact usage, one per action key that
	// reserved (its hold).
	`
CREATE TABLE {S}.budgets (
	id         text PRIMARY KEY,
	budget     text NOT NULL,
	scope      text NOT NULL,
	window_start timestamptz,
	every_ms   bigint NOT NULL,
	grp        text NOT NULL,
	used       numeric NOT NULL,
	count      integer NOT NULL,
	lim        numeric NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE TABLE {S}.budget_holds (
	key         text PRIMARY KEY,
	run_id      text NOT NULL,
	action_id   text NOT NULL,
	charges     jsonb NOT NULL,
	at          timestamptz NOT NULL,
	released    boolean NOT NULL,
	released_at timestamptz
);
CREATE INDEX budget_holds_run ON {S}.budget_holds (run_id);
`,
	// 4: the service's per-token limits shared by every node (limits.go):
	// one token bucket per (kind, name), and the sessions of a token by
	// expiry (the cap on a token's sessions). The buckets are taken from
	// on every request: unlogged, so a take waits for no WAL flush (a
	// crash or a failover of the database refills them).
	`
CREATE UNLOGGED TABLE {S}.limits (
	kind   text NOT NULL,
	name   text NOT NULL,
	tokens  double precision NOT NULL,
	at      timestamptz NOT NULL,
	took    boolean NOT NULL,
	full_at timestamptz NOT NULL,
	PRIMARY KEY (kind, name)
);
CREATE INDEX sessions_token ON {S}.sessions (token_name, expires);
`,
	// 5: the adopt sweep finds cancelled runs with an action in flight
	// through an index of such actions only, so its cost does not grow
	// with the finished runs.
	`
CREATE INDEX actions_in_flight ON {S}.actions (run_id)
	WHERE key <> '' AND (status = 'claimed' OR (status IN ('pending', 'approved') AND attempts > 0 AND NOT undo));
`,
	// 6: durable timers (ledger/timer.go): an action's timer, and a run's
	// wake time with an index of the runs that wait, so that finding the
	// due runs reads only theirs.
	`
ALTER TABLE {S}.actions ADD COLUMN timer bytea;
ALTER TABLE {S}.runs ADD COLUMN wake_at timestamptz;
CREATE INDEX runs_wake ON {S}.runs (wake_at, run_id) WHERE wake_at IS NOT NULL;
`,
	// 7: schedules (schedule.go): one row per schedule, its record as
	// ledger.EncodeSchedule writes it, and its version for swaps.
	`
CREATE TABLE {S}.schedules (
	id      text PRIMARY KEY,
	version bigint NOT NULL,
	doc     bytea NOT NULL
);
`,
	// 8: retention (collect.go): a run's own retention, when it ended and
	// until when its keys protect it; the collector finds ended runs and
	// budget buckets with a window through indexes of those only, so its
	// cost does not grow with live runs. Runs that ended before count as
	// ended at their last change.
	`
ALTER TABLE {S}.runs ADD COLUMN retention_ms bigint NOT NULL DEFAULT 0,
	ADD COLUMN ended_at timestamptz, ADD COLUMN keys_until timestamptz;
UPDATE {S}.runs SET ended_at = updated_at WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX runs_ended ON {S}.runs (ended_at, run_id) WHERE ended_at IS NOT NULL;
CREATE INDEX budgets_window ON {S}.budgets (window_start) WHERE every_ms > 0;
`,
	// 9: per-tool concurrency and rate limits (toollimit.go): one row per
	// limited tool, its slots and recent starts as JSON. Every claim and
	// outcome of the tool updates its row: pages mostly empty keep those
	// updates in place (HOT) instead of a chain of dead versions that each
	// lock must walk.
	`
CREATE TABLE {S}.tool_limits (
	tool   text PRIMARY KEY,
	record bytea NOT NULL
) WITH (fillfactor = 10);
`,
	// 10: what an action waits for while its tool's limits refuse its
	// claim (toolwait.go), shown on the row.
	`
ALTER TABLE {S}.actions ADD COLUMN tool_wait bytea;
`,
	// 11: no index reads the keys by owner (the adopt sweep went through
	// actions_in_flight), and one whose predicate names state made every
	// outcome's update of its key a new tuple with new entries in every
	// index of keys: without it, and with room on each page, an outcome
	// updates its key in place (HOT).
	`
DROP INDEX {S}.keys_claimed_owner;
ALTER TABLE {S}.keys SET (fillfactor = 80);
`,
	// 12: the adopt sweep finds cancelled runs with an action in flight
	// through a column of the run (unsettled, set by every write of the
	// run: queries.go) and its index, not through an index of actions that
	// names their status: an action's claim and outcome update its row in
	// place (HOT) when its page has room.
	`
ALTER TABLE {S}.runs ADD COLUMN unsettled boolean NOT NULL DEFAULT false;
` + markUnsettled + `;
CREATE INDEX runs_unsettled ON {S}.runs (run_id) WHERE unsettled;
DROP INDEX {S}.actions_in_flight;
ALTER TABLE {S}.actions SET (fillfactor = 80);
ALTER TABLE {S}.runs SET (fillfactor = 80);
`,
}

// markUnsettled sets the unsettled column of each run that had it before
// the column was there (a cancelled run with an action in flight).
var markUnsettled = `UPDATE {S}.runs SET unsettled = true WHERE ` + unsettled("runs.run_id", "runs.status", "runs.revision")

// migrate creates or upgrades the schema under a transaction-level
// advisory lock (one per schema name), so processes opening together take
// turns. Errors: ledger.ErrFormat (a newer schema), readOnly, others.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if len(migrations) != SchemaVersion {
		panic("postgres: migrations and SchemaVersion disagree")
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('docket.ledger.schema:' || $1, 0))`, schema); err != nil {
		return fmt.Errorf("taking the schema lock: %w", err)
	}
	qs := pgx.Identifier{schema}.Sanitize()
	var have int
	var meta *string
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1)::text`, qs+".meta").Scan(&meta); err != nil {
		return fmt.Errorf("looking for the schema: %w", err)
	}
	readVersion := `SELECT value FROM ` + qs + `.meta WHERE name = 'schema_version'`
	if meta != nil {
		var v string
		err := tx.QueryRow(ctx, readVersion).Scan(&v)
		if err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		if have, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("%w: schema %s has version %q", ledger.ErrFormat, schema, v)
		}
	}
	if have > SchemaVersion {
		return fmt.Errorf("%w: schema %q has version %d, newer than this binary's %d: upgrade docket on this machine (it never alters a newer schema)",
			ledger.ErrFormat, schema, have, SchemaVersion)
	}
	if have == SchemaVersion {
		return tx.Commit(ctx)
	}
	if meta != nil {
		// An upgrade locks the version's row (the schema lock keeps its
		// value) so that a registration (which reads it FOR SHARE) waits
		// for the upgrade and then finds the tables moved, or the upgrade
		// waits for a registration and then marks its node stopped. An
		// open that upgrades nothing does not hold up registrations.
		if _, err := tx.Exec(ctx, readVersion+` FOR NO KEY UPDATE`); err != nil {
			return fmt.Errorf("locking the schema version: %w", err)
		}
	} else {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+qs); err != nil {
			return fmt.Errorf("creating schema %s: %w", schema, err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+qs+`.meta (name text PRIMARY KEY, value text NOT NULL)`); err != nil {
			return fmt.Errorf("creating the meta table: %w", err)
		}
	}
	for v := have; v < SchemaVersion; v++ {
		if _, err := tx.Exec(ctx, strings.ReplaceAll(migrations[v], "{S}", qs)); err != nil {
			return fmt.Errorf("upgrading schema %s to version %d: %w", schema, v+1, err)
		}
	}
	if have > 0 {
		// The nodes still running an older binary would write as their
		// version does: they are marked stopped in this transaction, so
		// that each one's next commit is refused (the lease check reads
		// its row), its lease is not renewed and its registration finds
		// the tables moved (register). Their leases are not shortened: a
		// node counts on its lease until it ends, so their claims are
		// taken over, and their runs adopted, only then.
		if _, err := tx.Exec(ctx, stopNodes(qs)); err != nil {
			return fmt.Errorf("stopping the nodes of version %d: %w", have, err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+qs+`.meta (name, value) VALUES ('schema_version', $1)
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`, strconv.Itoa(SchemaVersion)); err != nil {
		return fmt.Errorf("recording the schema version: %w", err)
	}
	return tx.Commit(ctx)
}

// stopNodes marks every running node of schema qs (quoted) stopped: an
// upgrade's statement (migrate).
func stopNodes(qs string) string {
	return `UPDATE ` + qs + `.nodes SET stopped_at = clock_timestamp() WHERE stopped_at IS NULL`
}

// PostgreSQL error codes the store tells apart.
const (
	codeUniqueViolation     = "23505"
	codeSerializationFail   = "40001"
	codeDeadlock            = "40P01"
	codeReadOnly            = "25006"
	codeAdminShutdown       = "57P01"
	codeCrashShutdown       = "57P02"
	codeCannotConnectNow    = "57P03"
	codeInvalidPassword     = "28P01"
	codeInvalidAuthSpec     = "28000"
	codeInsufficientPrivile = "42501"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// transient reports whether a failed transaction (one that did not reach
// COMMIT) may run again: a lost race, or the server going away for a while.
func transient(err error) bool {
	switch pgCode(err) {
	case codeUniqueViolation, codeSerializationFail, codeDeadlock, codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow:
		return true
	case "":
		return connLost(err)
	}
	return false
}

// connLost reports a failure to reach the server or a connection that broke.
func connLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if pgCode(err) != "" {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || strings.Contains(err.Error(), "conn closed") ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe") ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection refused")
}
