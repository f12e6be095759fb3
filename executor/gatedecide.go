package executor

import (
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// The start decision: what the drive does with an action of a revision once
// its dependencies succeeded and its key is derived, as pure functions of
// the facts (the policy's gate, the budgets', the approvals that count, the
// key's record). The replay preview (PreviewReplay) walks a new revision
// with the same functions and the same inputs the drive reads (the rules
// with the run's totals of runInput, the budgets measured by checkBudgets,
// the approvals of driver.approved), so that what it says is what the
// replay does.

// startVerdict is what becomes of an action when the drive reaches it.
type startVerdict int

const (
	// startRun: its key is claimed and the tool called (a new key, or one
	// waiting for its next attempt).
	startRun startVerdict = iota
	// startAwait: it waits for people's approval (the gate says whom).
	startAwait
	// startDeny: a rule or a budget denies it: rejected, the run fails.
	startDeny
	// startKeep: its key succeeded before: the recorded output is its own,
	// nothing is called.
	startKeep
	// startMirrorFailed: its key failed before: the row mirrors the
	// failure and the run fails (nothing is called).
	startMirrorFailed
	// startMirrorReview: its key needs review: the row mirrors it and the
	// run waits for a person to resolve it.
	startMirrorReview
	// startMirrorSkipped: its key was skipped by a person: so is the row.
	startMirrorSkipped
	// startRefuse: its key was compensated (undone): building on it is
	// refused and the run fails.
	startRefuse
)

// startFacts is what decideStart looks at.
type startFacts struct {
	// gate is the policy's decision on the resolved arguments, or a
	// stricter budget's (decideGate).
	gate ledger.Gate
	// approved: gate needs nobody, or the approvals that count cover it
	// (driver.approved).
	approved bool
	// rec is the key's record; nil when the key has none (a new key).
	rec *ledger.KeyRecord
}

// decideStart decides an action's start. A denial comes first (a rule
// over the resolved arguments or the run's totals holds whether or not
// the key ran before); then a key with an outcome is mirrored whatever
// the approvals (nothing is called: a replay's unchanged action keeps its
// output, or its failure, without asking anyone again); then a call that
// needs approvals waits for them.
func decideStart(f startFacts) startVerdict {
	if f.gate.Outcome == string(policy.Deny) {
		return startDeny
	}
	if f.rec != nil {
		switch f.rec.State {
		case ledger.StatusSucceeded:
			return startKeep
		case ledger.StatusCompensated:
			return startRefuse
		case ledger.StatusFailed:
			return startMirrorFailed
		case ledger.StatusNeedsReview:
			return startMirrorReview
		case ledger.StatusSkipped:
			return startMirrorSkipped
		}
	}
	if !f.approved {
		return startAwait
	}
	return startRun
}

// decideGate is the gate an action is decided under: the policy's
// decision (gateFor on the resolved arguments, with in.Run from
// runInput), or the budgets' when stricter. bc is the
// budgets' check of the key's first claim (checkBudgets); a key that
// already has a record holds its share and is not measured again (pass
// the zero budgetCheck).
func (e *Engine) decideGate(pol Policy, spec tools.Spec, in policy.Input, bc budgetCheck) ledger.Gate {
	g := e.gateFor(pol, spec, in, false)
	if bc.gate != nil && stricter(*bc.gate, g) {
		g = *bc.gate // a budget would be exceeded: its outcome decides
	}
	return g
}
