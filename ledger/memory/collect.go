package memory

import (
	"context"

	"github.com/docketrun/docket/ledger"
)

var _ ledger.Collector = (*Store)(nil)

// Collect deletes the ended runs past their retention and the budget
// buckets whose window has passed (ledger.Collector), in one step under the
// store's lock. Records counts every map entry of a deleted run; Bytes is
// not known (0). Errors: ErrInvalid, ErrClosed, the context's error.
func (s *Store) Collect(ctx context.Context, o ledger.CollectOptions) (ledger.CollectReport, error) {
	var rep ledger.CollectReport
	if err := o.Validate(); err != nil {
		return rep, err
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if o.Now.IsZero() {
		o.Now = s.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return rep, ledger.ErrClosed
	}
	st := &s.st
	for id, r := range st.runs {
		if !ledger.Collectable(r, o.Retention, o.Now) {
			if ledger.ProtectedOnly(r, o.Retention, o.Now) {
				rep.Kept++
			}
			continue
		}
		rep.Runs++
		rep.Records += st.deleteRun(id, o.DryRun)
	}
	for id, b := range st.budgets {
		if ledger.BucketExpired(b, o.Now) {
			rep.Buckets++
			if !o.DryRun {
				delete(st.budgets, id)
			}
		}
	}
	return rep, nil
}

// deleteRun deletes (or, with dry, counts) every record of run id.
func (st *state) deleteRun(id string, dry bool) int64 {
	n := int64(1) // the header
	for k := range st.init {
		if k.run == id {
			n++
			if !dry {
				delete(st.init, k)
			}
		}
	}
	for k, rows := range st.rows {
		if k.run == id {
			n += int64(len(rows))
			if !dry {
				delete(st.rows, k)
			}
		}
	}
	for k := range st.plans {
		if k.run == id {
			n++
			if !dry {
				delete(st.plans, k)
			}
		}
	}
	n += st.deleteRunKeys(id, dry)
	n += int64(len(st.events[id]))
	for k := range st.memos {
		if k.a == id {
			n++
			if !dry {
				delete(st.memos, k)
			}
		}
	}
	for k := range st.blobs {
		if k.a == id {
			n++
			if !dry {
				delete(st.blobs, k)
			}
		}
	}
	if !dry {
		delete(st.events, id)
		delete(st.runs, id)
	}
	return n
}

// deleteRunKeys deletes (or, with dry, counts) the key records of run id,
// their index entries and budget holds.
func (st *state) deleteRunKeys(id string, dry bool) int64 {
	var n int64
	for key, run := range st.keyRuns {
		if run != id {
			continue
		}
		n += 2 // the record and its index entry
		if _, ok := st.holds[key]; ok {
			n++
		}
		if !dry {
			delete(st.keyRuns, key)
			delete(st.keyRecs, key)
			delete(st.holds, key)
		}
	}
	return n
}
