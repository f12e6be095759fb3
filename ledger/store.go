package ledger

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/docketrun/docket/plan"
)

// Store is the ledger as the executor, planner, ui and evals use it: every
// backend (the embedded Badger directory, the in-memory store of tests and
// evals, a shared database) implements it, and the conformance suite in
// ledgertest runs against it. Writes are durable when they return (a
// backend that cannot promise that says so in its name).
type Store interface {
	// CreateRun records a run with its first plan revision, or returns the
	// stored run (created false) when one with that id exists.
	CreateRun(ctx context.Context, r Run, p *plan.Plan, rows []Action) (stored Run, created bool, err error)
	// AddRevision records revision n+1 of a run's plan and its rows.
	AddRevision(ctx context.Context, runID string, p *plan.Plan, rows []Action) (int, error)
	// Apply commits ops atomically, in order, and durably.
	Apply(ctx context.Context, ops ...Op) ([]Result, error)
	// Memo records value under (runID, name) once and returns what is
	// recorded (the first value wins).
	Memo(ctx context.Context, runID, name string, value json.RawMessage) (json.RawMessage, error)

	GetRun(ctx context.Context, runID string) (Run, error)
	ListRuns(ctx context.Context, o ListOptions) (runs []Run, next string, err error)
	Plan(ctx context.Context, runID string, rev int) (*plan.Plan, error)
	Actions(ctx context.Context, runID string) ([]Action, error)
	Doc(ctx context.Context, runID string) (RunDoc, error)
	Key(ctx context.Context, key string) (KeyRecord, error)
	Events(ctx context.Context, runID string, after uint64, limit int) ([]Event, error)
	// Subscribe streams a run's events after seq after, gap-free, then live.
	Subscribe(ctx context.Context, runID string, after uint64) (*Subscription, error)

	// Incarnation identifies this handle: claims it makes carry it as owner,
	// and a claim by another incarnation without an outcome is unknown.
	Incarnation() string
	// Now is the store's clock: claim times and "now" for lookup windows and
	// key_ttl come from it.
	Now() time.Time
	// Local is process-local state attached to this handle: packages that
	// coordinate in memory the goroutines using one store (the executor's
	// key-in-flight and run gates) keep it here, never in package globals.
	Local() *Local
	Close() error
}

// Local holds process-local values attached to one store handle, by key.
// The zero value is ready to use.
type Local struct {
	mu sync.Mutex
	m  map[any]any
}

// Value returns the value under key, made by mk on first use. Use an
// unexported key type, as with context values.
func (l *Local) Value(key any, mk func() any) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.m[key]; ok {
		return v
	}
	if l.m == nil {
		l.m = make(map[any]any)
	}
	v := mk()
	l.m[key] = v
	return v
}

// DocApplier is a Store that returns with an Apply the document of a run as
// that Apply's commit leaves it, read inside the same transaction (the
// shared ledger reads it in the commit's round trip, holding the run's
// lock: no second round trip, and nobody's write in between).
type DocApplier interface {
	// ApplyDoc is Apply, and the document of run runID as the commit left
	// it, its args and outputs resolved as Doc's. doc is zero when the
	// Apply failed or the run has no rows (read it with Doc).
	ApplyDoc(ctx context.Context, runID string, ops ...Op) (results []Result, doc RunDoc, err error)
}

// Backuper is a Store that can write a consistent backup of itself.
type Backuper interface {
	Backup(ctx context.Context, w io.Writer) error
}
