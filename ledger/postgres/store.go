package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
	"github.com/docketrun/docket/plan"
)

// Config configures a Store. Zero values take the documented defaults.
type Config struct {
	// URL is the connection string, postgres://user:password@host:port/db?...
	// (libpq's keyword/value form works too). Required. Its password never
	// appears in errors or logs.
	URL string
	// Schema holds the ledger's tables; default "docket". Several ledgers
	// may share a database under different schemas.
	Schema string
	// Clock, when set, gives the times recorded in claims and events and
	// Store.Now (tests pin it). Default: the database's clock. Leases are
	// always judged by the database's clock.
	Clock  ledger.Clock
	Logger *slog.Logger // default: discard
	// MaxOutputBytes bounds one recorded output and a memo value; larger:
	// ErrTooLarge. Default 17 MiB (as the Badger ledger's).
	MaxOutputBytes int
	// SubscriberBuffer is how many live events a subscription may have
	// queued before it ends with ErrLagged; default 4096.
	SubscriberBuffer int
	// Lease is how long this node's lease lasts without a heartbeat: after
	// it, other nodes take over the node's claims and runs, and its own
	// commits are refused. Default 10s: the longest pause (GC, a stalled VM,
	// a network partition) a node survives without losing its work, and
	// about how long a dead node's runs wait before another node adopts
	// them.
	Lease time.Duration
	// Heartbeat is how often the lease is renewed; default Lease/5 (2s).
	// It must leave room for SkewMargin and a slow round trip: at most
	// (Lease - SkewMargin)/2.
	Heartbeat time.Duration
	// SkewMargin is how much the local clock may be off from the
	// database's, and how much earlier than the database this node counts
	// its own lease as ended (LeaseValid); default 1s.
	SkewMargin time.Duration
	// Poll is the fallback poll of subscriptions: how long an event of
	// another node can take to reach a subscriber when its notification was
	// lost. Default 1s.
	Poll time.Duration
	// MaxConns is the connection pool's size; default: the URL's
	// pool_max_conns, else 16.
	MaxConns int
	// Writers is how many Apply transactions this node runs at once;
	// default 2 (raise it on a database with many cores). Applies that
	// arrive while that many are running wait for one to end and then
	// commit together, in one transaction (group commit): under load, one set of locking reads, one lease check and
	// one WAL flush serve many Applies. Each is evaluated after the ones
	// before it, as if they had come one by one; a group that fails as a
	// whole (a lost race between nodes) runs its Applies again one by one.
	// It must be below MaxConns.
	Writers int
	// Outage is how long an Apply or a read waits and tries again while the
	// database is unreachable (restarting, failing over) before it returns
	// the error; default 30s. A transaction whose COMMIT was sent is never
	// run again: its outcome is returned as unknown.
	Outage time.Duration
	// PoolerLoginRetry matters only behind a pooler in transaction mode
	// (Store.Pooled): how long the pooler refuses every client after it
	// failed to log in to the database (PgBouncer's server_login_retry,
	// 15s by default), as after a database restart. A lease shorter than
	// that would lapse on every node at once and let the nodes take over
	// one another's live claims, so behind a pooler Open raises Lease to at
	// least 2*PoolerLoginRetry + SkewMargin, and says so in its log.
	// Default 15s; negative: leave Lease as it is.
	PoolerLoginRetry time.Duration
	// Keyring, when set, encrypts the values that may hold data (args,
	// outputs, errors, goals, plans, event data, memos) with envelope
	// encryption under its current key; older keys read what they sealed
	// (crypt.go). Default: none, values are stored in plaintext.
	Keyring *masterkey.Keyring
	// ListenURL, when set, is a connection string to the same database
	// that does not go through a pooler in transaction mode (the server
	// itself, or a pooler in session mode): the Store LISTENs there for
	// other nodes' events when URL goes through such a pooler, so its
	// subscribers get them at once rather than at the next poll. One
	// connection per process. Its password is kept out of errors and logs
	// as URL's is.
	ListenURL string
}

// Defaults.
const (
	DefaultSchema           = "docket"
	DefaultMaxOutputBytes   = 17 << 20
	DefaultSubscriberBuffer = 4096
	DefaultLease            = 10 * time.Second
	DefaultSkewMargin       = time.Second
	DefaultPoll             = time.Second
	DefaultMaxConns         = 16
	DefaultWriters          = 2
	DefaultOutage           = 30 * time.Second
	DefaultPoolerLoginRetry = 15 * time.Second
)

// maxConnsParam is the pool size parameter of pgxpool's connection strings.
const maxConnsParam = "pool_max_conns"

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.Schema = cmp.Or(cfg.Schema, DefaultSchema)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.MaxOutputBytes = cmp.Or(cfg.MaxOutputBytes, DefaultMaxOutputBytes)
	cfg.SubscriberBuffer = cmp.Or(cfg.SubscriberBuffer, DefaultSubscriberBuffer)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, cfg.Lease/5)
	cfg.SkewMargin = cmp.Or(cfg.SkewMargin, min(DefaultSkewMargin, cfg.Lease/5))
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	cfg.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)
	cfg.Writers = cmp.Or(cfg.Writers, min(DefaultWriters, max(cfg.MaxConns-1, 1)))
	cfg.Outage = cmp.Or(cfg.Outage, DefaultOutage)
	cfg.PoolerLoginRetry = cmp.Or(cfg.PoolerLoginRetry, DefaultPoolerLoginRetry)
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case strings.TrimSpace(cfg.URL) == "":
		return fmt.Errorf("%w: no database URL", ledger.ErrInvalid)
	case cfg.Schema == "" || len(cfg.Schema) > 48 || strings.ContainsAny(cfg.Schema, "\x00\"."):
		return fmt.Errorf("%w: schema name %q (1-48 characters, no quote, dot or NUL)", ledger.ErrInvalid, cfg.Schema)
	case cfg.MaxOutputBytes < 0 || cfg.MaxOutputBytes > 1<<30:
		return fmt.Errorf("%w: MaxOutputBytes %d out of range (0..1 GiB)", ledger.ErrInvalid, cfg.MaxOutputBytes)
	case cfg.SubscriberBuffer < 1:
		return fmt.Errorf("%w: SubscriberBuffer must be positive", ledger.ErrInvalid)
	case cfg.Lease < 100*time.Millisecond:
		return fmt.Errorf("%w: Lease %v is shorter than 100ms", ledger.ErrInvalid, cfg.Lease)
	case cfg.SkewMargin < 0 || cfg.SkewMargin >= cfg.Lease/2:
		return fmt.Errorf("%w: SkewMargin %v must be under half the lease (%v)", ledger.ErrInvalid, cfg.SkewMargin, cfg.Lease)
	case cfg.Heartbeat <= 0 || cfg.Heartbeat > (cfg.Lease-cfg.SkewMargin)/2:
		return fmt.Errorf("%w: Heartbeat %v must be positive and at most (Lease - SkewMargin)/2 = %v", ledger.ErrInvalid, cfg.Heartbeat, (cfg.Lease-cfg.SkewMargin)/2)
	case cfg.Poll <= 0 || cfg.Outage < 0:
		return fmt.Errorf("%w: Poll must be positive, Outage not negative", ledger.ErrInvalid)
	case cfg.MaxConns < 2:
		return fmt.Errorf("%w: MaxConns (or the URL's %s) is %d: at least 2 (one Apply transaction, and one more for the heartbeat and reads)", ledger.ErrInvalid, maxConnsParam, cfg.MaxConns)
	case cfg.Writers < 1 || cfg.Writers >= cfg.MaxConns:
		return fmt.Errorf("%w: Writers %d must be at least 1 and below MaxConns (%d)", ledger.ErrInvalid, cfg.Writers, cfg.MaxConns)
	}
	return nil
}

// SchemaMovedError says that the ledger's tables are at another version
// than this binary writes: a newer docket upgraded them while this node ran
// (errors.Is ledger.ErrFormat and ledger.ErrUnavailable). The upgrade
// marked every running node stopped in its own transaction, so this node's
// first commit after it was refused (a *LeaseError, nothing written) and
// its registration again found the tables moved: from then on every Apply
// returns this error at once and the node holds no lease, so the newer
// nodes adopt its runs once the lease it had ends.
type SchemaMovedError struct {
	Tables string // the version the meta table names
	Binary int    // SchemaVersion
}

func (e *SchemaMovedError) Error() string {
	return fmt.Sprintf("the ledger's tables are at version %s, not %d as this binary writes them (a newer docket upgraded them): this node no longer writes; run the newer version", e.Tables, e.Binary)
}

// Unwrap: ledger.ErrFormat, and ledger.ErrUnavailable (this node cannot
// write; a node of the tables' version can: a service answers 503).
func (e *SchemaMovedError) Unwrap() []error { return []error{ledger.ErrFormat, ledger.ErrUnavailable} }

// markMoved records that the tables moved past this binary (once, logged).
func (s *Store) markMoved(e *SchemaMovedError) {
	if s.moved.CompareAndSwap(nil, e) {
		s.validUntil.Store(0)
		s.log.Error("the ledger's tables were upgraded by a newer docket: this node stops writing (the newer nodes adopt its runs); run the newer version",
			"tables", e.Tables, "binary", e.Binary, "incarnation", s.Incarnation())
	}
}

// LeaseError is a commit refused because the writer's node lease lapsed
// (errors.Is ledger.ErrLeaseExpired). Nothing of it was written.
type LeaseError struct {
	Incarnation string    // the lapsed node
	Expired     time.Time // when its lease ended, by the database's clock (zero: its row is gone)
	Now         time.Time // the database's clock at the refused commit
}

func (e *LeaseError) Error() string {
	if e.Expired.IsZero() {
		return fmt.Sprintf("ledger: commit refused: node %s has no lease (its node row is gone)", e.Incarnation)
	}
	return fmt.Sprintf("ledger: commit refused: the lease of node %s expired at %s (database clock %s, %v ago): another node may have taken over its work; this store re-registers with a new incarnation",
		e.Incarnation, e.Expired.UTC().Format(time.RFC3339Nano), e.Now.UTC().Format(time.RFC3339Nano), e.Now.Sub(e.Expired).Round(time.Millisecond))
}

// Is makes errors.Is(err, ledger.ErrLeaseExpired) true.
func (e *LeaseError) Is(target error) bool { return target == ledger.ErrLeaseExpired }

// refused reports whether err is this node being refused as a writer (its
// lease lapsed, or its tables moved past it): the same for every Apply of
// a commit, and never worth a retry of that commit.
func refused(err error) bool {
	var lease *LeaseError
	var moved *SchemaMovedError
	return errors.As(err, &lease) || errors.As(err, &moved)
}

// Store is the shared ledger (see the package doc).
type Store struct {
	cfg    Config
	group  grouper   // runs Applies, grouping them under load (group.go)
	env    *envelope // seals and opens values (Config.Keyring); nil: plaintext
	pool   *pgxpool.Pool
	log    *slog.Logger
	secret string // the URL's password, redacted from every error
	// listenCfg, when set, is where listenLoop LISTENs (Config.ListenURL);
	// listenSecret its password.
	listenCfg    *pgx.ConnConfig
	listenSecret string
	local        ledger.Local
	hub          ledger.Hub
	id           string // this handle's notification sender id (stable across incarnations)
	pooled       bool   // behind a pooler in transaction mode (probePooler)
	q            queries
	lq           limitQueries
	takes        atomic.Int64 // TakeTokens calls (sweepEvery)

	inc        atomic.Pointer[string]           // current incarnation
	validUntil atomic.Int64                     // local unix nanos until which the lease counts as valid (LeaseValid)
	moved      atomic.Pointer[SchemaMovedError] // set once the tables moved past this binary (markMoved): it writes nothing more
	offset     atomic.Int64                     // database clock minus local clock, nanos

	closed    atomic.Bool
	stop      chan struct{}
	wg        sync.WaitGroup
	reregMu   sync.Mutex
	heartbeat atomic.Bool // false: heartbeats paused (tests simulate a stalled node)

	notes chan []string // NOTIFY payloads of committed Applies (notifier)
	// peers is how many other live nodes the ledger has (at the last
	// heartbeat, or raised by a new node's hello): with none, commits send
	// no NOTIFY, as nobody else listens.
	peers atomic.Int64

	seenMu sync.Mutex
	seen   map[string]uint64 // run -> highest seq published to the hub

	recent recent // what recent commits wrote, for Applies in one round trip (spec.go)
	noSpec bool   // every Apply takes two round trips (tests, measurements)
}

var (
	_ ledger.Store        = (*Store)(nil)
	_ ledger.OwnerChecker = (*tx)(nil)
)

// Open connects, creates or upgrades the schema, registers this process as
// a node with a lease and starts its heartbeat and its listener. Errors:
// ledger.ErrInvalid (a bad Config or URL), ledger.ErrFormat (a newer
// schema), and connection or permission errors that say what failed
// (never with the password).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil && strings.TrimSpace(cfg.URL) != "" {
		return nil, fmt.Errorf("%w: database URL: %s", ledger.ErrInvalid, redactString(err.Error(), passwordOf(cfg.URL)))
	}
	if cfg.MaxConns == 0 && hasParam(cfg.URL, maxConnsParam) {
		cfg.MaxConns = int(pc.MaxConns) // the URL's, when the Config leaves it
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger.With("component", "ledger/postgres"), secret: pc.ConnConfig.Password,
		stop: make(chan struct{}), seen: map[string]uint64{}, q: makeQueries(cfg.Schema), lq: makeLimitQueries(cfg.Schema), notes: make(chan []string, 4096)}
	s.group = grouper{s: s, max: cfg.Writers}
	s.heartbeat.Store(true)
	pc.MaxConns = int32(cfg.MaxConns)
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "docket" // unless the URL names one
	}
	if countingTrips {
		pc.ConnConfig.Tracer = tripTracer{}
	}
	where := fmt.Sprintf("PostgreSQL at %s:%d, database %q as user %q", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, pc.ConnConfig.User)
	if s.pooled, err = probePooler(ctx, pc.ConnConfig); err != nil {
		return nil, s.explain("connecting to "+where, err)
	}
	if s.pooled {
		if !setsExecMode(cfg.URL) {
			pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
		if err := s.listenElsewhere(ctx); err != nil {
			return nil, err
		}
		if s.listenCfg == nil {
			s.log.Info("the database is reached through a pooler in transaction mode (two connections shared one server session): queries go without named prepared statements, and other nodes' events reach this node's subscribers by polling, as LISTEN does not work through such a pooler (give a direct connection for listening, ListenURL, to get them at once)",
				"poll", cfg.Poll, "exec_mode", pc.ConnConfig.DefaultQueryExecMode.String())
		} else {
			s.log.Info("the database is reached through a pooler in transaction mode (two connections shared one server session): queries go without named prepared statements; this node LISTENs for other nodes' events on ListenURL",
				"exec_mode", pc.ConnConfig.DefaultQueryExecMode.String())
		}
		if least := 2*cfg.PoolerLoginRetry + cfg.SkewMargin; cfg.PoolerLoginRetry > 0 && cfg.Lease < least {
			s.log.Info("behind a pooler the node lease is raised above twice the pooler's wait after a failed login (PgBouncer's server_login_retry), so that a database restart does not make this node's live claims look dead; lower server_login_retry and set PoolerLoginRetry to keep a shorter lease",
				"lease", least, "configured_lease", cfg.Lease, "pooler_login_retry", cfg.PoolerLoginRetry)
			s.cfg.Lease = least
		}
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, s.explain("connecting to "+where, err)
	}
	if err := s.pool.Ping(ctx); err != nil {
		s.pool.Close()
		return nil, s.explain("connecting to "+where, err)
	}
	if err := migrate(ctx, s.pool, cfg.Schema); err != nil {
		s.pool.Close()
		return nil, s.explain("preparing the ledger's tables in "+where, err)
	}
	if s.env, err = newEnvelope(cfg.Keyring); err != nil {
		s.pool.Close()
		return nil, err
	}
	if err := s.checkKeys(ctx); err != nil {
		s.pool.Close()
		if errors.Is(err, ledger.ErrKey) {
			return nil, err
		}
		return nil, s.explain("checking the encryption keys in "+where, err)
	}
	if err := s.register(ctx); err != nil {
		s.pool.Close()
		return nil, s.explain("registering this node in "+where, err)
	}
	var b [8]byte
	rand.Read(b[:])
	s.id = hex.EncodeToString(b[:])
	s.wg.Add(3)
	go s.heartbeatLoop()
	go s.listenLoop()
	go s.notifier()
	return s, nil
}

// explain wraps err with what was being done, in words a person can act on
// for the usual failures, without the password.
func (s *Store) explain(doing string, err error) error {
	hint := ""
	switch pgCode(err) {
	case codeInvalidPassword, codeInvalidAuthSpec:
		hint = ": authentication failed (check the user and password of the ledger URL)"
	case codeReadOnly:
		hint = ": the database is read-only (a hot standby, or default_transaction_read_only): point the ledger at the primary"
	case codeInsufficientPrivile:
		hint = ": permission denied (the ledger's user must be able to create the schema and its tables, or they must exist)"
	case "3D000":
		hint = ": the database does not exist (create it first: createdb NAME)"
	case "42P05", "26000": // prepared statement already exists / does not exist
		hint = ": a pooler between docket and PostgreSQL shares server sessions (transaction pooling) and was not recognized at start: add " + execModeParam + "=cache_describe to the ledger URL"
	default:
		var lease *LeaseError
		if errors.As(err, &lease) || errors.Is(err, ledger.ErrFormat) {
			break
		}
		if connLost(err) {
			hint = ": the database is unreachable (is the server running and accepting TCP connections there?)"
		}
	}
	if connLost(err) && !errors.Is(err, ledger.ErrUnavailable) {
		return s.redact(fmt.Errorf("ledger: %s%s: %w (%w)", doing, hint, err, ledger.ErrUnavailable))
	}
	return s.redact(fmt.Errorf("ledger: %s%s: %w", doing, hint, err))
}

// register makes a new incarnation and its node row with a fresh lease.
func (s *Store) register(ctx context.Context) error {
	var b [8]byte
	rand.Read(b[:])
	inc := "inc_" + hex.EncodeToString(b[:])
	host, _ := os.Hostname()
	sent := time.Now()
	var dbNow time.Time
	var peers int64
	err := s.pool.QueryRow(ctx, s.q.registerNode, inc, host, os.Getpid(), s.cfg.Lease.Microseconds(), strconv.Itoa(SchemaVersion)).Scan(&dbNow, &peers)
	if errors.Is(err, pgx.ErrNoRows) {
		// No row: the tables are not at this binary's version. A newer
		// binary upgraded them (and marked this node stopped, migrate):
		// this node learns of it at its next commit or renewal, and here.
		var v string
		if err := s.pool.QueryRow(ctx, s.q.schemaVersion).Scan(&v); err != nil {
			return err
		}
		if v == strconv.Itoa(SchemaVersion) { // set back in between: not moved
			return fmt.Errorf("the tables' version changed while this node registered: %w", ledger.ErrUnavailable)
		}
		me := &SchemaMovedError{Tables: v, Binary: SchemaVersion}
		s.markMoved(me)
		return me
	}
	if err != nil {
		return err
	}
	s.peers.Store(peers)
	s.renewed(sent, dbNow)
	s.inc.Store(&inc)
	return nil
}

// renewed records a successful lease renewal sent at local time sent and
// answered with the database's clock dbNow.
func (s *Store) renewed(sent, dbNow time.Time) {
	back := time.Now()
	mid := sent.Add(back.Sub(sent) / 2)
	s.offset.Store(int64(dbNow.Sub(mid)))
	s.recent.mark(dbNow.UTC(), back)
	s.validUntil.Store(sent.Add(s.cfg.Lease - s.cfg.SkewMargin).UnixNano())
}

// heartbeatLoop renews the lease every Config.Heartbeat; a lease found
// lapsed is replaced by a new incarnation.
func (s *Store) heartbeatLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.heartbeat.Load() || s.moved.Load() != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Heartbeat)
		s.renew(ctx)
		cancel()
	}
}

// renew renews the lease once.
func (s *Store) renew(ctx context.Context) {
	inc := s.Incarnation()
	sent := time.Now()
	var dbNow time.Time
	var peers int64
	err := s.pool.QueryRow(ctx, s.q.renewNode, inc, s.cfg.Lease.Microseconds()).Scan(&dbNow, &peers)
	switch {
	case err == nil:
		s.renewed(sent, dbNow)
		s.peers.Store(peers)
	case errors.Is(err, pgx.ErrNoRows):
		s.lapsed(inc)
	default:
		s.log.Warn("renewing the node lease failed; retrying", "incarnation", inc, "err", s.redact(err))
	}
}

// lapsed replaces incarnation inc, whose lease lapsed, by a new one (once,
// however many callers notice).
func (s *Store) lapsed(inc string) {
	s.reregMu.Lock()
	defer s.reregMu.Unlock()
	if s.Incarnation() != inc || s.closed.Load() {
		return
	}
	s.validUntil.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Lease)
	defer cancel()
	if err := s.register(ctx); err != nil {
		if errors.Is(err, ledger.ErrFormat) {
			return // the tables moved past this binary (markMoved said so)
		}
		s.log.Error("the node lease lapsed and registering again failed; retrying at the next heartbeat", "incarnation", inc, "err", s.redact(err))
		return
	}
	s.log.Warn("the node lease lapsed: its claims may be taken over by other nodes; registered again",
		"old_incarnation", inc, "incarnation", s.Incarnation())
}

// LeaseValid reports whether this node may still act on its claims: its
// lease, as last renewed, has more than Config.SkewMargin left by the local
// clock. A caller about to perform an effect it cannot take back checks it.
func (s *Store) LeaseValid() bool { return time.Now().UnixNano() < s.validUntil.Load() }

// Incarnation identifies this node's current registration: claims carry it
// as owner. It changes when the lease lapsed and the Store registered again.
func (s *Store) Incarnation() string { return *s.inc.Load() }

// Now is Config.Clock's time, else the database's clock (the local clock
// corrected by the offset measured at the last heartbeat), in UTC, to the
// microsecond.
func (s *Store) Now() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock.Now().UTC().Truncate(time.Microsecond)
	}
	return time.Now().Add(time.Duration(s.offset.Load())).UTC().Truncate(time.Microsecond)
}

// Local is the Store's process-local state.
func (s *Store) Local() *ledger.Local { return &s.local }

// Close stops the heartbeat and the listener, ends the lease at once (so
// other nodes take over this node's claims without waiting), ends
// subscriptions with ErrClosed and closes the pool. A second Close returns
// ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ledger.ErrClosed
	}
	close(s.stop)
	s.wg.Wait()
	s.hub.CloseAll(ledger.ErrClosed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.pool.Exec(ctx, s.q.stopNode, s.Incarnation())
	s.pool.Close()
	if err != nil {
		return s.explain("ending the node lease", err)
	}
	return nil
}

// Apply evaluates ops in order with the ledger's rules and commits those
// that are valid, with their events, in one transaction (see the package
// doc), which under load it may share with other Applies of this Store
// (Config.Writers: each is evaluated as if it came alone). Every Result
// carries its op's error; the returned error is for the call as a whole,
// and then every Result carries it too and nothing was applied:
// ErrClosed, a context error, ErrInvalid (an op not built with a
// constructor), a *LeaseError (ledger.ErrLeaseExpired), a database error
// (after waiting up to Config.Outage for an unreachable database), or an
// error saying the commit's outcome is unknown (the connection broke
// during COMMIT, or ctx ended while the server had the commit: read the
// records to find out; in the latter case the error also Is ctx's).
func (s *Store) Apply(ctx context.Context, ops ...ledger.Op) ([]ledger.Result, error) {
	res, _, err := s.applyWith(ctx, ops, "")
	return res, err
}

// applyWith is Apply, reading run doc's document in the commit ("": none).
func (s *Store) applyWith(ctx context.Context, ops []ledger.Op, doc string) ([]ledger.Result, docRead, error) {
	if len(ops) == 0 {
		return nil, docRead{}, nil
	}
	if err := ledger.Check(ops); err != nil {
		return ledger.FailedResults(len(ops), err), docRead{}, err
	}
	if s.closed.Load() {
		return ledger.FailedResults(len(ops), ledger.ErrClosed), docRead{}, ledger.ErrClosed
	}
	if me := s.moved.Load(); me != nil {
		return ledger.FailedResults(len(ops), me), docRead{}, me
	}
	return s.group.apply(ctx, ops, doc)
}

// ApplyDoc is Apply, and run runID's document read in the same transaction
// after ops: the statement goes in the commit's pipeline, before COMMIT, so
// it costs no round trip of its own (ledger.DocApplier). doc is zero when
// the Apply failed, the run has no rows or a blob of its args could not be
// read (Doc says why).
func (s *Store) ApplyDoc(ctx context.Context, runID string, ops ...ledger.Op) ([]ledger.Result, ledger.RunDoc, error) {
	res, read, err := s.applyWith(ctx, ops, runID)
	if err != nil || len(read.doc.Actions) == 0 {
		return res, ledger.RunDoc{}, err
	}
	doc, err := s.resolveDoc(ctx, runID, read)
	if err != nil {
		return res, ledger.RunDoc{}, nil
	}
	return res, doc, nil
}

// applyAlone runs ops in a transaction of their own, trying again after a
// lost race or while the database is unreachable (retry).
func (s *Store) applyAlone(ctx context.Context, ops []ledger.Op, doc string) ([]ledger.Result, docRead, error) {
	var results [][]ledger.Result
	var events []ledger.Event
	var reads []docRead
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		results, events, reads, err = s.applyOnce(ctx, [][]ledger.Op{ops}, []string{doc})
		return err
	})
	if err != nil {
		err = s.applyErr(ctx, err)
		return ledger.FailedResults(len(ops), err), docRead{}, err
	}
	s.publish(events)
	return results[0], reads[0], nil
}

// applyErr is the error an Apply returns for err.
func (s *Store) applyErr(ctx context.Context, err error) error {
	var lease *LeaseError
	if errors.As(err, &lease) {
		s.lapsed(lease.Incarnation)
	}
	if !errors.Is(err, ledger.ErrClosed) && ctx.Err() == nil && lease == nil {
		err = s.explain("commit", err)
	}
	return err
}

// errCommitUnknown marks a COMMIT whose outcome is unknown: never retried.
type commitUnknownError struct{ err error }

func (e *commitUnknownError) Error() string {
	return "the connection broke, or the context ended, during COMMIT: the commit's outcome is unknown (read the records to find out): " + e.err.Error()
}
func (e *commitUnknownError) Unwrap() []error { return []error{e.err, ledger.ErrUnavailable} }

// retry runs fn until it succeeds, fails for good, or the database has been
// unreachable for Config.Outage.
func (s *Store) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	var start time.Time
	backoff := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if s.closed.Load() {
			return ledger.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err := fn(ctx)
		if err == nil {
			return nil
		}
		var cu *commitUnknownError
		if errors.As(err, &cu) {
			// Even when ctx ended: the server may have committed what it
			// was sent (the error still Is ctx's).
			return err
		}
		if !transient(err) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		code := pgCode(err)
		if code == codeUniqueViolation || code == codeSerializationFail || code == codeDeadlock {
			// A lost race: run again at once (bounded: a livelock is a bug).
			if attempt < 100 {
				continue
			}
			return err
		}
		if start.IsZero() {
			start = time.Now()
			s.log.Warn("the database is unreachable; waiting for it", "err", s.redact(err), "up_to", s.cfg.Outage)
		}
		if time.Since(start) >= s.cfg.Outage {
			return fmt.Errorf("%w: unreachable for %v: %w", ledger.ErrUnavailable, s.cfg.Outage, err)
		}
		wait := backoff + time.Duration(mrand.Int64N(int64(backoff)))
		backoff = min(2*backoff, time.Second)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return ledger.ErrClosed
		}
	}
}

// applyOnce runs the ops of one or more Applies in one transaction, each
// Apply's after the one before it, as if they had come one by one: two round
// trips when the ops read nothing but what ledger.ReadSet forecasts
// (tx.begin, tx.commit). docs[i] names the run whose document the commit
// reads after Apply i ("": none), returned in reads[i]. A hard error fails
// them all.
func (s *Store) applyOnce(ctx context.Context, applies [][]ledger.Op, docs []string) (results [][]ledger.Result, events []ledger.Event, reads []docRead, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	defer conn.Release()
	rollback := func() {
		if !conn.Conn().IsClosed() && conn.Conn().PgConn().TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := conn.Conn().Exec(rctx, "ROLLBACK"); err != nil {
				conn.Conn().Close(rctx) // the pool replaces it
			}
			cancel()
		}
	}
	if len(applies) == 1 && !s.noSpec {
		st := newTx(s, ctx, conn.Conn())
		res, done, err := st.applySpec(applies[0], docs)
		if done || err != nil {
			if err == nil {
				s.remember(st, st.xid)
				s.notifyPeers(st)
				return [][]ledger.Result{res}, st.events, st.docReads, nil
			}
			var cu *commitUnknownError
			if !errors.As(err, &cu) {
				rollback()
			}
			return nil, nil, nil, err
		}
		rollback() // a check failed: nothing was written
	}
	t := newTx(s, ctx, conn.Conn())
	done := false
	defer func() {
		if !done {
			rollback()
		}
	}()
	all := applies[0]
	if len(applies) > 1 {
		all = slices.Concat(applies...)
	}
	if err := t.begin(ledger.ReadSet(all)); err != nil {
		return nil, nil, nil, err
	}
	results = make([][]ledger.Result, len(applies))
	for i, ops := range applies {
		res, err := ledger.EvalApply(t, ops)
		if err != nil {
			return nil, nil, nil, err
		}
		results[i] = res
	}
	t.docs = docs
	if err := t.commit(); err != nil {
		var cu *commitUnknownError
		if errors.As(err, &cu) {
			done = true
		}
		return nil, nil, nil, err
	}
	done = true
	s.remember(t, t.xid)
	s.notifyPeers(t)
	return results, t.events, t.docReads, nil
}

// notifyPeers hands the notifications of t, committed, to the notifier
// when another node may listen.
func (s *Store) notifyPeers(t *tx) {
	if s.peers.Load() > 0 {
		select {
		case s.notes <- t.notifications():
		default: // the notifier is behind: the subscribers' poll delivers these
		}
	}
}

// AdoptOrphans makes this node the driver of up to limit runs that are
// running but whose driver is gone (its node lease expired, by the
// database's clock), paused by the executor with nothing left in
// needs_review or awaiting approval with an action approved, and a driver
// that is gone (the node that recorded a resolution or an approval died
// before driving the run on), or cancelled with an action left in flight by a node that is gone,
// and returns their ids: the caller drives them (a drive of
// a cancelled run concludes what was in flight and starts nothing). A run's
// driver is the node that last appended to its log; two nodes adopting at
// once never get the same run. A node whose own lease lapsed adopts
// nothing. Errors: ErrClosed, database errors.
func (s *Store) AdoptOrphans(ctx context.Context, limit int) ([]string, error) {
	var ids []string
	err := s.read(ctx, func(q querier) error {
		ids = ids[:0]
		rows, err := q.Query(ctx, s.q.adoptOrphans, s.Incarnation(), max(limit, 1))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	return ids, err
}

// Reserve holds name for this node across every node of the ledger until
// release is called or this node's lease expires: ok is false while another
// live node holds it. The service holds a run id this way while it accepts
// (plans) the run, so a second request for it on any node answers 409.
// Errors: ErrClosed, database errors.
func (s *Store) Reserve(ctx context.Context, name string) (release func(), ok bool, err error) {
	inc := s.Incarnation()
	err = s.read(ctx, func(q querier) error {
		var owner string
		err := q.QueryRow(ctx, s.q.reserve, name, inc).Scan(&owner)
		if errors.Is(err, pgx.ErrNoRows) {
			ok = false
			return nil
		}
		ok = err == nil
		return err
	})
	if err != nil || !ok {
		return nil, false, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if s.closed.Load() {
				return // the lease ended with Close
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := s.pool.Exec(ctx, s.q.unreserve, name, inc); err != nil {
				s.log.Warn("releasing a reservation failed; it ends with this node's lease", "name", name, "err", s.redact(err))
			}
		})
	}, true, nil
}

// PutSession records a sign-in session of the review page for every node:
// hash is the SHA-256 (hex) of the session's cookie (the cookie itself is
// never stored), tokenName the token it was made from. Errors: ErrClosed,
// database errors.
func (s *Store) PutSession(ctx context.Context, hash, tokenName string, expires time.Time) error {
	return s.read(ctx, func(q querier) error {
		_, err := q.Exec(ctx, s.q.putSession, hash, tokenName, expires.UTC())
		return err
	})
}

// Session returns a session recorded by PutSession on any node (ok false:
// none, or it was deleted). Errors: ErrClosed, database errors.
func (s *Store) Session(ctx context.Context, hash string) (tokenName string, expires time.Time, ok bool, err error) {
	err = s.read(ctx, func(q querier) error {
		err := q.QueryRow(ctx, s.q.getSession, hash).Scan(&tokenName, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			ok = false
			return nil
		}
		ok = err == nil
		return err
	})
	return tokenName, expires.UTC(), ok, err
}

// DeleteSession ends a session on every node. Errors: ErrClosed, database
// errors.
func (s *Store) DeleteSession(ctx context.Context, hash string) error {
	return s.read(ctx, func(q querier) error {
		_, err := q.Exec(ctx, s.q.deleteSession, hash)
		return err
	})
}

// CreateRun records a run with revision 1 of its plan (ledger.CreateRunWith).
func (s *Store) CreateRun(ctx context.Context, r ledger.Run, p *plan.Plan, rows []ledger.Action) (ledger.Run, bool, error) {
	return ledger.CreateRunWith(ctx, s, r, p, rows)
}

// AddRevision records revision n+1 of a run's plan (ledger.AddRevisionWith).
func (s *Store) AddRevision(ctx context.Context, runID string, p *plan.Plan, rows []ledger.Action) (int, error) {
	return ledger.AddRevisionWith(ctx, s, runID, p, rows)
}

// Memo records value under (runID, name) once (ledger.MemoWith).
func (s *Store) Memo(ctx context.Context, runID, name string, value json.RawMessage) (json.RawMessage, error) {
	return ledger.MemoWith(ctx, s, s.cfg.MaxOutputBytes, runID, name, value)
}

// redact returns err with the URL's password replaced, keeping the chain
// (errors.Is and errors.As still see through it).
func (s *Store) redact(err error) error {
	for _, secret := range []string{s.secret, s.listenSecret} {
		if err != nil && secret != "" && strings.Contains(err.Error(), secret) {
			err = &redacted{err: err, secret: secret}
		}
	}
	return err
}

type redacted struct {
	err    error
	secret string
}

func (r *redacted) Error() string { return redactString(r.err.Error(), r.secret) }
func (r *redacted) Unwrap() error { return r.err }

func redactString(s, secret string) string {
	if secret == "" {
		return s
	}
	s = strings.ReplaceAll(s, secret, "xxxxx")
	return strings.ReplaceAll(s, url.QueryEscape(secret), "xxxxx")
}

// passwordOf digs the password out of a URL that pgx could not parse.
func passwordOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		p, _ := u.User.Password()
		return p
	}
	if kvs, ok := parseKeywordValue(raw); ok {
		for _, kv := range kvs {
			if kv.key == "password" {
				return kv.value
			}
		}
		return ""
	}
	for _, f := range strings.Fields(raw) {
		if v, ok := strings.CutPrefix(f, "password="); ok {
			return strings.Trim(v, "'")
		}
	}
	return ""
}

// Redact removes the password from a ledger URL, for messages and logs:
// postgres://user:xxxxx@host/db, or host=h user=u password=xxxxx.
func Redact(raw string) string {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		if u, err := url.Parse(raw); err == nil {
			if u.User != nil {
				if _, has := u.User.Password(); has {
					u.User = url.UserPassword(u.User.Username(), "xxxxx")
				}
			}
			if q := u.Query(); q.Has("password") {
				q.Set("password", "xxxxx")
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
	}
	if r, ok := redactKeywordValue(raw); ok {
		return r
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	if p := passwordOf(raw); p != "" {
		return strings.ReplaceAll(raw, p, "xxxxx")
	}
	return raw
}

// IsURL reports whether s names a PostgreSQL ledger: a URL (postgres://
// or postgresql://) or libpq's keyword/value form with at least one of
// host, hostaddr, port, dbname, user or service (host=db dbname=docket).
// Anything else is a data directory (write ./host=x for a directory named
// so).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") || isKeywordValue(s)
}
