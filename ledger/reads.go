package ledger

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
type Reads struct {
	Runs []string
	Rows []RowRef
	Keys []string
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
		switch o.kind {
		case opClaim:
			row(o.runID, o.actionID)
			key(o.key)
		case opSucceed, opFail, opNeedsReview:
			key(o.key)
		case opResolve, opApprove, opReject, opEdit, opSkip, opCompensated, opDecide:
			row(o.runID, o.actionID)
		case opAddUndo:
			row(o.runID, o.row.ID)
		case opSetRunStatus, opNote, opAddRevision, opSetToolsHash, opSetPause:
			run(o.runID)
		case opCreateRun:
			run(o.run.ID)
		}
	}
	return r
}
