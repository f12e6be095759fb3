package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The run-level ops: AddUndo, SetRunStatus, Note, and the internal ones
// behind CreateRun, AddRevision and Memo (write.go).

type addUndoOp struct {
	runID string
	row   Action
	big   *bigValue // row.Args when large (large.go)
}

type setRunStatusOp struct {
	runID     string
	status    RunStatus
	eventType EventType
	errMsg    string
	data      json.RawMessage
}

type noteOp struct {
	runID, actionID string
	eventType       EventType
	data            json.RawMessage
}

// revision is a plan revision ready for storage (revisionOp, write.go).
type revision struct {
	runID    string
	planJSON []byte
	planRefs map[string]string // action index -> blob name of large args in planJSON
	planHash string
	rows     []Action
	blobs    map[string]json.RawMessage // large values by blob name
}

type createRunOp struct {
	revision
	run Run
}

type addRevisionOp struct{ revision }

type memoOp struct {
	runID, name string
	value       json.RawMessage
}

func (o *addUndoOp) kind() opKind      { return opAddUndo }
func (o *setRunStatusOp) kind() opKind { return opSetRunStatus }
func (o *noteOp) kind() opKind         { return opNote }
func (o *createRunOp) kind() opKind    { return opCreateRun }
func (o *addRevisionOp) kind() opKind  { return opAddRevision }
func (o *memoOp) kind() opKind         { return opMemo }

func (o *addUndoOp) scope() (string, *bigValue)      { return o.runID, o.big }
func (o *setRunStatusOp) scope() (string, *bigValue) { return o.runID, nil }
func (o *noteOp) scope() (string, *bigValue)         { return o.runID, nil }
func (o *revision) scope() (string, *bigValue)       { return o.runID, nil }
func (o *memoOp) scope() (string, *bigValue)         { return o.runID, nil }

func (o *addUndoOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	a := o.row
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	if err := validID("action id", a.ID); err != nil {
		return errResult(err), nil
	}
	if !strings.HasSuffix(a.ID, ".undo") {
		return errResult(fmt.Errorf("%w: a compensating row's id ends in .undo, not %q", ErrInvalid, a.ID)), nil
	}
	if err := validJSON("args", a.Args, false); err != nil {
		return errResult(err), nil
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	row, exists, err := b.row(o.runID, run.Revision, a.ID)
	if err != nil {
		return Result{}, err
	}
	if exists {
		same, err := b.sameArgs(o.runID, row.Args, a.Args, o.big)
		if err != nil {
			return Result{}, err
		}
		if row.Tool == a.Tool && same {
			return Result{Action: row.action(o.runID)}, nil
		}
		return b.conflict(opAddUndo, o.runID, a.ID, "", KeyRecord{}, &row, "row %q exists with other tool or args", a.ID), nil
	}
	if a.Args, err = b.stash(o.runID, a.Args, o.big); err != nil {
		return Result{}, err
	}
	if a.ApprovedArgs, err = b.stash(o.runID, a.ApprovedArgs, o.big); err != nil {
		return Result{}, err
	}
	row = rowFromAction(a, run.Rows)
	row.Key, row.Status, row.Attempts, row.Error, row.Undo = "", StatusPending, 0, "", true
	run.Rows++
	if err := b.putRow(o.runID, run.Revision, row); err != nil {
		return Result{}, err
	}
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	return Result{Action: row.action(o.runID)}, nil
}

func (o *setRunStatusOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	if err := validJSON("event data", o.data, false); err != nil {
		return errResult(err), nil
	}
	if !o.status.valid() {
		return errResult(fmt.Errorf("%w: run status %q", ErrInvalid, o.status)), nil
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	if run.Status == o.status && o.eventType == "" {
		return Result{}, nil
	}
	run.Status, run.Error = o.status, o.errMsg
	if ended(o.status) {
		run.WakeAt = noWake // an ended run is never woken (timer.go)
	}
	if o.status != RunPaused {
		// A person's pause is over once the run leaves paused: a
		// leftover PausedBy would make a later pause for another
		// reason (an action needs review) read as a person's.
		run.PausedBy = ""
	}
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	if o.eventType != "" {
		if err := b.event(o.runID, o.eventType, "", o.data); err != nil {
			return Result{}, err
		}
	}
	return Result{}, nil
}

func (o *noteOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	if err := validJSON("event data", o.data, false); err != nil {
		return errResult(err), nil
	}
	if o.eventType == "" {
		return errResult(fmt.Errorf("%w: a note needs an event type", ErrInvalid)), nil
	}
	_, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	if err := b.event(o.runID, o.eventType, o.actionID, o.data); err != nil {
		return Result{}, err
	}
	return Result{}, nil
}

func checkRows(rows []Action) error {
	seen := make(map[string]bool, len(rows))
	for _, a := range rows {
		if err := validID("action id", a.ID); err != nil {
			return err
		}
		if seen[a.ID] {
			return fmt.Errorf("%w: duplicate action id %q", ErrInvalid, a.ID)
		}
		seen[a.ID] = true
		if a.Status != "" && a.Status != StatusPending && a.Status != StatusApproved {
			return fmt.Errorf("%w: action %q: a new row is pending or approved, not %s", ErrInvalid, a.ID, a.Status)
		}
		if err := validJSON("args of "+a.ID, a.Args, false); err != nil {
			return err
		}
	}
	return nil
}

// putRows writes a revision's rows and their action.approved events.
// putRows records a revision's initial rows as one blob (so that a plan of
// any size is one record: large ones go to the value log); rows that change
// later get their own row records, which take precedence.
func (b *batch) putRows(runID string, rev int, rows []Action) error {
	stored := make([]storedRow, len(rows))
	for i, a := range rows {
		r := rowFromAction(a, i)
		r.Key, r.Attempts, r.Error, r.Undo = "", 0, "", false
		if r.Status == "" {
			r.Status = StatusPending
		}
		if r.Status == StatusApproved && r.ApprovedArgs == nil {
			r.ApprovedArgs = r.Args
		}
		stored[i] = r
	}
	if err := b.tx.PutRows(runID, rev, stored); err != nil {
		return err
	}
	for _, a := range rows {
		if a.Status == StatusApproved {
			if err := b.event(runID, EventActionApproved, a.ID, obj("by", "policy")); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *createRunOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	have, ok, err := b.run(o.run.ID)
	if err != nil {
		return Result{}, err
	}
	if ok {
		if have.PlanHash != o.planHash {
			return errResult(fmt.Errorf("%w: run %q was created with plan %s, not %s",
				ErrPlanMismatch, o.run.ID, have.PlanHash, o.planHash)), nil
		}
		return Result{run: have.Run}, nil
	}
	now := b.now()
	r := storedRun{Run: o.run, Rows: len(o.rows)}
	r.Status = RunStatus(cmpOr(string(r.Status), string(RunRunning)))
	r.Revision, r.PlanHash, r.RevHash, r.Error = 1, o.planHash, o.planHash, ""
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), now
	_, r.Audit = b.tx.(HashedAppender) // its events are chained from the first
	r.AuditHash, r.AuditSeq = "", 0
	if err := b.putRun(r); err != nil {
		return Result{}, err
	}
	if err := b.putBlobs(r.ID, o.blobs); err != nil {
		return Result{}, err
	}
	if err := b.tx.PutPlan(r.ID, 1, o.planJSON, o.planRefs); err != nil {
		return Result{}, err
	}
	created := obj("goal", r.Goal, "policy", r.Policy)
	if r.CreatedBy != "" {
		created = obj("goal", r.Goal, "policy", r.Policy, "created_by", r.CreatedBy)
	}
	if err := b.event(r.ID, EventRunCreated, "", created); err != nil {
		return Result{}, err
	}
	if err := b.event(r.ID, EventPlanRecorded, "", obj("revision", 1, "plan_hash", o.planHash, "actions", len(o.rows))); err != nil {
		return Result{}, err
	}
	if err := b.putRows(r.ID, 1, o.rows); err != nil {
		return Result{}, err
	}
	if b.created != nil {
		*b.created = append(*b.created, r.ID)
	}
	return Result{run: r.Run, created: true}, nil
}

func (o *addRevisionOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	run, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	if run.RevHash == "" && run.Revision == 1 {
		run.RevHash = run.PlanHash
	}
	if run.RevHash == o.planHash {
		return Result{rev: run.Revision}, nil // the same plan again: nothing new
	}
	rev := run.Revision + 1
	run.Revision, run.Rows, run.RevHash = rev, len(o.rows), o.planHash
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	if err := b.putBlobs(o.runID, o.blobs); err != nil {
		return Result{}, err
	}
	if err := b.tx.PutPlan(o.runID, rev, o.planJSON, o.planRefs); err != nil {
		return Result{}, err
	}
	if err := b.event(o.runID, EventRunReplayed, "", obj("revision", rev, "plan_hash", o.planHash, "actions", len(o.rows))); err != nil {
		return Result{}, err
	}
	if err := b.putRows(o.runID, rev, o.rows); err != nil {
		return Result{}, err
	}
	return Result{rev: rev}, nil
}

func (o *memoOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	raw, ok, err := b.tx.Memo(o.runID, o.name)
	if err != nil {
		return Result{}, err
	}
	if ok {
		return Result{memo: raw}, nil
	}
	if err := b.tx.PutMemo(o.runID, o.name, bytes.Clone(o.value)); err != nil {
		return Result{}, err
	}
	return Result{memo: o.value}, nil
}
