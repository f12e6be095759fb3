package ledgertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// testLimits: a claim that carries its tool's limits (Op.WithLimits) takes
// a slot and a start in its own commit, or is refused with a *LimitError
// (errors.Is ErrLimited) and writes nothing; the key's next record (an
// outcome of any kind, or a takeover) gives the slot back in its commit;
// parking claims and takeovers are not limited; the rate is a sliding
// window by the ledger's clock; concurrent claimers never hold more slots
// than max_in_flight; a slot of an owner that is gone stops counting.
func testLimits(t *testing.T, open Opener, opts Options) {
	t.Run("InFlight", func(t *testing.T) { t.Parallel(); testLimitInFlight(t, open) })
	t.Run("Rate", func(t *testing.T) { t.Parallel(); testLimitRate(t, open) })
	t.Run("Concurrent", func(t *testing.T) { t.Parallel(); testLimitConcurrent(t, open) })
	t.Run("BadLimits", func(t *testing.T) { t.Parallel(); testLimitBad(t, open) })
	t.Run("ToolWait", func(t *testing.T) { t.Parallel(); testLimitToolWait(t, open) })
	if opts.Durable {
		t.Run("DeadOwner", func(t *testing.T) { t.Parallel(); testLimitDeadOwner(t, open) })
	}
}

// limitCase is run "r" of n actions whose claims carry lim.
type limitCase struct {
	b   *bundle
	lim ledger.ToolLimit
}

func (c *limitCase) args(a string) string { return `{"i":` + a[1:] + `}` }

func (c *limitCase) key(t *testing.T, a string) string { return key(t, "r", a, c.args(a)) }

func (c *limitCase) claim(t *testing.T, a string, n int) ledger.Op {
	return ledger.Claim("r", a, "t", c.key(t, a), json.RawMessage(c.args(a)), n).WithLimits(c.lim)
}

// refused asserts that claiming a (attempt n) is refused for reason and
// wrote nothing: no key record, the row and the event log unchanged.
func (c *limitCase) refused(t *testing.T, a string, n int, reason string) *ledger.LimitError {
	t.Helper()
	before := c.b.events(t, "r")
	row := c.b.row(t, "r", a)
	rec, recErr := c.b.l.Key(c.b.ctx, c.key(t, a))
	r := c.b.apply(t, c.claim(t, a, n))
	var le *ledger.LimitError
	if !errors.As(r.Err, &le) || !errors.Is(r.Err, ledger.ErrLimited) || le.Reason != reason {
		t.Fatalf("claim %s attempt %d: want a *LimitError (%s), got %v", a, n, reason, r.Err)
	}
	if le.Tool != "t" || le.RunID != "r" || le.ActionID != a || le.Key != c.key(t, a) {
		t.Fatalf("LimitError names %+v", le)
	}
	if after := c.b.events(t, "r"); len(after) != len(before) {
		t.Fatalf("a refused claim appended %v", after[len(before):])
	}
	if got := c.b.row(t, "r", a); got.Status != row.Status || got.Attempts != row.Attempts {
		t.Fatalf("a refused claim changed the row: %+v -> %+v", row, got)
	}
	rec2, err2 := c.b.l.Key(c.b.ctx, c.key(t, a))
	if (recErr == nil) != (err2 == nil) || rec2.State != rec.State || rec2.Attempt != rec.Attempt {
		t.Fatalf("a refused claim changed the key record: %+v (%v) -> %+v (%v)", rec, recErr, rec2, err2)
	}
	return le
}

func testLimitInFlight(t *testing.T, open Opener) {
	c := &limitCase{b: setup(t, open), lim: ledger.ToolLimit{MaxInFlight: 2}}
	b := c.b
	b.createRun(t, "r", 8)
	r1 := b.mustOK(t, c.claim(t, "a1", 1))
	b.mustOK(t, c.claim(t, "a2", 1))
	if r1.Key.State != ledger.StatusClaimed {
		t.Fatalf("claim a1: %+v", r1.Key)
	}
	le := c.refused(t, "a3", 1, ledger.LimitInFlight)
	if le.InFlight != 2 || le.Limit.MaxInFlight != 2 {
		t.Fatalf("LimitError %+v: want 2 in flight of 2", le)
	}
	// The claim's event says how full the tool is.
	evs := b.events(t, "r")
	last := evs[len(evs)-1]
	if last.Type != ledger.EventActionClaimed || last.ActionID != "a2" ||
		!jsonHas(t, last.Data, "limits", `{"in_flight":2,"max_in_flight":2}`) {
		t.Fatalf("action.claimed of a2: %s %s", last.Type, last.Data)
	}
	// A parking claim is never followed by a call: not limited.
	b.mustOK(t, c.claim(t, "a3", 1).Parking())
	b.mustOK(t, ledger.NeedsReview(c.key(t, "a3"), 1, "parked"))
	// Every kind of outcome gives the slot back in its commit.
	b.mustOK(t, ledger.Succeed(c.key(t, "a1"), 1, json.RawMessage(`1`)))
	b.mustOK(t, c.claim(t, "a4", 1))
	c.refused(t, "a5", 1, ledger.LimitInFlight)
	b.mustOK(t, ledger.FailWith(c.key(t, "a2"), 1, "429", true, ledger.FailureNotProcessed, nil)) // pending
	b.mustOK(t, c.claim(t, "a5", 1))
	// A retry of a pending key is a new call: limited like a first claim.
	c.refused(t, "a2", 2, ledger.LimitInFlight)
	b.mustOK(t, ledger.NeedsReview(c.key(t, "a4"), 1, "unknown"))
	b.mustOK(t, c.claim(t, "a2", 2))
	b.mustOK(t, ledger.Fail(c.key(t, "a5"), 1, "400", false, nil))
	b.mustOK(t, c.claim(t, "a6", 1))
	c.refused(t, "a7", 1, ledger.LimitInFlight)
	// A claim without limits is not counted and not refused.
	b.mustOK(t, ledger.Claim("r", "a7", "t", c.key(t, "a7"), json.RawMessage(c.args("a7")), 1))
	c.refused(t, "a8", 1, ledger.LimitInFlight)
	// A larger limit lets it through.
	c.lim.MaxInFlight = 3
	b.mustOK(t, c.claim(t, "a8", 1))
}

// jsonHas reports whether the JSON object data has field name equal (as
// JSON) to want.
func jsonHas(t *testing.T, data json.RawMessage, name, want string) bool {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("event data %s: %v", data, err)
	}
	var got, w any
	if json.Unmarshal(m[name], &got) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return fmt.Sprint(got) == fmt.Sprint(w)
}

func testLimitRate(t *testing.T, open Opener) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := NewClock(t0)
	cfg := newConfig(t)
	cfg.Clock = clock
	b := &bundle{l: open(t, cfg), ctx: t.Context(), cfg: cfg}
	c := &limitCase{b: b, lim: ledger.ToolLimit{Rate: 2, Per: 10 * time.Second}}
	b.createRun(t, "r", 6)
	b.mustOK(t, c.claim(t, "a1", 1))
	clock.Set(t0.Add(time.Second))
	b.mustOK(t, c.claim(t, "a2", 1))
	// Their outcomes free nothing of the rate: starts are counted.
	b.mustOK(t, ledger.Succeed(c.key(t, "a1"), 1, json.RawMessage(`1`)))
	clock.Set(t0.Add(9 * time.Second))
	le := c.refused(t, "a3", 1, ledger.LimitRate)
	if le.Started != 2 || !le.RetryAt.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("LimitError %+v: want 2 started, retry at %v", le, t0.Add(10*time.Second))
	}
	// The window is sliding: at t0+10s the start at t0 has left it, the
	// one at t0+1s has not.
	clock.Set(t0.Add(10 * time.Second))
	b.mustOK(t, c.claim(t, "a3", 1))
	le = c.refused(t, "a4", 1, ledger.LimitRate)
	if !le.RetryAt.Equal(t0.Add(11 * time.Second)) {
		t.Fatalf("retry at %v, want %v", le.RetryAt, t0.Add(11*time.Second))
	}
	clock.Set(t0.Add(11 * time.Second))
	b.mustOK(t, c.claim(t, "a4", 1))
	// Both limits at once.
	c.lim = ledger.ToolLimit{MaxInFlight: 1, Rate: 2, Per: 10 * time.Second}
	clock.Set(t0.Add(30 * time.Second))
	b.mustOK(t, c.claim(t, "a5", 1)) // the only claim that took a slot
	clock.Set(t0.Add(60 * time.Second))
	c.refused(t, "a6", 1, ledger.LimitInFlight)
	// No window of 10s holds more than 2 starts.
	var starts []time.Time
	for _, ev := range b.events(t, "r") {
		if ev.Type == ledger.EventActionClaimed {
			starts = append(starts, ev.At)
		}
	}
	for i := range starts {
		n := 0
		for _, s := range starts[i:] {
			if s.Sub(starts[i]) < 10*time.Second {
				n++
			}
		}
		if n > 2 {
			t.Fatalf("%d claims started within 10s of %v: %v", n, starts[i], starts)
		}
	}
}

// testLimitConcurrent: workers claim, hold and conclude actions of one
// tool as fast as they can; the ledger never lets more than MaxInFlight of
// them hold a claim at once, and every action gets through.
func testLimitConcurrent(t *testing.T, open Opener) {
	const actions, workers, max = 24, 6, 2
	c := &limitCase{b: setup(t, open), lim: ledger.ToolLimit{MaxInFlight: max}}
	b := c.b
	b.createRun(t, "r", actions)
	var held, peak atomic.Int32
	next := make(chan string, actions)
	for i := 1; i <= actions; i++ {
		next <- fmt.Sprintf("a%d", i)
	}
	close(next)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range next {
				for tries := 0; ; tries++ {
					res, err := b.l.Apply(b.ctx, c.claim(t, a, 1))
					if err != nil {
						errs <- err
						return
					}
					if errors.Is(res[0].Err, ledger.ErrLimited) {
						if tries > 20000 {
							errs <- fmt.Errorf("claim %s never got a slot: %w", a, res[0].Err)
							return
						}
						time.Sleep(time.Millisecond)
						continue
					}
					if res[0].Err != nil {
						errs <- fmt.Errorf("claim %s: %w", a, res[0].Err)
						return
					}
					break
				}
				n := held.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				held.Add(-1) // before the outcome commits: its slot is free only then
				if res, err := b.l.Apply(b.ctx, ledger.Succeed(c.key(t, a), 1, json.RawMessage(`1`))); err != nil || res[0].Err != nil {
					errs <- fmt.Errorf("succeed %s: %v %v", a, err, res[0].Err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > max || p < 1 {
		t.Fatalf("peak of claims held at once %d, want 1..%d", p, max)
	}
	for i := 1; i <= actions; i++ {
		if r := b.row(t, "r", fmt.Sprintf("a%d", i)); r.Status != ledger.StatusSucceeded {
			t.Fatalf("a%d is %s", i, r.Status)
		}
	}
}

func testLimitBad(t *testing.T, open Opener) {
	c := &limitCase{b: setup(t, open)}
	b := c.b
	b.createRun(t, "r", 1)
	for _, l := range []ledger.ToolLimit{{MaxInFlight: -1}, {Rate: -1, Per: time.Second}, {Rate: 2},
		{Rate: 1, Per: -time.Second}, {Per: time.Second}, {Rate: ledger.MaxRate + 1, Per: time.Second}} {
		c.lim = l
		if r := b.apply(t, c.claim(t, "a1", 1)); !errors.Is(r.Err, ledger.ErrInvalid) {
			t.Errorf("claim with limits %+v: want ErrInvalid, got %v", l, r.Err)
		}
	}
	if r := b.apply(t, ledger.Succeed(c.key(t, "a1"), 1, json.RawMessage(`1`)).WithLimits(ledger.ToolLimit{MaxInFlight: 1})); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Errorf("Succeed with limits: want ErrInvalid, got %v", r.Err)
	}
	if evs := b.events(t, "r"); len(evs) != 2 {
		t.Fatalf("refused ops appended events: %v", evs)
	}
}

// testLimitDeadOwner: a process that holds a slot and is gone (closed
// here; killed in the backends' crash tests) does not keep it: the next
// incarnation's claim finds the tool full of gone owners' slots and drops
// them; taking over the dead claim is not limited and its outcome frees
// what is left.
func testLimitDeadOwner(t *testing.T, open Opener) {
	cfg := newConfig(t)
	l1 := open(t, cfg)
	b := &bundle{l: l1, ctx: t.Context(), cfg: cfg}
	c := &limitCase{b: b, lim: ledger.ToolLimit{MaxInFlight: 1}}
	b.createRun(t, "r", 3)
	b.mustOK(t, c.claim(t, "a1", 1))
	c.refused(t, "a2", 1, ledger.LimitInFlight)
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	b.l = open(t, cfg)
	b.mustOK(t, c.claim(t, "a2", 1)) // a1's owner is gone
	c.refused(t, "a3", 1, ledger.LimitInFlight)
	// Taking a1 over concludes what was in flight: not refused although
	// the tool is full.
	b.mustOK(t, c.claim(t, "a1", 2))
	b.mustOK(t, ledger.Succeed(c.key(t, "a1"), 2, json.RawMessage(`1`)))
	c.refused(t, "a3", 1, ledger.LimitInFlight)
	b.mustOK(t, ledger.Succeed(c.key(t, "a2"), 1, json.RawMessage(`1`)))
	b.mustOK(t, c.claim(t, "a3", 1))
}

// testLimitToolWait: LimitWait shows an action's wait for its tool on its
// row (and the Run JSON's "tool_wait") with action.limit_wait, keeps the
// time it began across repeats, is cleared by the claim that starts the
// action, is not shown once the action is rejected, and changes nothing
// on an action that started.
func testLimitToolWait(t *testing.T, open Opener) {
	c := &limitCase{b: setup(t, open), lim: ledger.ToolLimit{MaxInFlight: 1}}
	b := c.b
	b.createRun(t, "r", 3)
	b.mustOK(t, c.claim(t, "a1", 1))
	le := c.refused(t, "a2", 1, ledger.LimitInFlight)
	wait := func(a string) ledger.Result {
		t.Helper()
		w := ledger.ToolWait{Tool: le.Tool, Reason: le.Reason}
		return b.mustOK(t, ledger.LimitWait("r", a, w, json.RawMessage(`{"tool":"t","reason":"max_in_flight"}`)))
	}
	wait("a2")
	row := b.row(t, "r", "a2")
	if row.ToolWait == nil || row.ToolWait.Tool != "t" || row.ToolWait.Reason != ledger.LimitInFlight || row.ToolWait.Since.IsZero() {
		t.Fatalf("row after LimitWait: tool_wait %+v", row.ToolWait)
	}
	since := row.ToolWait.Since
	evs := b.events(t, "r")
	if last := evs[len(evs)-1]; last.Type != ledger.EventLimitWait || last.ActionID != "a2" {
		t.Fatalf("last event %s %s, want action.limit_wait of a2", last.Type, last.ActionID)
	}
	wait("a2")
	if got := b.row(t, "r", "a2").ToolWait; got == nil || !got.Since.Equal(since) {
		t.Fatalf("a repeated wait moved its start: %+v, want since %v", got, since)
	}
	doc, err := b.l.Doc(b.ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(doc)
	if !strings.Contains(string(js), `"tool_wait":{"tool":"t","reason":"max_in_flight","since":`) {
		t.Fatalf("Run JSON lacks the wait: %s", js)
	}
	// The claim that starts the action ends its wait.
	b.mustOK(t, ledger.Succeed(c.key(t, "a1"), 1, json.RawMessage(`1`)))
	b.mustOK(t, c.claim(t, "a2", 1))
	if got := b.row(t, "r", "a2").ToolWait; got != nil {
		t.Fatalf("a claimed action still waits: %+v", got)
	}
	// On a started action a wait changes nothing and appends nothing.
	n := len(b.events(t, "r"))
	wait("a2")
	if got := b.row(t, "r", "a2").ToolWait; got != nil || len(b.events(t, "r")) != n {
		t.Fatalf("a wait on a claimed action: tool_wait %+v, %d events after %d", got, len(b.events(t, "r")), n)
	}
	// Pending again for a retry, it waits for nothing until it is refused again.
	b.mustOK(t, ledger.FailWith(c.key(t, "a2"), 1, "429", true, ledger.FailureNotProcessed, nil))
	if got := b.row(t, "r", "a2"); got.Status != ledger.StatusPending || got.ToolWait != nil {
		t.Fatalf("a retryable failure: row %s, tool_wait %+v; want pending without a wait", got.Status, got.ToolWait)
	}
	// A rejected action waits for nothing.
	wait("a3")
	b.mustOK(t, ledger.Reject("r", "a3", "no", "p"))
	if got := b.row(t, "r", "a3").ToolWait; got != nil {
		t.Fatalf("a rejected action still shows a wait: %+v", got)
	}
	r := b.apply(t, ledger.LimitWait("r", "a3", ledger.ToolWait{Tool: "t"}, nil))
	if !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("a wait without a reason: %v, want ErrInvalid", r.Err)
	}
}
