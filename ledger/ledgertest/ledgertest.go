// Package ledgertest is the conformance suite for docket's ledger: the same
// test body runs against every way of opening a ledger (river's
// riverdrivertest, litestream's RunWithReplicaClient). It exercises the
// contract documented on the ledger package: runs, plans, the key-record state
// machine with its compare-and-swap claim, identical rewrites, gap-free events,
// subscriptions, large outputs and memos.
//
// Imports: the standard library, docket's ledger and plan packages.
package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// Config is what the suite asks of a store it opens.
type Config struct {
	// Dir is a fresh directory for the store's data; a durable store opened
	// again with the same Dir has the same data.
	Dir              string
	Clock            ledger.Clock
	SubscriberBuffer int // 0: the store's default
	MaxOutputBytes   int // 0: the store's default
}

// Opener opens a store for cfg and registers its Close with t.Cleanup (a
// second Close returns ErrClosed) when the test does not close it itself.
type Opener func(t *testing.T, cfg Config) ledger.Store

// Options says what the store under test promises beyond the Store
// interface.
type Options struct {
	// Durable: the store keeps its data across Close and a new Open of the
	// same Dir (with a new incarnation). The reopen checks run only then.
	Durable bool
	// ApplyLimit: one Apply whose writes exceed what the store commits at
	// once is refused with ErrTooLarge (and nothing of it is written).
	ApplyLimit bool
}

// Run runs the conformance suite.
func Run(t *testing.T, open Opener, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
		skip bool
	}{
		{"CreateRun", testCreateRun, false},
		{"ListRuns", testListRuns, false},
		{"ClaimConcurrent", testClaimConcurrent, false},
		{"Transitions", testTransitions, false},
		{"ReviewMarks", testReviewMarks, false},
		{"IdenticalRewrite", testIdenticalRewrite, false},
		{"DeadOwnerTakeover", testDeadOwnerTakeover, !opts.Durable},
		{"ApplySeveralOps", testApplySeveralOps, false},
		{"Replay", testReplay, false},
		{"EventsGapFree", testEventsGapFree, false},
		{"Subscribe", testSubscribe, false},
		{"SubscribeLagged", testSubscribeLagged, false},
		{"LargeOutput", testLargeOutput, false},
		{"TooLarge", testTooLarge, false},
		{"ApplyTooLarge", testApplyTooLarge, !opts.ApplyLimit},
		{"Memo", testMemo, false},
		{"MemoReopen", testMemoReopen, !opts.Durable},
		{"DocJSON", testDocJSON, false},
		{"Closed", testClosed, false},
		{"Pause", func(t *testing.T, open Opener) { testPause(t, open, opts) }, false},
		{"LeavingPausedClearsPausedBy", testLeavingPausedClearsPausedBy, false},
		{"ToolsHash", func(t *testing.T, open Opener) { testToolsHash(t, open, opts) }, false},
		{"LargeArgs", func(t *testing.T, open Opener) { testLargeArgs(t, open, opts) }, false},
		{"ApplyErrors", testApplyErrors, false},
		{"Gates", func(t *testing.T, open Opener) { testGates(t, open, opts) }, false},
		{"GateGroups", func(t *testing.T, open Opener) { testGateGroups(t, open, opts) }, false},
		{"Audit", testAudit, false},
		{"Budgets", func(t *testing.T, open Opener) { testBudgets(t, open, opts) }, false},
		{"LedgerDecides", testLedgerDecides, false},
		{"Limits", func(t *testing.T, open Opener) { testLimits(t, open, opts) }, false},
		{"Modifiers", testModifiers, false},
		{"Capabilities", func(t *testing.T, open Opener) { testCapabilities(t, open, opts) }, false},
		{"Timers", func(t *testing.T, open Opener) { testTimers(t, open, opts) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip {
				t.Skip("the store does not promise this (ledgertest.Options)")
			}
			t.Parallel()
			tc.fn(t, open)
		})
	}
}

// stepClock advances one millisecond per reading, from a fixed start.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func newConfig(t *testing.T) Config {
	return Config{Dir: t.TempDir(), Clock: &stepClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
}

type bundle struct {
	l   ledger.Store
	ctx context.Context
	cfg Config
}

func setup(t *testing.T, open Opener) *bundle {
	cfg := newConfig(t)
	return &bundle{l: open(t, cfg), ctx: context.Background(), cfg: cfg}
}

// testPlan builds a plan of n actions a1..an with tool "t" and args {"i": i}.
func testPlan(goal string, n int) *plan.Plan {
	p := &plan.Plan{Goal: goal}
	for i := 1; i <= n; i++ {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t",
			Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	return p
}

func (b *bundle) createRun(t *testing.T, runID string, n int) *plan.Plan {
	t.Helper()
	p := testPlan("goal of "+runID, n)
	_, created, err := b.l.CreateRun(b.ctx, ledger.Run{ID: runID, Policy: "safe"}, p, nil)
	if err != nil || !created {
		t.Fatalf("CreateRun(%s) = created %v, %v; want created", runID, created, err)
	}
	return p
}

func key(t *testing.T, runID, actionID string, args string) string {
	t.Helper()
	k, err := plan.Key(runID, actionID, "t", json.RawMessage(args))
	if err != nil {
		t.Fatalf("plan.Key: %v", err)
	}
	return k
}

// apply applies one op and fails the test on a commit error; it returns the
// op's result.
func (b *bundle) apply(t *testing.T, op ledger.Op) ledger.Result {
	t.Helper()
	res, err := b.l.Apply(b.ctx, op)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(res) != 1 {
		t.Fatalf("Apply returned %d results for 1 op", len(res))
	}
	return res[0]
}

func (b *bundle) mustOK(t *testing.T, op ledger.Op) ledger.Result {
	t.Helper()
	r := b.apply(t, op)
	if r.Err != nil {
		t.Fatalf("op failed: %v", r.Err)
	}
	return r
}

// mustConflict asserts a *ConflictError and returns it.
func (b *bundle) mustConflict(t *testing.T, op ledger.Op) *ledger.ConflictError {
	t.Helper()
	r := b.apply(t, op)
	var ce *ledger.ConflictError
	if !errors.As(r.Err, &ce) || !errors.Is(r.Err, ledger.ErrConflict) {
		t.Fatalf("want *ConflictError, got %v", r.Err)
	}
	return ce
}

func (b *bundle) events(t *testing.T, runID string) []ledger.Event {
	t.Helper()
	evs, err := b.l.Events(b.ctx, runID, 0, 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	checkSeqs(t, evs, 0)
	return evs
}

func checkSeqs(t *testing.T, evs []ledger.Event, after uint64) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != after+uint64(i)+1 {
			t.Fatalf("event %d has seq %d, want %d (gap or repeat)", i, ev.Seq, after+uint64(i)+1)
		}
	}
}

func types(evs []ledger.Event) []string {
	var out []string
	for _, ev := range evs {
		s := string(ev.Type)
		if ev.ActionID != "" {
			s += ":" + ev.ActionID
		}
		out = append(out, s)
	}
	return out
}

func wantTypes(t *testing.T, evs []ledger.Event, want ...string) {
	t.Helper()
	got := types(evs)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events:\n got  %v\n want %v", got, want)
	}
}

func (b *bundle) row(t *testing.T, runID, actionID string) ledger.Action {
	t.Helper()
	rows, err := b.l.Actions(b.ctx, runID)
	if err != nil {
		t.Fatalf("Actions: %v", err)
	}
	for _, r := range rows {
		if r.ID == actionID {
			return r
		}
	}
	t.Fatalf("no row %q in run %q", actionID, runID)
	return ledger.Action{}
}

func testCreateRun(t *testing.T, open Opener) {
	b := setup(t, open)
	p := testPlan("send the invoice", 3)
	rows := []ledger.Action{
		{ID: "a1", Tool: "t", Class: "idempotent", Args: p.Actions[0].Args, Status: ledger.StatusApproved},
		{ID: "a2", Tool: "t", Class: "keyed", Args: p.Actions[1].Args, DependsOn: []string{"a1"}},
		{ID: "a3", Tool: "t", Class: "at_most_once", Args: p.Actions[2].Args},
	}
	run, created, err := b.l.CreateRun(b.ctx, ledger.Run{ID: "r1", Goal: p.Goal, Policy: "safe", ToolsHash: "sha256:tools"}, p, rows)
	if err != nil || !created {
		t.Fatalf("CreateRun = %v, %v", created, err)
	}
	hash, _ := plan.Hash(p)
	if run.PlanHash != hash || run.Revision != 1 || run.Status != ledger.RunRunning || run.CreatedAt.IsZero() {
		t.Fatalf("created run = %+v", run)
	}
	again, created, err := b.l.CreateRun(b.ctx, ledger.Run{ID: "r1"}, testPlan("send the invoice", 3), nil)
	if err != nil || created {
		t.Fatalf("CreateRun again = created %v, %v; want stored", created, err)
	}
	if again.PlanHash != run.PlanHash || !again.CreatedAt.Equal(run.CreatedAt) || again.ToolsHash != "sha256:tools" {
		t.Fatalf("stored run differs: %+v vs %+v", again, run)
	}
	_, _, err = b.l.CreateRun(b.ctx, ledger.Run{ID: "r1"}, testPlan("something else", 3), nil)
	if !errors.Is(err, ledger.ErrPlanMismatch) {
		t.Fatalf("CreateRun with another plan: %v, want ErrPlanMismatch", err)
	}
	checkCreatedRun(t, b, p, hash)
	if _, _, err := b.l.CreateRun(b.ctx, ledger.Run{ID: "bad\x00id"}, p, nil); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("CreateRun with NUL in id = %v, want ErrInvalid", err)
	}
}

// checkCreatedRun: testCreateRun's run r1 reads back as created.
func checkCreatedRun(t *testing.T, b *bundle, p *plan.Plan, hash string) {
	got, err := b.l.GetRun(b.ctx, "r1")
	if err != nil || got.ID != "r1" || got.Goal != p.Goal {
		t.Fatalf("GetRun = %+v, %v", got, err)
	}
	if _, err := b.l.GetRun(b.ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("GetRun(nope) = %v, want ErrNotFound", err)
	}
	stored, err := b.l.Plan(b.ctx, "r1", 0)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if h, _ := plan.Hash(stored); h != hash {
		t.Fatalf("stored plan hash %s, want %s", h, hash)
	}
	if _, err := b.l.Plan(b.ctx, "r1", 2); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Plan rev 2 = %v, want ErrNotFound", err)
	}
	acts, err := b.l.Actions(b.ctx, "r1")
	if err != nil || len(acts) != 3 {
		t.Fatalf("Actions = %d rows, %v", len(acts), err)
	}
	for i, want := range []struct {
		id     string
		status ledger.Status
		class  string
	}{{"a1", ledger.StatusApproved, "idempotent"}, {"a2", ledger.StatusPending, "keyed"}, {"a3", ledger.StatusPending, "at_most_once"}} {
		a := acts[i]
		if a.ID != want.id || a.Status != want.status || a.Class != want.class || a.Key != "" || a.RunID != "r1" {
			t.Fatalf("row %d = %+v, want %+v", i, a, want)
		}
	}
	if string(acts[0].ApprovedArgs) != `{"i":1}` || acts[1].DependsOn[0] != "a1" {
		t.Fatalf("rows lost fields: %+v", acts)
	}
	wantTypes(t, b.events(t, "r1"), "run.created", "plan.recorded", "action.approved:a1")
}

func testListRuns(t *testing.T, open Opener) {
	b := setup(t, open)
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 7; i++ {
		id := fmt.Sprintf("run%d", i)
		if _, _, err := b.l.CreateRun(b.ctx, ledger.Run{ID: id, CreatedAt: base.Add(time.Duration(i) * time.Minute)}, testPlan(id, 1), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"run1", "run4", "run5"} {
		b.mustOK(t, ledger.SetRunStatus(id, ledger.RunCompleted, "run.completed", "", nil))
	}
	all := listAll(t, b, ledger.ListOptions{Limit: 3}, []int{3, 3, 1})
	if got := strings.Join(all, ","); got != "run6,run5,run4,run3,run2,run1,run0" {
		t.Fatalf("ListRuns order %s", got)
	}
	done := listAll(t, b, ledger.ListOptions{Limit: 2, Status: ledger.RunCompleted}, nil)
	if got := strings.Join(done, ","); got != "run5,run4,run1" {
		t.Fatalf("completed runs %s", got)
	}
	if _, _, err := b.l.ListRuns(b.ctx, ledger.ListOptions{After: "zz"}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// listAll pages through ListRuns with o, checking each run against o's
// status filter and, when pages is given, each page's length.
func listAll(t *testing.T, b *bundle, o ledger.ListOptions, pages []int) []string {
	t.Helper()
	var ids []string
	for page := 0; ; page++ {
		runs, next, err := b.l.ListRuns(b.ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if pages != nil && (page >= len(pages) || len(runs) != pages[page] || (next == "") != (page == len(pages)-1)) {
			t.Fatalf("page %d: %d runs, next %q; want pages of %v", page, len(runs), next, pages)
		}
		for _, r := range runs {
			if o.Status != "" && r.Status != o.Status {
				t.Fatalf("filter returned %s with status %s", r.ID, r.Status)
			}
			ids = append(ids, r.ID)
		}
		if next == "" {
			return ids
		}
		o.After = next
	}
}

func testClaimConcurrent(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 1)
	k := key(t, "r", "a1", `{"i":1}`)
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := b.l.Apply(b.ctx, ledger.Claim("r", "a1", "t", k, json.RawMessage(`{"i":1}`), 1))
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = res[0].Err
		}()
	}
	close(start)
	wg.Wait()
	wins := 0
	for i, err := range errs {
		if err == nil {
			wins++
			continue
		}
		var ce *ledger.ConflictError
		if !errors.As(err, &ce) {
			t.Fatalf("claimer %d: %v, want *ConflictError", i, err)
		}
		if ce.Current.State != ledger.StatusClaimed || ce.Current.Owner != b.l.Incarnation() || ce.Current.Attempt != 1 ||
			ce.RunID != "r" || ce.ActionID != "a1" || ce.Key != k || ce.Op != "claim" {
			t.Fatalf("claimer %d conflict: %+v", i, ce)
		}
	}
	if wins != 1 {
		t.Fatalf("%d claimers won, want exactly 1", wins)
	}
	claimed := 0
	for _, ev := range b.events(t, "r") {
		if ev.Type == "action.claimed" {
			claimed++
		}
	}
	if claimed != 1 {
		t.Fatalf("%d action.claimed events, want 1", claimed)
	}
}

func testTransitions(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 6)
	tr := transitions{b}
	tr.succeeded(t)
	tr.retried(t)
	tr.reviewedDone(t)
	tr.reviewedRetry(t)
	tr.reviewedSkip(t)
	tr.unknowns(t)
	tr.recorded(t)
}

// transitions is testTransitions' run "r": action aN has args {"i":N}.
type transitions struct{ b *bundle }

func (transitions) args(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)) }

func (tr transitions) k(t *testing.T, i int) string {
	return key(t, "r", fmt.Sprintf("a%d", i), string(tr.args(i)))
}

func (tr transitions) succeeded(t *testing.T) {
	b := tr.b
	// a1: claimed -> succeeded; then every other outcome or claim conflicts.
	res := b.mustOK(t, ledger.Claim("r", "a1", "t", tr.k(t, 1), tr.args(1), 1))
	if res.Key.State != ledger.StatusClaimed || res.Key.Owner != b.l.Incarnation() || res.Action.Status != ledger.StatusClaimed || res.Action.Key != tr.k(t, 1) {
		t.Fatalf("claim result %+v", res)
	}
	if r := b.apply(t, ledger.Claim("r", "a1", "t", tr.k(t, 1), tr.args(1), 2)); !errors.Is(r.Err, ledger.ErrConflict) {
		t.Fatalf("claim attempt 2 while attempt 1 in flight in this process: %v", r.Err)
	}
	b.mustConflict(t, ledger.Succeed(tr.k(t, 1), 2, json.RawMessage(`{"ok":true}`)))
	res = b.mustOK(t, ledger.Succeed(tr.k(t, 1), 1, json.RawMessage(`{"ok":true}`)))
	if res.Key.State != ledger.StatusSucceeded || string(res.Action.Output) != `{"ok":true}` {
		t.Fatalf("succeed result %+v", res)
	}
	ce := b.mustConflict(t, ledger.Claim("r", "a1", "t", tr.k(t, 1), tr.args(1), 2))
	if ce.Current.State != ledger.StatusSucceeded || string(ce.Current.Output) != `{"ok":true}` {
		t.Fatalf("claim after success: current %+v", ce.Current)
	}
	b.mustConflict(t, ledger.Succeed(tr.k(t, 1), 1, json.RawMessage(`{"ok":false}`)))
	b.mustConflict(t, ledger.Fail(tr.k(t, 1), 1, "boom", false, nil))
	b.mustConflict(t, ledger.NeedsReview(tr.k(t, 1), 1, "unknown"))
	b.mustConflict(t, ledger.Resolve("r", "a1", ledger.Resolution{Retry: true}))
}

func (tr transitions) retried(t *testing.T) {
	b := tr.b
	// a2: retryable failure -> pending; attempt 2 claims; final failure.
	b.mustOK(t, ledger.Claim("r", "a2", "t", tr.k(t, 2), tr.args(2), 1))
	res := b.mustOK(t, ledger.Fail(tr.k(t, 2), 1, "503", true, json.RawMessage(`{"outcome":"not_sent","status":503}`)))
	if res.Key.State != ledger.StatusPending || res.Action.Status != ledger.StatusPending || res.Key.Error != "503" {
		t.Fatalf("retryable fail result %+v", res)
	}
	b.mustConflict(t, ledger.Claim("r", "a2", "t", tr.k(t, 2), tr.args(2), 1))
	b.mustConflict(t, ledger.Claim("r", "a2", "t", tr.k(t, 2), tr.args(2), 3))
	b.mustOK(t, ledger.Claim("r", "a2", "t", tr.k(t, 2), tr.args(2), 2))
	res = b.mustOK(t, ledger.Fail(tr.k(t, 2), 2, "400 bad request", false, nil))
	if res.Key.State != ledger.StatusFailed || res.Action.Status != ledger.StatusFailed || res.Action.Attempts != 2 {
		t.Fatalf("fail result %+v", res)
	}
	b.mustConflict(t, ledger.Succeed(tr.k(t, 2), 2, json.RawMessage(`1`)))
	b.mustConflict(t, ledger.Claim("r", "a2", "t", tr.k(t, 2), tr.args(2), 3))
}

func (tr transitions) reviewedDone(t *testing.T) {
	b := tr.b
	// a3: needs_review -> done.
	b.mustOK(t, ledger.Claim("r", "a3", "t", tr.k(t, 3), tr.args(3), 1))
	b.mustConflict(t, ledger.Resolve("r", "a3", ledger.Resolution{Done: json.RawMessage(`1`)}))
	b.mustOK(t, ledger.NeedsReview(tr.k(t, 3), 1, "timeout"))
	b.mustConflict(t, ledger.Claim("r", "a3", "t", tr.k(t, 3), tr.args(3), 2))
	b.mustConflict(t, ledger.Succeed(tr.k(t, 3), 1, json.RawMessage(`1`)))
	if r := b.apply(t, ledger.Resolve("r", "a3", ledger.Resolution{Retry: true, Skip: true})); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("two resolutions at once: %v", r.Err)
	}
	res := b.mustOK(t, ledger.Resolve("r", "a3", ledger.Resolution{Done: json.RawMessage(`{"id":7}`), By: "ops"}))
	if res.Key.State != ledger.StatusSucceeded || string(res.Action.Output) != `{"id":7}` {
		t.Fatalf("resolve done %+v", res)
	}
}

func (tr transitions) reviewedRetry(t *testing.T) {
	b := tr.b
	// a4: needs_review -> retry -> attempt 2 -> succeeded -> compensated.
	b.mustOK(t, ledger.Claim("r", "a4", "t", tr.k(t, 4), tr.args(4), 1))
	b.mustOK(t, ledger.NeedsReview(tr.k(t, 4), 1, "unknown outcome"))
	res := b.mustOK(t, ledger.Resolve("r", "a4", ledger.Resolution{Retry: true, By: "ops"}))
	if res.Key.State != ledger.StatusPending || string(res.Action.ApprovedArgs) != `{"i":4}` {
		t.Fatalf("resolve retry %+v", res)
	}
	b.mustConflict(t, ledger.Claim("r", "a4", "t", tr.k(t, 4), tr.args(4), 1))
	b.mustOK(t, ledger.Claim("r", "a4", "t", tr.k(t, 4), tr.args(4), 2))
	b.mustOK(t, ledger.Succeed(tr.k(t, 4), 2, json.RawMessage(`"done"`)))
	res = b.mustOK(t, ledger.Compensated("r", "a4"))
	if res.Action.Status != ledger.StatusCompensated || res.Key.State != ledger.StatusCompensated {
		t.Fatalf("compensated %+v", res)
	}
}

func (tr transitions) reviewedSkip(t *testing.T) {
	b := tr.b
	// a5: needs_review -> skip.
	b.mustOK(t, ledger.Claim("r", "a5", "t", tr.k(t, 5), tr.args(5), 1))
	b.mustOK(t, ledger.NeedsReview(tr.k(t, 5), 1, "unknown"))
	res := b.mustOK(t, ledger.Resolve("r", "a5", ledger.Resolution{Skip: true, By: "ops"}))
	if res.Key.State != ledger.StatusSkipped || res.Action.Status != ledger.StatusSkipped {
		t.Fatalf("resolve skip %+v", res)
	}
	b.mustConflict(t, ledger.Claim("r", "a5", "t", tr.k(t, 5), tr.args(5), 2))
}

func (tr transitions) unknowns(t *testing.T) {
	b := tr.b
	// Unknown keys and rows; claims that do not start at 1.
	if r := b.apply(t, ledger.Succeed("dk1_unknown", 1, json.RawMessage(`1`))); !errors.Is(r.Err, ledger.ErrNotFound) {
		t.Fatalf("succeed unknown key: %v", r.Err)
	}
	if r := b.apply(t, ledger.Claim("r", "zz", "t", "dk1_x", nil, 1)); !errors.Is(r.Err, ledger.ErrNotFound) {
		t.Fatalf("claim unknown row: %v", r.Err)
	}
	b.mustConflict(t, ledger.Claim("r", "a6", "t", tr.k(t, 6), tr.args(6), 2))
	b.mustConflict(t, ledger.Compensated("r", "a6"))
	if r := b.apply(t, ledger.Succeed(tr.k(t, 1), 1, json.RawMessage(`{bad`))); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("invalid output JSON: %v", r.Err)
	}
}

func (tr transitions) recorded(t *testing.T) {
	b := tr.b
	rec, err := b.l.Key(b.ctx, tr.k(t, 4))
	if err != nil || rec.State != ledger.StatusCompensated || rec.Attempt != 2 || string(rec.Output) != `"done"` || rec.Owner != b.l.Incarnation() {
		t.Fatalf("Key(a4) = %+v, %v", rec, err)
	}
	if _, err := b.l.Key(b.ctx, "dk1_nope"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Key(nope) = %v", err)
	}
	evs := b.events(t, "r")
	wantTypes(t, evs[2:], "action.claimed:a1", "action.succeeded:a1",
		"action.claimed:a2", "action.attempt_failed:a2", "action.claimed:a2", "action.failed:a2",
		"action.claimed:a3", "action.needs_review:a3", "action.resolved:a3",
		"action.claimed:a4", "action.needs_review:a4", "action.resolved:a4", "action.claimed:a4", "action.succeeded:a4", "action.compensated:a4",
		"action.claimed:a5", "action.needs_review:a5", "action.resolved:a5", "action.skipped:a5")
	var data map[string]any
	if err := json.Unmarshal(evs[5].Data, &data); err != nil || data["outcome"] != "not_sent" || data["attempt"] != 1.0 || data["error"] != "503" || data["status"] != 503.0 {
		t.Fatalf("attempt_failed data %s (%v)", evs[5].Data, err)
	}
	if string(evs[3].Data) != `{"output":{"ok":true}}` {
		t.Fatalf("succeeded data %s", evs[3].Data)
	}
}

func testReviewMarks(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 5)
	res := b.mustOK(t, ledger.Approve("r", "a1", json.RawMessage(`{"i":1}`), "alice"))
	if res.Action.Status != ledger.StatusApproved || string(res.Action.ApprovedArgs) != `{"i":1}` {
		t.Fatalf("approve %+v", res.Action)
	}
	res = b.mustOK(t, ledger.Edit("r", "a1", json.RawMessage(`{"i":10}`), "alice"))
	if res.Action.Status != ledger.StatusPending || res.Action.ApprovedArgs != nil || string(res.Action.Args) != `{"i":10}` {
		t.Fatalf("edit should clear the approval: %+v", res.Action)
	}
	b.mustOK(t, ledger.Reject("r", "a2", "no", "bob"))
	b.mustConflict(t, ledger.Approve("r", "a2", nil, "bob"))
	b.mustConflict(t, ledger.Edit("r", "a2", json.RawMessage(`{}`), "bob"))
	b.mustConflict(t, ledger.Claim("r", "a2", "t", key(t, "r", "a2", `{"i":2}`), json.RawMessage(`{"i":2}`), 1))
	b.mustConflict(t, ledger.Skip("r", "a2", "dependency rejected"))
	b.mustOK(t, ledger.Skip("r", "a3", "dependency rejected"))
	b.mustConflict(t, ledger.Claim("r", "a3", "t", key(t, "r", "a3", `{"i":3}`), json.RawMessage(`{"i":3}`), 1))
	// Once claimed, review marks conflict.
	k4 := key(t, "r", "a4", `{"i":4}`)
	b.mustOK(t, ledger.Claim("r", "a4", "t", k4, json.RawMessage(`{"i":4}`), 1))
	b.mustConflict(t, ledger.Approve("r", "a4", nil, "x"))
	b.mustConflict(t, ledger.Reject("r", "a4", "late", "x"))
	b.mustConflict(t, ledger.Edit("r", "a4", json.RawMessage(`{"i":5}`), "x"))
	b.mustConflict(t, ledger.Skip("r", "a4", "x"))
	// A retryable failure leaves the row pending: a cancelled run skips it and its key.
	b.mustOK(t, ledger.Fail(k4, 1, "503", true, nil))
	res = b.mustOK(t, ledger.Skip("r", "a4", "run cancelled"))
	if res.Action.Status != ledger.StatusSkipped || res.Key.State != ledger.StatusSkipped {
		t.Fatalf("skip after retryable failure %+v", res)
	}
	// Compensating rows.
	undo := ledger.Action{ID: "a5.undo", Tool: "undo_t", Args: json.RawMessage(`{"id":1}`)}
	res = b.mustOK(t, ledger.AddUndo("r", undo))
	if !res.Action.Undo || res.Action.Status != ledger.StatusPending {
		t.Fatalf("add undo %+v", res.Action)
	}
	b.mustOK(t, ledger.AddUndo("r", undo))
	undo.Args = json.RawMessage(`{"id":2}`)
	b.mustConflict(t, ledger.AddUndo("r", undo))
	if r := b.apply(t, ledger.AddUndo("r", ledger.Action{ID: "a5x", Tool: "t"})); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("undo id without .undo: %v", r.Err)
	}
	acts, err := b.l.Actions(b.ctx, "r")
	if err != nil || len(acts) != 6 || acts[5].ID != "a5.undo" {
		t.Fatalf("Actions after AddUndo: %d rows, %v", len(acts), err)
	}
	wantTypes(t, b.events(t, "r")[2:], "action.approved:a1", "action.edited:a1", "action.rejected:a2",
		"action.skipped:a3", "action.claimed:a4", "action.attempt_failed:a4", "action.skipped:a4")
	// Run status.
	b.mustOK(t, ledger.SetRunStatus("r", ledger.RunPaused, "run.paused", "", json.RawMessage(`{"reason":"review"}`)))
	n := len(b.events(t, "r"))
	b.mustOK(t, ledger.SetRunStatus("r", ledger.RunPaused, "", "", nil))
	if len(b.events(t, "r")) != n {
		t.Fatalf("SetRunStatus to the same status without an event type wrote an event")
	}
	b.mustOK(t, ledger.SetRunStatus("r", ledger.RunFailed, "run.failed", "a2 rejected", nil))
	b.mustOK(t, ledger.Note("r", "run.awaiting_approval", "", nil))
	run, _ := b.l.GetRun(b.ctx, "r")
	if run.Status != ledger.RunFailed || run.Error != "a2 rejected" {
		t.Fatalf("run after SetRunStatus %+v", run)
	}
	if r := b.apply(t, ledger.SetRunStatus("r", "bogus", "", "", nil)); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("bogus status: %v", r.Err)
	}
}

func testIdenticalRewrite(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 4)
	k := func(i int) string { return key(t, "r", fmt.Sprintf("a%d", i), fmt.Sprintf(`{"i":%d}`, i)) }
	claim := func(i, n int) ledger.Op {
		return ledger.Claim("r", fmt.Sprintf("a%d", i), "t", k(i), json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), n)
	}
	b.mustOK(t, claim(1, 1))
	b.mustOK(t, ledger.Succeed(k(1), 1, json.RawMessage(`{"a": 1, "b": [1,2]}`)))
	before := len(b.events(t, "r"))
	// The same output again (whitespace aside): success, nothing new written.
	b.mustOK(t, ledger.Succeed(k(1), 1, json.RawMessage(`{"a":1,"b":[1,2]}`)))
	b.mustOK(t, claim(2, 1))
	b.mustOK(t, ledger.Fail(k(2), 1, "400", false, nil))
	b.mustOK(t, ledger.Fail(k(2), 1, "400", false, nil))
	b.mustConflict(t, ledger.Fail(k(2), 1, "401", false, nil))
	b.mustOK(t, claim(3, 1))
	b.mustOK(t, ledger.NeedsReview(k(3), 1, "timeout"))
	b.mustOK(t, ledger.NeedsReview(k(3), 1, "timeout"))
	b.mustConflict(t, ledger.NeedsReview(k(3), 1, "other"))
	b.mustOK(t, ledger.Resolve("r", "a3", ledger.Resolution{Done: json.RawMessage(`5`)}))
	b.mustOK(t, ledger.Resolve("r", "a3", ledger.Resolution{Done: json.RawMessage(`5`)}))
	b.mustConflict(t, ledger.Resolve("r", "a3", ledger.Resolution{Done: json.RawMessage(`6`)}))
	b.mustOK(t, ledger.Approve("r", "a4", nil, "x"))
	b.mustOK(t, ledger.Approve("r", "a4", nil, "x"))
	b.mustOK(t, ledger.Reject("r", "a4", "no", "x"))
	b.mustOK(t, ledger.Reject("r", "a4", "no", "x"))
	wantTypes(t, b.events(t, "r")[before:], "action.claimed:a2", "action.failed:a2", "action.claimed:a3",
		"action.needs_review:a3", "action.resolved:a3", "action.approved:a4", "action.rejected:a4")
}

func testDeadOwnerTakeover(t *testing.T, open Opener) {
	cfg := newConfig(t)
	l1 := open(t, cfg)
	ctx := context.Background()
	b := &bundle{l: l1, ctx: ctx, cfg: cfg}
	b.createRun(t, "r", 2)
	k1 := key(t, "r", "a1", `{"i":1}`)
	b.mustOK(t, ledger.Claim("r", "a1", "t", k1, json.RawMessage(`{"i":1}`), 1))
	dead := l1.Incarnation()
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := open(t, cfg)
	b.l = l2
	if l2.Incarnation() == dead {
		t.Fatalf("a reopened ledger kept incarnation %s", dead)
	}
	rec, err := l2.Key(ctx, k1)
	if err != nil || rec.State != ledger.StatusClaimed || rec.Owner != dead {
		t.Fatalf("claim after reopen %+v, %v", rec, err)
	}
	// The dead owner's attempt 1 may still get its outcome (a lookup found it)...
	// but here the new process takes over with attempt 2.
	b.mustConflict(t, ledger.Claim("r", "a1", "t", k1, json.RawMessage(`{"i":1}`), 1))
	res := b.mustOK(t, ledger.Claim("r", "a1", "t", k1, json.RawMessage(`{"i":1}`), 2))
	if res.Key.Owner != l2.Incarnation() || res.Key.Attempt != 2 {
		t.Fatalf("takeover %+v", res.Key)
	}
	b.mustConflict(t, ledger.Succeed(k1, 1, json.RawMessage(`1`)))
	b.mustOK(t, ledger.Succeed(k1, 2, json.RawMessage(`1`)))
	// Events continue their sequence after the reopen.
	b.events(t, "r")
}

func testApplySeveralOps(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 3)
	k := func(i int) string { return key(t, "r", fmt.Sprintf("a%d", i), fmt.Sprintf(`{"i":%d}`, i)) }
	b.mustOK(t, ledger.Claim("r", "a1", "t", k(1), json.RawMessage(`{"i":1}`), 1))
	res, err := b.l.Apply(b.ctx,
		ledger.Succeed(k(1), 1, json.RawMessage(`"one"`)),
		ledger.Claim("r", "a2", "t", k(2), json.RawMessage(`{"i":2}`), 1),
		ledger.Claim("r", "a2", "t", k(2), json.RawMessage(`{"i":2}`), 1), // sees the claim before it
		ledger.Succeed(k(2), 1, json.RawMessage(`"two"`)),
	)
	if err != nil || len(res) != 4 {
		t.Fatalf("Apply = %d results, %v", len(res), err)
	}
	if res[0].Err != nil || res[1].Err != nil || !errors.Is(res[2].Err, ledger.ErrConflict) || res[3].Err != nil {
		t.Fatalf("results %v %v %v %v", res[0].Err, res[1].Err, res[2].Err, res[3].Err)
	}
	wantTypes(t, b.events(t, "r")[2:], "action.claimed:a1", "action.succeeded:a1", "action.claimed:a2", "action.succeeded:a2")
	if _, err := b.l.Apply(b.ctx, ledger.Op{}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("zero Op: %v", err)
	}
}

func testReplay(t *testing.T, open Opener) {
	b := setup(t, open)
	p := b.createRun(t, "r", 2)
	k1 := key(t, "r", "a1", `{"i":1}`)
	k2 := key(t, "r", "a2", `{"i":2}`)
	b.mustOK(t, ledger.Claim("r", "a1", "t", k1, json.RawMessage(`{"i":1}`), 1))
	b.mustOK(t, ledger.Succeed(k1, 1, json.RawMessage(`"out1"`)))
	b.mustOK(t, ledger.Claim("r", "a2", "t", k2, json.RawMessage(`{"i":2}`), 1))
	b.mustOK(t, ledger.Succeed(k2, 1, json.RawMessage(`"out2"`)))
	p2 := *p
	p2.Actions = append([]plan.Action(nil), p.Actions...)
	p2.Actions[1].Args = json.RawMessage(`{"i":22}`)
	rev, err := b.l.AddRevision(b.ctx, "r", &p2, nil)
	if err != nil || rev != 2 {
		t.Fatalf("AddRevision = %d, %v", rev, err)
	}
	if rev, err := b.l.AddRevision(b.ctx, "r", &p2, nil); err != nil || rev != 2 {
		t.Fatalf("AddRevision with the same plan again = %d, %v; want 2 (nothing new)", rev, err)
	}
	acts, _ := b.l.Actions(b.ctx, "r")
	if acts[0].Status != ledger.StatusPending || acts[0].Key != "" || string(acts[1].Args) != `{"i":22}` {
		t.Fatalf("revision 2 rows %+v", acts)
	}
	// The unchanged action re-derives its key and finds it succeeded; its row
	// is linked to the record.
	ce := b.mustConflict(t, ledger.Claim("r", "a1", "t", k1, json.RawMessage(`{"i":1}`), 1))
	if ce.Current.State != ledger.StatusSucceeded || string(ce.Current.Output) != `"out1"` {
		t.Fatalf("replayed claim current %+v", ce.Current)
	}
	a1 := b.row(t, "r", "a1")
	if a1.Status != ledger.StatusSucceeded || a1.Key != k1 || string(a1.Output) != `"out1"` {
		t.Fatalf("replayed a1 row %+v", a1)
	}
	k22 := key(t, "r", "a2", `{"i":22}`)
	b.mustOK(t, ledger.Claim("r", "a2", "t", k22, json.RawMessage(`{"i":22}`), 1))
	b.mustOK(t, ledger.Succeed(k22, 1, json.RawMessage(`"out22"`)))
	if a2 := b.row(t, "r", "a2"); string(a2.Output) != `"out22"` {
		t.Fatalf("a2 after replay %+v", a2)
	}
	old, err := b.l.Plan(b.ctx, "r", 1)
	if err != nil || string(old.Actions[1].Args) != `{"i":2}` {
		t.Fatalf("revision 1 changed: %v", err)
	}
	if _, err := b.l.AddRevision(b.ctx, "nope", &p2, nil); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("AddRevision unknown run: %v", err)
	}
	run, _ := b.l.GetRun(b.ctx, "r")
	h1, _ := plan.Hash(p)
	if run.Revision != 2 || run.PlanHash != h1 {
		t.Fatalf("run after replay %+v", run)
	}
}

func testEventsGapFree(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r1", 40)
	b.createRun(t, "r2", 40)
	var wg sync.WaitGroup
	for _, run := range []string{"r1", "r2"} {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g*10 + 1; i <= g*10+10; i++ {
					id := fmt.Sprintf("a%d", i)
					args := fmt.Sprintf(`{"i":%d}`, i)
					k := key(t, run, id, args)
					if _, err := b.l.Apply(b.ctx, ledger.Claim(run, id, "t", k, json.RawMessage(args), 1)); err != nil {
						t.Error(err)
						return
					}
					if _, err := b.l.Apply(b.ctx, ledger.Succeed(k, 1, json.RawMessage(args))); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, run := range []string{"r1", "r2"} {
		evs := b.events(t, run)
		if len(evs) != 2+80 {
			t.Fatalf("run %s has %d events, want 82", run, len(evs))
		}
		page, err := b.l.Events(b.ctx, run, 10, 5)
		if err != nil || len(page) != 5 || page[0].Seq != 11 {
			t.Fatalf("Events(after 10, limit 5) = %d events, %v", len(page), err)
		}
		checkSeqs(t, page, 10)
		if evs[0].RunID != run || evs[0].At.IsZero() {
			t.Fatalf("event fields %+v", evs[0])
		}
	}
	if evs, err := b.l.Events(b.ctx, "nope", 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("Events of unknown run = %v, %v", evs, err)
	}
}

// collect reads n events from s (failing after a deadline).
func collect(t *testing.T, s *ledger.Subscription, n int) []ledger.Event {
	t.Helper()
	var out []ledger.Event
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for len(out) < n {
		select {
		case ev, ok := <-s.C:
			if !ok {
				t.Fatalf("subscription ended after %d of %d events: %v", len(out), n, s.Err())
			}
			out = append(out, ev)
		case <-deadline.C:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}

func testSubscribe(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 1)
	const notes = 300
	for i := 0; i < 100; i++ {
		b.mustOK(t, ledger.Note("r", "test.note", "", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))))
	}
	// Three subscribers from different points; the writer keeps going.
	afters := []uint64{0, 50, 102}
	subs := make([]*ledger.Subscription, len(afters))
	for i, after := range afters {
		s, err := b.l.Subscribe(b.ctx, "r", after)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 100; i < notes; i++ {
			if _, err := b.l.Apply(b.ctx, ledger.Note("r", "test.note", "", nil)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	total := 2 + notes
	for i, s := range subs {
		evs := collect(t, s, total-int(afters[i]))
		checkSeqs(t, evs, afters[i])
	}
	<-done
	// Nothing more arrives: no duplicates.
	late, err := b.l.Subscribe(b.ctx, "r", uint64(total))
	if err != nil {
		t.Fatal(err)
	}
	b.mustOK(t, ledger.Note("r", "test.last", "", nil))
	for i, s := range append(subs, late) {
		ev := collect(t, s, 1)[0]
		if ev.Seq != uint64(total+1) || ev.Type != "test.last" {
			t.Fatalf("subscriber %d: next event %+v, want seq %d", i, ev, total+1)
		}
	}
	late.Close()
	if _, ok := <-late.C; ok {
		// drain: Close ends the subscription soon after.
		for range late.C {
		}
	}
	if late.Err() != nil {
		t.Fatalf("Err after Close = %v, want nil", late.Err())
	}
	ctx, cancel := context.WithCancel(b.ctx)
	s, err := b.l.Subscribe(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range s.C {
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("Err after cancel = %v", s.Err())
	}
	if _, err := b.l.Subscribe(b.ctx, "nope", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Subscribe unknown run: %v", err)
	}
}

func testSubscribeLagged(t *testing.T, open Opener) {
	cfg := newConfig(t)
	cfg.SubscriberBuffer = 16
	b := &bundle{l: open(t, cfg), ctx: context.Background(), cfg: cfg}
	b.createRun(t, "r", 1)
	slow, err := b.l.Subscribe(b.ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The slow reader takes nothing while 200 events are written: writers
	// must not wait for it.
	ops := make([]ledger.Op, 0, 200)
	for i := 0; i < 200; i++ {
		ops = append(ops, ledger.Note("r", "test.note", "", nil))
	}
	for i := 0; i < 200; i++ {
		if _, err := b.l.Apply(b.ctx, ops[i]); err != nil {
			t.Fatal(err)
		}
	}
	var last uint64
	deadline := time.After(30 * time.Second)
	for open := true; open; {
		select {
		case ev, ok := <-slow.C:
			if ok {
				if ev.Seq != last+1 {
					t.Fatalf("lagging subscriber saw seq %d after %d", ev.Seq, last)
				}
				last = ev.Seq
			}
			open = ok
		case <-deadline:
			t.Fatal("lagging subscription was not ended")
		}
	}
	if !errors.Is(slow.Err(), ledger.ErrLagged) {
		t.Fatalf("Err = %v, want ErrLagged", slow.Err())
	}
	// It resubscribes from the last seq it saw and misses nothing.
	again, err := b.l.Subscribe(b.ctx, "r", last)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	checkSeqs(t, collect(t, again, 202-int(last)), last)
}

func bigString(n int) json.RawMessage {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	b[0], b[n-1] = '"', '"'
	return b
}

func testLargeOutput(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 3)
	sizes := []int{1000, 100 << 10, 16 << 20}
	for i, n := range sizes {
		id := fmt.Sprintf("a%d", i+1)
		args := fmt.Sprintf(`{"i":%d}`, i+1)
		k := key(t, "r", id, args)
		out := bigString(n)
		b.mustOK(t, ledger.Claim("r", id, "t", k, json.RawMessage(args), 1))
		// Outcome and the next claim in one Apply, like the executor does.
		b.mustOK(t, ledger.Succeed(k, 1, out))
		rec, err := b.l.Key(b.ctx, k)
		if err != nil || string(rec.Output) != string(out) {
			t.Fatalf("output of %d bytes: read back %d bytes, %v", n, len(rec.Output), err)
		}
		if row := b.row(t, "r", id); string(row.Output) != string(out) {
			t.Fatalf("row output of %d bytes: %d bytes", n, len(row.Output))
		}
	}
	evs := b.events(t, "r")
	var inlined, truncated int
	for _, ev := range evs {
		if ev.Type != "action.succeeded" {
			continue
		}
		if string(ev.Data) == `{"output_truncated":true}` {
			truncated++
		} else if strings.HasPrefix(string(ev.Data), `{"output":"`) {
			inlined++
		}
	}
	if inlined != 1 || truncated != 2 {
		t.Fatalf("succeeded events: %d inlined, %d truncated; want 1, 2", inlined, truncated)
	}
	// Several large records in one Apply still commit (they go to the value log).
	b2 := setup(t, open)
	b2.createRun(t, "r", 4)
	var ops []ledger.Op
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("a%d", i)
		args := fmt.Sprintf(`{"i":%d}`, i)
		ops = append(ops, ledger.Claim("r", id, "t", key(t, "r", id, args), json.RawMessage(args), 1),
			ledger.Succeed(key(t, "r", id, args), 1, bigString(2<<20)))
	}
	res, err := b2.l.Apply(b2.ctx, ops...)
	if err != nil {
		t.Fatalf("Apply of 4 x 2 MiB outputs: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("op %d: %v", i, r.Err)
		}
	}
}

func testTooLarge(t *testing.T, open Opener) {
	cfg := newConfig(t)
	cfg.MaxOutputBytes = 1 << 20
	b := &bundle{l: open(t, cfg), ctx: context.Background(), cfg: cfg}
	b.createRun(t, "r", 1)
	k := key(t, "r", "a1", `{"i":1}`)
	b.mustOK(t, ledger.Claim("r", "a1", "t", k, json.RawMessage(`{"i":1}`), 1))
	if r := b.apply(t, ledger.Succeed(k, 1, bigString(1<<20+1))); !errors.Is(r.Err, ledger.ErrTooLarge) {
		t.Fatalf("output above MaxOutputBytes: %v, want ErrTooLarge", r.Err)
	}
	if _, err := b.l.Memo(b.ctx, "r", "m", bigString(1<<20+1)); !errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("memo above MaxOutputBytes: %v, want ErrTooLarge", err)
	}
	b.mustOK(t, ledger.Succeed(k, 1, bigString(1<<20)))
}

func testApplyTooLarge(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 1)
	// One Apply whose writes exceed one transaction is refused as a whole.
	var ops []ledger.Op
	for i := 0; i < 4000; i++ {
		ops = append(ops, ledger.Note("r", "test.big", "", json.RawMessage(`{"s":`+string(bigString(500))+`}`)))
	}
	before := len(b.events(t, "r"))
	if _, err := b.l.Apply(b.ctx, ops...); !errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("Apply of 4000 events (2 MiB): %v, want ErrTooLarge", err)
	}
	if n := len(b.events(t, "r")); n != before {
		t.Fatalf("a refused Apply wrote %d events", n-before)
	}
	// The same volume from many callers is split over several commits.
	var wg sync.WaitGroup
	for i := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.l.Apply(b.ctx, ops[i]); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := len(b.events(t, "r")); n != before+len(ops) {
		t.Fatalf("%d events after concurrent notes, want %d", n, before+len(ops))
	}
}

func testMemo(t *testing.T, open Opener) {
	cfg := newConfig(t)
	l := open(t, cfg)
	ctx := context.Background()
	v, err := l.Memo(ctx, "r", "uuid", json.RawMessage(`"first"`))
	if err != nil || string(v) != `"first"` {
		t.Fatalf("Memo = %s, %v", v, err)
	}
	v, err = l.Memo(ctx, "r", "uuid", json.RawMessage(`"second"`))
	if err != nil || string(v) != `"first"` {
		t.Fatalf("Memo again = %s, %v; want the first value", v, err)
	}
	v, err = l.Memo(ctx, "r2", "uuid", json.RawMessage(`"other run"`))
	if err != nil || string(v) != `"other run"` {
		t.Fatalf("Memo other run = %s, %v", v, err)
	}
	if _, err := l.Memo(ctx, "r", "", json.RawMessage(`1`)); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("Memo empty name: %v", err)
	}
	if _, err := l.Memo(ctx, "r", "x", json.RawMessage(`{`)); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("Memo invalid JSON: %v", err)
	}
	// Concurrent first writers: all see one value.
	var wg sync.WaitGroup
	got := make([]string, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := l.Memo(ctx, "r", "race", json.RawMessage(fmt.Sprintf(`%d`, i)))
			if err != nil {
				t.Error(err)
			}
			got[i] = string(v)
		}()
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatalf("concurrent memos disagree: %v", got)
		}
	}
}

func testMemoReopen(t *testing.T, open Opener) {
	cfg := newConfig(t)
	l := open(t, cfg)
	ctx := context.Background()
	v, err := l.Memo(ctx, "r", "uuid", json.RawMessage(`"first"`))
	if err != nil || string(v) != `"first"` {
		t.Fatalf("Memo = %s, %v", v, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, cfg)
	v, err = l.Memo(ctx, "r", "uuid", json.RawMessage(`"third"`))
	if err != nil || string(v) != `"first"` {
		t.Fatalf("Memo after reopen = %s, %v", v, err)
	}
}

func testDocJSON(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 2)
	k := key(t, "r", "a1", `{"i":1}`)
	b.mustOK(t, ledger.Claim("r", "a1", "t", k, json.RawMessage(`{"i":1}`), 1))
	b.mustOK(t, ledger.Succeed(k, 1, json.RawMessage(`{"id":"x"}`)))
	doc, err := b.l.Doc(b.ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	want := "actions,created_at,error,goal,policy,revision,run_id,status,updated_at"
	if got := strings.Join(sortStrings(keys), ","); got != want {
		t.Fatalf("Run JSON keys %s, want %s", got, want)
	}
	var actions []map[string]json.RawMessage
	if err := json.Unmarshal(m["actions"], &actions); err != nil || len(actions) != 2 {
		t.Fatalf("actions %s", m["actions"])
	}
	keys = keys[:0]
	for k := range actions[0] {
		keys = append(keys, k)
	}
	want = "args,attempts,class,depends_on,error,id,key,output,status,tool"
	if got := strings.Join(sortStrings(keys), ","); got != want {
		t.Fatalf("action keys %s, want %s", got, want)
	}
	if string(actions[0]["output"]) != `{"id":"x"}` || string(actions[1]["output"]) != "null" || string(actions[1]["depends_on"]) != "[]" {
		t.Fatalf("actions JSON %s", m["actions"])
	}
	var created string
	_ = json.Unmarshal(m["created_at"], &created)
	if _, err := time.Parse(time.RFC3339, created); err != nil || !strings.HasSuffix(created, "Z") {
		t.Fatalf("created_at %q is not RFC 3339 UTC", created)
	}
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

func testClosed(t *testing.T, open Opener) {
	cfg := newConfig(t)
	l := open(t, cfg)
	ctx := context.Background()
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r"}, testPlan("g", 1), nil); err != nil {
		t.Fatal(err)
	}
	s, err := l.Subscribe(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range s.C {
	}
	if !errors.Is(s.Err(), ledger.ErrClosed) {
		t.Fatalf("subscription Err after Close = %v", s.Err())
	}
	if _, err := l.Apply(ctx, ledger.Note("r", "x", "", nil)); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("Apply after Close = %v", err)
	}
	if _, err := l.GetRun(ctx, "r"); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("GetRun after Close = %v", err)
	}
	if err := l.Close(); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
}
