package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Tx is what the rules of the state machine need from a backend while they
// evaluate an op: reads of the state as the ops before it left it (committed
// state plus the pending writes of the same commit), and writes that the
// backend commits atomically with the rest of the commit, or not at all.
// Each backend implements it over its own storage; EvalApply (and Eval)
// are the only callers.
// A read error other than "not there" (found false) is a hard error: Eval
// returns it and the backend fails the whole request.
type Tx interface {
	// Now is the time recorded in claims, updates and events (UTC).
	Now() time.Time
	// Incarnation is the owner recorded in claims made through this store.
	Incarnation() string
	// MaxOutputBytes bounds one recorded output.
	MaxOutputBytes() int

	Run(runID string) (RunRecord, bool, error)
	PutRun(r RunRecord) error
	// Row is a row of a revision: its latest write, else its initial state
	// from PutRows.
	Row(runID string, rev int, actionID string) (RowRecord, bool, error)
	PutRow(runID string, rev int, r RowRecord) error
	// PutRows records a revision's initial rows.
	PutRows(runID string, rev int, rows []RowRecord) error
	// PutPlan records a plan revision: planJSON has null in place of the
	// args named in argRefs (action index, decimal -> blob name).
	PutPlan(runID string, rev int, planJSON []byte, argRefs map[string]string) error
	// KeyRun returns the run that owns key.
	KeyRun(key string) (runID string, ok bool, err error)
	KeyRec(runID, key string) (KeyRecord, bool, error)
	// PutKeyRec writes a key record; isNew: the key gets its owner (KeyRun).
	PutKeyRec(rec KeyRecord, isNew bool) error
	// AppendEvent appends an event to the run's log with the run's next
	// seq (gap-free, never repeated) and At = Now().
	AppendEvent(runID string, typ EventType, actionID string, data json.RawMessage) error
	// Blob returns a run's content blob by name; PutBlob writes one unless
	// it is already there.
	Blob(runID, hash string) (json.RawMessage, bool, error)
	PutBlob(runID, hash string, v json.RawMessage) error
	Memo(runID, name string) (json.RawMessage, bool, error)
	PutMemo(runID, name string, v json.RawMessage) error
}

// OwnerChecker is a Tx of a shared ledger, where several live processes
// (nodes) write: a claim by another incarnation may be in flight on another
// node. OwnerGone reports whether owner's claims may be taken over (its
// node lease expired, judged by the database's clock, or it is unknown).
// A Tx without it is a single process's: every other incarnation is gone.
type OwnerChecker interface {
	OwnerGone(owner string) (bool, error)
}

// RunRecord is a run header as backends store it.
type RunRecord struct {
	Run
	Rows    int    `json:"rows"`               // rows of the current revision (next row order)
	RevHash string `json:"rev_hash,omitempty"` // plan hash of the current revision
	// Audit: the run's events are chained (see HashedAppender); AuditSeq
	// is the seq of the last one (Run.AuditHash its hash).
	Audit    bool   `json:"audit,omitempty"`
	AuditSeq uint64 `json:"audit_seq,omitempty"`
	// EndedAt is when the run last became completed, failed or cancelled
	// (zero while it is not ended); KeysUntil is the latest time one of its
	// keys protects (Claim.WithKeyTTL). Retention counts from them
	// (CollectAt).
	EndedAt   time.Time `json:"ended_at,omitzero"`
	KeysUntil time.Time `json:"keys_until,omitzero"`
	// Collecting: a backend that deletes a run in more than one commit
	// marks its header first; reads treat such a run as gone and ops on it
	// fail (ErrCollected) until the collector has finished.
	Collecting bool `json:"collecting,omitempty"`
}

// RowRecord is a row as backends store it. Output is not stored here: it
// lives in the key record (readers join them), so an output is written once.
// Args and ApprovedArgs may hold blob references (package blobref).
type RowRecord struct {
	ID           string          `json:"id"`
	Tool         string          `json:"tool"`
	Class        string          `json:"class,omitempty"`
	Key          string          `json:"key,omitempty"`
	Status       Status          `json:"status"`
	Attempts     int             `json:"attempts,omitempty"`
	Args         json.RawMessage `json:"args,omitempty"`
	DependsOn    []string        `json:"depends_on,omitempty"`
	Error        string          `json:"error,omitempty"`
	ApprovedArgs json.RawMessage `json:"approved_args,omitempty"`
	Undo         bool            `json:"undo,omitempty"`
	Ord          int             `json:"ord"`
	Gate         *Gate           `json:"gate,omitempty"`
	Approvals    []Approval      `json:"approvals,omitempty"`
	Timer        *Timer          `json:"timer,omitempty"`
	ToolWait     *ToolWait       `json:"tool_wait,omitempty"`
}

// Action is the row as an Action of run runID (without output).
func (r RowRecord) Action(runID string) Action {
	a := Action{RunID: runID, ID: r.ID, Tool: r.Tool, Class: r.Class, Key: r.Key, Status: r.Status,
		Attempts: r.Attempts, Args: r.Args, DependsOn: r.DependsOn, Error: r.Error,
		ApprovedArgs: r.ApprovedArgs, Undo: r.Undo, Gate: r.Gate, Approvals: r.Approvals, Timer: r.Timer}
	if r.Status == StatusPending || r.Status == StatusApproved {
		a.ToolWait = r.ToolWait // a wait ends when the action starts, is skipped or rejected
	}
	return a
}

// The rules below predate RunRecord and RowRecord; these names keep them as
// they were.
type (
	storedRun = RunRecord
	storedRow = RowRecord
)

func (r RowRecord) action(runID string) Action { return r.Action(runID) }

func rowFromAction(a Action, ord int) storedRow {
	return storedRow{ID: a.ID, Tool: a.Tool, Class: a.Class, Key: a.Key, Status: a.Status,
		Attempts: a.Attempts, Args: a.Args, DependsOn: a.DependsOn, Error: a.Error,
		ApprovedArgs: a.ApprovedArgs, Undo: a.Undo, Ord: ord, Gate: a.Gate, Approvals: a.Approvals, Timer: a.Timer}
}

// batch is the rules' view of one backend transaction; created lists the
// runs that ops of the Apply being evaluated created (nil: one op alone).
type batch struct {
	tx      Tx
	created *[]string
}

// Eval applies the rules of op to the state tx shows and writes the result
// through tx. The Result carries the op's own error (a *ConflictError, or
// ErrNotFound, ErrInvalid, ErrTooLarge, ErrPlanMismatch): then the op wrote
// nothing. The returned error is a hard one (a read or encoding failure):
// the backend must then fail the whole request, whose writes may be partial.
// Values in the Result carry bytes, never blob references.
func Eval(tx Tx, o Op) (Result, error) {
	b := batch{tx: tx}
	return b.evalOp(o)
}

// EvalApply evaluates the ops of one Apply, in order, through tx: Eval of
// each, except that a claim made InNewRun sees whether an op before it in
// the same Apply created its run. Backends evaluate every Apply with it
// (several Applies may share tx: each is evaluated by its own call). The
// error is a hard one, as Eval's.
func EvalApply(tx Tx, ops []Op) ([]Result, error) {
	var created []string
	b := batch{tx: tx, created: &created}
	results := make([]Result, len(ops))
	for i, o := range ops {
		res, err := b.evalOp(o)
		if err != nil {
			return nil, err
		}
		results[i] = res
	}
	return results, nil
}

// createdHere reports whether an op before this one in the same Apply
// created run runID.
func (b *batch) createdHere(runID string) bool {
	return b.created != nil && slices.Contains(*b.created, runID)
}

// Check refuses ops not built with a constructor (the zero Op); backends
// call it before they accept a request.
func Check(ops []Op) error {
	for i, o := range ops {
		if o.body == nil {
			return fmt.Errorf("%w: op %d was not built with a constructor", ErrInvalid, i)
		}
	}
	return nil
}

func (b *batch) now() time.Time { return b.tx.Now().UTC() }

func (b *batch) run(runID string) (storedRun, bool, error) {
	r, ok, err := b.tx.Run(runID)
	if err == nil && ok && r.Collecting {
		return r, false, fmt.Errorf("%w: run %q", ErrCollected, runID)
	}
	return r, ok, err
}

// putRun writes a run header, keeping the audit chain's position when r is
// a copy read before events were appended since.
func (b *batch) putRun(r storedRun) error {
	cur, ok, err := b.tx.Run(r.ID)
	if err != nil {
		return err
	}
	if ok && cur.AuditSeq > r.AuditSeq {
		r.Audit, r.AuditHash, r.AuditSeq = cur.Audit, cur.AuditHash, cur.AuditSeq
	}
	if ok && cur.KeysUntil.After(r.KeysUntil) {
		r.KeysUntil = cur.KeysUntil
	}
	r.ended(b.now())
	return b.tx.PutRun(r)
}

func (b *batch) row(runID string, rev int, actionID string) (storedRow, bool, error) {
	return b.tx.Row(runID, rev, actionID)
}

func (b *batch) putRow(runID string, rev int, r storedRow) error { return b.tx.PutRow(runID, rev, r) }

func (b *batch) keyRun(key string) (string, bool, error) { return b.tx.KeyRun(key) }

func (b *batch) keyRec(runID, key string) (KeyRecord, bool, error) { return b.tx.KeyRec(runID, key) }

// ownerGone reports whether another incarnation's claim may be taken over.
func (b *batch) ownerGone(owner string) (bool, error) {
	if oc, ok := b.tx.(OwnerChecker); ok {
		return oc.OwnerGone(owner)
	}
	return true, nil
}

// putKeyRec writes a key record; an existing key's next record gives back
// the tool slot its earlier claim held (limit.go).
func (b *batch) putKeyRec(rec KeyRecord, isNew bool) error {
	if !isNew {
		if err := b.freeSlot(rec); err != nil {
			return err
		}
	}
	return b.tx.PutKeyRec(rec, isNew)
}

// event appends an event; on a chained run (RunRecord.Audit) with its hash,
// keeping the new last hash in the run record.
func (b *batch) event(runID string, typ EventType, actionID string, data json.RawMessage) error {
	ha, hashed := b.tx.(HashedAppender)
	if !hashed {
		return b.tx.AppendEvent(runID, typ, actionID, data)
	}
	run, ok, err := b.tx.Run(runID)
	if err != nil {
		return err
	}
	if !ok || !run.Audit {
		return b.tx.AppendEvent(runID, typ, actionID, data)
	}
	prev := run.AuditHash // the closure takes the hash alone: run stays off the heap
	ev, err := ha.AppendHashedEvent(runID, typ, actionID, data, func(ev Event) string { return ChainHash(prev, ev) })
	if err != nil {
		return err
	}
	run.AuditHash, run.AuditSeq = ev.Hash, ev.Seq
	return b.tx.PutRun(run)
}
