package badgerdb

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
)

// Config opens a ledger. Zero values take the documented defaults (WithDefaults).
type Config struct {
	Dir    string       // data directory (required; created if missing)
	Logger *slog.Logger // default: slog.Default(); component=ledger is added
	Clock  ledger.Clock // default: real time
	// MaxOutputBytes bounds one recorded output (Succeed, Resolve Done) and a
	// memo value; larger: ErrTooLarge. Default 17 MiB (16 MiB + headroom).
	MaxOutputBytes int
	// GCInterval is the period of the value-log GC ticker; default 5m.
	GCInterval time.Duration
	// MemTableSize is Badger's memtable size; default 8 MiB. With two
	// memtables and small caches, an idle ledger stays well under 64 MiB RSS.
	// It also bounds one commit: Badger refuses a transaction above 15% of it,
	// so the committer splits batches below that.
	MemTableSize int64
	// SubscriberBuffer is how many live events a subscription may have queued
	// before it ends with ErrLagged; default 4096.
	SubscriberBuffer int
	// MinFreeBytes is the free space kept on the data directory's file system
	// for Badger's own writes (flushes, compaction, Close): a commit that
	// would leave less is refused with ErrNoSpace, and a directory with less
	// at Open is opened read-only (space.go). Default: derived from
	// MemTableSize (59 MiB with the default 8 MiB memtables).
	MinFreeBytes int64
	// Key, when valid, encrypts the ledger at rest with Badger's encryption
	// (AES-256; encryption.go): a new directory is made encrypted, an
	// encrypted one must be opened with the key it was made with, and a
	// plain one is refused (ledger.ErrKey). Backups are encrypted with it
	// too. Default: none, not encrypted.
	Key masterkey.Key
	// DataKeyRotation is how long Badger uses one data key (encrypted with
	// Key) for the new files it writes; default Badger's, 10 days.
	DataKeyRotation time.Duration
	// AfterSync, when set, is called by the committer right after each durable
	// sync and before any acknowledgement of the writes it covered (test hook).
	AfterSync func()
	// BeforeAck, when set, is called before each acknowledgement (test hook, lets
	// a test assert that a sync happened first).
	BeforeAck func()
}

// Defaults.
const (
	DefaultMaxOutputBytes   = 17 << 20
	DefaultGCInterval       = 5 * time.Minute
	DefaultMemTableSize     = 8 << 20
	DefaultSubscriberBuffer = 4096
	// valueThreshold: values at least this large go to Badger's value log;
	// smaller ones stay in the LSM tree (and its WAL), so a commit of small
	// records dirties only the WAL. Outputs of a few KiB go to the value log:
	// kept in the LSM tree, a burst of them made compaction rewrite them again
	// and again, with table builders holding hundreds of MiB (measured).
	valueThreshold = 2 << 10
)

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Clock == nil {
		cfg.Clock = ledger.RealClock{}
	}
	cfg.MaxOutputBytes = cmp.Or(cfg.MaxOutputBytes, DefaultMaxOutputBytes)
	cfg.GCInterval = cmp.Or(cfg.GCInterval, DefaultGCInterval)
	cfg.MemTableSize = cmp.Or(cfg.MemTableSize, DefaultMemTableSize)
	cfg.SubscriberBuffer = cmp.Or(cfg.SubscriberBuffer, DefaultSubscriberBuffer)
	cfg.MinFreeBytes = cmp.Or(cfg.MinFreeBytes, minFree(cfg))
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case cfg.Dir == "":
		return fmt.Errorf("%w: Config.Dir is required", ledger.ErrInvalid)
	case cfg.MaxOutputBytes < 0 || cfg.MaxOutputBytes > 1<<30:
		return fmt.Errorf("%w: MaxOutputBytes %d out of range (0..1 GiB)", ledger.ErrInvalid, cfg.MaxOutputBytes)
	case cfg.MemTableSize < 1<<20 || cfg.MemTableSize > 1<<30:
		return fmt.Errorf("%w: MemTableSize %d out of range (1 MiB..1 GiB)", ledger.ErrInvalid, cfg.MemTableSize)
	case cfg.GCInterval < 0:
		return fmt.Errorf("%w: negative GCInterval", ledger.ErrInvalid)
	case cfg.SubscriberBuffer < 1:
		return fmt.Errorf("%w: SubscriberBuffer must be positive", ledger.ErrInvalid)
	case cfg.MinFreeBytes < 0:
		return fmt.Errorf("%w: negative MinFreeBytes", ledger.ErrInvalid)
	case cfg.DataKeyRotation < 0:
		return fmt.Errorf("%w: negative DataKeyRotation", ledger.ErrInvalid)
	}
	return nil
}

// Ledger is the durable state of docket, in one Badger directory.
type Ledger struct {
	cfg         Config
	log         *slog.Logger
	db          *badger.DB
	incarnation string
	local       ledger.Local // process-local state of this handle (ledger.Store.Local)

	mu     sync.RWMutex // guards closed against Apply's enqueue
	closed bool
	reqCh  chan *request

	committerDone chan struct{}
	gcStop        chan struct{}
	gcDone        chan struct{}

	hub   ledger.Hub
	stats stats
	// deleted counts the bytes Collect deleted since the last compaction
	// it asked for (collect.go).
	deleted atomic.Int64
	space   *spaceGuard

	// schedMu serializes schedule writes (schedule.go): the database runs
	// without conflict detection, the committer being its only other writer.
	schedMu sync.Mutex

	// committer-owned state (only the committer goroutine touches these).
	seqs     map[string]uint64 // last committed event seq per run (loaded at first use)
	cache    recordCache
	blobs    blobCache
	inflight *flight // batch handed to the writer, not yet settled
	// maxBatchSize/Count are the committer's budget per transaction (below
	// Badger's own limits).
	maxBatchSize, maxBatchCount int64
	// testAck, when set (in-package tests), observes each acknowledgement:
	// the commit that carried the request and the last commit that was synced.
	testAck func(committedIn, synced uint64)
}

// The optional capabilities of package ledger that the embedded ledger has.
var (
	_ ledger.Store        = (*Ledger)(nil)
	_ ledger.Backuper     = (*Ledger)(nil)
	_ ledger.BudgetReader = (*Ledger)(nil)
)

// Open opens (creating if needed) the data directory. Errors: ErrLocked (the
// directory is held by another handle or process, still after waiting up to
// a second for it: lockWait), ErrFormat (the directory holds another
// format than formatVersion, older or newer, or is not a docket ledger:
// nothing in it is changed), ErrKey (the directory is encrypted and
// Config.Key is missing or another key, or it is plain and a key was given:
// nothing in it is changed), ErrInvalid.
func Open(ctx context.Context, cfg Config) (*Ledger, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "ledger")
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		if isNoSpaceErr(err) {
			return nil, fmt.Errorf("%w on %s: creating the data directory: %v", ledger.ErrNoSpace, cfg.Dir, err)
		}
		return nil, fmt.Errorf("ledger: creating data directory: %w", err)
	}
	if err := checkKey(cfg.Dir, cfg.Key); err != nil {
		return nil, err
	}
	space := &spaceGuard{dir: cfg.Dir, minFree: cfg.MinFreeBytes, reserve: reserveBytes(cfg)}
	opts := badgerOptions(cfg, log)
	// Opening for writing makes Badger write (a lock file, a new memtable and
	// value-log file, flushes of what a killed process left): without the
	// headroom, open read-only so that reads keep working, or, where Badger
	// cannot open read-only, for writing in the reserve's space (space.go).
	free, known := freeBytes(cfg.Dir)
	var db *badger.DB
	var err error
	if known && free < space.minFree {
		if hasUnflushedLog(cfg.Dir) {
			// Badger refuses to open it read-only (it must truncate the log),
			// and its replay reads the log's sparse tail, which on tmpfs
			// faults when the file system is full: do not try.
			err = errors.New("the write-ahead log of a process that did not close it is not flushed")
		} else {
			db, err = openBadger(opts.WithReadOnly(true), log)
		}
		switch {
		case err == nil:
			space.readOnly = true
			log.Warn("the data directory's file system is full: opened read-only; writes are refused until it is opened again with space",
				"dir", cfg.Dir, "free_bytes", free, "min_free_bytes", space.minFree)
		case isLockErr(err):
		case space.releaseReserve(log):
			log.Warn("the data directory cannot be opened read-only; opening it for writing in the reserve's space, writes are refused until space is freed",
				"dir", cfg.Dir, "read_only_err", err)
			db, err = openBadger(opts, log)
		default:
			// Nothing to read without writing first (an empty directory, or a
			// log a killed process left that Badger must truncate).
			return nil, fmt.Errorf("%w: it cannot be opened without writing (%v)", space.noSpace(free, space.minFree), err)
		}
	} else {
		db, err = openBadger(opts, log)
	}
	if err != nil {
		switch {
		case isLockErr(err):
			return nil, fmt.Errorf("%w: %s", ledger.ErrLocked, cfg.Dir)
		case isNoSpaceErr(err):
			return nil, fmt.Errorf("%w on %s: opening: %v", ledger.ErrNoSpace, cfg.Dir, err)
		}
		return nil, fmt.Errorf("ledger: opening %s: %w", cfg.Dir, err)
	}
	if err := checkFormat(db, cfg.Dir, space.readOnly); err != nil {
		db.Close()
		if space.readOnly && errors.Is(err, errEmptyReadOnly) {
			return nil, fmt.Errorf("%w: a new ledger cannot be created", space.noSpace(free, space.minFree))
		}
		return nil, err
	}
	var inc [8]byte
	if _, err := rand.Read(inc[:]); err != nil {
		db.Close()
		return nil, fmt.Errorf("ledger: making incarnation id: %w", err)
	}
	l := &Ledger{
		cfg:           cfg,
		log:           log,
		db:            db,
		incarnation:   "inc_" + hex.EncodeToString(inc[:]),
		reqCh:         make(chan *request, 1024),
		committerDone: make(chan struct{}),
		gcStop:        make(chan struct{}),
		gcDone:        make(chan struct{}),
		seqs:          make(map[string]uint64),
		cache:         recordCache{m: make(map[string]*entry)},
		blobs:         blobCache{m: make(map[string]*rowsBlob)},
		// Badger refuses a txn at 15% of the memtable; keep a margin for its
		// per-entry overhead estimate.
		maxBatchSize:  db.MaxBatchSize() * 3 / 4,
		maxBatchCount: db.MaxBatchCount() * 3 / 4,
		space:         space,
	}
	if free, ok := freeBytes(cfg.Dir); ok {
		space.keepReserve(free, 0, log)
	}
	go l.commitLoop()
	go l.gcLoop()
	return l, nil
}

// vlogFileSize is Badger's value-log file size for cfg: a value must fit in
// one value-log file; the file being written is mapped and resident, so it
// is kept small.
func vlogFileSize(cfg Config) int64 {
	return max(int64(32<<20), int64(cfg.MaxOutputBytes)+(1<<20))
}

func (l *Ledger) vlogFileSize() int64 { return vlogFileSize(l.cfg) }

// openBadger opens Badger with opts, retrying once after a crash leftover.
func openBadger(opts badger.Options, log *slog.Logger) (*badger.DB, error) {
	db, err := openWaitingForLock(opts)
	if err != nil && !isLockErr(err) && isCrashLeftoverErr(err) {
		// The first open after a crash can fail once on a file the killed
		// process left half-made; the failed open repairs it and a second
		// open succeeds: a memtable file (upstream badger#2207), or an empty
		// value-log file, which Badger truncates and then reports as "Create
		// a new file" (seen by the chaos harness in ~0.3% of SIGKILLs).
		log.Warn("retrying open after a crash leftover", "err", err)
		db, err = openWaitingForLock(opts)
	}
	return db, err
}

// lockWait bounds how long Open waits for the directory's lock before it
// says ErrLocked. Badger's lock is a flock, which belongs to the open file:
// a child process that any goroutine of this process forks (os/exec) holds a
// copy of every descriptor until it execs, so a handle closed an instant
// before may still hold the lock for a moment (seen as "data directory
// busy" between two commands of one process under load). Another process
// that really holds the directory still gets ErrLocked, after the wait.
const lockWait = time.Second

// lockRetried, when set (tests only), runs before each retry of a lock.
var lockRetried func()

func openWaitingForLock(opts badger.Options) (*badger.DB, error) {
	return retryLocked(func() (*badger.DB, error) { return badger.Open(opts) }, isLockErr)
}

// retryLocked calls try until it returns anything but an error that
// locked says is a lock held by another, or lockWait passed.
func retryLocked[T any](try func() (T, error), locked func(error) bool) (T, error) {
	deadline := time.Now().Add(lockWait)
	for {
		v, err := try()
		if err == nil || !locked(err) || time.Now().After(deadline) {
			return v, err
		}
		if lockRetried != nil {
			lockRetried()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func badgerOptions(cfg Config, log *slog.Logger) badger.Options {
	vlogSize := vlogFileSize(cfg)
	opts := badger.DefaultOptions(cfg.Dir).
		WithLogger(badgerLogger{log: log}).
		// Every commit is synced inside Badger before Commit returns (WAL,
		// and the value log when a value went there); see doc.go.
		WithSyncWrites(true).
		// The committer is the only writer: no conflict tracking needed.
		WithDetectConflicts(false).
		WithMemTableSize(cfg.MemTableSize).
		WithNumMemtables(2).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithBaseTableSize(2 << 20).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(4 << 20).
		WithNumCompactors(2).
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(vlogSize).
		WithMetricsEnabled(false).
		WithNumVersionsToKeep(1)
	if cfg.Key.Valid() {
		// Encryption needs the block and index caches (set above).
		opts = opts.WithEncryptionKey(cfg.Key.Bytes())
		if cfg.DataKeyRotation > 0 {
			opts = opts.WithEncryptionKeyRotationDuration(cfg.DataKeyRotation)
		}
	}
	return opts
}

func isLockErr(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Another process is using this Badger database")
}

func isCrashLeftoverErr(err error) bool {
	s := err.Error()
	return strings.Contains(s, "memtable") || strings.Contains(s, ".mem") ||
		(strings.Contains(s, ".vlog") && strings.Contains(s, "Create a new file"))
}

// errEmptyReadOnly: an empty directory opened read-only has no format record
// and none can be written.
var errEmptyReadOnly = errors.New("ledger: empty directory opened read-only")

// checkFormat writes the format version into an empty directory and refuses
// a directory holding another version or other data, changing nothing.
func checkFormat(db *badger.DB, dir string, readOnly bool) error {
	var have []byte
	var empty bool
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaFormatKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			it := txn.NewIterator(badger.IteratorOptions{})
			defer it.Close()
			it.Rewind()
			empty = !it.Valid()
			return nil
		}
		if err != nil {
			return err
		}
		have, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: reading format version: %w", err)
	}
	switch {
	case have != nil:
		return formatError(dir, string(have))
	case !empty:
		return fmt.Errorf("%w: %s is a Badger directory without a docket format record, not a docket ledger: "+
			"nothing in it was changed; open a new or empty directory instead", ledger.ErrFormat, dir)
	case readOnly:
		return errEmptyReadOnly
	}
	if err := db.Update(func(txn *badger.Txn) error {
		return txn.Set(metaFormatKey, []byte(formatVersion))
	}); err != nil {
		return fmt.Errorf("ledger: writing format version: %w", err)
	}
	return nil
}

// currentFormat is formatVersion as a number.
var currentFormat, _ = strconv.Atoi(formatVersion)

// formatError says what a directory (or backup) of format have is and what
// to do, or nil when it is this build's format. It is a ledger.ErrFormat.
func formatError(what, have string) error {
	if have == formatVersion {
		return nil
	}
	if n, err := strconv.Atoi(have); err == nil && n > 0 && strconv.Itoa(n) == have && n < currentFormat {
		return &FormatError{Have: have, msg: fmt.Sprintf("ledger: %s is a docket ledger of data directory format %q, "+
			"written by a development build before format %q (no release wrote it); this build reads only format %q "+
			"and has no reader for it. None of its records was changed: read it with the build that wrote it, "+
			"or move it aside and start with a new directory", what, have, formatVersion, formatVersion)}
	}
	return &FormatError{Have: have, msg: fmt.Sprintf("ledger: %s is a docket ledger of data directory format %q, "+
		"which this build does not know (it reads only format %q; a newer build may have written it). "+
		"None of its records was changed: open it with the build that wrote it", what, have, formatVersion)}
}

// FormatError is the ledger.ErrFormat of a data directory or backup of
// another format than this build's.
type FormatError struct {
	Have string // the directory's (or backup's) format
	msg  string
}

func (e *FormatError) Error() string { return e.msg }

// Is makes errors.Is(err, ledger.ErrFormat) hold.
func (e *FormatError) Is(target error) bool { return target == ledger.ErrFormat }

// Close stops the committer (after committing and acknowledging every write
// already submitted), ends subscriptions and closes Badger. Later calls return
// ErrClosed.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ledger.ErrClosed
	}
	l.closed = true
	close(l.reqCh)
	l.mu.Unlock()
	<-l.committerDone
	close(l.gcStop)
	<-l.gcDone
	l.hub.CloseAll(ledger.ErrClosed)
	if !l.space.readOnly {
		// Badger's Close flushes the memtable into a table through a
		// mapping: on a full file system that store would fault (SIGBUS).
		// Give the reserve back for it; if even that is not enough, the
		// memtable stays in its synced write-ahead log, which the next Open
		// replays: leave it there, and Badger open, rather than crash. (The
		// process is expected to exit: the directory stays locked by this
		// process until it does.)
		if free, ok := freeBytes(l.cfg.Dir); ok {
			need := flushBytes(l.cfg.Dir)
			if free < need && l.space.releaseReserve(l.log) {
				free, _ = freeBytes(l.cfg.Dir)
			}
			if free < need {
				l.log.Error("no space to flush the memtable at close: leaving it in the write-ahead log for the next open",
					"dir", l.cfg.Dir, "free_bytes", free, "needed_bytes", need)
				return fmt.Errorf("%w: closed without flushing the memtable (it stays in the write-ahead log, replayed at the next open)", l.space.noSpace(free, need))
			}
		}
	}
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("ledger: closing badger: %w", err)
	}
	return nil
}

// Incarnation is this handle's random owner id, recorded in every claim.
func (l *Ledger) Incarnation() string { return l.incarnation }

func (l *Ledger) gcLoop() {
	defer close(l.gcDone)
	t := time.NewTicker(l.cfg.GCInterval)
	defer t.Stop()
	trim := time.NewTicker(time.Second)
	defer trim.Stop()
	var trimmedAt uint64
	for {
		select {
		case <-l.gcStop:
			return
		case <-trim.C:
			// Only when something was written since the last trim.
			if n := l.stats.commits.Load(); n != trimmedAt {
				trimmedAt = n
				trimMapped(l.cfg.Dir)
			}
			continue
		case <-t.C:
		}
		l.vlogGC()
	}
}

// vlogGC rewrites value-log files whose values are mostly deleted or
// overwritten (a bounded number per call), giving their space back: on the
// GC ticker, and after Collect deleted runs.
func (l *Ledger) vlogGC() (rewrites int) {
	if l.space.readOnly {
		return 0
	}
	for i := 0; i < 16; i++ { // a bounded number of rewrites per call
		// A rewrite copies up to one value-log file's live values
		// through the value log's mapping before deleting the file.
		if err := l.space.admit(l.vlogFileSize(), l.log); err != nil {
			l.log.Warn("value log GC postponed", "err", err)
			return rewrites
		}
		err := l.db.RunValueLogGC(0.5)
		if err == nil {
			rewrites++
			continue
		}
		if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
			l.log.Warn("value log GC", "err", err)
		}
		return rewrites
	}
	return rewrites
}

// badgerLogger routes Badger's logging to slog: errors and warnings as such,
// info and debug at debug level (Badger's own default prints INFO to stderr).
type badgerLogger struct{ log *slog.Logger }

func (b badgerLogger) logf(level slog.Level, format string, args ...any) {
	if !b.log.Enabled(context.Background(), level) {
		return
	}
	b.log.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(format, args...)), "source", "badger")
}

func (b badgerLogger) Errorf(f string, a ...any)   { b.logf(slog.LevelError, f, a...) }
func (b badgerLogger) Warningf(f string, a ...any) { b.logf(slog.LevelWarn, f, a...) }
func (b badgerLogger) Infof(f string, a ...any)    { b.logf(slog.LevelDebug, f, a...) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.logf(slog.LevelDebug-4, f, a...) }

var (
	_ ledger.Store    = (*Ledger)(nil)
	_ ledger.Backuper = (*Ledger)(nil)
)

// Now is the ledger's clock (Config.Clock), in UTC.
func (l *Ledger) Now() time.Time { return l.now() }

func (l *Ledger) now() time.Time { return l.cfg.Clock.Now().UTC() }

// Local is the handle's process-local state.
func (l *Ledger) Local() *ledger.Local { return &l.local }

// Subscribe delivers the backlog after seq `after` and then live events. A slow
// reader never blocks writers: when more than Config.SubscriberBuffer live
// events wait for it, it is ended with ErrLagged instead. Errors: ErrNotFound
// (no such run), ErrClosed.
func (l *Ledger) Subscribe(ctx context.Context, runID string, after uint64) (*ledger.Subscription, error) {
	if _, err := l.GetRun(ctx, runID); err != nil {
		return nil, err
	}
	return l.hub.Subscribe(ctx, runID, after, l.cfg.SubscriberBuffer, l.Events)
}
