// Package badgerdb is docket's embedded ledger: a ledger.Store in one Badger
// (v4) directory, the default (`--data DIR`). The rules of the state machine
// are the ledger package's (ledger.Eval); this package stores their records,
// commits them durably, and reads them back.
//
// Imports: the standard library, github.com/dgraph-io/badger/v4 (this is the
// only docket package importing Badger; its errors are translated into the
// ledger's: ErrNotFound, ErrClosed, ErrTooLarge, ErrNoSpace, ...), and
// docket's ledger (with ledger/masterkey) and plan packages.
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
// value-log GC on a ticker, the pages of the files Badger leaves mapped
// (value log, tables, memtable logs) handed back to the kernel each second
// after writes (MADV_PAGEOUT on Linux: otherwise the resident set grows with
// every byte written), and a format-version record checked at open: a new
// directory gets format "3"; a directory of any other format (the formats
// "1" and "2" of development builds before it, or one this build does not
// know) is refused with a *FormatError (ledger.ErrFormat) saying what it is
// and what to do, and a non-empty Badger directory without the record with
// ErrFormat; none of their records is changed. A
// directory held by another handle or process gives ErrLocked. The first open
// after a crash can fail once on a memtable file (upstream badger#2207): Open
// retries once.
//
// # Memory: what an application embedding the ledger should set
//
// Badger builds its tables (memtable flushes, compactions) in buffers on the
// Go heap, keeps up to eight of them at their grown size for reuse, and
// keeps its memtables there too. Without a soft memory limit the collector
// lets the heap grow to about twice that, so a process's peak grows with the
// bytes written in a burst (a few hundred MiB after tens of thousands of
// actions in a few seconds). Set one: 96 MiB for the ledger plus what the
// application itself needs, in the environment (GOMEMLIMIT=128MiB for an
// application needing 32 MiB) or at start (debug.SetMemoryLimit). It is
// soft: the runtime collects harder as the heap nears it (at most about half
// the CPU) and never fails an allocation. The price is throughput in write
// bursts, whose live heap comes close to it: measured with 96 MiB, 64 runs in
// flight lost 36% of their rate on a 19,200-step burst and 65% on a
// 64,000-step one, for a peak 0.6× and 0.3× of the unlimited one (README,
// docket against DBOS). An application that must not lose the rate sets a
// higher limit, or none, and budgets the memory instead.
// `docket serve` sets 128 MiB by default (--memory-limit). This package does
// not set it: the limit is the whole process's.
//
// # Key layout
//
// Every key is a kind byte and NUL; per-run kinds continue with the run id
// (which may not contain NUL) and NUL, so one run's records of a kind are one
// contiguous prefix and reading a run costs what the run holds, not the ledger:
//
//	v\0format                        format version ("3")
//	h\0<run>                         run header (JSON ledger.RunRecord)
//	t\0<^created_ns BE8><run>        list index, newest first; value = status
//	p\0<run>\0<rev BE4>              plan revision (immutable; large.go)
//	b\0<run>\0<rev BE4>              a revision's initial rows, one record (rowenc.go)
//	a\0<run>\0<rev BE4><action id>   a row once it changed (rowenc.go; output not stored here)
//	x\0<run>\0<key>                  key record (keyrecenc.go; output stored here, once)
//	k\0<key>                         key -> run id
//	e\0<run>\0<seq BE8>              event (eventenc.go)
//	m\0<run>\0<name>                 memo (the value as given)
//	c\0<run>\0<sha256 hex>           a value of 64 KiB or more, stored once (large.go)
//	u\0<bucket id>                   budget bucket (JSON ledger.BudgetRecord; budget.go)
//	r\0<key>                         a key's budget hold (JSON ledger.Hold; budget.go)
//	s\0<schedule id>                 schedule (JSON ledger.EncodeSchedule; schedule.go)
//	g\0<ended_ns BE8><run>           ended runs by end time, for the collector; value 1 when the
//	                                 run has a retention of its own; at time 0: a run whose
//	                                 deletion was cut short (collect.go)
//	l\0<tool>                        a limited tool's slots and recent starts (JSON ledger.LimitRecord; limit.go)
//	w\0<wake_ns BE8><run>            runs waiting for a time, by wake time (timer.go)
//
// The <key> of x and k records is NUL + the 32 bytes of an executor-derived
// key ("dk1_" + 64 lowercase hex digits), any other key its text.
//
// Each record kind has one encoding, named by the directory's format (no
// record carries a tag of its own), and a fuzz target (fuzz_test.go). A
// record decodes with its Badger key and nothing else (args of 64 KiB or
// more are then a reference to their blob), except that a row record holds
// only what changed since its revision's initial row, and a plan revision
// may leave its actions to those initial rows. What is
// written holds nothing twice where that pays on disk (measured after
// Badger's compression, TestLedgerBytes):
//   - key records: binary fields without the key and run id (their Badger
//     key holds them), status codes, times as Unix nanoseconds (relative
//     where they follow another), the args, then the output as raw JSON;
//   - events: no run id or seq (the Badger key), a type code, the
//     commonest data shapes without their JSON framing (read back byte for
//     byte), and the whole audit hash (32 bytes);
//   - rows: a revision's initial rows in one record, and a row record
//     holding only what changed since its initial row;
//   - plan revisions: without their actions when the revision's initial
//     rows give them back (the record is large enough to go to Badger's
//     value log, which is not compressed).
//
// Args of 64 KiB or more are written once per run, as a content blob that
// the plan revision, the rows and the key record refer to (large.go).
//
// # Events and subscriptions
//
// Events are the "e" records above; Subscribe serves them through a
// ledger.Hub fed by the writer after each durable commit (the ledger
// package's doc says what a subscription promises).
//
// # Encryption at rest
//
// With Config.Key the directory is encrypted with Badger's own encryption
// (every table, value log and write-ahead log), its backups with
// AES-256-GCM in chunks (backupcrypt.go); Open tells a missing, wrong or
// needless key from its key registry before Badger writes anything, and
// Rekey rewrites the registry under a new master key (encryption.go).
package badgerdb
