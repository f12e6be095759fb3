package executor

import (
	"context"

	"github.com/docketrun/docket/ledger"
)

// apply commits ops in one ledger.Apply and unpacks its two kinds of error
// in one place: err is the commit's error, else the error of the first op
// that failed (ops up to it went through in the same commit, and so did
// those after it: Apply is per op). res is nil when the commit failed.
func apply(ctx context.Context, s ledger.Store, ops ...ledger.Op) (res []ledger.Result, err error) {
	res, err = s.Apply(ctx, ops...)
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		if r.Err != nil {
			return res, r.Err
		}
	}
	return res, nil
}

// applyLead is apply when only the first op's error matters to the caller
// (the others are best effort, or inspected one by one): err is the commit's
// error, else the first op's.
func applyLead(ctx context.Context, s ledger.Store, ops ...ledger.Op) (res []ledger.Result, err error) {
	res, err = s.Apply(ctx, ops...)
	if err != nil {
		return nil, err
	}
	return res, res[0].Err
}

// applyDoc is s.Apply, and run runID's document as the commit left it when
// the store reads it in the same transaction (ledger.DocApplier: the shared
// ledger, in the commit's round trip); else, or when it could not, doc is
// zero.
func applyDoc(ctx context.Context, s ledger.Store, runID string, ops ...ledger.Op) (res []ledger.Result, doc ledger.RunDoc, err error) {
	if da, ok := s.(ledger.DocApplier); ok {
		return da.ApplyDoc(ctx, runID, ops...)
	}
	res, err = s.Apply(ctx, ops...)
	return res, ledger.RunDoc{}, err
}
