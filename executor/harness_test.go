package executor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
	"github.com/docketrun/docket/tools/tooltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Badger's and the ledger's own background goroutines of handles that
		// tests close in t.Cleanup are checked by the ledger's tests.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	)
}

// fakeClock is shared by the ledger and the engine; the engine's sleeps
// advance it, so backoffs and visibility waits take no real time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// bundle is what a test needs: a durable ledger in a temp dir, a registry of
// fake tools, an engine, a fake clock and a record of the engine's sleeps.
type bundle struct {
	t     *testing.T
	dir   string
	clock *fakeClock
	led   ledger.Store
	reg   *tools.Registry
	eng   *Engine
	cfg   Config
	world *tooltest.World

	mu     sync.Mutex
	sleeps []time.Duration
}

type setupOpt func(*Config)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func setup(t *testing.T, ts []tools.Tool, opts ...setupOpt) *bundle {
	t.Helper()
	b := &bundle{t: t, dir: t.TempDir(), clock: newFakeClock(), world: tooltest.NewWorld()}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	b.reg = reg
	seed := uint64(time.Now().UnixNano())
	t.Logf("jitter seed %d", seed)
	b.cfg = Config{
		Tools:  reg,
		Clock:  b.clock,
		Logger: quietLogger(),
		Sleep: func(ctx context.Context, d time.Duration) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			b.mu.Lock()
			b.sleeps = append(b.sleeps, d)
			b.mu.Unlock()
			b.clock.Advance(d)
			return nil
		},
		Rand: mrand.New(mrand.NewPCG(seed, 1)),
	}
	for _, o := range opts {
		o(&b.cfg)
	}
	b.open()
	return b
}

// open opens the ledger (a new incarnation) and builds a new engine.
func (b *bundle) open() {
	b.t.Helper()
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: b.dir, Clock: b.clock, Logger: quietLogger()})
	if err != nil {
		b.t.Fatalf("badgerdb.Open: %v", err)
	}
	b.led = l
	b.t.Cleanup(func() {
		if err := l.Close(); err != nil && !errors.Is(err, ledger.ErrClosed) {
			b.t.Errorf("ledger Close: %v", err)
		}
	})
	cfg := b.cfg
	cfg.Ledger = l
	e, err := New(cfg)
	if err != nil {
		b.t.Fatalf("New: %v", err)
	}
	b.eng = e
}

// useTools rebuilds the engine on a registry of ts (with budgets, when
// given), on the same ledger directory: a new engine and ledger handle.
func (b *bundle) useTools(budgets []policy.Budget, ts ...tools.Tool) {
	b.t.Helper()
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		b.t.Fatal(err)
	}
	if budgets != nil {
		reg = reg.WithBudgets(budgets)
	}
	b.reg, b.cfg.Tools = reg, reg
	b.led.Close()
	b.open()
}

// preview is the replay preview of p on runID, by action id.
func (b *bundle) preview(runID string, p *plan.Plan) map[string]PreviewStep {
	b.t.Helper()
	steps, err := b.eng.PreviewReplay(context.Background(), runID, p)
	if err != nil {
		b.t.Fatal(err)
	}
	got := map[string]PreviewStep{}
	for _, s := range steps {
		got[s.ActionID] = s
	}
	return got
}

// crash closes the ledger as a dying process would leave it (whatever was
// not recorded is lost), then reopens it with a new incarnation.
func (b *bundle) restart() {
	b.t.Helper()
	if err := b.led.Close(); err != nil && !errors.Is(err, ledger.ErrClosed) {
		b.t.Fatalf("Close: %v", err)
	}
	b.open()
}

func (b *bundle) sleepLog() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.sleeps...)
}

func (b *bundle) run(runID string, p *plan.Plan, pol Policy) ledger.RunDoc {
	b.t.Helper()
	doc, err := b.eng.Run(context.Background(), runID, p, &RunOptions{Policy: pol})
	if err != nil {
		b.t.Fatalf("Run %s: %v", runID, err)
	}
	return doc
}

func (b *bundle) resume(runID string) ledger.RunDoc {
	b.t.Helper()
	doc, err := b.eng.Resume(context.Background(), runID, nil)
	if err != nil {
		b.t.Fatalf("Resume %s: %v", runID, err)
	}
	return doc
}

func (b *bundle) events(runID string) []ledger.Event {
	b.t.Helper()
	evs, err := b.led.Events(context.Background(), runID, 0, 0)
	if err != nil {
		b.t.Fatalf("Events: %v", err)
	}
	return evs
}

func (b *bundle) count(runID, typ string) int {
	n := 0
	for _, ev := range b.events(runID) {
		if string(ev.Type) == typ {
			n++
		}
	}
	return n
}

func row(t *testing.T, doc ledger.RunDoc, id string) ledger.Action {
	t.Helper()
	for _, a := range doc.Actions {
		if a.ID == id {
			return a
		}
	}
	t.Fatalf("run %s has no action %s (actions: %+v)", doc.Run.ID, id, doc.Actions)
	return ledger.Action{}
}

func wantStatus(t *testing.T, doc ledger.RunDoc, want ledger.RunStatus) {
	t.Helper()
	if doc.Run.Status != want {
		t.Fatalf("run %s status %s (error %q), want %s; actions: %s", doc.Run.ID, doc.Run.Status, doc.Run.Error, want, docString(doc))
	}
}

func wantAction(t *testing.T, doc ledger.RunDoc, id string, want ledger.Status) ledger.Action {
	t.Helper()
	a := row(t, doc, id)
	if a.Status != want {
		t.Fatalf("action %s status %s (error %q), want %s; actions: %s", id, a.Status, a.Error, want, docString(doc))
	}
	return a
}

func docString(doc ledger.RunDoc) string {
	s := ""
	for _, a := range doc.Actions {
		s += a.ID + "=" + string(a.Status) + "(" + a.Error + ") "
	}
	return s
}

func mkPlan(t *testing.T, actions ...plan.Action) *plan.Plan {
	t.Helper()
	return &plan.Plan{Goal: "test", Actions: actions}
}

func pa(id, tool, args string, deps ...string) plan.Action {
	return plan.Action{ID: id, Tool: tool, Args: json.RawMessage(args), DependsOn: deps}
}

// keyOf derives an action's key the way the executor does.
func keyOf(t *testing.T, runID, id, tool, args string) string {
	t.Helper()
	k, err := plan.Key(runID, id, tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("Key: %v", err)
	}
	return k
}

// noLook hides a tool's Lookup (a keyed tool without a lookup).
type noLook struct{ t *tooltest.Tool }

func (n noLook) Spec() tools.Spec { return n.t.Spec() }
func (n noLook) Call(ctx context.Context, c tools.Call) (json.RawMessage, error) {
	return n.t.Call(ctx, c)
}

var objSchema = json.RawMessage(`{"type":"object"}`)

func spec(name string, class tools.Class) tools.Spec {
	return tools.Spec{Name: name, Description: name, Class: class, InputSchema: objSchema}
}

func (b *bundle) doc(runID string) ledger.RunDoc {
	b.t.Helper()
	d, err := b.led.Doc(context.Background(), runID)
	if err != nil {
		b.t.Fatalf("Doc: %v", err)
	}
	return d
}
