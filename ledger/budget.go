package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"
)

// Budgets: limits on what actions may spend (the sum of a numeric argument,
// or a count of actions) per budget, scope (a run, a tenant: the identity
// that created the run, or everyone), window and group. The executor turns
// the tools file's budgets into Charges and attaches them to an action's
// claim (Op.WithCharges); the claim's rule reserves them in the same commit
// as the claim, or refuses the claim with a *BudgetError (nothing written)
// when one would pass its limit and no approval covers that.
//
// Exactly once per key: only the first claim of a key (no key record yet)
// reserves; its reservations are kept on a Hold record under the key, so a
// re-claim after a crash or a person's retry never reserves again. A hold
// is released (its amounts given back) by a failure that says nothing
// happened (the key ends failed, or waits for a retry after a failure of
// class not_sent, not_processed, definite or invalid_arguments), or a skip
// while waiting for a retry, when no attempt may have taken effect
// (KeyRecord.MaybeTookEffect false, or the caller knows better:
// Op.NoEffect); the next claim of the key takes the same amounts again,
// checked against the limits like a first reservation (others may have
// taken the room meanwhile) unless they were approved to pass them. It is kept on success,
// needs_review, an unknown outcome and everything a person resolves.
//
// Amounts are exact decimals (big.Rat), written as decimal strings.

// ErrBudgetExceeded: a claim would take a budget past its limit (see
// *BudgetError): nothing of the claim was written.
var ErrBudgetExceeded = errors.New("ledger: budget exceeded")

// BudgetError is a claim refused by a budget.
type BudgetError struct {
	RunID, ActionID, Key string
	Charge               Charge
	Used                 string // the bucket's usage before the claim
}

func (e *BudgetError) Error() string {
	c := e.Charge
	s := fmt.Sprintf("ledger: budget %q exceeded for run %q action %q: %s used + %s > limit %s",
		c.Budget, e.RunID, e.ActionID, e.Used, c.Amount, c.Limit)
	if c.Group != "" {
		s += " (group " + c.Group + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrBudgetExceeded) true.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExceeded }

// Charge is what one claim takes from one budget bucket.
type Charge struct {
	// Budget is the budget's name (the tools file's budgets[].name).
	Budget string `json:"budget"`
	// Scope is who shares the bucket: "run:ID", "tenant:IDENTITY" or "all".
	Scope string `json:"scope"`
	// Window is the start of the window (UTC); zero: no window.
	Window time.Time `json:"window,omitzero"`
	// Every is the window's length (0: no window).
	Every time.Duration `json:"every,omitempty"`
	// Group is the group-by argument's value ("": no group).
	Group string `json:"group,omitempty"`
	// Amount is a decimal of at least 0 ("1" for a count).
	Amount string `json:"amount"`
	// Limit is the bucket's limit, a decimal.
	Limit string `json:"limit"`
	// Over: approvals cover this claim going past the limit (it is
	// reserved all the same).
	Over bool `json:"over,omitempty"`
}

// Bucket is the id of the bucket c charges: the JSON array [budget, scope,
// window start (RFC 3339, "" without window), group].
func (c Charge) Bucket() string {
	return BucketID(c.Budget, c.Scope, c.Window, c.Group)
}

// BucketID is the id of a budget bucket (Charge.Bucket).
func BucketID(budget, scope string, window time.Time, group string) string {
	w := ""
	if !window.IsZero() {
		w = window.UTC().Format(time.RFC3339)
	}
	b, _ := json.Marshal([]string{budget, scope, w, group})
	return string(b)
}

// BudgetRecord is one bucket's usage: what the holds that are not released
// reserved from it.
type BudgetRecord struct {
	ID     string        `json:"id"`
	Budget string        `json:"budget"`
	Scope  string        `json:"scope"`
	Window time.Time     `json:"window,omitzero"`
	Every  time.Duration `json:"every,omitempty"`
	Group  string        `json:"group,omitempty"`
	// Used is the sum of the kept reservations (a decimal); Count how many
	// keys hold one.
	Used  string `json:"used"`
	Count int    `json:"count"`
	// Limit is the limit of the latest reservation.
	Limit     string    `json:"limit"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Hold is the reservations of one action key.
type Hold struct {
	Key      string       `json:"key"`
	RunID    string       `json:"run_id"`
	ActionID string       `json:"action_id"`
	Charges  []HoldCharge `json:"charges"`
	At       time.Time    `json:"at"`
	// Released: the amounts were given back (a definite failure).
	Released   bool      `json:"released,omitempty"`
	ReleasedAt time.Time `json:"released_at,omitzero"`
}

// HoldCharge is one reservation of a hold.
type HoldCharge struct {
	Bucket string `json:"bucket"`
	Budget string `json:"budget"`
	Amount string `json:"amount"`
	Over   bool   `json:"over,omitempty"`
}

// BudgetTx is a Tx that keeps budgets: buckets by id, holds by key. A
// backend without it refuses claims that carry charges (ErrInvalid).
type BudgetTx interface {
	Budget(id string) (BudgetRecord, bool, error)
	PutBudget(r BudgetRecord) error
	Hold(key string) (Hold, bool, error)
	PutHold(h Hold) error
}

// BudgetReader is a Store that keeps budgets: every bucket, one bucket by
// id (ErrNotFound when nothing was reserved from it), and a key's hold
// (ErrNotFound when the key reserved nothing).
type BudgetReader interface {
	Budgets(ctx context.Context) ([]BudgetRecord, error)
	Budget(ctx context.Context, id string) (BudgetRecord, error)
	Hold(ctx context.Context, key string) (Hold, error)
}

// WithCharges returns a Claim op that reserves charges when it is the
// key's first claim (see the budget rules above); on other ops it is
// ErrInvalid.
func (o Op) WithCharges(charges ...Charge) Op {
	c, ok := o.body.(*claimOp)
	if !ok {
		if charges != nil {
			o.misuse |= misuseCharges
		}
		return o
	}
	cc := *c
	cc.charges = slices.Clone(charges)
	o.body = &cc
	return o
}

// NoEffect returns a Fail or Skip op whose caller knows that no attempt of
// the key took effect although the key record may say one might have
// (KeyRecord.MaybeTookEffect: a keyed call answered definitely under the
// same key after a crash, a lookup that found nothing): the key's budget
// hold is released. On other ops it is ErrInvalid.
func (o Op) NoEffect() Op {
	switch body := o.body.(type) {
	case *failOp:
		f := *body
		f.noEffect = true
		o.body = &f
	case *skipOp:
		sk := *body
		sk.noEffect = true
		o.body = &sk
	default:
		o.misuse |= misuseNoEffect
	}
	return o
}

// SortBudgets orders buckets by budget, scope, window (newest first) and
// group, as `docket budgets` shows them.
func SortBudgets(rs []BudgetRecord) {
	slices.SortFunc(rs, func(a, b BudgetRecord) int {
		if c := strings.Compare(a.Budget, b.Budget); c != 0 {
			return c
		}
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		if c := b.Window.Compare(a.Window); c != 0 {
			return c
		}
		return strings.Compare(a.Group, b.Group)
	})
}

// ParseAmount parses a decimal as budgets write them (digits, an optional
// fraction, an optional leading minus; no exponent), exactly.
func ParseAmount(s string) (*big.Rat, error) {
	t := strings.TrimPrefix(s, "-")
	int_, frac, hasDot := strings.Cut(t, ".")
	ok := int_ != "" && (!hasDot || frac != "")
	for _, part := range []string{int_, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				ok = false
			}
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a decimal number", ErrInvalid, s)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a decimal number", ErrInvalid, s)
	}
	return r, nil
}

// FormatAmount writes an exact decimal (a sum of decimals has a finite
// decimal expansion) with no trailing zeros.
func FormatAmount(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	for n := 1; n < 400; n++ {
		s := r.FloatString(n)
		if back, ok := new(big.Rat).SetString(s); ok && back.Cmp(r) == 0 {
			return s
		}
	}
	return r.FloatString(400)
}

func (b *batch) budgets() (BudgetTx, error) {
	bt, ok := b.tx.(BudgetTx)
	if !ok {
		return nil, fmt.Errorf("%w: this ledger does not keep budgets", ErrInvalid)
	}
	return bt, nil
}

// checkCharges validates charges before anything is written.
func checkCharges(cs []Charge) error {
	seen := map[string]bool{}
	for _, c := range cs {
		if c.Budget == "" || c.Scope == "" {
			return fmt.Errorf("%w: a charge needs a budget and a scope", ErrInvalid)
		}
		a, err := ParseAmount(c.Amount)
		if err != nil {
			return fmt.Errorf("budget %q amount: %w", c.Budget, err)
		}
		if a.Sign() < 0 {
			return fmt.Errorf("%w: budget %q: negative amount %s", ErrInvalid, c.Budget, c.Amount)
		}
		if _, err := ParseAmount(c.Limit); err != nil {
			return fmt.Errorf("budget %q limit: %w", c.Budget, err)
		}
		id := c.Bucket()
		if seen[id] {
			return fmt.Errorf("%w: budget bucket %s charged twice by one claim", ErrInvalid, id)
		}
		seen[id] = true
	}
	return nil
}

// reserve takes o's charges for the first claim of o.key: a *BudgetError
// (as an op-level error, nothing written) when one would pass its limit
// without approval; else the buckets and the key's hold are written, and the
// returned list describes the reservations for the claim's event.
func (b *batch) reserve(o *claimOp) (reserved []any, refused error, err error) {
	if len(o.charges) == 0 {
		return nil, nil, nil
	}
	bt, err := b.budgets()
	if err != nil {
		return nil, err, nil
	}
	if _, held, err := bt.Hold(o.key); err != nil {
		return nil, nil, err
	} else if held {
		return nil, nil, nil // reserved once for this key
	}
	now := b.now()
	recs := make([]BudgetRecord, len(o.charges))
	for i, c := range o.charges {
		rec, ok, err := bt.Budget(c.Bucket())
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			rec = BudgetRecord{ID: c.Bucket(), Budget: c.Budget, Scope: c.Scope, Window: c.Window.UTC(), Every: c.Every, Group: c.Group, Used: "0"}
		}
		used, err := ParseAmount(cmpOr(rec.Used, "0"))
		if err != nil {
			return nil, nil, fmt.Errorf("ledger: budget bucket %s: %w", rec.ID, err)
		}
		amount, _ := ParseAmount(c.Amount)
		limit, _ := ParseAmount(c.Limit)
		after := new(big.Rat).Add(used, amount)
		if after.Cmp(limit) > 0 && !c.Over {
			return nil, &BudgetError{RunID: o.runID, ActionID: o.actionID, Key: o.key, Charge: c, Used: FormatAmount(used)}, nil
		}
		rec.Used, rec.Count, rec.Limit, rec.UpdatedAt = FormatAmount(after), rec.Count+1, c.Limit, now
		recs[i] = rec
	}
	h := Hold{Key: o.key, RunID: o.runID, ActionID: o.actionID, At: now}
	for i, c := range o.charges {
		if err := bt.PutBudget(recs[i]); err != nil {
			return nil, nil, err
		}
		h.Charges = append(h.Charges, HoldCharge{Bucket: recs[i].ID, Budget: c.Budget, Amount: c.Amount, Over: c.Over})
		kv := []any{"budget", c.Budget, "scope", c.Scope, "amount", c.Amount, "used", recs[i].Used, "limit", c.Limit}
		if !c.Window.IsZero() {
			kv = append(kv, "window", c.Window.UTC().Format(time.RFC3339))
		}
		if c.Group != "" {
			kv = append(kv, "group", c.Group)
		}
		if c.Over {
			kv = append(kv, "over", true)
		}
		reserved = append(reserved, obj(kv...))
	}
	if err := bt.PutHold(h); err != nil {
		return nil, nil, err
	}
	return reserved, nil, nil
}

// rereserve takes again the released hold of o.key (a retry after a failure
// that gave it back): a reservation like the first, so a *BudgetError (as
// an op-level error, nothing written) when a charge would now pass its
// limit and was not approved to (HoldCharge.Over) and the claim does not
// park the action for a person (Op.Parking); the limit is the op's
// charge for that bucket when it carries one, else the bucket's. Returns
// the reservations for the claim's event, nil when the key holds nothing
// released.
func (b *batch) rereserve(o *claimOp) (reserved []any, refused error, err error) {
	bt, ok := b.tx.(BudgetTx)
	if !ok {
		return nil, nil, nil
	}
	h, held, err := bt.Hold(o.key)
	if err != nil || !held || !h.Released {
		return nil, nil, err
	}
	for _, c := range h.Charges {
		if refused, err := o.retakes(bt, c); refused != nil || err != nil {
			return nil, refused, err
		}
	}
	now := b.now()
	for _, c := range h.Charges {
		rec, err := shiftHeld(bt, o.key, c, 1, now)
		if err != nil {
			return nil, nil, err
		}
		reserved = append(reserved, obj("budget", c.Budget, "amount", c.Amount, "used", rec.Used, "again", true))
	}
	h.Released, h.ReleasedAt = false, time.Time{}
	return reserved, nil, bt.PutHold(h)
}

// retakes checks that the claim may take held charge c again: a
// *BudgetError when c would now pass its limit (the op's charge for the
// bucket, else the bucket's) and was not approved to, unless the claim
// parks the action for a person.
func (o *claimOp) retakes(bt BudgetTx, c HoldCharge) (refused error, err error) {
	rec, ok, err := bt.Budget(c.Bucket)
	if err != nil {
		return nil, err
	}
	if !ok || c.Over || (o.basis != nil && o.basis.parking) {
		return nil, nil // shiftHeld reports a missing bucket; a parked action waits for a person
	}
	limit := rec.Limit
	over := false
	for _, oc := range o.charges {
		if oc.Bucket() == c.Bucket {
			limit, over = oc.Limit, oc.Over
		}
	}
	if over || limit == "" {
		return nil, nil
	}
	used, err := ParseAmount(cmpOr(rec.Used, "0"))
	if err != nil {
		return nil, fmt.Errorf("ledger: budget bucket %s: %w", rec.ID, err)
	}
	amount, err := ParseAmount(c.Amount)
	if err != nil {
		return nil, fmt.Errorf("ledger: hold of key %s: %w", o.key, err)
	}
	lim, err := ParseAmount(limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: budget bucket %s limit: %w", rec.ID, err)
	}
	if new(big.Rat).Add(used, amount).Cmp(lim) > 0 {
		ch := Charge{Budget: c.Budget, Scope: rec.Scope, Window: rec.Window, Every: rec.Every, Group: rec.Group, Amount: c.Amount, Limit: limit}
		return &BudgetError{RunID: o.runID, ActionID: o.actionID, Key: o.key, Charge: ch, Used: FormatAmount(used)}, nil
	}
	return nil, nil
}

// shiftHeld takes key's held charge c again (sign 1) or gives it back
// (sign -1) in its bucket, and returns the bucket as written.
func shiftHeld(bt BudgetTx, key string, c HoldCharge, sign int, now time.Time) (BudgetRecord, error) {
	rec, ok, err := bt.Budget(c.Bucket)
	if err != nil {
		return rec, err
	}
	if !ok {
		return rec, fmt.Errorf("ledger: key %s holds budget bucket %s, which does not exist", key, c.Bucket)
	}
	used, err := ParseAmount(cmpOr(rec.Used, "0"))
	if err != nil {
		return rec, fmt.Errorf("ledger: budget bucket %s: %w", rec.ID, err)
	}
	amount, err := ParseAmount(c.Amount)
	if err != nil {
		return rec, fmt.Errorf("ledger: hold of key %s: %w", key, err)
	}
	if sign < 0 {
		amount.Neg(amount)
	}
	rec.Used, rec.Count, rec.UpdatedAt = FormatAmount(used.Add(used, amount)), rec.Count+sign, now
	return rec, bt.PutBudget(rec)
}

// release gives back key's hold (nothing happened: a definite failure, a
// skip, a person's "skip") and returns the event data with the names of the
// budgets released in "budgets_released"; data unchanged when it held
// nothing. A store without budgets holds nothing.
func (b *batch) release(key string, data json.RawMessage) (json.RawMessage, error) {
	bt, ok := b.tx.(BudgetTx)
	if !ok {
		return data, nil
	}
	h, held, err := bt.Hold(key)
	if err != nil || !held || h.Released {
		return data, err
	}
	now := b.now()
	var names []string
	for _, c := range h.Charges {
		if _, err := shiftHeld(bt, key, c, -1, now); err != nil {
			return data, err
		}
		names = append(names, c.Budget)
	}
	h.Released, h.ReleasedAt = true, now
	if err := bt.PutHold(h); err != nil {
		return data, err
	}
	if len(names) > 0 {
		data = withField(data, "budgets_released", names)
	}
	return data, nil
}

// withField adds a field to a JSON object (event data).
func withField(data json.RawMessage, name string, v any) json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &m); err != nil {
			return data
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return data
	}
	m[name] = raw
	out, err := json.Marshal(m)
	if err != nil {
		return data
	}
	return out
}
