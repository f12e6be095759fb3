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
