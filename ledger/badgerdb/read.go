package ledger

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/plan"
)

// CreateRun records a run with revision 1 of its plan and its initial action rows
// (in plan order, status pending or approved, class filled), plus events
// run.created and plan.recorded (and action.approved for pre-approved rows).
// If the run exists with the same plan hash it returns the stored run and
// created=false; with another plan hash, ErrPlanMismatch.
//
// r.ID is required; r.Status defaults to running and r.CreatedAt to now;
// r.Revision and r.PlanHash are set by the ledger (PlanHash = plan.Hash(p)).
// rows nil: one pending row per plan action (id, tool, args, depends_on).
// Errors: ErrPlanMismatch, ErrInvalid, ErrTooLarge, ErrClosed.
func (l *Ledger) CreateRun(ctx context.Context, r Run, p *plan.Plan, rows []Action) (stored Run, created bool, err error) {
	if err := validID("run id", r.ID); err != nil {
		return Run{}, false, err
	}
	if r.Status != "" && !r.Status.valid() {
		return Run{}, false, fmt.Errorf("%w: run status %q", ErrInvalid, r.Status)
	}
	o, err := revisionOp(opCreateRun, r.ID, p, rows)
	if err != nil {
		return Run{}, false, err
	}
	o.run = r
	res, err := l.applyOne(ctx, o)
	if err != nil {
		return Run{}, false, err
	}
	return res.run, res.created, nil
}

// AddRevision records revision n+1 of a run's plan with fresh rows (replay with
// edits) and event run.replayed {"revision","plan_hash","actions"}. Returns the
// new revision number. A plan identical to the current revision's (the same
// plan.Hash) records nothing and returns the current revision, so a retried
// call does not add a second revision. Errors: ErrNotFound, ErrInvalid,
// ErrTooLarge, ErrClosed.
func (l *Ledger) AddRevision(ctx context.Context, runID string, p *plan.Plan, rows []Action) (int, error) {
	if err := validID("run id", runID); err != nil {
		return 0, err
	}
	o, err := revisionOp(opAddRevision, runID, p, rows)
	if err != nil {
		return 0, err
	}
	res, err := l.applyOne(ctx, o)
	if err != nil {
		return 0, err
	}
	return res.rev, nil
}

func revisionOp(kind opKind, runID string, p *plan.Plan, rows []Action) (Op, error) {
	if p == nil {
		return Op{}, fmt.Errorf("%w: nil plan", ErrInvalid)
	}
	hash, err := plan.Hash(p)
	if err != nil {
		return Op{}, fmt.Errorf("%w: hashing plan: %v", ErrInvalid, err)
	}
	if rows == nil {
		for _, a := range p.Actions {
			rows = append(rows, Action{ID: a.ID, Tool: a.Tool, Args: a.Args, DependsOn: a.DependsOn, Status: StatusPending})
		}
	}
	if err := checkRows(rows); err != nil {
		return Op{}, err
	}
	// Large args are stored once, as blobs that the plan record and the rows
	// refer to (large.go); hashed here, in the caller's goroutine.
	h, blobs := hasher{}, map[string]json.RawMessage{}
	pj, err := planRecord(p, h, blobs)
	if err != nil {
		return Op{}, fmt.Errorf("%w: encoding plan: %v", ErrInvalid, err)
	}
	stored := make([]Action, len(rows))
	for i, a := range rows {
		a.Args, a.ApprovedArgs = h.ref(a.Args, blobs), h.ref(a.ApprovedArgs, blobs)
		stored[i] = a
	}
	return Op{kind: kind, runID: runID, planJSON: pj, planHash: hash, rows: stored, blobs: blobs}, nil
}

// applyOne runs one internal op and turns its op-level error into the error.
func (l *Ledger) applyOne(ctx context.Context, o Op) (Result, error) {
	res, err := l.Apply(ctx, o)
	if err != nil {
		return Result{}, err
	}
	return res[0], res[0].Err
}

// Memo stores value under (runID, name) if nothing is stored yet and returns
// what is stored (so a value derived once, like a UUID or a time, never changes
// on resume). Durable before it returns. The run need not exist. Errors:
// ErrInvalid (empty name or id, value not JSON), ErrTooLarge, ErrClosed.
func (l *Ledger) Memo(ctx context.Context, runID, name string, value json.RawMessage) (json.RawMessage, error) {
	if err := validID("run id", runID); err != nil {
		return nil, err
	}
	if err := validID("memo name", name); err != nil {
		return nil, err
	}
	if len(value) > l.cfg.MaxOutputBytes {
		return nil, fmt.Errorf("%w: memo of %d bytes exceeds %d", ErrTooLarge, len(value), l.cfg.MaxOutputBytes)
	}
	if err := validJSON("memo value", value, true); err != nil {
		return nil, err
	}
	res, err := l.applyOne(ctx, Op{kind: opMemo, runID: runID, msg: name, data: value})
	if err != nil {
		return nil, err
	}
	return res.memo, nil
}

// view runs fn in a read transaction, unless the ledger is closed.
func (l *Ledger) view(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	return translate(l.db.View(fn))
}

func getDecoded(txn *badger.Txn, key []byte, fn func(v []byte) error) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, item.Value(fn)
}

func readRun(txn *badger.Txn, runID string) (storedRun, error) {
	var r storedRun
	ok, err := getDecoded(txn, runKey(runID), func(v []byte) error {
		_, err := decode(v, &r)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("ledger: reading run %q: %w", runID, err)
	}
	if !ok {
		return r, fmt.Errorf("%w: run %q", ErrNotFound, runID)
	}
	// Every change of a run's actions appends an event; the header is only
	// rewritten for run-level changes. UpdatedAt is the later of the two.
	prefix := runPrefix(kindEvent, runID)
	it := txn.NewIterator(badger.IteratorOptions{Reverse: true, Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	it.Seek(append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	if it.ValidForPrefix(prefix) {
		var ev Event
		err := it.Item().Value(func(v []byte) error { _, err := decode(v, &ev); return err })
		if err != nil {
			return r, fmt.Errorf("ledger: reading events of run %q: %w", runID, err)
		}
		if ev.At.After(r.UpdatedAt) {
			r.UpdatedAt = ev.At
		}
	}
	return r, nil
}

// GetRun returns a run's header. Errors: ErrNotFound, ErrClosed.
func (l *Ledger) GetRun(ctx context.Context, runID string) (Run, error) {
	var r storedRun
	err := l.view(ctx, func(txn *badger.Txn) (err error) {
		r, err = readRun(txn, runID)
		return err
	})
	return r.Run, err
}

// ListRuns pages through runs newest first (by CreatedAt, then run id); next
// is "" on the last page, else the cursor for ListOptions.After. A status
// filter scans the run index (which carries each run's status), not headers.
// Errors: ErrInvalid (bad cursor or status), ErrClosed.
func (l *Ledger) ListRuns(ctx context.Context, o ListOptions) (runs []Run, next string, err error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	if o.Status != "" && !o.Status.valid() {
		return nil, "", fmt.Errorf("%w: run status %q", ErrInvalid, o.Status)
	}
	prefix := []byte{kindIndex, 0}
	seek := prefix
	if o.After != "" {
		c, err := hex.DecodeString(o.After)
		if err != nil || len(c) < 9 {
			return nil, "", fmt.Errorf("%w: cursor %q", ErrInvalid, o.After)
		}
		seek = append(append([]byte{kindIndex, 0}, c...), 0) // just after the cursor's entry
	}
	err = l.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		var lastKey []byte
		for it.Seek(seek); it.ValidForPrefix(prefix); it.Next() {
			item := it.Item()
			if o.Status != "" {
				match := false
				if err := item.Value(func(v []byte) error { match = string(v) == string(o.Status); return nil }); err != nil {
					return err
				}
				if !match {
					continue
				}
			}
			if len(runs) == limit {
				next = hex.EncodeToString(lastKey[2:])
				return nil
			}
			k := item.KeyCopy(nil)
			r, err := readRun(txn, string(k[10:]))
			if err != nil {
				return err
			}
			runs = append(runs, r.Run)
			lastKey = k
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return runs, next, nil
}

// Plan returns revision rev of a run's plan (0 = current). Errors:
// ErrNotFound, ErrClosed.
func (l *Ledger) Plan(ctx context.Context, runID string, rev int) (*plan.Plan, error) {
	var p *plan.Plan
	err := l.view(ctx, func(txn *badger.Txn) error {
		if rev <= 0 {
			r, err := readRun(txn, runID)
			if err != nil {
				return err
			}
			rev = r.Revision
		}
		ok, err := getDecoded(txn, planKey(runID, rev), func(v []byte) (err error) {
			p, err = decodePlan(v, txnResolver(txn, runID))
			return err
		})
		if err != nil {
			return fmt.Errorf("ledger: reading plan of run %q: %w", runID, err)
		}
		if !ok {
			return fmt.Errorf("%w: plan revision %d of run %q", ErrNotFound, rev, runID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Actions returns the rows of the run's current revision in plan order, followed
// by compensating rows ("<id>.undo") in the order they were added. Cost scales
// with the run's size, not the ledger's: two prefix scans (the revision's rows
// and the run's key records, joined for outputs). Errors: ErrNotFound, ErrClosed.
func (l *Ledger) Actions(ctx context.Context, runID string) ([]Action, error) {
	var out []Action
	err := l.view(ctx, func(txn *badger.Txn) error {
		r, err := readRun(txn, runID)
		if err != nil {
			return err
		}
		out, err = readActions(txn, r)
		return err
	})
	return out, err
}

func readActions(txn *badger.Txn, r storedRun) ([]Action, error) {
	var rows []storedRow
	ok, err := getDecoded(txn, rowsBlobKey(r.ID, r.Revision), func(v []byte) (err error) {
		rows, err = decodeRows(v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: reading rows of run %q: %w", r.ID, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: rows of run %q revision %d", ErrNotFound, r.ID, r.Revision)
	}
	index := make(map[string]int, len(rows))
	for i, row := range rows {
		index[row.ID] = i
	}
	// Rows that changed since the revision was recorded (and compensating rows).
	prefix := rowPrefix(r.ID, r.Revision)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
	for it.Rewind(); it.Valid(); it.Next() {
		var row storedRow
		if err := it.Item().Value(func(v []byte) (err error) { row, err = decodeRow(v); return err }); err != nil {
			it.Close()
			return nil, fmt.Errorf("ledger: reading rows of run %q: %w", r.ID, err)
		}
		if i, ok := index[row.ID]; ok {
			rows[i] = row
		} else {
			index[row.ID] = len(rows)
			rows = append(rows, row)
		}
	}
	it.Close()
	keyed := 0
	for _, row := range rows {
		if row.Key != "" {
			keyed++
		}
	}
	slices.SortFunc(rows, func(a, b storedRow) int { return a.Ord - b.Ord })
	outputs := make(map[string]json.RawMessage, keyed)
	if keyed > 0 {
		want := make(map[string]bool, keyed)
		for _, row := range rows {
			if row.Key != "" && (row.Status == StatusSucceeded || row.Status == StatusCompensated) {
				want[row.Key] = true
			}
		}
		if len(want) > 0 {
			prefix := runPrefix(kindKeyRec, r.ID)
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
			for it.Rewind(); it.Valid(); it.Next() {
				item := it.Item()
				key := string(item.Key()[len(prefix):])
				if !want[key] {
					continue
				}
				err := item.Value(func(v []byte) (err error) {
					outputs[key], err = keyRecOutput(v)
					return err
				})
				if err != nil {
					it.Close()
					return nil, fmt.Errorf("ledger: reading key records of run %q: %w", r.ID, err)
				}
			}
			it.Close()
		}
	}
	out := make([]Action, len(rows))
	blobs := txnResolver(txn, r.ID) // large args: one read per blob (large.go)
	for i, row := range rows {
		out[i] = row.action(r.ID)
		if err := blobs.action(&out[i]); err != nil {
			return nil, fmt.Errorf("ledger: reading args of run %q action %q: %w", r.ID, row.ID, err)
		}
		if row.Status == StatusSucceeded || row.Status == StatusCompensated {
			out[i].Output = outputs[row.Key]
		}
	}
	return out, nil
}

// Doc returns the Run JSON document (header and actions from one snapshot).
// Errors: ErrNotFound, ErrClosed.
func (l *Ledger) Doc(ctx context.Context, runID string) (RunDoc, error) {
	var d RunDoc
	err := l.view(ctx, func(txn *badger.Txn) error {
		r, err := readRun(txn, runID)
		if err != nil {
			return err
		}
		d.Run = r.Run
		d.Actions, err = readActions(txn, r)
		return err
	})
	return d, err
}

// Key returns the record of an idempotency key. Errors: ErrNotFound, ErrClosed.
func (l *Ledger) Key(ctx context.Context, key string) (KeyRecord, error) {
	var rec KeyRecord
	err := l.view(ctx, func(txn *badger.Txn) error {
		var runID string
		ok, err := getDecoded(txn, keyIdxKey(key), func(v []byte) error { runID = string(v); return nil })
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: key %s", ErrNotFound, key)
		}
		item, err := txn.Get(keyRecKey(runID, key))
		if err != nil {
			return fmt.Errorf("ledger: reading key %s: %w", key, err)
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if rec, err = decodeKeyRec(v); err != nil {
			return err
		}
		return txnResolver(txn, runID).keyRec(&rec)
	})
	return rec, err
}

// Events returns up to limit events of a run with seq > after (limit <= 0:
// all), in seq order. A run without events (or unknown) gives none.
// Errors: ErrClosed.
func (l *Ledger) Events(ctx context.Context, runID string, after uint64, limit int) ([]Event, error) {
	var out []Event
	err := l.view(ctx, func(txn *badger.Txn) error {
		prefix := runPrefix(kindEvent, runID)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 128})
		defer it.Close()
		for it.Seek(eventKey(runID, after+1)); it.Valid(); it.Next() {
			if limit > 0 && len(out) == limit {
				return nil
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			ev, err := decodeEvent(v)
			if err != nil {
				return fmt.Errorf("ledger: reading events of run %q: %w", runID, err)
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}
