package memory

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/docketrun/docket/ledger"
)

// tx is one Apply's view: its pending writes over the committed state. It
// implements ledger.Tx; commit folds the writes into the state.
type tx struct {
	s       *Store
	runs    map[string]ledger.RunRecord
	init    map[revKey]*initRows
	rows    map[rowID]ledger.RowRecord
	plans   map[revKey]planRec
	keyRuns map[string]string
	keyRecs map[string]ledger.KeyRecord
	memos   map[pair]json.RawMessage
	blobs   map[pair]json.RawMessage
	seqs    map[string]uint64
	events  []ledger.Event
	budgets map[string]ledger.BudgetRecord
	holds   map[string]ledger.Hold
	limits  map[string]ledger.LimitRecord
}

var (
	_ ledger.Tx             = (*tx)(nil)
	_ ledger.HashedAppender = (*tx)(nil)
	_ ledger.BudgetTx       = (*tx)(nil)
)

func newTx(s *Store) *tx {
	return &tx{s: s,
		runs: map[string]ledger.RunRecord{}, init: map[revKey]*initRows{}, rows: map[rowID]ledger.RowRecord{},
		plans: map[revKey]planRec{}, keyRuns: map[string]string{}, keyRecs: map[string]ledger.KeyRecord{},
		memos: map[pair]json.RawMessage{}, blobs: map[pair]json.RawMessage{}, seqs: map[string]uint64{},
		budgets: map[string]ledger.BudgetRecord{}, holds: map[string]ledger.Hold{}, limits: map[string]ledger.LimitRecord{}}
}

func (t *tx) Now() time.Time      { return t.s.Now() }
func (t *tx) Incarnation() string { return t.s.incarnation }
func (t *tx) MaxOutputBytes() int { return t.s.cfg.MaxOutputBytes }

func (t *tx) Run(runID string) (ledger.RunRecord, bool, error) {
	if r, ok := t.runs[runID]; ok {
		return r, true, nil
	}
	r, ok := t.s.st.runs[runID]
	return r, ok, nil
}

func (t *tx) PutRun(r ledger.RunRecord) error {
	t.runs[r.ID] = r
	return nil
}

func (t *tx) Row(runID string, rev int, actionID string) (ledger.RowRecord, bool, error) {
	if r, ok := t.rows[rowID{runID, rev, actionID}]; ok {
		return r, true, nil
	}
	k := revKey{runID, rev}
	if r, ok := t.s.st.rows[k][actionID]; ok {
		return r, true, nil
	}
	ir := t.init[k]
	if ir == nil {
		ir = t.s.st.init[k]
	}
	if ir == nil {
		return ledger.RowRecord{}, false, nil
	}
	i, ok := ir.index[actionID]
	if !ok {
		return ledger.RowRecord{}, false, nil
	}
	return ir.rows[i], true, nil
}

func cloneRow(r ledger.RowRecord) ledger.RowRecord {
	r.Args, r.ApprovedArgs = bytes.Clone(r.Args), bytes.Clone(r.ApprovedArgs)
	r.DependsOn = slices.Clone(r.DependsOn)
	r.Approvals = slices.Clone(r.Approvals)
	for i := range r.Approvals {
		r.Approvals[i].Groups = slices.Clone(r.Approvals[i].Groups)
	}
	if r.Gate != nil {
		g := *r.Gate
		g.Names, g.Groups = slices.Clone(g.Names), slices.Clone(g.Groups)
		r.Gate = &g
	}
	return r
}

func (t *tx) PutRow(runID string, rev int, r ledger.RowRecord) error {
	t.rows[rowID{runID, rev, r.ID}] = cloneRow(r)
	return nil
}

func (t *tx) PutRows(runID string, rev int, rows []ledger.RowRecord) error {
	ir := &initRows{rows: make([]ledger.RowRecord, len(rows)), index: make(map[string]int, len(rows))}
	for i, r := range rows {
		ir.rows[i] = cloneRow(r)
		ir.index[r.ID] = i
	}
	t.init[revKey{runID, rev}] = ir
	return nil
}

func (t *tx) PutPlan(runID string, rev int, planJSON []byte, argRefs map[string]string) error {
	t.plans[revKey{runID, rev}] = planRec{json: bytes.Clone(planJSON), refs: maps.Clone(argRefs)}
	return nil
}

func (t *tx) KeyRun(key string) (string, bool, error) {
	if r, ok := t.keyRuns[key]; ok {
		return r, true, nil
	}
	r, ok := t.s.st.keyRuns[key]
	return r, ok, nil
}

func (t *tx) KeyRec(runID, key string) (ledger.KeyRecord, bool, error) {
	rec, ok := t.keyRecs[key]
	if !ok {
		rec, ok = t.s.st.keyRecs[key]
	}
	if !ok || rec.RunID != runID {
		return ledger.KeyRecord{}, false, nil
	}
	return rec, true, nil
}

func (t *tx) PutKeyRec(rec ledger.KeyRecord, isNew bool) error {
	rec.Args, rec.Output = bytes.Clone(rec.Args), bytes.Clone(rec.Output)
	t.keyRecs[rec.Key] = rec
	if isNew {
		t.keyRuns[rec.Key] = rec.RunID
	}
	return nil
}

func (t *tx) AppendEvent(runID string, typ ledger.EventType, actionID string, data json.RawMessage) error {
	last, ok := t.seqs[runID]
	if !ok {
		last = uint64(len(t.s.st.events[runID]))
	}
	ev := ledger.Event{Seq: last + 1, RunID: runID, Type: typ, ActionID: actionID, At: t.Now(), Data: bytes.Clone(data)}
	t.seqs[runID] = ev.Seq
	t.events = append(t.events, ev)
	return nil
}

// AppendHashedEvent is AppendEvent with the event's audit hash
// (ledger.HashedAppender).
func (t *tx) AppendHashedEvent(runID string, typ ledger.EventType, actionID string, data json.RawMessage, hash func(ledger.Event) string) (ledger.Event, error) {
	last, ok := t.seqs[runID]
	if !ok {
		last = uint64(len(t.s.st.events[runID]))
	}
	ev := ledger.Event{Seq: last + 1, RunID: runID, Type: typ, ActionID: actionID, At: t.Now().UTC(), Data: bytes.Clone(data)}
	ev.Hash = hash(ev)
	t.seqs[runID] = ev.Seq
	t.events = append(t.events, ev)
	return ev, nil
}

func (t *tx) Blob(runID, hash string) (json.RawMessage, bool, error) {
	k := pair{runID, hash}
	if v, ok := t.blobs[k]; ok {
		return v, true, nil
	}
	v, ok := t.s.st.blobs[k]
	return v, ok, nil
}

func (t *tx) PutBlob(runID, hash string, v json.RawMessage) error {
	if _, ok, _ := t.Blob(runID, hash); !ok {
		t.blobs[pair{runID, hash}] = bytes.Clone(v)
	}
	return nil
}

func (t *tx) Memo(runID, name string) (json.RawMessage, bool, error) {
	k := pair{runID, name}
	if v, ok := t.memos[k]; ok {
		return v, true, nil
	}
	v, ok := t.s.st.memos[k]
	return v, ok, nil
}

func (t *tx) PutMemo(runID, name string, v json.RawMessage) error {
	t.memos[pair{runID, name}] = bytes.Clone(v)
	return nil
}

// commit folds the writes into the Store's state (under its write lock).
func (t *tx) commit() {
	st := &t.s.st
	maps.Copy(st.runs, t.runs)
	maps.Copy(st.init, t.init)
	for k, r := range t.rows {
		rk := revKey{k.run, k.rev}
		m := st.rows[rk]
		if m == nil {
			m = map[string]ledger.RowRecord{}
			st.rows[rk] = m
		}
		m[k.id] = r
	}
	maps.Copy(st.plans, t.plans)
	maps.Copy(st.keyRuns, t.keyRuns)
	maps.Copy(st.keyRecs, t.keyRecs)
	maps.Copy(st.memos, t.memos)
	maps.Copy(st.blobs, t.blobs)
	maps.Copy(st.budgets, t.budgets)
	maps.Copy(st.holds, t.holds)
	maps.Copy(st.limits, t.limits)
	for _, ev := range t.events {
		st.events[ev.RunID] = append(st.events[ev.RunID], ev)
	}
}

// Budget returns a budget bucket as this Apply sees it (ledger.BudgetTx).
func (t *tx) Budget(id string) (ledger.BudgetRecord, bool, error) {
	if r, ok := t.budgets[id]; ok {
		return r, true, nil
	}
	r, ok := t.s.st.budgets[id]
	return r, ok, nil
}

// PutBudget writes a budget bucket (ledger.BudgetTx).
func (t *tx) PutBudget(r ledger.BudgetRecord) error {
	t.budgets[r.ID] = r
	return nil
}

// Hold returns a key's budget hold (ledger.BudgetTx).
func (t *tx) Hold(key string) (ledger.Hold, bool, error) {
	if h, ok := t.holds[key]; ok {
		return h, true, nil
	}
	h, ok := t.s.st.holds[key]
	return h, ok, nil
}

// PutHold writes a key's budget hold (ledger.BudgetTx).
func (t *tx) PutHold(h ledger.Hold) error {
	h.Charges = slices.Clone(h.Charges)
	t.holds[h.Key] = h
	return nil
}
