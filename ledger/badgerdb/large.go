package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/dgraph-io/badger/v4"

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
const largeValue = 64 << 10

// refPrefix starts an in-record reference to a content blob.
const refPrefix = "\x00dkblob:"

// refLen is the length of a reference: the prefix and 64 hex digits.
const refLen = len(refPrefix) + 2*sha256.Size

// hashOf is the blob name of a value: lowercase hex sha256.
func hashOf(v []byte) string {
	h := sha256.Sum256(v)
	return hex.EncodeToString(h[:])
}

func validHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// refOf is the reference to the blob named hash.
func refOf(hash string) json.RawMessage { return json.RawMessage(refPrefix + hash) }

// refHash returns the blob name if v is a reference.
func refHash(v []byte) (string, bool) {
	if len(v) != refLen || string(v[:len(refPrefix)]) != refPrefix {
		return "", false
	}
	return string(v[len(refPrefix):]), true
}

func isRef(v []byte) bool { _, ok := refHash(v); return ok }

// bigValue is a large value with its blob name, computed once (by the
// caller's goroutine when an Op is built, not by the committer).
type bigValue struct {
	raw  json.RawMessage
	hash string
}

// bigOf returns the blob form of v, or nil when v stays inline.
func bigOf(v json.RawMessage) *bigValue {
	if len(v) < largeValue || isRef(v) {
		return nil
	}
	return &bigValue{raw: v, hash: hashOf(v)}
}

// hasher names blobs, hashing each distinct slice once (a plan's args and
// the rows made from them share their bytes).
type hasher map[sliceID]string

type sliceID struct {
	p *byte
	n int
}

// ref returns v's reference (and records the blob in blobs) when v is large,
// else v.
func (h hasher) ref(v json.RawMessage, blobs map[string]json.RawMessage) json.RawMessage {
	if len(v) < largeValue || isRef(v) {
		return v
	}
	id := sliceID{&v[0], len(v)}
	hash, ok := h[id]
	if !ok {
		hash = hashOf(v)
		h[id] = hash
	}
	blobs[hash] = v
	return refOf(hash)
}

// putBlob writes the blob unless this batch, the batch in flight or the
// store already holds it.
func (b *batch) putBlob(runID, hash string, v json.RawMessage) error {
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

// stash returns what a record stores for v: a reference to its blob (written
// if new) when v is large, else v. big, when given, is v's precomputed form.
func (b *batch) stash(runID string, v json.RawMessage, big *bigValue) (json.RawMessage, error) {
	if len(v) < largeValue || isRef(v) {
		return v, nil
	}
	if big == nil || len(big.raw) != len(v) || &big.raw[0] != &v[0] {
		big = bigOf(v)
	}
	if err := b.putBlob(runID, big.hash, v); err != nil {
		return nil, err
	}
	return refOf(big.hash), nil
}

// blob returns the bytes v refers to (v itself when it is no reference).
func (b *batch) blob(runID string, v json.RawMessage) (json.RawMessage, error) {
	hash, ok := refHash(v)
	if !ok {
		return v, nil
	}
	k := blobKey(runID, hash)
	if e, ok := b.lookup(k); ok {
		return e.val, nil
	}
	raw, ok, err := b.getRaw(k)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: run %q refers to blob %s, which is missing", ErrFormat, runID, hash)
	}
	return raw, nil
}

// sameArgs compares stored args (maybe a reference) with given ones (maybe
// large) the way jsonEqual does.
func (b *batch) sameArgs(runID string, stored, given json.RawMessage, big *bigValue) (bool, error) {
	if !isRef(stored) {
		return jsonEqual(stored, given), nil
	}
	if isRef(given) {
		if string(stored) == string(given) {
			return true, nil
		}
	} else if len(given) >= largeValue {
		if big == nil || len(big.raw) != len(given) || &big.raw[0] != &given[0] {
			big = bigOf(given)
		}
		if string(stored) == string(refOf(big.hash)) {
			return true, nil
		}
	}
	x, err := b.blob(runID, stored)
	if err != nil {
		return false, err
	}
	y, err := b.blob(runID, given)
	if err != nil {
		return false, err
	}
	return jsonEqual(x, y), nil
}

// resolver replaces references by their bytes, reading each blob once.
type resolver struct {
	get  func(hash string) (json.RawMessage, error)
	seen map[string]json.RawMessage
}

func (r *resolver) value(v json.RawMessage) (json.RawMessage, error) {
	hash, ok := refHash(v)
	if !ok {
		return v, nil
	}
	if raw, ok := r.seen[hash]; ok {
		return raw, nil
	}
	raw, err := r.get(hash)
	if err != nil {
		return nil, err
	}
	if r.seen == nil {
		r.seen = map[string]json.RawMessage{}
	}
	r.seen[hash] = raw
	return raw, nil
}

func (r *resolver) action(a *Action) (err error) {
	if a.Args, err = r.value(a.Args); err != nil {
		return err
	}
	a.ApprovedArgs, err = r.value(a.ApprovedArgs)
	return err
}

func (r *resolver) keyRec(k *KeyRecord) (err error) {
	k.Args, err = r.value(k.Args)
	return err
}

// batchResolver resolves against this batch (its writes, the batch in
// flight, the store); known values (an op's own large args) need no read.
func (b *batch) resolver(runID string, known ...*bigValue) *resolver {
	r := &resolver{get: func(hash string) (json.RawMessage, error) { return b.blob(runID, refOf(hash)) }}
	for _, k := range known {
		if k != nil {
			if r.seen == nil {
				r.seen = map[string]json.RawMessage{}
			}
			r.seen[k.hash] = k.raw
		}
	}
	return r
}

// resolveResult gives an op's result (and its conflict's record) the bytes
// of their references.
func (b *batch) resolveResult(o Op, res *Result) error {
	runID := res.Action.RunID
	if runID == "" {
		runID = res.Key.RunID
	}
	var ce *ConflictError
	if errors.As(res.Err, &ce) && runID == "" {
		runID = ce.RunID
	}
	if runID == "" {
		runID = o.runID
	}
	r := b.resolver(runID, o.big)
	if err := r.action(&res.Action); err != nil {
		return err
	}
	if err := r.keyRec(&res.Key); err != nil {
		return err
	}
	if ce != nil {
		cur := ce.Current
		if err := r.keyRec(&cur); err != nil {
			return err
		}
		ce.Current = cur
	}
	return nil
}

// txnResolver resolves references in a read transaction.
func txnResolver(txn *badger.Txn, runID string) *resolver {
	return &resolver{get: func(hash string) (json.RawMessage, error) {
		item, err := txn.Get(blobKey(runID, hash))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: run %q refers to blob %s, which is missing", ErrFormat, runID, hash)
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
// and the plan's JSON with null in their place. blobs receives the large
// args; h hashes each distinct slice once.
func planRecord(p *plan.Plan, h hasher, blobs map[string]json.RawMessage) ([]byte, error) {
	var refs map[string]string
	cp := *p
	for i, a := range p.Actions {
		if len(a.Args) < largeValue {
			continue
		}
		if !json.Valid(a.Args) {
			return nil, fmt.Errorf("args of action %q are not valid JSON", a.ID)
		}
		if refs == nil {
			refs = map[string]string{}
			cp.Actions = slices.Clone(p.Actions)
		}
		hash, _ := refHash(h.ref(a.Args, blobs))
		refs[strconv.Itoa(i)] = hash
		cp.Actions[i].Args = json.RawMessage("null")
	}
	pj, err := json.Marshal(&cp)
	if err != nil || refs == nil {
		return pj, err
	}
	return encode(storedPlan{Args: refs}, pj)
}

// decodePlan reads a plan revision record (either form).
func decodePlan(v []byte, r *resolver) (*plan.Plan, error) {
	var p plan.Plan
	if len(v) == 0 || v[0] != encJSONBlob {
		return &p, json.Unmarshal(v, &p)
	}
	var meta storedPlan
	pj, err := decode(v, &meta)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(pj, &p); err != nil {
		return nil, err
	}
	for idx, hash := range meta.Args {
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 || i >= len(p.Actions) || !validHash(hash) {
			return nil, fmt.Errorf("%w: plan record names a blob for action %q", ErrFormat, idx)
		}
		if p.Actions[i].Args, err = r.value(refOf(hash)); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

// putBlobs writes a revision's large values (those not stored yet).
func (b *batch) putBlobs(runID string, blobs map[string]json.RawMessage) error {
	for hash, v := range blobs {
		if err := b.putBlob(runID, hash, v); err != nil {
			return err
		}
	}
	return nil
}
