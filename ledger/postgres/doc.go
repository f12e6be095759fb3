// Package postgres is the shared ledger: ledger.Store over PostgreSQL
// (github.com/jackc/pgx/v5), for several processes and several machines
// against one database — `docket serve` nodes behind a load balancer, CLIs
// and `docket step` alongside them, workers of a workflow engine. It runs
// the same rules as every backend (ledger.Eval over its Tx) and passes the
// same conformance suite (ledger/ledgertest) against a real server.
//
// # Tables
//
// Everything lives in one schema (Config.Schema, default "docket"), in
// tables a person can query: runs, revisions (plans), actions (the rows of
// each revision), keys (one record per idempotency key: the execution
// truth), events (each run's log, primary key (run_id, seq)), memos, blobs
// (large values stored once per run), nodes (one row per process with its
// lease), reservations (run ids a node is accepting), sessions (the review
// page's, by the cookie's SHA-256), limits (the service's per-token rate
// buckets, shared by every node) and meta (the schema version). Each run
// row names its driver: the node that last appended to its log. JSON
// values are stored as bytea,
// byte for byte as recorded (a value of 64 KiB or more is a reference
// "\x00dkblob:<sha256>" to the blobs table); read one with
// convert_from(output, 'UTF8')::jsonb. The schema is created and upgraded at
// Open under a transaction-level advisory lock, so nodes starting together
// never race; a schema newer than this binary knows is refused
// (ledger.ErrFormat), never altered.
//
// # Transactions
//
// Every Apply is one READ COMMITTED transaction in which every record the
// rules read is locked (SELECT ... FOR UPDATE: the run, its rows, the key
// record, the memo): a read-modify-write of a record is atomic without
// SERIALIZABLE's predicate locks and the retries of its false positives.
// Records that do not exist yet cannot be locked, so a first write is a
// plain INSERT: two transactions racing to create the same key, run or memo
// meet on the primary key, and the loser (unique_violation) runs again from
// the start and sees the winner's record, exactly as a compare-and-swap
// loser does. Deadlocks and serialization failures run again too. A run's
// event seq comes from runs.last_seq, read under the run's row lock and
// written in the same transaction: gap-free and never repeated. With the
// server's defaults (fsync, synchronous_commit on) an acknowledged Apply is
// on disk.
//
// An Apply is two round trips when its ops read what ledger.ReadSet
// forecasts (claims, outcomes, reviews, run status, a new run): one
// pipeline sends BEGIN, locks and reads the runs, rows, keys and budget
// holds the ops name (and those they lead to: a key's run and row, a
// row's key), each set in one order, and reads the clock; the rules then
// run on those records in memory; a second pipeline sends the writes (a
// run once, however often the rules wrote it), the lease check and COMMIT.
// A read the forecast missed (another key of the row, a blob, a budget
// bucket, a memo) is one more query. A lapsed lease fails the lease check,
// so the server skips the COMMIT behind it; a connection that breaks after
// the second pipeline was sent leaves the outcome unknown (never retried).
//
// At most Config.Writers Apply transactions run at once; the Applies that
// arrive meanwhile commit together in one transaction (group commit,
// group.go), each evaluated after the ones before it as if they had come
// one by one. A group that fails as a whole runs its Applies again one by
// one. An Apply whose context ends while it waits leaves the queue, with
// nothing written.
//
// # Nodes, leases and fencing
//
// Each Store registers a node row (its incarnation) with a lease of
// Config.Lease, renewed every Config.Heartbeat. The statement before every
// Apply's COMMIT checks, by the database's clock, that the writer's lease is still
// valid; if it lapsed (a pause, a partition longer than the lease) the
// commit is refused with a *LeaseError (errors.Is ledger.ErrLeaseExpired),
// and the Store re-registers with a new incarnation: a caller drops what it
// was driving and starts again. A claim owned by another incarnation may
// be taken over only once that incarnation's lease expired, by the
// database's clock (ledger.OwnerChecker); Close ends the lease at once, so
// a cleanly stopped node's claims are taken over without waiting.
//
// An upgrade of the tables by a newer binary marks every running node
// stopped in its transaction (its lease left to run out): such a node's
// next commit fails the lease check, its registration finds the tables
// moved, and every Apply after it returns a *SchemaMovedError (errors.Is
// ledger.ErrFormat). A registration reads the version's row FOR SHARE
// and an upgrade locks it first, so one waits for the other: a node
// starting during an upgrade is never left out of it. A node registering
// deletes rows of nodes whose lease ended over a day ago (a node without
// a row counts as gone, as one whose lease ended).
//
// # Clock
//
// Without Config.Clock, times recorded in claims and events and Store.Now
// come from the database's clock: inside an Apply, clock_timestamp() of the
// transaction, read once; outside one, the local clock corrected by the
// offset measured at each heartbeat. Times are kept to the microsecond
// (PostgreSQL's precision).
//
// # Events on every node
//
// After a commit that appended events, the Store sends NOTIFY on a channel
// of the schema (batched: one statement, in a transaction of its own with
// synchronous_commit off: NOTIFY holds a global lock through its
// transaction's commit, which inside every Apply would serialize all
// commits); each Store LISTENs on a dedicated connection and publishes
// other processes' events to its subscribers (gap-free: a subscriber fills
// any gap from the table). A fallback poll (Config.Poll) compares the runs' last_seq with what
// was delivered, so a lost notification (the listening connection dropped)
// delays events by at most one poll, never stalls them. A Store alone on
// its ledger (no other live node at its last heartbeat, and no hello from
// a node that started since) sends no NOTIFY.
//
// # Connection strings and poolers
//
// Config.URL is a URL (postgres://…, postgresql://…) or libpq's
// keyword/value form (host=… port=… dbname=… user=… sslmode=…); IsURL
// tells either from a data directory. Open looks for a pooler in
// transaction mode (PgBouncer's pool_mode = transaction and its kind): two
// of its connections, both open, that land on the same server backend.
// Behind one (Store.Pooled) it sends queries without named prepared
// statements (pgx's cache_describe: the unnamed statement, one round trip
// per query once its description is cached), unless the URL sets
// default_query_exec_mode itself; it does not LISTEN (the pooler would
// register the LISTEN on a server connection it then hands to someone
// else), so other nodes' events reach subscribers by the poll, within
// Config.Poll, unless Config.ListenURL gives a direct connection to LISTEN
// on; and it raises the node lease to at least
// 2*Config.PoolerLoginRetry + SkewMargin, so that the pooler refusing
// every client for its server_login_retry after a database restart does
// not make live nodes' claims look dead. Each of these is written to the
// log at Open. A direct connection or a pooler in session mode is used as
// the server itself.
//
// # Secrets
//
// The connection URL's password never appears in an error or a log line of
// this package (errors are redacted before they leave it).
//
// # Encryption at rest
//
// With Config.Keyring, the values that may hold data (args, outputs,
// errors, goals, plans, event data, memos, blobs) are sealed one by one
// when they are encoded for a statement and opened when they are scanned
// (crypt.go): AES-256-GCM under a random data key per value, the data key
// sealed with the keyring's current master key, whose id the value keeps.
// The rules see plaintext only. Open refuses a keyring that lacks a key the
// ledger lists in its meta table, and a ledger with keys opened without
// one (ledger.ErrKey). Reseal moves every value to the current key
// (reseal.go). Keys never appear in an error or a log line.
//
// Imports: the standard library, pgx, and docket's ledger (with its
// internal blobref and masterkey) and plan packages.
package postgres
