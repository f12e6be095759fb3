package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/docketrun/docket/ledger"
)

// A batch is what the drive's loop writes in one Apply: the outcomes of
// the actions that just succeeded (lead), then what preparing the nodes
// picked with them decided (claims, policy decisions, failures of bad
// arguments, what a reviewer is shown). Building it (planBatch) and taking
// in the ledger's answer (sched.absorbBatch) are pure; driver.commit does
// the I/O between them.

// prep is what preparing a picked node yields; exactly one of the types
// below.
type prep interface{ node() *node }

// prepWork: the worker decides from the key's record (a.rec when already
// read): claimed before, attempted before under this key, or the key has
// an outcome.
type prepWork struct{ a *act }

// prepClaim: claim attempt 1 of a new key in the batch, with ops (the
// policy's decision) written before it.
type prepClaim struct {
	a   *act
	ops []ledger.Op
}

// prepFail: resolving or validating the arguments failed: ops claim the
// key and fail it at once.
type prepFail struct {
	a   *act
	msg string
	ops []ledger.Op
}

// prepDeny: the policy denied the call: ops decide and reject it.
type prepDeny struct {
	n      *node
	reason string
	ops    []ledger.Op
}

// prepAwait: it waits for a person's approval; ops (maybe none) show the
// reviewer the resolved args (shown) and record the gate decided now.
type prepAwait struct {
	n     *node
	ops   []ledger.Op
	gate  *ledger.Gate
	shown json.RawMessage
}

// prepDrop: nothing can be done with it now (the drive stops: fatal).
type prepDrop struct{ n *node }

func (p prepWork) node() *node  { return p.a.n }
func (p prepClaim) node() *node { return p.a.n }
func (p prepFail) node() *node  { return p.a.n }
func (p prepDeny) node() *node  { return p.n }
func (p prepAwait) node() *node { return p.n }
func (p prepDrop) node() *node  { return p.n }

// batchFacts is what planBatch looks at besides the preps.
type batchFacts struct {
	halted  bool // the run may not start new actions (paused by a person, cancelled)
	failing bool // the run is failing: no new claim
	runID   string
}

// slot is a prep's place in a batch: its ops are ops[first:first+count].
type slot struct {
	p     prep
	first int
	count int
}

// batch is one Apply of the loop.
type batch struct {
	ops       []ledger.Op // lead first
	lead      int         // how many of ops are lead
	slots     []slot
	work      []*act  // to workers, nothing written for them here
	giveBack  []*node // not worked on now
	awaitBack []*node // wait for a person
	drop      []*act  // their key reservations go back
}

// writes reports whether the batch writes anything besides lead.
func (b *batch) writes() bool { return len(b.slots) > 0 }

// planBatch lays out the batch of lead and preps. A claim or a failure
// whose key this process could not reserve (a.release nil) goes to a worker,
// which waits for the key's holder.
func planBatch(lead []ledger.Op, preps []prep, f batchFacts) *batch {
	b := &batch{ops: append([]ledger.Op(nil), lead...), lead: len(lead)}
	add := func(p prep, ops []ledger.Op) {
		b.slots = append(b.slots, slot{p: p, first: len(b.ops), count: len(ops)})
		b.ops = append(b.ops, ops...)
	}
	for _, p := range preps {
		switch p := p.(type) {
		case prepAwait:
			if len(p.ops) > 0 {
				add(p, p.ops)
			}
			b.awaitBack = append(b.awaitBack, p.n)
		case prepDeny:
			if f.halted {
				b.giveBack = append(b.giveBack, p.n)
			} else {
				add(p, p.ops)
			}
		case prepDrop:
			b.giveBack = append(b.giveBack, p.n)
		case prepWork:
			b.planWork(p.a, f.halted)
		case prepClaim:
			switch {
			case f.halted || f.failing:
				b.giveBack, b.drop = append(b.giveBack, p.a.n), append(b.drop, p.a)
			case p.a.release == nil:
				b.work = append(b.work, p.a) // another goroutine holds the key
			default:
				// The policy's decision, recorded with the claim: the slot is
				// the claim alone.
				b.ops = append(b.ops, p.ops...)
				add(p, []ledger.Op{p.a.claimOp(f.runID, 1)})
			}
		case prepFail:
			switch {
			case f.halted:
				b.giveBack, b.drop = append(b.giveBack, p.a.n), append(b.drop, p.a)
			case p.a.release == nil:
				p.a.fresh = false
				b.work = append(b.work, p.a)
			default:
				add(p, p.ops)
			}
		}
	}
	return b
}

func (b *batch) planWork(a *act, halted bool) {
	if halted {
		b.giveBack = append(b.giveBack, a.n)
		return
	}
	b.work = append(b.work, a)
}

// note is a line for the drive's log, from a pure step.
type note struct {
	warn bool
	msg  string
	id   string
	key  string
	err  string
}

// absorbed is what the loop does after a batch was written.
type absorbed struct {
	work    []*act   // to workers
	claimed []*act   // claimed in the batch (Hooks.AfterClaim), also in work
	release []func() // key reservations to give back
	notes   []note
}

// absorbBatch takes in the results of b's Apply (err: the Apply failed as
// a whole) at time now: rows follow what was written, claims held go to
// workers, a claim refused as stale stops the drive (redrive), one refused
// by a budget is prepared again, failures and denials fail the run.
func (s *sched) absorbBatch(b *batch, res []ledger.Result, err error, runID string, now time.Time) absorbed {
	for _, n := range b.giveBack {
		s.unpick(n, false)
	}
	for _, n := range b.awaitBack {
		s.unpick(n, true)
	}
	out := absorbed{work: b.work}
	for _, a := range b.drop {
		out.giveUp(a)
	}
	if err != nil {
		for _, sl := range b.slots {
			if a := actOf(sl.p); a != nil {
				out.giveUp(a)
			}
			if _, await := sl.p.(prepAwait); !await {
				s.done(sl.p.node())
			}
		}
		for _, a := range b.work {
			s.done(a.n)
		}
		s.setFatal(fmt.Errorf("executor: run %s: write claims: %w", runID, err))
		return absorbed{release: out.release}
	}
	for _, sl := range b.slots {
		s.absorbSlot(sl, res, runID, now, &out)
	}
	return out
}

// giveUp lists a's key reservation to be given back.
func (o *absorbed) giveUp(a *act) {
	if a.release != nil {
		o.release = append(o.release, a.release)
		a.release = nil
	}
}

// actOf is the act of a prep that has one.
func actOf(p prep) *act {
	switch p := p.(type) {
	case prepClaim:
		return p.a
	case prepFail:
		return p.a
	case prepWork:
		return p.a
	}
	return nil
}

func (s *sched) absorbSlot(sl slot, res []ledger.Result, runID string, now time.Time, out *absorbed) {
	last := res[sl.first+sl.count-1]
	switch p := sl.p.(type) {
	case prepAwait:
		if p.shown != nil && res[sl.first].Err == nil {
			s.update(p.n, func(row *ledger.Action) {
				row.Args, row.ApprovedArgs, row.Approvals, row.Status = p.shown, nil, nil, ledger.StatusPending
			})
		}
		if p.gate != nil && last.Err == nil {
			s.update(p.n, func(row *ledger.Action) { row.Gate, row.Status = p.gate, last.Action.Status })
		}
	case prepDeny:
		s.done(p.n)
		if last.Err != nil {
			s.setFatal(&ActionError{RunID: runID, ActionID: p.n.id, Op: "deny", Err: last.Err})
			return
		}
		s.update(p.n, func(row *ledger.Action) {
			row.Status, row.Error, row.ApprovedArgs = ledger.StatusRejected, p.reason, nil
		})
		s.fail(fmt.Sprintf("action %s was %s", p.n.id, p.reason), true)
	case prepFail:
		s.absorbFail(p, res[sl.first], last, out)
	case prepClaim:
		s.absorbClaim(p.a, last, runID, now, out)
	}
}

func (s *sched) absorbFail(p prepFail, r0, r1 ledger.Result, out *absorbed) {
	a := p.a
	out.giveUp(a)
	if r0.Err != nil || r1.Err != nil {
		// Someone else got there first: decide from its record.
		a.fresh = false
		if cur := conflictRecord(r0.Err); cur != nil {
			a.rec = cur
		}
		out.work = append(out.work, a)
		return
	}
	s.update(a.n, func(row *ledger.Action) {
		row.Status, row.Key, row.Attempts, row.Error = ledger.StatusFailed, a.key, 1, p.msg
	})
	out.notes = append(out.notes, note{warn: true, msg: "action failed before its call", id: a.n.id, key: a.key, err: p.msg})
	s.fail(fmt.Sprintf("action %s failed: %s", a.n.id, p.msg), false)
	s.done(a.n)
}

func (s *sched) absorbClaim(a *act, r ledger.Result, runID string, now time.Time, out *absorbed) {
	n := a.n
	if r.Err == nil {
		a.row = n.row
		a.claimed(1, r.Key, now)
		s.setRow(n, a.row)
		out.claimed = append(out.claimed, a)
		out.work = append(out.work, a)
		return
	}
	out.giveUp(a)
	a.fresh = false
	if r.Action.ID == n.id {
		s.setRow(n, r.Action) // e.g. linked to a succeeded key
	}
	if cur := conflictRecord(r.Err); cur != nil {
		a.rec = cur
		out.work = append(out.work, a)
		return
	}
	if due, ok := notDue(r.Err); ok {
		out.notes = append(out.notes, note{msg: waitingMsg, id: n.id, err: r.Err.Error()})
		s.wait(n, due)
		return
	}
	switch {
	case errors.Is(r.Err, ledger.ErrStale), errors.Is(r.Err, ledger.ErrNotDue): // not due, without a time: stale facts (timer.go)
		out.notes = append(out.notes, note{msg: staleMsg, id: n.id, err: r.Err.Error()})
		s.redrive = true
		s.retake(n)
	case errors.Is(r.Err, ledger.ErrLimited):
		// The tool is full or its rate is spent (nothing written, no
		// attempt counted): its worker waits for a slot and claims it.
		a.rec = nil
		out.work = append(out.work, a)
	case errors.Is(r.Err, ledger.ErrBudgetExceeded):
		// Another claim took the room since we read the usage: prepare it
		// again, decided on the new usage.
		out.notes = append(out.notes, note{msg: "claim refused by a budget; deciding again", id: n.id, err: r.Err.Error()})
		s.retake(n)
	default:
		s.done(n)
		s.setFatal(&ActionError{RunID: runID, ActionID: n.id, Key: a.key, Op: "claim", Err: r.Err})
	}
}

// staleMsg is logged when the ledger refuses a claim decided on facts that
// changed (ledger.ErrStale): the drive starts nothing more and the run is
// driven again from a fresh read once what is in flight is recorded.
const staleMsg = "claim refused: the run or action changed since it was read; reading it again"
