package postgres

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

const (
	runCols = `run_id, status, revision, goal, policy, plan_hash, tools_hash, created_at, updated_at, error, paused_by, rows, rev_hash, created_by, audit, audit_hash, audit_seq, wake_at, retention_ms, ended_at, keys_until`
	rowCols = `action_id, ord, tool, class, key, status, attempts, args, depends_on, error, approved_args, undo, gate, approvals, timer, tool_wait`
	keyCols = `key, run_id, action_id, tool, args, state, attempt, owner, claimed_at, output, error, retryable, updated_at, first_claimed_at, maybe_took_effect, failure`
)

// inFlight: an action a whose call may be under way (claimed), or a keyed
// call's action between attempts. A cancelled run with such an action of
// its revision is one the adopt sweep concludes.
const inFlight = `a.key <> '' AND (a.status = 'claimed' OR (a.status IN ('pending', 'approved') AND a.attempts > 0 AND NOT a.undo))`

// unsettled is the value every write of a run gives its unsettled column,
// from the run's id, status and revision as written and the rows of the
// same transaction's writes before it: whether it is a cancelled run with
// an action in flight (the adopt sweep finds those through the index
// runs_unsettled). Only a cancel and the conclusion of a cancelled run's
// last action in flight change it: no index of runs or actions names a
// column that a running run's step changes, so those updates are
// heap-only.
func unsettled(id, status, rev string) string {
	return `CASE WHEN ` + status + ` = 'cancelled' THEN EXISTS (SELECT 1 FROM {S}.actions a WHERE a.run_id = ` + id +
		` AND a.revision = ` + rev + ` AND ` + inFlight + `) ELSE false END`
}

// nodeKeep is how long a node's row outlives the end of its lease, and
// pruneNodes how many such rows one registration deletes at most (each
// registration adds one row, so the table stays bounded by the nodes
// started within nodeKeep).
const (
	nodeKeep   = "1 day"
	pruneNodes = "1000"
)

// livePeers counts the other live nodes of the ledger (those a commit's
// NOTIFY is for), $1 being this node's incarnation.
const livePeers = `(SELECT count(*) FROM {S}.nodes o WHERE o.incarnation <> $1 AND o.stopped_at IS NULL AND o.lease_expires > clock_timestamp())`

// queries holds every statement with the schema filled in.
type queries struct {
	channel string // the NOTIFY channel of the schema

	registerNode, renewNode, stopNode, leaseCheck, schemaVersion, ownerGone, clock string

	lockRuns, lockRows, lockKeys, lockHolds string // an Apply's first reads (tx.begin)

	verifyRuns, verifyRows, verifyKeys string // a one round trip Apply's checks (spec.go)
	// A one round trip Apply's writes of the records it remembered, each
	// its record's check as well (guard).
	updateRunIf, setLastSeqIf, updateRowIf, updateKeyIf string

	runForUpdate, insertRun, updateRun, setLastSeq, adoptOrphans string
	rowForUpdate, upsertRow, updateRow, insertPlan               string
	keyForUpdate, insertKey, updateKey                           string
	notify                                                       string
	// insertRows[n-1], insertEvents[n-1]: the INSERT of n rows of a
	// revision, of n events (multiInsert).
	insertRows, insertEvents                                [maxRowsPerInsert]string
	memoForUpdate, insertMemo, updateMemo, blob, insertBlob string

	getRun, listRuns, listRunsStatus, plan, doc, key, events, blobRead, lastSeqs string

	reserve, unreserve                    string
	putSession, getSession, deleteSession string
}

func makeQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	t := func(q string) string { return strings.ReplaceAll(q, "{S}", s) }
	runRead := `SELECT ` + runCols + `, last_seq FROM {S}.runs`
	rRunCols := "r." + strings.ReplaceAll(runCols, ", ", ", r.")
	q := queries{
		channel: "docket_events_" + schema,

		// A node registers only while the tables are at its version ($5):
		// it reads the version's row FOR SHARE, so a registration and an
		// upgrade (migrate, which locks that row first) take turns. One
		// that waited for an upgrade finds the new version and inserts
		// nothing; an upgrade that waited for a registration marks the new
		// node stopped with the others.
		// A node registering also deletes up to pruneNodes rows of nodes
		// whose lease ended over nodeKeep ago: a node with no row counts as
		// gone everywhere (its claims, its runs, its own lease check), just
		// as one whose lease ended, so only the host and pid of a long
		// dead process go. Without it every process started (each CLI
		// command on a shared ledger is one) left a row for good.
		registerNode: t(`WITH gone AS (DELETE FROM {S}.nodes WHERE incarnation IN (
				SELECT incarnation FROM {S}.nodes WHERE lease_expires < clock_timestamp() - interval '` + nodeKeep + `'
				LIMIT ` + pruneNodes + ` FOR UPDATE SKIP LOCKED))
			INSERT INTO {S}.nodes (incarnation, host, pid, started_at, renewed_at, lease_expires)
			SELECT $1, $2, $3, clock_timestamp(), clock_timestamp(), clock_timestamp() + make_interval(secs => $4::bigint / 1e6)
			FROM {S}.meta WHERE name = 'schema_version' AND value = $5 FOR SHARE
			RETURNING clock_timestamp(), ` + livePeers),
		renewNode: t(`UPDATE {S}.nodes SET renewed_at = clock_timestamp(), lease_expires = clock_timestamp() + make_interval(secs => $2::bigint / 1e6)
			WHERE incarnation = $1 AND lease_expires > clock_timestamp() AND stopped_at IS NULL RETURNING clock_timestamp(), ` + livePeers),
		stopNode: t(`UPDATE {S}.nodes SET stopped_at = clock_timestamp(), lease_expires = least(lease_expires, clock_timestamp()) WHERE incarnation = $1`),
		// The commit's lease check fails its statement when the lease
		// lapsed, so that the server skips the COMMIT sent after it: the
		// failure is a cast of a marked text (leaseError reads it back)
		// holding the lease's end and the database's clock in microseconds
		// since the epoch ("-": the node has no row).
		// A node marked stopped (an upgrade of the tables by a newer
		// binary, migrate) fails it too, its end being when it was stopped.
		// It also returns the transaction's id (null: it wrote nothing), for
		// the records the commit leaves (remember), in the same statement.
		// And it is a one round trip Apply's check of what it took as
		// absent and did not write ($2 runs, $3 budget holds, $4 tool
		// limit rows; what it wrote, a plain INSERT checks): it fails, as
		// the verify statements do ($5: the failure's text), unless none
		// is there. Each a lookup per id (LATERAL) whatever the statistics
		// when the plan was made.
		leaseCheck: t(`SELECT CASE WHEN x.lease_expires > c.n AND x.stopped_at IS NULL THEN 0 ELSE ('` + leaseLapsed + ` '
			|| coalesce((extract(epoch FROM least(x.lease_expires, x.stopped_at)) * 1000000)::bigint::text, '-')
			|| ' ' || (extract(epoch FROM c.n) * 1000000)::bigint::text)::int END, txid_current_if_assigned() % 4294967296,
			(SELECT CASE WHEN count(*) = 0 THEN 0 ELSE ($5::text || ' ' || count(*))::int END FROM (
				SELECT 1 FROM unnest($2::text[]) AS r (id), LATERAL (SELECT 1 FROM {S}.runs WHERE run_id = r.id OFFSET 0) AS g
				UNION ALL
				SELECT 1 FROM unnest($3::text[]) AS x (key), LATERAL (SELECT 1 FROM {S}.budget_holds WHERE key = x.key OFFSET 0) AS h
				UNION ALL
				SELECT 1 FROM unnest($4::text[]) AS y (tool), LATERAL (SELECT 1 FROM {S}.tool_limits WHERE tool = y.tool OFFSET 0) AS l) AS f)
			FROM (SELECT clock_timestamp() AS n) AS c LEFT JOIN {S}.nodes x ON x.incarnation = $1`),
		schemaVersion: t(`SELECT coalesce((SELECT value FROM {S}.meta WHERE name = 'schema_version'), '-')`),
		ownerGone:     t(`SELECT coalesce((SELECT lease_expires <= clock_timestamp() FROM {S}.nodes WHERE incarnation = $1), true)`),
		clock:         `SELECT clock_timestamp()`,

		// The runs named and the runs of the keys named ($2: a key's run
		// never changes), the rows named ($1, $2) in their run's current
		// revision and the rows of the keys named ($3), the keys named and
		// the keys of the rows named: each set sorted, then each record
		// looked up and locked by its primary key in that order (a LATERAL
		// subquery with FOR UPDATE is a lookup per id whatever the plan
		// chosen for the prepared statement; a join there could turn into a
		// scan of the table when its statistics are off).
		lockRuns: t(`SELECT r.* FROM (SELECT DISTINCT u.id FROM (
				SELECT unnest($1::text[]) AS id
				UNION ALL SELECT k.run_id FROM unnest($2::text[]) AS x (key), LATERAL (SELECT run_id FROM {S}.keys WHERE key = x.key OFFSET 0) AS k) AS u
				ORDER BY 1) AS w,
			LATERAL (` + runRead + ` WHERE run_id = w.id FOR UPDATE) AS r`),
		lockRows: t(`SELECT a.* FROM (SELECT DISTINCT u.run_id, u.action_id FROM (
				SELECT * FROM unnest($1::text[], $2::text[]) AS x (run_id, action_id)
				UNION ALL SELECT k.run_id, k.action_id FROM unnest($3::text[]) AS y (key),
					LATERAL (SELECT run_id, action_id FROM {S}.keys WHERE key = y.key OFFSET 0) AS k) AS u ORDER BY 1, 2) AS w,
			LATERAL (SELECT run_id, revision, ` + rowCols + ` FROM {S}.actions WHERE run_id = w.run_id AND action_id = w.action_id
				AND revision = (SELECT r.revision FROM {S}.runs r WHERE r.run_id = w.run_id) FOR UPDATE) AS a`),
		lockKeys: t(`SELECT k.* FROM (SELECT DISTINCT u.key FROM (
				SELECT unnest($1::text[]) AS key
				UNION ALL SELECT a.key FROM unnest($2::text[], $3::text[]) AS x (run_id, action_id),
					LATERAL (SELECT key FROM {S}.actions WHERE run_id = x.run_id AND action_id = x.action_id
						AND revision = (SELECT r.revision FROM {S}.runs r WHERE r.run_id = x.run_id) AND key <> '' OFFSET 0) AS a) AS u ORDER BY 1) AS w,
			LATERAL (SELECT ` + keyCols + ` FROM {S}.keys WHERE key = w.key FOR UPDATE) AS k`),
		// A one round trip Apply's checks (spec.go): each locks the
		// records named in the order lockRuns, lockRows and lockKeys do, and
		// fails (a cast of the failure's text) unless every one is still the
		// version remembered ($2: its xmin); verifyRuns also fails unless the
		// database's clock has reached the Apply's time ($3), and returns it.
		// A failure's text names a count or the clock, never a constant the
		// planner could fold.
		verifyRuns: t(`SELECT CASE WHEN count(r.x) = cardinality($1::text[]) AND clock_timestamp() >= $3::timestamptz THEN clock_timestamp()
				ELSE ($4::text || ' ' || count(r.x))::timestamptz END
			FROM (SELECT * FROM unnest($1::text[], $2::bigint[]) AS u (id, xm) ORDER BY 1) AS w
			LEFT JOIN LATERAL (SELECT xmin::text::bigint AS x FROM {S}.runs WHERE run_id = w.id FOR UPDATE) AS r ON r.x = w.xm`),
		verifyRows: t(`SELECT CASE WHEN count(a.x) = cardinality($1::text[]) THEN 0 ELSE ($5::text || ' ' || count(a.x))::int END
			FROM (SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::bigint[]) AS u (run_id, rev, action_id, xm) ORDER BY 1, 3) AS w
			LEFT JOIN LATERAL (SELECT xmin::text::bigint AS x FROM {S}.actions
				WHERE run_id = w.run_id AND revision = w.rev AND action_id = w.action_id FOR UPDATE) AS a ON a.x = w.xm`),
		// verifyKeys: a key remembered absent ($2 = 0) must still be
		// absent.
		verifyKeys: t(`SELECT CASE WHEN count(*) FILTER (WHERE k.x IS NOT DISTINCT FROM nullif(w.xm, 0)) = cardinality($1::text[]) THEN 0
				ELSE ($3::text || ' ' || count(k.x))::int END
			FROM (SELECT * FROM unnest($1::text[], $2::bigint[]) AS u (key, xm) ORDER BY 1) AS w
			LEFT JOIN LATERAL (SELECT xmin::text::bigint AS x FROM {S}.keys WHERE key = w.key FOR UPDATE) AS k ON true`),
		lockHolds:    t(`SELECT ` + holdCols + ` FROM {S}.budget_holds WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE`),
		runForUpdate: t(runRead + ` WHERE run_id = $1 FOR UPDATE`),
		insertRun: t(`INSERT INTO {S}.runs (` + runCols + `, last_seq, driver, unsettled)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, ` + unsettled("$1", "$2", "$3") + `)`),
		// $23 NULL: the driver is kept (no event appended).
		updateRun: t(`UPDATE {S}.runs SET status = $2, revision = $3, goal = $4, policy = $5, plan_hash = $6, tools_hash = $7,
			created_at = $8, updated_at = $9, error = $10, paused_by = $11, rows = $12, rev_hash = $13,
			created_by = $14, audit = $15, audit_hash = $16, audit_seq = $17, wake_at = $18, retention_ms = $19, ended_at = $20, keys_until = $21,
			last_seq = $22, driver = coalesce($23, driver), unsettled = ` + unsettled("$1", "$2", "$3") + ` WHERE run_id = $1`),
		setLastSeq: t(`UPDATE {S}.runs SET last_seq = $2, driver = $3, unsettled = ` + unsettled("run_id", "status", "revision") + ` WHERE run_id = $1`),
		// Orphans: running runs whose driver is gone; runs paused by the
		// executor with nothing left in needs_review, or awaiting approval
		// with an action approved, whose driver is gone (the node that
		// recorded a resolution or an approval died before its drive went
		// on); and
		// cancelled runs with
		// an action left in flight (as ui.Server.ResumeRunning on one
		// process): a claim whose owner is gone when the driver is gone too
		// or is this node (the run was cancelled here, or adopted by this
		// node and not concluded yet), or a keyed action between attempts
		// when the driver is gone. A drive of a cancelled run concludes them
		// and starts nothing.
		// The candidates come from indexes of live runs (runs_status) and
		// of cancelled runs with an action in flight (runs_unsettled),
		// never a scan of every run.
		adoptOrphans: t(`UPDATE {S}.runs SET driver = $1 WHERE run_id IN (
			SELECT r.run_id FROM (
				SELECT c.run_id FROM {S}.runs c WHERE c.status IN ('running', 'paused', 'awaiting_approval')
				UNION
				SELECT u.run_id FROM {S}.runs u WHERE u.unsettled
			) AS cand JOIN {S}.runs r ON r.run_id = cand.run_id LEFT JOIN {S}.nodes n ON n.incarnation = r.driver
			WHERE (r.status = 'running' AND (n.incarnation IS NULL OR n.lease_expires <= clock_timestamp()))
			OR (r.status IN ('paused', 'awaiting_approval') AND r.paused_by = ''
				AND (n.incarnation IS NULL OR n.lease_expires <= clock_timestamp())
				AND NOT EXISTS (SELECT 1 FROM {S}.actions a WHERE a.run_id = r.run_id AND a.revision = r.revision AND a.status = 'needs_review')
				AND (r.status = 'paused' OR EXISTS (SELECT 1 FROM {S}.actions a WHERE a.run_id = r.run_id AND a.revision = r.revision AND a.status = 'approved')))
			OR (r.status = 'cancelled' AND EXISTS (
				SELECT 1 FROM {S}.actions a JOIN {S}.keys k ON k.key = a.key LEFT JOIN {S}.nodes kn ON kn.incarnation = k.owner
				WHERE a.run_id = r.run_id AND a.revision = r.revision AND a.key <> '' AND (
					(a.status = 'claimed' AND k.state = 'claimed' AND (kn.incarnation IS NULL OR kn.lease_expires <= clock_timestamp())
						AND (r.driver = $1 OR n.incarnation IS NULL OR n.lease_expires <= clock_timestamp()))
					OR (a.status IN ('pending', 'approved') AND a.attempts > 0 AND NOT a.undo
						AND (n.incarnation IS NULL OR n.lease_expires <= clock_timestamp())))))
			ORDER BY r.updated_at LIMIT $2 FOR UPDATE OF r SKIP LOCKED)
			AND EXISTS (SELECT 1 FROM {S}.nodes WHERE incarnation = $1 AND lease_expires > clock_timestamp())
			RETURNING run_id`),

		rowForUpdate: t(`SELECT ` + rowCols + ` FROM {S}.actions WHERE run_id = $1 AND revision = $2 AND action_id = $3 FOR UPDATE`),
		upsertRow: t(`INSERT INTO {S}.actions (run_id, revision, ` + rowCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
			ON CONFLICT (run_id, revision, action_id) DO UPDATE SET ord = EXCLUDED.ord, tool = EXCLUDED.tool, class = EXCLUDED.class,
			key = EXCLUDED.key, status = EXCLUDED.status, attempts = EXCLUDED.attempts, args = EXCLUDED.args, depends_on = EXCLUDED.depends_on,
			error = EXCLUDED.error, approved_args = EXCLUDED.approved_args, undo = EXCLUDED.undo, gate = EXCLUDED.gate, approvals = EXCLUDED.approvals, timer = EXCLUDED.timer, tool_wait = EXCLUDED.tool_wait`),
		updateRow: t(`UPDATE {S}.actions SET ord = $4, tool = $5, class = $6, key = $7, status = $8, attempts = $9, args = $10, depends_on = $11,
			error = $12, approved_args = $13, undo = $14, gate = $15, approvals = $16, timer = $17, tool_wait = $18
			WHERE run_id = $1 AND revision = $2 AND action_id = $3`),
		insertPlan: t(`INSERT INTO {S}.revisions (run_id, revision, plan, arg_refs) VALUES ($1, $2, $3, $4)`),

		keyForUpdate: t(`SELECT ` + keyCols + ` FROM {S}.keys WHERE key = $1 FOR UPDATE`),
		insertKey:    t(`INSERT INTO {S}.keys (` + keyCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`),
		updateKey: t(`UPDATE {S}.keys SET run_id = $2, action_id = $3, tool = $4, args = $5, state = $6, attempt = $7, owner = $8, claimed_at = $9,
			output = $10, error = $11, retryable = $12, updated_at = $13, first_claimed_at = $14, maybe_took_effect = $15, failure = $16 WHERE key = $1`),

		// One statement, in a transaction of its own that does not wait for
		// its commit to be flushed (set_config local to it).
		notify: `SELECT count(pg_notify($1, p)) FROM set_config('synchronous_commit', 'off', true), unnest($2::text[]) AS p`,

		memoForUpdate: t(`SELECT value FROM {S}.memos WHERE run_id = $1 AND name = $2 FOR UPDATE`),
		insertMemo:    t(`INSERT INTO {S}.memos (run_id, name, value) VALUES ($1, $2, $3)`),
		updateMemo:    t(`UPDATE {S}.memos SET value = $3 WHERE run_id = $1 AND name = $2`),
		blob:          t(`SELECT value FROM {S}.blobs WHERE run_id = $1 AND hash = $2`),
		insertBlob:    t(`INSERT INTO {S}.blobs (run_id, hash, value) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`),

		getRun: t(`SELECT ` + runCols + `, (SELECT at FROM {S}.events e WHERE e.run_id = r.run_id AND e.seq = r.last_seq) FROM {S}.runs r WHERE run_id = $1`),
		listRuns: t(`SELECT ` + runCols + `, (SELECT at FROM {S}.events e WHERE e.run_id = r.run_id AND e.seq = r.last_seq) FROM {S}.runs r
			WHERE ($1::timestamptz IS NULL OR created_at < $1 OR (created_at = $1 AND run_id > $2))
			ORDER BY created_at DESC, run_id LIMIT $3`),
		// The page's ids come from the index runs_status alone (an
		// index-only scan), then each run by its key (OFFSET 0 keeps that a
		// lookup per id), whatever plan is chosen for the prepared
		// statement: never a read of the runs of other statuses.
		listRunsStatus: t(`SELECT ` + rRunCols + `, (SELECT at FROM {S}.events e WHERE e.run_id = r.run_id AND e.seq = r.last_seq)
			FROM (SELECT p.run_id, p.created_at FROM {S}.runs p
				WHERE p.status = $4 AND ($1::timestamptz IS NULL OR p.created_at < $1 OR (p.created_at = $1 AND p.run_id > $2))
				ORDER BY p.created_at DESC, p.run_id LIMIT $3) AS page,
			LATERAL (SELECT ` + runCols + `, last_seq FROM {S}.runs x WHERE x.run_id = page.run_id OFFSET 0) AS r
			ORDER BY page.created_at DESC, page.run_id`),
		plan: t(`SELECT plan, arg_refs FROM {S}.revisions WHERE run_id = $1 AND revision = $2`),
		// A run and the rows of its current revision in one statement (one
		// snapshot, one round trip): the run's columns repeat on every row.
		// The run's last event is looked up once (OFFSET 0 keeps the
		// subquery from being flattened into a lookup per row).
		doc: t(`SELECT ` + rRunCols + `, r.last_at,
			a.action_id, a.ord, a.tool, a.class, a.key, a.status, a.attempts, a.args, a.depends_on, a.error, a.approved_args, a.undo, a.gate, a.approvals, a.timer, a.tool_wait,
			CASE WHEN a.status IN ('succeeded', 'compensated') THEN k.output END
			FROM (SELECT ` + runCols + `, (SELECT at FROM {S}.events e WHERE e.run_id = x.run_id AND e.seq = x.last_seq) AS last_at
				FROM {S}.runs x WHERE x.run_id = $1 OFFSET 0) AS r
			JOIN {S}.actions a ON a.run_id = r.run_id AND a.revision = r.revision
			LEFT JOIN {S}.keys k ON k.key = a.key AND a.key <> ''
			ORDER BY a.ord, a.action_id`),
		key:      t(`SELECT ` + keyCols + ` FROM {S}.keys WHERE key = $1`),
		events:   t(`SELECT seq, type, action_id, at, data, COALESCE(hash, '') FROM {S}.events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`),
		blobRead: t(`SELECT value FROM {S}.blobs WHERE run_id = $1 AND hash = $2`),
		lastSeqs: t(`SELECT run_id, last_seq FROM {S}.runs WHERE run_id = ANY($1)`),

		reserve: t(`INSERT INTO {S}.reservations AS r (name, owner, at) VALUES ($1, $2, clock_timestamp())
			ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, at = EXCLUDED.at
			WHERE r.owner = EXCLUDED.owner OR NOT EXISTS (
				SELECT 1 FROM {S}.nodes n WHERE n.incarnation = r.owner AND n.lease_expires > clock_timestamp())
			RETURNING owner`),
		unreserve: t(`DELETE FROM {S}.reservations WHERE name = $1 AND owner = $2`),

		putSession: t(`WITH gone AS (DELETE FROM {S}.sessions WHERE expires < clock_timestamp() - interval '1 hour')
			INSERT INTO {S}.sessions (hash, token_name, expires) VALUES ($1, $2, $3)
			ON CONFLICT (hash) DO UPDATE SET token_name = EXCLUDED.token_name, expires = EXCLUDED.expires`),
		getSession:    t(`SELECT token_name, expires FROM {S}.sessions WHERE hash = $1`),
		deleteSession: t(`DELETE FROM {S}.sessions WHERE hash = $1`),
	}
	for n := 1; n <= maxRowsPerInsert; n++ {
		q.insertRows[n-1] = multiInsert(t(`INSERT INTO {S}.actions (run_id, revision, `+rowCols+`)`), rowParams, n)
		q.insertEvents[n-1] = multiInsert(t(`INSERT INTO {S}.events (run_id, seq, type, action_id, at, data, hash)`), eventParams, n)
	}
	q.updateRunIf, q.setLastSeqIf = guard(q.updateRun, 24), guard(q.setLastSeq, 4)
	q.updateRowIf, q.updateKeyIf = guard(q.updateRow, 19), guard(q.updateKey, 17)
	return q
}

// guard makes update (an UPDATE of one record by its primary key, its
// WHERE last, n-1 parameters) a check of a one round trip Apply as well:
// it writes the record only when it is still the version remembered ($n:
// its xmin), which the UPDATE reads with the record locked, then fails, as
// the verify statements do (a cast of the failure's text, $n+2), unless it
// wrote it and the database's clock has reached the Apply's time ($n+1); it
// returns the clock.
func guard(update string, n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	return `WITH u AS (` + update + ` AND xmin::text::bigint = ` + p(0) + ` RETURNING 1)
		SELECT CASE WHEN count(*) = 1 AND clock_timestamp() >= ` + p(1) + `::timestamptz THEN clock_timestamp()
			ELSE (` + p(2) + `::text || ' ' || count(*))::timestamptz END FROM u`
}

// maxRowsPerInsert bounds the rows of one multi-row INSERT (of a revision's
// rows, of an Apply's events); rowParams and eventParams are the parameters
// of one row of each.
const (
	maxRowsPerInsert = 64
	rowParams        = 18
	eventParams      = 7
)

// multiInsert is insert (the statement up to VALUES) with n rows of cols
// parameters each.
func multiInsert(insert string, cols, n int) string {
	var b strings.Builder
	b.WriteString(insert + " VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range cols {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("$" + strconv.Itoa(i*cols+j+1))
		}
		b.WriteByte(')')
	}
	return b.String()
}
