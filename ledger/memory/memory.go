// Package memory is an in-memory ledger.Store: the same rules as every
// backend (ledger.Eval), the same events, the same errors, with everything
// held in maps of one process. It is for fast tests of the executor and
// for evals, where a ledger on disk costs time and proves nothing more.
//
// It is NOT durable, by design: nothing survives Close or the process, and
// "durable when Apply returns" holds only in the sense that the write is
// visible to every later read of the same Store. Never use it to run real
// actions. It is safe for concurrent use: one mutex serializes writes (each
// Apply commits atomically, its events get gap-free per-run seqs) and
// guards reads.
//
// Imports: the standard library and docket's ledger (and its internal
// blobref) and plan packages.
package memory

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/internal/blobref"
	"github.com/docketrun/docket/plan"
)

// Config configures a Store. Zero values take the documented defaults.
type Config struct {
	Clock ledger.Clock // default: real time
	// MaxOutputBytes bounds one recorded output and a memo value; larger:
	// ErrTooLarge. Default 17 MiB (as the Badger ledger's).
	MaxOutputBytes int
	// SubscriberBuffer is how many live events a subscription may have
	// queued before it ends with ErrLagged; default 4096.
	SubscriberBuffer int
}

// Defaults.
const (
	DefaultMaxOutputBytes   = 17 << 20
	DefaultSubscriberBuffer = 4096
)

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.Clock == nil {
		cfg.Clock = ledger.RealClock{}
	}
	cfg.MaxOutputBytes = cmp.Or(cfg.MaxOutputBytes, DefaultMaxOutputBytes)
	cfg.SubscriberBuffer = cmp.Or(cfg.SubscriberBuffer, DefaultSubscriberBuffer)
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case cfg.MaxOutputBytes < 0 || cfg.MaxOutputBytes > 1<<30:
		return fmt.Errorf("%w: MaxOutputBytes %d out of range (0..1 GiB)", ledger.ErrInvalid, cfg.MaxOutputBytes)
	case cfg.SubscriberBuffer < 1:
		return fmt.Errorf("%w: SubscriberBuffer must be positive", ledger.ErrInvalid)
	}
	return nil
}

// Store is an in-memory ledger (see the package doc: not durable).
type Store struct {
	cfg         Config
	incarnation string
	local       ledger.Local
	hub         ledger.Hub

	mu     sync.RWMutex // guards closed and st
	closed bool
	st     state
}

var _ ledger.Store = (*Store)(nil)

type revKey struct {
	run string
	rev int
}

type rowID struct {
	run string
	rev int
	id  string
}

type pair struct{ a, b string }

type planRec struct {
	json []byte
	refs map[string]string
}

type initRows struct {
	rows  []ledger.RowRecord
	index map[string]int
}

// state is the committed state.
type state struct {
	runs    map[string]ledger.RunRecord
	init    map[revKey]*initRows
	rows    map[revKey]map[string]ledger.RowRecord // rows changed since their revision was recorded
	plans   map[revKey]planRec
	keyRuns map[string]string
	keyRecs map[string]ledger.KeyRecord
	events  map[string][]ledger.Event
	memos   map[pair]json.RawMessage
	blobs   map[pair]json.RawMessage
	budgets map[string]ledger.BudgetRecord // by bucket id
	holds   map[string]ledger.Hold         // by key
	limits  map[string]ledger.LimitRecord  // by tool

	// schedules by id, encoded (schedule.go; made on first write).
	schedules map[string][]byte
}

// New returns an empty Store. Errors: ErrInvalid (a bad Config).
func New(cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var inc [8]byte
	if _, err := rand.Read(inc[:]); err != nil {
		return nil, fmt.Errorf("ledger: making incarnation id: %w", err)
	}
	return &Store{cfg: cfg, incarnation: "inc_" + hex.EncodeToString(inc[:]), st: state{
		runs:    map[string]ledger.RunRecord{},
		init:    map[revKey]*initRows{},
		rows:    map[revKey]map[string]ledger.RowRecord{},
		plans:   map[revKey]planRec{},
		keyRuns: map[string]string{},
		keyRecs: map[string]ledger.KeyRecord{},
		events:  map[string][]ledger.Event{},
		memos:   map[pair]json.RawMessage{},
		blobs:   map[pair]json.RawMessage{},
		budgets: map[string]ledger.BudgetRecord{},
		holds:   map[string]ledger.Hold{},
		limits:  map[string]ledger.LimitRecord{},
	}}, nil
}

// Incarnation identifies this Store: claims it makes carry it as owner.
func (s *Store) Incarnation() string { return s.incarnation }

// Now is Config.Clock's time, in UTC.
func (s *Store) Now() time.Time { return s.cfg.Clock.Now().UTC() }

// Local is the Store's process-local state.
func (s *Store) Local() *ledger.Local { return &s.local }

// Close ends subscriptions (with ErrClosed) and refuses later calls with
// ErrClosed. The data is gone with the Store.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ledger.ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.hub.CloseAll(ledger.ErrClosed)
	return nil
}

// Apply evaluates ops in order with the ledger's rules and commits those
// that are valid, with their events, atomically. Every Result carries its
// op's error; the returned error is for the call as a whole (ErrClosed, a
// context error, ErrInvalid for an op not built with a constructor), and
// then every Result carries it too and nothing was applied.
func (s *Store) Apply(ctx context.Context, ops ...ledger.Op) ([]ledger.Result, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if err := ledger.Check(ops); err != nil {
		return ledger.FailedResults(len(ops), err), err
	}
	if err := ctx.Err(); err != nil {
		return ledger.FailedResults(len(ops), err), err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ledger.FailedResults(len(ops), ledger.ErrClosed), ledger.ErrClosed
	}
	t := newTx(s)
	results, err := ledger.EvalApply(t, ops)
	if err != nil {
		err = fmt.Errorf("ledger: commit: %w", err)
		return ledger.FailedResults(len(ops), err), err
	}
	t.commit()
	s.hub.Publish(t.events)
	return results, nil
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

// read runs fn under the read lock, unless the Store is closed.
func (s *Store) read(ctx context.Context, fn func(st *state) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ledger.ErrClosed
	}
	return fn(&s.st)
}

func (st *state) resolver(runID string) *blobref.Resolver {
	return &blobref.Resolver{Get: func(hash string) (json.RawMessage, error) {
		v, ok := st.blobs[pair{runID, hash}]
		if !ok {
			return nil, fmt.Errorf("%w: run %q refers to blob %s, which is missing", ledger.ErrFormat, runID, hash)
		}
		return v, nil
	}}
}

// run returns a run header; UpdatedAt is the later of the header's and
// the run's last event's (as in every backend).
func (st *state) run(runID string) (ledger.RunRecord, error) {
	r, ok := st.runs[runID]
	if !ok {
		return r, fmt.Errorf("%w: run %q", ledger.ErrNotFound, runID)
	}
	if evs := st.events[runID]; len(evs) > 0 && evs[len(evs)-1].At.After(r.UpdatedAt) {
		r.UpdatedAt = evs[len(evs)-1].At
	}
	return r, nil
}

// GetRun returns a run's header. Errors: ErrNotFound, ErrClosed.
func (s *Store) GetRun(ctx context.Context, runID string) (ledger.Run, error) {
	var r ledger.RunRecord
	err := s.read(ctx, func(st *state) (err error) {
		r, err = st.run(runID)
		return err
	})
	return r.Run, err
}

// listKey orders runs newest first (by CreatedAt, then run id); its hex
// form is the ListRuns cursor.
func listKey(r ledger.Run) []byte {
	b := binary.BigEndian.AppendUint64(nil, ^uint64(r.CreatedAt.UnixNano()))
	return append(b, r.ID...)
}

// ListRuns pages through runs newest first (by CreatedAt, then run id);
// next is "" on the last page. Errors: ErrInvalid (bad cursor or status),
// ErrClosed.
func (s *Store) ListRuns(ctx context.Context, o ledger.ListOptions) (runs []ledger.Run, next string, err error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	if o.Status != "" && !o.Status.Valid() {
		return nil, "", fmt.Errorf("%w: run status %q", ledger.ErrInvalid, o.Status)
	}
	var after []byte
	if o.After != "" {
		c, err := hex.DecodeString(o.After)
		if err != nil || len(c) < 9 {
			return nil, "", fmt.Errorf("%w: cursor %q", ledger.ErrInvalid, o.After)
		}
		after = c
	}
	err = s.read(ctx, func(st *state) error {
		type entry struct {
			k []byte
			r ledger.Run
		}
		var all []entry
		for id := range st.runs {
			r, err := st.run(id)
			if err != nil {
				return err
			}
			if o.Status != "" && r.Status != o.Status {
				continue
			}
			k := listKey(r.Run)
			if after != nil && bytes.Compare(k, after) <= 0 {
				continue
			}
			all = append(all, entry{k, r.Run})
		}
		slices.SortFunc(all, func(a, b entry) int { return bytes.Compare(a.k, b.k) })
		for i, e := range all {
			if i == limit {
				next = hex.EncodeToString(all[i-1].k)
				break
			}
			runs = append(runs, e.r)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return runs, next, nil
}

// Plan returns revision rev of a run's plan (0 = current). Errors:
// ErrNotFound, ErrClosed.
func (s *Store) Plan(ctx context.Context, runID string, rev int) (*plan.Plan, error) {
	var p *plan.Plan
	err := s.read(ctx, func(st *state) error {
		if rev <= 0 {
			r, err := st.run(runID)
			if err != nil {
				return err
			}
			rev = r.Revision
		}
		pr, ok := st.plans[revKey{runID, rev}]
		if !ok {
			return fmt.Errorf("%w: plan revision %d of run %q", ledger.ErrNotFound, rev, runID)
		}
		var err error
		if p, err = ledger.DecodePlan(pr.json, pr.refs, st.resolver(runID)); err != nil {
			return fmt.Errorf("ledger: reading plan of run %q: %w", runID, err)
		}
		return nil
	})
	return p, err
}

// Actions returns the rows of the run's current revision in plan order,
// followed by compensating rows in the order they were added. Errors:
// ErrNotFound, ErrClosed.
func (s *Store) Actions(ctx context.Context, runID string) ([]ledger.Action, error) {
	var out []ledger.Action
	err := s.read(ctx, func(st *state) error {
		r, err := st.run(runID)
		if err != nil {
			return err
		}
		out, err = st.actions(r)
		return err
	})
	return out, err
}

func (st *state) actions(r ledger.RunRecord) ([]ledger.Action, error) {
	k := revKey{r.ID, r.Revision}
	ir := st.init[k]
	if ir == nil {
		return nil, fmt.Errorf("%w: rows of run %q revision %d", ledger.ErrNotFound, r.ID, r.Revision)
	}
	rows := slices.Clone(ir.rows)
	for id, row := range st.rows[k] {
		if i, ok := ir.index[id]; ok {
			rows[i] = row
		} else {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b ledger.RowRecord) int { return cmp.Compare(a.Ord, b.Ord) })
	blobs := st.resolver(r.ID)
	out := make([]ledger.Action, len(rows))
	for i, row := range rows {
		out[i] = cloneAction(row.Action(r.ID))
		if err := ledger.ResolveAction(blobs, &out[i]); err != nil {
			return nil, fmt.Errorf("ledger: reading args of run %q action %q: %w", r.ID, row.ID, err)
		}
		if row.Status == ledger.StatusSucceeded || row.Status == ledger.StatusCompensated {
			if rec, ok := st.keyRecs[row.Key]; ok {
				out[i].Output = bytes.Clone(rec.Output)
			}
		}
	}
	return out, nil
}

func cloneAction(a ledger.Action) ledger.Action {
	a.Args, a.ApprovedArgs = bytes.Clone(a.Args), bytes.Clone(a.ApprovedArgs)
	a.DependsOn = slices.Clone(a.DependsOn)
	return a
}

// Doc returns the Run JSON document. Errors: ErrNotFound, ErrClosed.
func (s *Store) Doc(ctx context.Context, runID string) (ledger.RunDoc, error) {
	var d ledger.RunDoc
	err := s.read(ctx, func(st *state) error {
		r, err := st.run(runID)
		if err != nil {
			return err
		}
		d.Run = r.Run
		d.Actions, err = st.actions(r)
		return err
	})
	return d, err
}

// Key returns the record of an idempotency key. Errors: ErrNotFound,
// ErrClosed.
func (s *Store) Key(ctx context.Context, key string) (ledger.KeyRecord, error) {
	var rec ledger.KeyRecord
	err := s.read(ctx, func(st *state) error {
		r, ok := st.keyRecs[key]
		if !ok {
			return fmt.Errorf("%w: key %s", ledger.ErrNotFound, key)
		}
		rec = r
		rec.Args, rec.Output = bytes.Clone(rec.Args), bytes.Clone(rec.Output)
		return ledger.ResolveKey(st.resolver(rec.RunID), &rec)
	})
	return rec, err
}

// Events returns up to limit events of a run with seq > after (limit <= 0:
// all), in seq order. Errors: ErrClosed.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]ledger.Event, error) {
	var out []ledger.Event
	err := s.read(ctx, func(st *state) error {
		evs := st.events[runID]
		if after >= uint64(len(evs)) {
			return nil
		}
		evs = evs[after:]
		if limit > 0 && len(evs) > limit {
			evs = evs[:limit]
		}
		out = make([]ledger.Event, len(evs))
		for i, ev := range evs {
			ev.Data = bytes.Clone(ev.Data)
			out[i] = ev
		}
		return nil
	})
	return out, err
}

// Subscribe streams a run's events after seq after, gap-free, then live;
// a reader more than Config.SubscriberBuffer events behind is ended with
// ErrLagged. Errors: ErrNotFound, ErrClosed.
func (s *Store) Subscribe(ctx context.Context, runID string, after uint64) (*ledger.Subscription, error) {
	if _, err := s.GetRun(ctx, runID); err != nil {
		return nil, err
	}
	return s.hub.Subscribe(ctx, runID, after, s.cfg.SubscriberBuffer, s.Events)
}

var _ ledger.BudgetReader = (*Store)(nil)

// Budgets returns every budget bucket, sorted (ledger.SortBudgets).
func (s *Store) Budgets(ctx context.Context) ([]ledger.BudgetRecord, error) {
	var out []ledger.BudgetRecord
	err := s.read(ctx, func(st *state) error {
		for _, r := range st.budgets {
			out = append(out, r)
		}
		return nil
	})
	ledger.SortBudgets(out)
	return out, err
}

// Hold returns the budget hold of key; ErrNotFound when it reserved nothing.
func (s *Store) Hold(ctx context.Context, key string) (ledger.Hold, error) {
	var h ledger.Hold
	err := s.read(ctx, func(st *state) error {
		r, ok := st.holds[key]
		if !ok {
			return fmt.Errorf("%w: no budget hold for key %s", ledger.ErrNotFound, key)
		}
		h = r
		h.Charges = slices.Clone(r.Charges)
		return nil
	})
	return h, err
}

// Budget returns one budget bucket; ErrNotFound when nothing was reserved
// from it.
func (s *Store) Budget(ctx context.Context, id string) (ledger.BudgetRecord, error) {
	var r ledger.BudgetRecord
	err := s.read(ctx, func(st *state) error {
		b, ok := st.budgets[id]
		if !ok {
			return fmt.Errorf("%w: budget bucket %s", ledger.ErrNotFound, id)
		}
		r = b
		return nil
	})
	return r, err
}
