// Package ledger is docket's durable state: runs, immutable plan revisions,
// one row per action of a run's current revision, one record per idempotency
// key (the execution truth), an append-only event log per run with a gap-free
// sequence, and small memos. It lives in one embedded Badger (v4) directory.
//
// Imports: the standard library, github.com/dgraph-io/badger/v4 (this is the
// only docket package importing Badger; its errors are translated into
// ErrNotFound, ErrConflict, ErrLocked, ...), and docket's plan package (to hash
// and store plans). It knows nothing about running tools.
//
// # Writes: one committer, group commit, durability
//
// Every write goes through Apply (CreateRun, AddRevision and Memo too). A single
// committer goroutine takes all waiting requests, validates their ops in order
// against the committed state plus the writes of the requests before them,
// writes them in one Badger transaction, and acknowledges each caller only
// after that transaction is synced. Being the only writer, it never meets
// Badger's ErrConflict (conflict detection is off) and keeps each run's last
// event seq in memory (loaded from the log at first use, dropped after a
// failed commit), so sequences have no gaps and never repeat, across crashes
// too: a seq exists once its event is durable.
//
// Durability: Badger runs with SyncWrites on, so Commit returns only after the
// write-ahead log of the memtable and the value log are synced (msync). The
// alternative, SyncWrites off plus db.Sync after each commit, costs the same
// two syncs and is not safe here: db.Sync syncs only the current memtable's
// log, so a memtable rotation between Commit and Sync would leave an
// acknowledged write unsynced, and with SyncWrites off Badger's value-log GC
// deletes an old value-log file after rewriting its live values without
// syncing them. Values under 2 KiB stay in the LSM tree, so a commit of small
// records dirties only the WAL; the value-log sync Badger issues anyway then
// has nothing to write (it still costs about 0.1 ms here). One commit = one
// durable sync shared by every caller in the batch; Config.AfterSync and
// BeforeAck let tests check the order.
//
// Badger refuses a transaction larger than 15% of the memtable ("Txn is too
// big"): the committer estimates each request's size as Badger does, commits
// what it has when the next request would not fit, and refuses (ErrTooLarge)
// only a single Apply that alone exceeds the budget. Large values (outputs up
// to MaxOutputBytes, 17 MiB by default) go to the value log, where they count
// as a 12-byte pointer, so one huge record still commits.
//
// Open: memory-conscious Badger sizes (8 MiB memtables, two of them, 8 MiB
// block cache, 4 MiB index cache, 32 MiB value-log files), Badger's logger
// routed to slog (errors and warnings; its INFO chatter at debug level),
// value-log GC on a ticker, the value-log pages Badger leaves mapped handed
// back to the kernel each second after writes (MADV_PAGEOUT on Linux:
// otherwise the resident set grows with every output written), and a
// format-version record checked at open (an unknown or newer format, or a
// non-empty directory without one, is ErrFormat; nothing is overwritten). A
// directory held by another handle or process gives ErrLocked. The first open
// after a crash can fail once on a memtable file (upstream badger#2207): Open
// retries once.
//
// # Key layout
//
// Every key is a kind byte and NUL; per-run kinds continue with the run id
// (which may not contain NUL) and NUL, so one run's records of a kind are one
// contiguous prefix and reading a run costs what the run holds, not the ledger:
//
//	v\0format                        format version ("1")
//	h\0<run>                         run header (Run + row count)
//	t\0<^created_ns BE8><run>        list index, newest first; value = status
//	p\0<run>\0<rev BE4>              plan revision (JSON, immutable)
//	b\0<run>\0<rev BE4>              a revision's initial rows, one record
//	a\0<run>\0<rev BE4><action id>   a row once it changed (output not stored here)
//	x\0<run>\0<key>                  key record (output stored here, once)
//	k\0<key>                         key -> run id
//	e\0<run>\0<seq BE8>              event
//	m\0<run>\0<name>                 memo
//	c\0<run>\0<sha256 hex>           a value of 64 KiB or more, stored once (large.go)
//
// Records start with an encoding tag byte. Runs, key records and events are a
// uvarint length, JSON metadata, then the raw JSON of their large field (a key
// record's output, an event's data), so reading never re-parses outputs.
// Args of 64 KiB or more are written once per run, as a content blob that
// the plan revision, the rows and the key record refer to (large.go). Rows,
// the most numerous records a resume reads, use a compact binary encoding
// (rowenc.go).
//
// # Action state machine (DESIGN.md)
//
// Key record: (absent) → claimed(attempt 1, owner, at) → succeeded(output) |
// failed(error) | needs_review | pending (retryable failure; next claim is
// attempt n+1); needs_review → succeeded (Resolve Done) | pending (Resolve
// Retry) | skipped (Resolve Skip); succeeded → compensated. A claim is a
// compare-and-swap on (state, attempt): exactly one of concurrent claimers
// wins; the others get *ConflictError with the current record. A claim whose
// owner is another incarnation (a process that is gone) may be taken over
// with attempt n+1. Outcomes are conditional on the current state; an
// identical repeat (a lost acknowledgement) is success; anything else is a
// *ConflictError carrying the run id, action id and key.
//
// Rows (the Run JSON's actions) mirror their current key's state and also
// carry review marks made before the first claim: pending → approved |
// rejected | skipped, and edits of the planned args. Every transition appends
// its event(s) in the same transaction.
//
// # Events and subscriptions
//
// Events(run, after, limit) reads the log. Subscribe registers for live
// events first, then reads the backlog, then delivers live events, skipping
// seqs it already delivered and filling any gap from the store: in order, no
// loss, no duplicates. A subscriber that falls more than SubscriberBuffer
// events behind is ended with ErrLagged (writers never wait for readers); it
// resubscribes from the last seq it saw. Outputs larger than 64 KiB are not
// inlined in events ({"output_truncated": true}); read them from the run.
package ledger
