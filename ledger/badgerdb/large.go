package badgerdb

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/internal/blobref"
	"github.com/docketrun/docket/plan"
)

// Large values are stored once.
//
// An action's arguments used to be copied into every record that mentions
// them: the plan revision, the revision's rows (twice when pre-approved:
// args and approved args), the key record and the row record at the claim,
// and both again at the outcome. One action with a 15 MiB argument wrote
// 135 MiB of values. Now a value of blobref.Large bytes or more is written once
// per run as a content blob,
//
//	c\0<run>\0<sha256 hex>   the value's bytes, exactly as given
//
// and records refer to it:
//   - a row's args or approved args (rowenc.go stores raw bytes) hold the
//     reference "\x00dkblob:<sha256 hex>" in place of the JSON. No JSON text
//     starts with a NUL byte, so a reference is never mistaken for args;
//   - a key record has no args and names the blob in its args_ref
//     (keyrecenc.go);
//   - a plan revision's record maps action indexes to blobs and its JSON
//     has null in their place (planRec).
//
// Inside the committer rows and key records carry references; every value
// that leaves the package (Actions, Doc, Key, Plan, Apply's results and
// conflicts) has them replaced by the bytes. Events never carry a large
// value: action.edited says {"args_truncated": true} above the ledger's
// event inline limit (64 KiB), as action.succeeded does for outputs.

func refOf(hash string) json.RawMessage { return blobref.Of(hash) }

func refHash(v []byte) (string, bool) { return blobref.Hash(v) }

func validHash(h string) bool { return blobref.ValidHash(h) }

// PutBlob writes the blob unless this batch, the batch in flight or the
// store already holds it (ledger.Tx).
func (b *batch) PutBlob(runID, hash string, v json.RawMessage) error {
	k := blobKey(runID, hash)
	if _, ok := b.lookup(k); ok {
		return nil
	}
	_, err := b.txn.Get(k)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, badger.ErrKeyNotFound):
		return fmt.Errorf("ledger: reading: %w", err)
	}
	b.put(k, nil, v)
	return nil
}

// Blob returns a blob as this batch sees it (ledger.Tx).
func (b *batch) Blob(runID, hash string) (json.RawMessage, bool, error) {
	k := blobKey(runID, hash)
	if e, ok := b.lookup(k); ok {
		return e.val, true, nil
	}
	return b.getRaw(k)
}

// txnResolver resolves references in a read transaction.
func txnResolver(txn *badger.Txn, runID string) *blobref.Resolver {
	return &blobref.Resolver{Get: func(hash string) (json.RawMessage, error) {
		item, err := txn.Get(blobKey(runID, hash))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: run %q refers to blob %s, which is missing", ledger.ErrFormat, runID, hash)
		}
		if err != nil {
			return nil, err
		}
		return item.ValueCopy(nil)
	}}
}

// A plan revision (p\0<run>\0<rev BE4>, immutable) is stored as:
//
//	the count of its blob references (uvarint), each an action index
//	(uvarint) and the blob's name (uvarint length + 64 hex digits); then
//	w (uvarint): 0 when the plan's JSON below holds its actions, else
//	its actions are the revision's initial rows (their id, tool, args
//	and depends_on; the args compacted, as JSON encoding leaves them in
//	the plan) and w-1 "why" texts follow (uvarint length + bytes; none:
//	every one is empty, else one per action); then the plan's JSON
//	(without its actions when w > 0) to the end.
//
// The actions are left to the rows only when the rows give them back
// exactly and none of their args is a blob (compactPlan): a plan's actions
// repeat its rows, and the plan record is large enough to go to Badger's
// value log, which is not compressed (measured: 82 bytes per step of a
// chain of keyed actions).
type planRec struct {
	refs   map[string]string // action index (decimal) -> blob name; nil: none
	inRows bool              // the actions are the revision's initial rows
	whys   []string          // with inRows: the actions' why texts (nil: all empty)
	rest   []byte            // the plan's JSON (without actions with inRows)
}

func encodePlanRec(r planRec) []byte {
	idx := make([]int, 0, len(r.refs))
	for k := range r.refs {
		i, _ := strconv.Atoi(k)
		idx = append(idx, i)
	}
	slices.Sort(idx)
	b := binary.AppendUvarint(make([]byte, 0, 16+len(r.rest)), uint64(len(idx)))
	for _, i := range idx {
		b = binary.AppendUvarint(b, uint64(i))
		b = appendStr(b, r.refs[strconv.Itoa(i)])
	}
	switch {
	case !r.inRows:
		b = append(b, 0)
	default:
		b = binary.AppendUvarint(b, uint64(len(r.whys))+1)
		for _, w := range r.whys {
			b = appendStr(b, w)
		}
	}
	return append(b, r.rest...)
}

func decodePlanRec(b []byte) (planRec, error) {
	var r planRec
	d := rowReader{b: b}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: plan record: %d blob references", ledger.ErrFormat, n)
	}
	for range n {
		i, h := d.int(), d.str()
		if d.err != nil {
			break
		}
		if r.refs == nil {
			r.refs = make(map[string]string, n)
		}
		k := strconv.Itoa(i)
		if _, dup := r.refs[k]; dup || !validHash(h) {
			d.err = fmt.Errorf("%w: plan record: malformed blob reference of action %d", ledger.ErrFormat, i)
			break
		}
		r.refs[k] = h
	}
	if w := d.uvarint(); d.err == nil && w > 0 {
		if w-1 > uint64(len(d.b)) {
			return r, fmt.Errorf("%w: plan record: %d texts", ledger.ErrFormat, w-1)
		}
		r.inRows = true
		for range w - 1 {
			r.whys = append(r.whys, d.str())
		}
	}
	if d.err != nil {
		return r, d.err
	}
	if r.inRows && r.refs != nil {
		return r, fmt.Errorf("%w: plan record: actions left to the rows with blob references", ledger.ErrFormat)
	}
	r.rest = append([]byte(nil), d.b...)
	return r, nil
}

// planRecord encodes a plan revision whose JSON (with null in place of
// large args) is planJSON and whose large args are the blobs argRefs names,
// keeping its actions (compactPlan leaves them to the rows).
func planRecord(planJSON []byte, argRefs map[string]string) []byte {
	return encodePlanRec(planRec{refs: argRefs, rest: planJSON})
}

// compactPlan returns the record of a plan revision whose JSON is planJSON
// and whose initial rows are rows, without its actions, or ok false when
// the rows do not give its actions back exactly.
func compactPlan(planJSON []byte, argRefs map[string]string, rows []ledger.RowRecord) (v []byte, ok bool) {
	if argRefs != nil {
		return nil, false
	}
	var p plan.Plan
	if err := json.Unmarshal(planJSON, &p); err != nil || len(p.Actions) != len(rows) {
		return nil, false
	}
	var whys []string
	for i, a := range p.Actions {
		if b := planAction(rows[i], a.Why); a.ID != b.ID || a.Tool != b.Tool || !bytes.Equal(a.Args, b.Args) ||
			!slices.Equal(a.DependsOn, b.DependsOn) {
			return nil, false
		}
		if a.Why != "" && whys == nil {
			whys = make([]string, len(p.Actions))
		}
	}
	for i := range whys {
		whys[i] = p.Actions[i].Why
	}
	p.Actions = nil
	rest, err := json.Marshal(&p)
	if err != nil {
		return nil, false
	}
	back := p
	if json.Unmarshal(rest, &back) != nil || back.Actions != nil {
		return nil, false
	}
	return encodePlanRec(planRec{inRows: true, whys: whys, rest: rest}), true
}

// planAction is the plan action a row gives back.
func planAction(r ledger.RowRecord, why string) plan.Action {
	a := plan.Action{ID: r.ID, Tool: r.Tool, DependsOn: r.DependsOn, Why: why}
	var c bytes.Buffer
	if len(r.Args) > 0 && !blobref.Is(r.Args) && json.Compact(&c, r.Args) == nil {
		a.Args = c.Bytes()
	}
	return a
}

// decodePlan reads a plan revision record; rows gives the revision's
// initial rows (read only when the record leaves its actions to them).
func decodePlan(v []byte, r *blobref.Resolver, rows func() ([]ledger.RowRecord, error)) (*plan.Plan, error) {
	pr, err := decodePlanRec(v)
	if err != nil {
		return nil, err
	}
	if !pr.inRows {
		return ledger.DecodePlan(pr.rest, pr.refs, r)
	}
	var p plan.Plan
	if err := json.Unmarshal(pr.rest, &p); err != nil {
		return nil, err
	}
	rs, err := rows()
	if err != nil {
		return nil, err
	}
	if pr.whys != nil && len(pr.whys) != len(rs) {
		return nil, fmt.Errorf("%w: plan record has %d actions' texts for %d rows", ledger.ErrFormat, len(pr.whys), len(rs))
	}
	p.Actions = make([]plan.Action, len(rs))
	for i, row := range rs {
		why := ""
		if pr.whys != nil {
			why = pr.whys[i]
		}
		if p.Actions[i] = planAction(row, why); p.Actions[i].Args == nil {
			return nil, fmt.Errorf("%w: plan action %q: its row holds no args", ledger.ErrFormat, row.ID)
		}
	}
	return &p, nil
}
