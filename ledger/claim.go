package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// claimOp is Claim: attempt n of an action under key.
type claimOp struct {
	runID, actionID, tool, key string
	args                       json.RawMessage
	n                          int
	big                        *bigValue     // args when large, named by the caller (large.go)
	charges                    []Charge      // budgets (budget.go)
	limits                     ToolLimit     // the tool's limits (limit.go)
	basis                      *basis        // what its caller decided from (admit.go)
	keyTTL                     time.Duration // how long the provider honours the key (retention.go)
}

func (c *claimOp) kind() opKind               { return opClaim }
func (c *claimOp) scope() (string, *bigValue) { return c.runID, c.big }

// claiming is what a claim found: the run, the row, the key's record (has:
// the key has one) and, once taken, the budgets it reserved.
type claiming struct {
	run      storedRun
	row      storedRow
	rec      KeyRecord
	has      bool
	reserved []any
	slot     *slotTaking // the tool slot the claim takes (limit.go)
}

func (c *claimOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := c.check(); err != nil {
		return errResult(err), nil
	}
	run, row, err := b.runRow(at{c.runID, c.actionID})
	if err != nil {
		return opFailure(err)
	}
	if c.basis != nil && c.basis.newRun && !b.createdHere(c.runID) {
		return errResult(&StaleError{RunID: c.runID, ActionID: c.actionID, Run: run.Status, PausedBy: run.PausedBy,
			Msg: "the run was not created by this commit (it was recorded before): decide from it as recorded"}), nil
	}
	s := &claiming{run: run, row: row}
	if res, done, err := c.readKey(b, s); done || err != nil {
		return res, err
	}
	if res, done, err := c.rowFree(b, s); done || err != nil {
		return res, err
	}
	if res, done, err := c.follows(b, s); done || err != nil {
		return res, err
	}
	if res, done, err := c.admitted(b, s); done || err != nil {
		return res, err
	}
	return c.write(b, s)
}

// check validates the op itself, before anything is read.
func (c *claimOp) check() error {
	if err := validID("key", c.key); err != nil {
		return err
	}
	if c.n < 1 {
		return fmt.Errorf("%w: claim attempt %d (attempts start at 1)", ErrInvalid, c.n)
	}
	if err := validJSON("args", c.args, false); err != nil {
		return err
	}
	if err := c.limits.check(); err != nil {
		return fmt.Errorf("tool %q limits: %w", c.tool, err)
	}
	return checkCharges(c.charges)
}

func (c *claimOp) conflict(b *batch, s *claiming, key string, cur KeyRecord, format string, args ...any) (Result, bool, error) {
	return b.conflict(opClaim, c.runID, c.actionID, key, cur, &s.row, format, args...), true, nil
}

// readKey reads the key's record, if it has one: the key must belong to
// this run and action.
func (c *claimOp) readKey(b *batch, s *claiming) (Result, bool, error) {
	owner, has, err := b.keyRun(c.key)
	if err != nil || !has {
		return Result{}, err != nil, err
	}
	if owner != c.runID {
		return c.conflict(b, s, c.key, KeyRecord{}, "key belongs to run %q", owner)
	}
	rec, _, err := b.keyRec(c.runID, c.key)
	if err != nil {
		return Result{}, true, err
	}
	if rec.ActionID != c.actionID {
		return c.conflict(b, s, c.key, rec, "key belongs to action %q", rec.ActionID)
	}
	s.rec, s.has = rec, true
	return Result{}, false, nil
}

// rowFree refuses a row that was rejected, skipped or compensated (under
// this key, or before any), or that is claimed under another key.
func (c *claimOp) rowFree(b *batch, s *claiming) (Result, bool, error) {
	switch s.row.Status {
	case StatusRejected, StatusSkipped, StatusCompensated:
		if !s.has || s.row.Key == c.key {
			return c.conflict(b, s, c.key, s.rec, "action is %s", s.row.Status)
		}
	}
	if s.row.Key == "" || s.row.Key == c.key {
		return Result{}, false, nil
	}
	old, _, err := b.keyRec(c.runID, s.row.Key)
	if err != nil {
		return Result{}, true, err
	}
	if old.State == StatusClaimed {
		return c.conflict(b, s, s.row.Key, old, "action is claimed under another key")
	}
	return Result{}, false, nil
}

// follows checks that attempt n follows the key's record: absent for
// attempt 1, pending after attempt n-1, or claimed for n-1 by an owner that
// is gone. A key with an outcome links the row to it (replay).
func (c *claimOp) follows(b *batch, s *claiming) (Result, bool, error) {
	rec := s.rec
	if !s.has {
		if c.n != 1 {
			return c.conflict(b, s, c.key, rec, "key has no record: the first claim is attempt 1, not %d", c.n)
		}
		return Result{}, false, nil
	}
	switch {
	case rec.State == StatusPending && rec.Attempt == c.n-1:
		return Result{}, false, nil
	case rec.State == StatusClaimed && rec.Attempt == c.n-1 && rec.Owner != b.tx.Incarnation():
		gone, err := b.ownerGone(rec.Owner)
		if err != nil || gone {
			return Result{}, err != nil, err
		}
		return c.conflict(b, s, c.key, rec, "claim in flight on another node (its lease is live)")
	case rec.State == StatusClaimed && rec.Owner == b.tx.Incarnation():
		return c.conflict(b, s, c.key, rec, "claim in flight in this process")
	case rec.State == StatusPending || rec.State == StatusClaimed:
		return c.conflict(b, s, c.key, rec, "attempt %d does not follow %d", c.n, rec.Attempt)
	}
	return c.link(b, s)
}

// link: the key has an outcome (a replay's unchanged action re-derives a
// key that succeeded). The current row is linked to it and the claim
// conflicts.
func (c *claimOp) link(b *batch, s *claiming) (Result, bool, error) {
	rec, row := s.rec, &s.row
	if row.Key != c.key || row.Status != rec.State {
		row.Key, row.Status, row.Attempts, row.Error = c.key, rec.State, rec.Attempt, rec.Error
		row.Args = rec.Args
		if err := b.putRow(c.runID, s.run.Revision, *row); err != nil {
			return Result{}, true, err
		}
		if err := b.touch(s.run); err != nil {
			return Result{}, true, err
		}
	}
	return c.conflict(b, s, c.key, rec, "key is %s", rec.State)
}

// admitted checks the claim against the facts in the store (admit.go) and
// takes its budgets: the key's first claim reserves them, a retry whose
// hold was given back takes it again (budget.go).
func (c *claimOp) admitted(b *batch, s *claiming) (Result, bool, error) {
	refuse := func(refused error) (Result, bool, error) {
		res := errResult(refused)
		res.Action, res.Key = b.rowAction(c.runID, s.row, s.rec), s.rec
		return res, true, nil
	}
	takeover := s.has && s.rec.State == StatusClaimed // a gone owner's claim, concluded: nothing new starts
	if !s.has && (c.basis == nil || !c.basis.parking) {
		// The first claim waits for the action's time (timer.go).
		if refused, err := b.notDue(c, s.run, s.row); err != nil {
			return Result{}, true, err
		} else if refused != nil {
			return refuse(refused)
		}
	}
	if !takeover {
		if refused, err := b.admit(c, s.run, s.row, !s.has); err != nil {
			return Result{}, true, err
		} else if refused != nil {
			return refuse(refused)
		}
	}
	var refused error
	var err error
	if !takeover && (c.basis == nil || !c.basis.parking) {
		// A claim that starts a call takes a slot of its tool (limit.go),
		// written below once the budgets took theirs.
		if s.slot, refused, err = b.takeSlot(c); err != nil {
			return Result{}, true, err
		} else if refused != nil {
			return refuse(refused)
		}
	}
	if !s.has {
		// The key's first claim reserves its budgets (exactly once per key).
		s.reserved, refused, err = b.reserve(c)
	} else {
		// A retry of a key whose hold an attempt that did not happen gave
		// back takes it again: a reservation like the first, checked
		// against the limits.
		s.reserved, refused, err = b.rereserve(c)
	}
	if err != nil {
		return Result{}, true, err
	}
	if refused != nil {
		return refuse(refused)
	}
	if err := s.slot.put(b); err != nil {
		return Result{}, true, err
	}
	return Result{}, false, nil
}

// write records the claim: the key record, the row and action.claimed.
func (c *claimOp) write(b *batch, s *claiming) (Result, error) {
	now := b.now()
	if s.slot != nil {
		now = s.slot.at // the start the tool's rate counts
	}
	args, err := b.stash(c.runID, c.args, c.big) // one blob for the key record and the row
	if err != nil {
		return Result{}, err
	}
	rec := claimed(s.rec, s.has, KeyRecord{Key: c.key, RunID: c.runID, ActionID: c.actionID, Tool: c.tool, Args: args,
		State: StatusClaimed, Attempt: c.n, Owner: b.tx.Incarnation(), ClaimedAt: now, UpdatedAt: now})
	if err := b.putKeyRec(rec, !s.has); err != nil {
		return Result{}, err
	}
	if err := b.protect(s.run, rec, c.keyTTL); err != nil {
		return Result{}, err
	}
	row := s.row
	row.Key, row.Status, row.Attempts, row.Error, row.ToolWait = c.key, StatusClaimed, c.n, "", nil
	if len(c.args) > 0 {
		row.Args = args
	}
	data := c.claimData(&row, now, s.reserved)
	if s.slot != nil {
		data = withField(data, "limits", s.slot.data)
	}
	if err := b.putRow(c.runID, s.run.Revision, row); err != nil {
		return Result{}, err
	}
	if err := b.event(c.runID, EventActionClaimed, c.actionID, data); err != nil {
		return Result{}, err
	}
	return Result{Action: row.action(c.runID), Key: rec}, nil
}

// claimData is action.claimed's data: the attempt and key; who approved,
// and under which rule (the row's approvals for these args are used by
// this claim only); the budgets reserved.
func (c *claimOp) claimData(row *storedRow, now time.Time, reserved []any) json.RawMessage {
	data := obj("attempt", c.n, "key", c.key)
	if used := useApprovals(row, c.tool, c.key, c.args, now); len(used) > 0 || row.Gate != nil {
		kv := []any{"attempt", c.n, "key", c.key, "approved_by", used}
		if row.Gate != nil {
			kv = append(kv, "rule", row.Gate.Rule, "outcome", row.Gate.Outcome)
		}
		data = obj(kv...)
	}
	if len(reserved) > 0 {
		data = withField(data, "budgets", reserved)
	}
	return data
}

// claimed carries the safety facts of prev (the key's record, if has) over
// to next, the record of a new claim: FirstClaimedAt is set by attempt 1
// and kept; MaybeTookEffect is kept, and set when the claim takes over a
// claim that has no outcome.
func claimed(prev KeyRecord, has bool, next KeyRecord) KeyRecord {
	if !has || next.Attempt == 1 {
		next.FirstClaimedAt = next.ClaimedAt
	} else {
		next.FirstClaimedAt = prev.FirstClaimedAt // zero on records from before the field
	}
	next.MaybeTookEffect = has && (prev.MaybeTookEffect || prev.State == StatusClaimed)
	return next
}

// useApprovals marks the row's approvals that count for args (tool's, at
// now) as used by the claim of key, and returns who gave them.
func useApprovals(row *storedRow, tool, key string, args json.RawMessage, now time.Time) []string {
	if len(row.Approvals) == 0 || len(args) == 0 {
		return []string{}
	}
	h := ArgsHash(tool, args)
	row.Approvals = slices.Clone(row.Approvals)
	used := []string{}
	for i, ap := range row.Approvals {
		if ap.Args != h || ap.Used != "" || (!ap.Expires.IsZero() && !now.Before(ap.Expires)) {
			continue
		}
		row.Approvals[i].Used = key
		if !slices.Contains(used, ap.By) {
			used = append(used, ap.By)
		}
	}
	return used
}
