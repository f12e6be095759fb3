package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/docketrun/docket/ledger/internal/blobref"
	"github.com/docketrun/docket/plan"
)

// Large values are stored once: a value of largeValue bytes or more is
// written once per run as a content blob (Tx.PutBlob) and the records that
// mention it (a row's args or approved args, a key record's args, a plan
// revision) hold a reference to it (package blobref). Inside the rules rows
// and key records carry references; every value that leaves a backend
// (Actions, Doc, Key, Plan, Apply's results and conflicts) has them replaced
// by the bytes. Events never carry a large value: action.edited says
// {"args_truncated": true} above eventInlineMax, as action.succeeded does
// for outputs.
const largeValue = blobref.Large

func refOf(hash string) json.RawMessage { return blobref.Of(hash) }

func refHash(v []byte) (string, bool) { return blobref.Hash(v) }

func isRef(v []byte) bool { return blobref.Is(v) }

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
	return &bigValue{raw: v, hash: blobref.HashOf(v)}
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
		hash = blobref.HashOf(v)
		h[id] = hash
	}
	blobs[hash] = v
	return refOf(hash)
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
	if err := b.tx.PutBlob(runID, big.hash, v); err != nil {
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
	raw, ok, err := b.tx.Blob(runID, hash)
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

// ResolveAction replaces references in a's args and approved args by their
// bytes (backends call it on every row they return).
func ResolveAction(r *blobref.Resolver, a *Action) (err error) {
	if a.Args, err = r.Value(a.Args); err != nil {
		return err
	}
	a.ApprovedArgs, err = r.Value(a.ApprovedArgs)
	return err
}

// ResolveKey replaces a reference in k's args by its bytes.
func ResolveKey(r *blobref.Resolver, k *KeyRecord) (err error) {
	k.Args, err = r.Value(k.Args)
	return err
}

// resolver resolves against this batch (its writes and the store); known
// values (an op's own large args) need no read.
func (b *batch) resolver(runID string, known ...*bigValue) *blobref.Resolver {
	r := &blobref.Resolver{Get: func(hash string) (json.RawMessage, error) { return b.blob(runID, refOf(hash)) }}
	for _, k := range known {
		if k != nil {
			r.Know(k.hash, k.raw)
		}
	}
	return r
}

// resolveResult gives an op's result (and its conflict's record) the bytes
// of their references.
func (b *batch) resolveResult(opRunID string, big *bigValue, res *Result) error {
	if !isRef(res.Action.Args) && !isRef(res.Action.ApprovedArgs) && !isRef(res.Key.Args) {
		var ce *ConflictError
		if !errors.As(res.Err, &ce) || !isRef(ce.Current.Args) {
			return nil
		}
	}
	runID := res.Action.RunID
	if runID == "" {
		runID = res.Key.RunID
	}
	var ce *ConflictError
	if errors.As(res.Err, &ce) && runID == "" {
		runID = ce.RunID
	}
	if runID == "" {
		runID = opRunID
	}
	r := b.resolver(runID, big)
	if err := ResolveAction(r, &res.Action); err != nil {
		return err
	}
	if err := ResolveKey(r, &res.Key); err != nil {
		return err
	}
	if ce != nil {
		cur := ce.Current
		if err := ResolveKey(r, &cur); err != nil {
			return err
		}
		ce.Current = cur
	}
	return nil
}

// planRecord prepares a plan revision for storage: its JSON with null in
// place of large args, and the blobs that hold them by action index
// (decimal; nil when no args are large). blobs receives the large args; h
// hashes each distinct slice once.
func planRecord(p *plan.Plan, h hasher, blobs map[string]json.RawMessage) ([]byte, map[string]string, error) {
	var refs map[string]string
	cp := *p
	for i, a := range p.Actions {
		if len(a.Args) < largeValue {
			continue
		}
		if !json.Valid(a.Args) {
			return nil, nil, fmt.Errorf("args of action %q are not valid JSON", a.ID)
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
	return pj, refs, err
}

// DecodePlan reads a plan revision stored as planJSON with the blobs named
// in argRefs (action index -> blob name) in place of their args.
func DecodePlan(planJSON []byte, argRefs map[string]string, r *blobref.Resolver) (*plan.Plan, error) {
	var p plan.Plan
	if err := json.Unmarshal(planJSON, &p); err != nil {
		return nil, err
	}
	for idx, hash := range argRefs {
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 || i >= len(p.Actions) || !blobref.ValidHash(hash) {
			return nil, fmt.Errorf("%w: plan record names a blob for action %q", ErrFormat, idx)
		}
		if p.Actions[i].Args, err = r.Value(refOf(hash)); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

// putBlobs writes a revision's large values (those not stored yet).
func (b *batch) putBlobs(runID string, blobs map[string]json.RawMessage) error {
	for hash, v := range blobs {
		if err := b.tx.PutBlob(runID, hash, v); err != nil {
			return err
		}
	}
	return nil
}
