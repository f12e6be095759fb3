package ledger

import (
	"context"
	"time"
)

// Optional capabilities. A Store may implement more than the Store
// interface; callers find out with a type assertion on one of the
// interfaces below (never on a backend's own type or on an interface of
// their own), so that a new backend that implements one gets the feature
// and one that does not is known to lack it. Each backend asserts at
// compile time which ones it implements (var _ ledger.Reserver =
// (*Store)(nil)), and ledgertest lists them for the store under test and
// runs each one's contract. Backuper and BudgetReader are capabilities
// too (store.go, budget.go).

// LeaseHolder is a Store shared by several processes (nodes) whose claims
// stay theirs only while their node lease is renewed (ledger/postgres).
// LeaseValid reports whether this handle may still act on its claims now:
// its lease, as last renewed, has time left by the local clock. A caller
// about to perform an effect it cannot take back checks it first: once
// the lease has lapsed another node may take the claim over. It is true
// on a handle that was just opened. A Store without it is one process's:
// its claims stay its own while it runs.
type LeaseHolder interface {
	LeaseValid() bool
}

// LeaseReader is a Store shared by several processes that reads another
// process's node lease (ledger/postgres), so a caller that meets a claim
// owned by another incarnation can tell a live owner (wait for it) from a
// gone one (its claim may be taken over). Lease returns the lease of
// incarnation inc by the ledger's clock; ErrNotFound when no such node is
// known (a claim it owns counts as gone), ErrClosed, the context's error,
// the backend's.
type LeaseReader interface {
	Lease(ctx context.Context, inc string) (NodeLease, error)
}

// NodeLease is what a shared ledger knows of one incarnation's lease, read
// by the ledger's clock (LeaseReader).
type NodeLease struct {
	Incarnation string
	Host        string // where the process ran (its host name)
	PID         int
	Expires     time.Time // when the lease ends (or ended), by the ledger's clock
	Now         time.Time // the ledger's clock when it was read
	// Stopped: the process closed its ledger (its lease was ended at once),
	// or a newer binary upgraded the tables under it (its lease runs out:
	// it writes nothing more, and its claims are another's only then).
	Stopped bool
}

// Live reports whether the lease still holds: another process may not take
// over its claims yet.
func (l NodeLease) Live() bool { return l.Expires.After(l.Now) }

// Left is how long the lease still holds (0 once it expired).
func (l NodeLease) Left() time.Duration {
	if !l.Live() {
		return 0
	}
	return l.Expires.Sub(l.Now)
}

// Reserver is a Store shared by several processes that holds a name for
// one of them at a time (ledger/postgres): the service holds a run id this
// way while it accepts the run, so a second request for it on any node is
// refused. Reserve returns ok false while another live handle on the same
// ledger holds name; otherwise the name is held by this handle until
// release is called (once or more; later calls do nothing) or until the
// handle is gone (closed, or its lease expired). Errors: ErrClosed, the
// context's error, the backend's.
type Reserver interface {
	Reserve(ctx context.Context, name string) (release func(), ok bool, err error)
}

// SessionKeeper is a Store shared by several processes that keeps the
// review page's sign-in sessions (ledger/postgres), so that a session is
// valid on every node behind a load balancer and signing out on one ends
// it on all. Sessions are stored by the SHA-256 (hex) of their cookie,
// never the cookie, with the name of the token they were made from and
// their expiry: PutSession records (or replaces) one, Session returns it
// (ok false: there is none, or it was deleted; an expired session may
// still be returned, the caller compares expires with its clock), and
// DeleteSession ends it (deleting a session that is not there is no
// error). A session put through one handle is seen by every handle on the
// same ledger. Errors: ErrClosed, the context's error, the backend's.
type SessionKeeper interface {
	PutSession(ctx context.Context, hash, tokenName string, expires time.Time) error
	Session(ctx context.Context, hash string) (tokenName string, expires time.Time, ok bool, err error)
	DeleteSession(ctx context.Context, hash string) error
}

// ScheduleKeeper is a Store that keeps schedules (schedule.go), read and
// written by every process on the same ledger. CreateSchedule stores a
// new one (ScheduleCreated: version 1) and returns it as stored; when the
// id is stored already it returns the stored record if the definition is
// the same (SameDefinition: a retried create) and ErrConflict otherwise.
// Schedule returns one, Schedules all (by id). SwapSchedule replaces the
// record whose stored Version is s.Version with s (its Version one more)
// and returns it as stored; ErrConflict when the stored version is
// another (another writer changed it first: read it again), ErrNotFound
// when there is none. DeleteSchedule removes one (ErrNotFound when there
// is none). Errors besides: ErrInvalid (CheckSchedule), ErrTooLarge,
// ErrClosed, the context's error, the backend's.
type ScheduleKeeper interface {
	CreateSchedule(ctx context.Context, s Schedule) (Schedule, error)
	Schedule(ctx context.Context, id string) (Schedule, error)
	Schedules(ctx context.Context) ([]Schedule, error)
	SwapSchedule(ctx context.Context, s Schedule) (Schedule, error)
	DeleteSchedule(ctx context.Context, id string) error
}

// Collector is a Store that deletes the runs it no longer has to keep
// (ledger/README.md, Retention): Collect deletes (or, with DryRun, only
// counts) every ended run (completed, failed, cancelled) whose CollectAt
// has passed at o.Now, with all of its records (header, plan revisions,
// rows, key records and their index, events, memos, blobs, budget holds),
// and every budget bucket whose window has passed (BucketExpired). A run
// that is not ended is never collected; a run is deleted whole or, if the
// process dies while deleting it, reads treat it as gone until the next
// Collect finishes it. Errors: ErrInvalid (a negative retention), ErrClosed,
// the context's error (what was deleted before stays deleted and is
// counted), the backend's.
type Collector interface {
	Collect(ctx context.Context, o CollectOptions) (CollectReport, error)
}
