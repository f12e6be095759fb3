package badgerdb

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

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
// 135 MiB of values. Now a value of largeValue bytes or more is written once
// per run as a content blob,
//
//	c\0<run>\0<sha256 hex>   the value's bytes, exactly as given
//
// and records refer to it:
//   - a row's args or approved args (rowenc.go stores raw bytes) hold the
//     reference "\x00dkblob:<sha256 hex>" in place of the JSON. No JSON text
//     starts with a NUL byte, so a reference is never mistaken for args, and
//     rows written before references existed read as before;
//   - a key record's metadata says "args": null, "args_ref": "<sha256 hex>"
//     (keys.go: storedKeyRec);
//   - a plan revision is stored as an encJSONBlob record whose metadata maps
//     action indexes to blobs and whose JSON has null in their place (a plain
//     JSON plan record, as older versions wrote, still reads).
//
// Inside the committer rows and key records carry references; every value
// that leaves the package (Actions, Doc, Key, Plan, Apply's results and
// conflicts) has them replaced by the bytes. Events never carry a large
// value: action.edited says {"args_truncated": true} above eventInlineMax,
// as action.succeeded does for outputs.
const largeValue = blobref.Large

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

// storedPlan is the metadata of a plan revision whose large args are blobs:
// action index (decimal) -> blob name. The record's JSON has null there.
type storedPlan struct {
	Args map[string]string `json:"args_refs"`
}

// planRecord encodes a plan revision: plain JSON when no args are large (as
// every revision was stored before blobs), else metadata naming the blobs
// and the plan's JSON with null in their place.
func planRecord(planJSON []byte, argRefs map[string]string) ([]byte, error) {
	if argRefs == nil {
		return planJSON, nil
	}
	return encode(storedPlan{Args: argRefs}, planJSON)
}

// encPlan2 is a plan revision whose actions are the revision's initial
// rows (their id, tool, args and depends_on; the args compacted, as JSON
// encoding leaves them in the plan), so that they are stored once:
//
//	encPlan2, uvarint count of the actions' "why" texts (0: every one is
//	empty), those texts (uvarint length + bytes), then the plan's JSON
//	without its actions.
//
// It is written only when the rows hold exactly the plan's actions and
// none of their args is a blob (compactPlan); else the forms above.
const encPlan2 = 12

// compactPlan returns the encPlan2 record of a plan revision whose JSON is
// planJSON and whose initial rows are rows, or ok false when the rows do
// not give its actions back exactly.
func compactPlan(planJSON []byte, argRefs map[string]string, rows []ledger.RowRecord) (v []byte, ok bool) {
	if argRefs != nil {
		return nil, false
	}
	var p plan.Plan
	if err := json.Unmarshal(planJSON, &p); err != nil || len(p.Actions) != len(rows) {
		return nil, false
	}
	whys := 0
	for i, a := range p.Actions {
		if b := planAction(rows[i], a.Why); a.ID != b.ID || a.Tool != b.Tool || !bytes.Equal(a.Args, b.Args) ||
			!slices.Equal(a.DependsOn, b.DependsOn) {
			return nil, false
		}
		if a.Why != "" {
			whys = len(p.Actions)
		}
	}
	acts := p.Actions
	p.Actions = nil
	rest, err := json.Marshal(&p)
	if err != nil {
		return nil, false
	}
	back := p
	if json.Unmarshal(rest, &back) != nil || back.Actions != nil {
		return nil, false
	}
	v = binary.AppendUvarint([]byte{encPlan2}, uint64(whys))
	for i := range whys {
		v = appendStr(v, acts[i].Why)
	}
	return append(v, rest...), true
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

// decodePlan reads a plan revision record (any form); rows gives the
// revision's initial rows (read only for an encPlan2 record).
func decodePlan(v []byte, r *blobref.Resolver, rows func() ([]ledger.RowRecord, error)) (*plan.Plan, error) {
	if len(v) > 0 && v[0] == encPlan2 {
		d := rowReader{b: v[1:]}
		whys := make([]string, d.uvarint())
		for i := range whys {
			whys[i] = d.str()
		}
		if d.err != nil {
			return nil, d.err
		}
		var p plan.Plan
		if err := json.Unmarshal(d.b, &p); err != nil {
			return nil, err
		}
		rs, err := rows()
		if err != nil {
			return nil, err
		}
		if len(whys) > 0 && len(whys) != len(rs) {
			return nil, fmt.Errorf("%w: plan record has %d actions' texts for %d rows", ledger.ErrFormat, len(whys), len(rs))
		}
		p.Actions = make([]plan.Action, len(rs))
		for i, row := range rs {
			why := ""
			if len(whys) > 0 {
				why = whys[i]
			}
			if p.Actions[i] = planAction(row, why); p.Actions[i].Args == nil {
				return nil, fmt.Errorf("%w: plan action %q: its row holds no args", ledger.ErrFormat, row.ID)
			}
		}
		return &p, nil
	}
	if len(v) == 0 || v[0] != encJSONBlob {
		var p plan.Plan
		return &p, json.Unmarshal(v, &p)
	}
	var meta storedPlan
	pj, err := decode(v, &meta)
	if err != nil {
		return nil, err
	}
	return ledger.DecodePlan(pj, meta.Args, r)
}
