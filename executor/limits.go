package executor

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// Tool limits (tools.Spec.Limits: the tools file's max_in_flight and rate)
// are enforced by the ledger: every claim that starts a call carries them
// (ledger.Op.WithLimits) and the ledger refuses it with a *ledger.LimitError
// when the tool is full or its rate is spent, writing nothing. The action
// then waits in its worker, without an attempt counted: once per wait the
// event action.limit_wait is appended, and the claim is tried again when
// this process gives a slot of the tool back (an outcome recorded by any
// drive on the same store handle), when the rate's window frees a start,
// or after a short poll (another node may free a slot on a shared ledger).

// limitPollMin and limitPollMax bound the poll of a waiting action: it
// starts at limitPollMin and doubles up to limitPollMax (each wait drawn
// between half and all of it), so that many waiting actions spread out.
const (
	limitPollMin = 20 * time.Millisecond
	limitPollMax = time.Second
)

// rateWaitMax bounds one wait for a rate's window (a window may be a day
// long): the action then claims again, so that a pause or a cancel of its
// run, or the end of the drive, is seen within it.
const rateWaitMax = 5 * time.Second

// toolLimit is spec's limits as the ledger takes them.
func toolLimit(s tools.Spec) ledger.ToolLimit {
	return ledger.ToolLimit{MaxInFlight: s.Limits.MaxInFlight, Rate: s.Limits.Rate, Per: s.Limits.Per}
}

// slotSignal returns a channel that is closed the next time this process
// gives back a slot of tool (slotFreed).
func slotSignal(l ledger.Store, tool string) <-chan struct{} {
	c := coordOf(l)
	c.slotsMu.Lock()
	defer c.slotsMu.Unlock()
	if c.slots == nil {
		c.slots = map[string]chan struct{}{}
	}
	ch, ok := c.slots[tool]
	if !ok {
		ch = make(chan struct{})
		c.slots[tool] = ch
	}
	return ch
}

// slotFreed wakes the actions of this process that wait for a slot of
// tool.
func slotFreed(l ledger.Store, tool string) {
	c := coordOf(l)
	c.slotsMu.Lock()
	defer c.slotsMu.Unlock()
	if ch, ok := c.slots[tool]; ok {
		close(ch)
		delete(c.slots, tool)
	}
}

// freedSlot tells the waiters of a's tool that a recorded an outcome (its
// slot, if it held one, is free).
func (d *driver) freedSlot(a *act) {
	if !a.n.spec.Limits.IsZero() {
		slotFreed(d.e.led, a.n.spec.Name)
	}
}

// limitWait is what a waiting action remembers between two tries.
type limitWait struct {
	noted bool          // action.limit_wait was appended for this wait
	poll  time.Duration // the next poll's cap
}

// waitSlot waits after the ledger refused a's claim of attempt n with le:
// for a rate, until the window frees a start; for max_in_flight, until
// freed is closed (this process gave a slot back) or a poll. It
// appends action.limit_wait once per wait. false: the drive ends first.
func (d *driver) waitSlot(ctx context.Context, a *act, n int, le *ledger.LimitError, freed <-chan struct{}) bool {
	if a.limit == nil {
		a.limit = &limitWait{poll: limitPollMin}
	}
	w := a.limit
	if !w.noted {
		w.noted = true
		d.noteLimitWait(ctx, a, n, le)
	}
	if le.Reason == ledger.LimitRate {
		// A start frees up at RetryAt by the ledger's clock, which the
		// engine's clock and sleep follow (Config.Clock, Config.Sleep).
		until := min(max(le.RetryAt.Sub(d.e.clock.Now()), 0)+time.Millisecond, rateWaitMax)
		return d.e.sleep(ctx, until) == nil
	}
	wait := w.poll/2 + rand.N(w.poll/2+1)
	w.poll = min(2*w.poll, limitPollMax)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-freed:
	case <-t.C:
	case <-ctx.Done():
		return false
	case <-d.e.drained.Done():
		return false
	}
	return true
}

// claimedAfterWait ends a's wait for a slot once a claim went through.
func (a *act) claimedAfterWait() { a.limit = nil }

// noteLimitWait appends action.limit_wait and shows the wait on the row
// (tool_wait in the Run JSON) until the claim that starts the action.
func (d *driver) noteLimitWait(ctx context.Context, a *act, n int, le *ledger.LimitError) {
	data := map[string]any{"attempt": n, "tool": le.Tool, "reason": le.Reason}
	if le.Reason == ledger.LimitRate {
		data["started"], data["rate"], data["per"] = le.Started, le.Limit.Rate, le.Limit.Per.String()
		data["retry_at"] = le.RetryAt.UTC()
	} else {
		data["in_flight"], data["max_in_flight"] = le.InFlight, le.Limit.MaxInFlight
	}
	w := ledger.ToolWait{Tool: le.Tool, Reason: le.Reason, RetryAt: le.RetryAt}
	if _, err := apply(context.WithoutCancel(ctx), d.e.led, ledger.LimitWait(d.runID, a.n.id, w, mustJSON(data))); err != nil {
		d.e.log.Warn("could not record a wait for a tool slot", "run_id", d.runID, "action_id", a.n.id, "error", err)
	}
	d.e.log.Info("action waits for its tool's limit", "run_id", d.runID, "action_id", a.n.id, "tool", le.Tool, "reason", le.Reason)
}

// limitErr returns err's *ledger.LimitError, if it is one.
func limitErr(err error) *ledger.LimitError {
	var le *ledger.LimitError
	if errors.As(err, &le) {
		return le
	}
	return nil
}
