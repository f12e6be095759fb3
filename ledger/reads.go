package ledger

import "slices"

// Reads is what a list of ops will read first, known before the rules run:
// a backend that fetches (and locks) these records together, in one round
// trip, answers the rules' usual reads from memory. It is a forecast, not a
// bound: a rule may read more (another key, a blob, a budget, a memo), and
// the backend reads that when it is asked. The records are:
//
//   - Runs: run headers by id;
//   - Rows: rows of their run's current revision, by run and action id, and
//     the key record each of those rows names (Row.Key, when set);
//   - Keys: key records by key, with the header of the run that owns each
//     key and the row of the key's action in that run's current revision.
//
// Creates names the runs an op of the list records (NewRun): most often
// absent before it, with no rows and no keys.
type Reads struct {
	Runs    []string
	Rows    []RowRef
	Keys    []string
	Creates []string
}

// RowRef names a row of a run's current revision.
type RowRef struct{ RunID, ActionID string }

// ReadSet returns what ops read first (see Reads), each record once, in the
// order the ops name them.
func ReadSet(ops []Op) Reads {
	var r Reads
	seenRun := map[string]bool{}
	seenRow := map[RowRef]bool{}
	seenKey := map[string]bool{}
	run := func(id string) {
		if id != "" && !seenRun[id] {
			seenRun[id] = true
			r.Runs = append(r.Runs, id)
		}
	}
	row := func(runID, actionID string) {
		run(runID)
		ref := RowRef{runID, actionID}
		if runID != "" && actionID != "" && !seenRow[ref] {
			seenRow[ref] = true
			r.Rows = append(r.Rows, ref)
		}
	}
	key := func(k string) {
		if k != "" && !seenKey[k] {
			seenKey[k] = true
			r.Keys = append(r.Keys, k)
		}
	}
	for _, o := range ops {
		switch b := o.body.(type) {
		case nil:
		case *claimOp:
			row(b.runID, b.actionID)
			key(b.key)
		case *addUndoOp:
			row(b.runID, b.row.ID)
		case *createRunOp:
			run(b.run.ID)
			if !slices.Contains(r.Creates, b.run.ID) {
				r.Creates = append(r.Creates, b.run.ID)
			}
		case namesRow: // the review marks
			a := b.namedRow()
			row(a.runID, a.actionID)
		case namesKey: // the outcomes
			key(b.namedKey())
		default:
			runID, _ := b.scope()
			run(runID)
		}
	}
	return r
}

// namesRow is an op on one row of a run (Approve, Edit, Reject, Skip,
// Resolve, Compensated, Decide: they embed at).
type namesRow interface{ namedRow() at }

func (a at) namedRow() at { return a }

// namesKey is an op named by its key (Succeed, Fail, NeedsReview).
type namesKey interface{ namedKey() string }

func (s *succeedOp) namedKey() string     { return s.key }
func (f *failOp) namedKey() string        { return f.key }
func (r *needsReviewOp) namedKey() string { return r.key }
