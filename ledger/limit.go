package ledger

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Tool limits: how many calls of one tool may be in flight at once
// (MaxInFlight) and how many may start in any window of Per (Rate), across
// every process that writes to the ledger. The executor turns a tool's
// limits (the tools file's max_in_flight and rate) into a ToolLimit and
// attaches it to every claim that starts a call (Op.WithLimits); the
// claim's rule checks it and takes a slot and a start in the same commit
// as the claim, or refuses the claim with a *LimitError (nothing written).
//
// One LimitRecord per tool holds the slots (one per key whose claim holds
// one) and the start times of the recent claims. A slot is given back in
// the commit that writes the key's next record: an outcome (succeeded,
// failed, pending for a retry, needs_review, skipped, resolved) or a claim
// that takes the key over. A slot whose owner is gone (a process killed: on
// a single-process ledger every other incarnation; on a shared one an
// owner whose node lease expired) does not count: a full tool looks at its
// slots' owners and drops those.
//
// The rate is a sliding window, not a token bucket: a claim is refused when
// Rate claims of the tool started (by the ledger's clock) in the window of
// length Per that ends at the claim, so no window of length Per ever holds
// more than Rate starts.
//
// Not limited: a claim that takes over a gone owner's claim (it concludes
// what was in flight) and a claim that parks the action for a person
// (Op.Parking).

// ErrLimited: a claim would take a tool past its max_in_flight or its rate
// (see *LimitError): nothing of the claim was written.
var ErrLimited = errors.New("ledger: tool limit reached")

// Reasons a claim is refused by a tool's limits (LimitError.Reason).
const (
	LimitInFlight = "max_in_flight"
	LimitRate     = "rate"
)

// LimitError is a claim refused by its tool's limits.
type LimitError struct {
	RunID, ActionID, Key, Tool string
	// Reason is LimitInFlight or LimitRate.
	Reason string
	// InFlight is how many live claims of the tool hold a slot.
	InFlight int
	// Started is how many claims of the tool started in the window.
	Started int
	Limit   ToolLimit
	// RetryAt (Reason LimitRate) is when, by the ledger's clock, the
	// oldest start in the window leaves it.
	RetryAt time.Time
}

func (e *LimitError) Error() string {
	if e.Reason == LimitRate {
		return fmt.Sprintf("ledger: tool %q: %d calls started in the last %v (rate limit %d per %v), run %q action %q waits until %s",
			e.Tool, e.Started, e.Limit.Per, e.Limit.Rate, e.Limit.Per, e.RunID, e.ActionID, e.RetryAt.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("ledger: tool %q: %d calls in flight (max_in_flight %d), run %q action %q waits for a slot",
		e.Tool, e.InFlight, e.Limit.MaxInFlight, e.RunID, e.ActionID)
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimited }

// ToolLimit is a tool's limits as a claim carries them. Zero fields: no
// limit of that kind.
type ToolLimit struct {
	// MaxInFlight is the most claims of the tool that hold a slot at once.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Rate is the most claims of the tool that start in any window of Per.
	Rate int           `json:"rate,omitempty"`
	Per  time.Duration `json:"per,omitempty"`
}

// IsZero reports whether l limits nothing.
func (l ToolLimit) IsZero() bool { return l.MaxInFlight == 0 && l.Rate == 0 }

// MaxRate is the largest ToolLimit.Rate: the ledger keeps the start time of
// each of the last Rate claims.
const MaxRate = 1000

func (l ToolLimit) check() error {
	switch {
	case l.MaxInFlight < 0:
		return fmt.Errorf("%w: max_in_flight %d is negative", ErrInvalid, l.MaxInFlight)
	case l.Rate < 0 || l.Rate > MaxRate:
		return fmt.Errorf("%w: rate %d is not between 1 and %d", ErrInvalid, l.Rate, MaxRate)
	case l.Rate > 0 && l.Per <= 0:
		return fmt.Errorf("%w: rate %d needs a positive window, not %v", ErrInvalid, l.Rate, l.Per)
	case l.Rate == 0 && l.Per != 0:
		return fmt.Errorf("%w: a rate window %v needs a rate", ErrInvalid, l.Per)
	}
	return nil
}

// LimitRecord is one tool's limiter state.
type LimitRecord struct {
	Tool string `json:"tool"`
	// Slots are the claims that hold a slot, oldest first.
	Slots []Slot `json:"slots,omitempty"`
	// Starts are the times (the ledger's clock, nanoseconds since the
	// Unix epoch: compact, as a rate may keep a thousand) of the latest
	// claims that started a call, oldest first: only those that may still
	// count against the rate.
	Starts    []int64   `json:"starts,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Slot is one claim that holds a slot of its tool.
type Slot struct {
	Key      string    `json:"key"`
	RunID    string    `json:"run_id"`
	ActionID string    `json:"action_id"`
	Owner    string    `json:"owner"`
	Attempt  int       `json:"attempt"`
	At       time.Time `json:"at"`
}

// LimitTx is a Tx that keeps tool limits: one record per tool, read for
// update. A backend without it refuses claims that carry limits
// (ErrInvalid).
type LimitTx interface {
	Limit(tool string) (LimitRecord, bool, error)
	PutLimit(r LimitRecord) error
}

// WithLimits returns a Claim op that checks its tool's limits and takes a
// slot and a start (see above) unless it takes over a gone owner's claim
// or parks the action; on other ops it is ErrInvalid. A zero l limits
// nothing.
func (o Op) WithLimits(l ToolLimit) Op {
	c, ok := o.body.(*claimOp)
	if !ok {
		if !l.IsZero() {
			o.misuse |= misuseLimits
		}
		return o
	}
	cc := *c
	cc.limits = l
	o.body = &cc
	return o
}

// slotTaking is a slot and a start a claim may take: the tool's record to
// write, and what the claim's event says of it.
type slotTaking struct {
	rec  LimitRecord
	data any
	at   time.Time // the start recorded: the claim's time too
}

// takeSlot checks o's tool limits: a *LimitError (as an op-level error)
// when the tool is full or its rate is spent; else the tool's record with
// the claim's slot and start, for put to write once nothing else refuses
// the claim (nil: no limits). It writes nothing.
func (b *batch) takeSlot(o *claimOp) (taken *slotTaking, refused error, err error) {
	l := o.limits
	if l.IsZero() {
		return nil, nil, nil
	}
	if _, ok := b.tx.(LimitTx); !ok {
		return nil, fmt.Errorf("%w: this ledger does not keep tool limits", ErrInvalid), nil
	}
	rec, _, err := b.tx.(LimitTx).Limit(o.tool)
	if err != nil {
		return nil, nil, err
	}
	now := b.now()
	rec.Tool = o.tool
	rec.Slots = slices.DeleteFunc(slices.Clone(rec.Slots), func(s Slot) bool { return s.Key == o.key })
	if l.MaxInFlight > 0 && len(rec.Slots) >= l.MaxInFlight {
		if rec.Slots, err = b.liveSlots(rec.Slots); err != nil {
			return nil, nil, err
		}
		if len(rec.Slots) >= l.MaxInFlight {
			return nil, &LimitError{RunID: o.runID, ActionID: o.actionID, Key: o.key, Tool: o.tool,
				Reason: LimitInFlight, InFlight: len(rec.Slots), Limit: l}, nil
		}
	}
	if l.Rate > 0 {
		from := now.Add(-l.Per)
		rec.Starts = slices.DeleteFunc(slices.Clone(rec.Starts), func(t int64) bool { return t <= from.UnixNano() })
		if n := len(rec.Starts); n >= l.Rate {
			return nil, &LimitError{RunID: o.runID, ActionID: o.actionID, Key: o.key, Tool: o.tool,
				Reason: LimitRate, Started: n, Limit: l, RetryAt: time.Unix(0, rec.Starts[n-l.Rate]).UTC().Add(l.Per)}, nil
		}
		rec.Starts = append(rec.Starts, now.UnixNano())
	} else {
		rec.Starts = nil
	}
	kv := []any{}
	if l.MaxInFlight > 0 {
		rec.Slots = append(rec.Slots, Slot{Key: o.key, RunID: o.runID, ActionID: o.actionID,
			Owner: b.tx.Incarnation(), Attempt: o.n, At: now})
		kv = append(kv, "in_flight", len(rec.Slots), "max_in_flight", l.MaxInFlight)
	}
	if l.Rate > 0 {
		kv = append(kv, "started", len(rec.Starts), "rate", l.Rate, "per", l.Per.String())
	}
	rec.UpdatedAt = now
	return &slotTaking{rec: rec, data: obj(kv...), at: now}, nil, nil
}

// put writes the tool's record with the slot taken.
func (t *slotTaking) put(b *batch) error {
	if t == nil {
		return nil
	}
	return b.tx.(LimitTx).PutLimit(t.rec)
}

// liveSlots drops the slots whose owner is gone (its claims may be taken
// over: a killed process, an expired node lease).
func (b *batch) liveSlots(slots []Slot) ([]Slot, error) {
	gone := map[string]bool{}
	for _, s := range slots {
		if _, seen := gone[s.Owner]; seen || s.Owner == b.tx.Incarnation() {
			continue
		}
		g, err := b.ownerGone(s.Owner)
		if err != nil {
			return nil, err
		}
		gone[s.Owner] = g
	}
	return slices.DeleteFunc(slices.Clone(slots), func(s Slot) bool { return gone[s.Owner] }), nil
}

// freeSlot gives back the slot of rec's key unless rec is the claim that
// holds it: called before every write of an existing key record, so that an
// outcome, or a claim that takes the key over, releases it in its commit.
func (b *batch) freeSlot(rec KeyRecord) error {
	lt, ok := b.tx.(LimitTx)
	if !ok || rec.Tool == "" {
		return nil
	}
	lr, found, err := lt.Limit(rec.Tool)
	if err != nil || !found {
		return err
	}
	i := slices.IndexFunc(lr.Slots, func(s Slot) bool { return s.Key == rec.Key })
	if i < 0 {
		return nil
	}
	if s := lr.Slots[i]; rec.State == StatusClaimed && s.Owner == rec.Owner && s.Attempt == rec.Attempt {
		return nil
	}
	lr.Slots = slices.Delete(slices.Clone(lr.Slots), i, i+1)
	lr.UpdatedAt = b.now()
	return lt.PutLimit(lr)
}
