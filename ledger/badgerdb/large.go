package badgerdb

import (
	"encoding/json"
	"errors"
	"fmt"

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

// decodePlan reads a plan revision record (either form).
func decodePlan(v []byte, r *blobref.Resolver) (*plan.Plan, error) {
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
