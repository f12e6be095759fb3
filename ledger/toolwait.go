package ledger

import (
	"encoding/json"
	"fmt"
	"time"
)

// ToolWait is what an action not started yet waits for when its tool's
// limits refused its claim (limit.go): shown on the row (the Run JSON's
// "tool_wait") while the action is pending or approved, and cleared by the
// claim that starts it.
type ToolWait struct {
	Tool string `json:"tool"`
	// Reason is LimitInFlight (every slot of the tool is taken) or
	// LimitRate (its rate's window is full).
	Reason string `json:"reason"`
	// Since is when the action began to wait, by the ledger's clock.
	Since time.Time `json:"since"`
	// RetryAt (Reason LimitRate) is when a start frees up, by the
	// ledger's clock.
	RetryAt time.Time `json:"retry_at,omitzero"`
}

// toolWaitOp is LimitWait.
type toolWaitOp struct {
	at
	wait ToolWait
	data json.RawMessage
}

// LimitWait records that an action waits for its tool's limits: it
// appends action.limit_wait with data and sets the row's ToolWait (its
// Since by the ledger's clock, kept from an earlier wait of the same
// reason). The row must be pending or approved; otherwise (it started or
// ended meanwhile) the op changes nothing and is success. Errors:
// ErrNotFound, ErrInvalid (no tool or reason, data not a JSON object).
func LimitWait(runID, actionID string, w ToolWait, data json.RawMessage) Op {
	return Op{body: &toolWaitOp{at: at{runID, actionID}, wait: w, data: data}}
}

func (o *toolWaitOp) kind() opKind { return opLimitWait }

func (o *toolWaitOp) eval(bv batch) (Result, error) {
	b := &bv
	if o.wait.Tool == "" || (o.wait.Reason != LimitInFlight && o.wait.Reason != LimitRate) {
		return errResult(fmt.Errorf("%w: a limit wait needs its tool and a reason (%q or %q)", ErrInvalid, LimitInFlight, LimitRate)), nil
	}
	if err := validJSON("event data", o.data, false); err != nil {
		return errResult(err), nil
	}
	m, res, err := b.markRow(opLimitWait, o.at)
	if m == nil {
		return res, err
	}
	if m.row.Status != StatusPending && m.row.Status != StatusApproved {
		return m.done(b)
	}
	w := o.wait
	w.Since, w.RetryAt = b.now(), w.RetryAt.UTC()
	if prev := m.row.ToolWait; prev != nil && prev.Tool == w.Tool && prev.Reason == w.Reason {
		w.Since = prev.Since
	}
	m.row.ToolWait = &w
	return m.write(b, false, EventLimitWait, o.data)
}
