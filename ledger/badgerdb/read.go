package badgerdb

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// CreateRun records a run with revision 1 of its plan (ledger.CreateRunWith
// has the rules). Errors: ErrPlanMismatch, ErrInvalid, ErrTooLarge,
// ErrClosed, ErrNoSpace.
func (l *Ledger) CreateRun(ctx context.Context, r ledger.Run, p *plan.Plan, rows []ledger.Action) (stored ledger.Run, created bool, err error) {
	return ledger.CreateRunWith(ctx, l, r, p, rows)
}

// AddRevision records revision n+1 of a run's plan (ledger.AddRevisionWith
// has the rules). Errors: ErrNotFound, ErrInvalid, ErrTooLarge, ErrClosed,
// ErrNoSpace.
func (l *Ledger) AddRevision(ctx context.Context, runID string, p *plan.Plan, rows []ledger.Action) (int, error) {
	return ledger.AddRevisionWith(ctx, l, runID, p, rows)
}

// Memo stores value under (runID, name) if nothing is stored yet and returns
// what is stored (ledger.MemoWith has the rules). Durable before it returns.
// Errors: ErrInvalid, ErrTooLarge, ErrClosed, ErrNoSpace.
func (l *Ledger) Memo(ctx context.Context, runID, name string, value json.RawMessage) (json.RawMessage, error) {
	return ledger.MemoWith(ctx, l, l.cfg.MaxOutputBytes, runID, name, value)
}

// view runs fn in a read transaction, unless the ledger is closed.
func (l *Ledger) view(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ledger.ErrClosed
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

func readRun(txn *badger.Txn, runID string) (ledger.RunRecord, error) {
	var r ledger.RunRecord
	ok, err := getDecoded(txn, runKey(runID), func(v []byte) (err error) {
		r, err = decodeRun(v)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("ledger: reading run %q: %w", runID, err)
	}
	if !ok {
		return r, fmt.Errorf("%w: run %q", ledger.ErrNotFound, runID)
	}
	if r.Collecting {
		return r, fmt.Errorf("%w: run %q", ledger.ErrCollected, runID)
	}
	// Every change of a run's actions appends an event; the header is only
	// rewritten for run-level changes. UpdatedAt is the later of the two.
	prefix := runPrefix(kindEvent, runID)
	it := txn.NewIterator(badger.IteratorOptions{Reverse: true, Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	it.Seek(append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	if it.ValidForPrefix(prefix) {
		var ev ledger.Event
		k := it.Item().Key()
		if len(k) != len(prefix)+8 {
			return r, fmt.Errorf("%w: malformed event key", ledger.ErrFormat)
		}
		err := it.Item().Value(func(v []byte) (err error) { ev, err = decodeEvent(runID, beUint64(k[len(prefix):]), v); return err })
		if err != nil {
			return r, fmt.Errorf("ledger: reading events of run %q: %w", runID, err)
		}
		if ev.At.After(r.UpdatedAt) {
			r.UpdatedAt = ev.At
		}
	}
	return r, nil
}

// isCollecting reports whether run runID's header is marked for the
// collector (collect.go): reads treat the run as gone.
func isCollecting(txn *badger.Txn, runID string) (bool, error) {
	var collecting bool
	_, err := getDecoded(txn, runKey(runID), func(v []byte) error {
		collecting = bytes.Contains(v, []byte(`"collecting":true`))
		return nil
	})
	return collecting, err
}

// GetRun returns a run's header. Errors: ErrNotFound, ErrClosed.
func (l *Ledger) GetRun(ctx context.Context, runID string) (ledger.Run, error) {
	var r ledger.RunRecord
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
func (l *Ledger) ListRuns(ctx context.Context, o ledger.ListOptions) (runs []ledger.Run, next string, err error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	if o.Status != "" && !o.Status.Valid() {
		return nil, "", fmt.Errorf("%w: run status %q", ledger.ErrInvalid, o.Status)
	}
	prefix := []byte{kindIndex, 0}
	seek := prefix
	if o.After != "" {
		c, err := hex.DecodeString(o.After)
		if err != nil || len(c) < 9 {
			return nil, "", fmt.Errorf("%w: cursor %q", ledger.ErrInvalid, o.After)
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
			p, err = decodePlan(v, txnResolver(txn, runID), func() ([]ledger.RowRecord, error) {
				var rows []ledger.RowRecord
				ok, err := getDecoded(txn, rowsBlobKey(runID, rev), func(v []byte) (err error) { rows, err = decodeRows(v); return err })
				if err == nil && !ok {
					err = fmt.Errorf("%w: the plan's actions are its rows, which are missing", ledger.ErrFormat)
				}
				return rows, err
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("ledger: reading plan of run %q: %w", runID, err)
		}
		if !ok {
			return fmt.Errorf("%w: plan revision %d of run %q", ledger.ErrNotFound, rev, runID)
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
func (l *Ledger) Actions(ctx context.Context, runID string) ([]ledger.Action, error) {
	var out []ledger.Action
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

func readActions(txn *badger.Txn, r ledger.RunRecord) ([]ledger.Action, error) {
	rows, err := readRows(txn, r)
	if err != nil {
		return nil, err
	}
	outputs, err := readOutputs(txn, r.ID, rows)
	if err != nil {
		return nil, err
	}
	out := make([]ledger.Action, len(rows))
	blobs := txnResolver(txn, r.ID) // large args: one read per blob (large.go)
	for i, row := range rows {
		out[i] = row.Action(r.ID)
		if err := ledger.ResolveAction(blobs, &out[i]); err != nil {
			return nil, fmt.Errorf("ledger: reading args of run %q action %q: %w", r.ID, row.ID, err)
		}
		if hasOutput(row) {
			out[i].Output = outputs[row.Key]
		}
	}
	return out, nil
}

// hasOutput: the row's key record holds its output.
func hasOutput(row ledger.RowRecord) bool {
	return row.Status == ledger.StatusSucceeded || row.Status == ledger.StatusCompensated
}

// readRows returns the rows of the run's current revision in row order:
// the revision's initial rows, as changed since (their row records), and
// the compensating rows.
func readRows(txn *badger.Txn, r ledger.RunRecord) ([]ledger.RowRecord, error) {
	var rows []ledger.RowRecord
	ok, err := getDecoded(txn, rowsBlobKey(r.ID, r.Revision), func(v []byte) (err error) {
		rows, err = decodeRows(v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: reading rows of run %q: %w", r.ID, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: rows of run %q revision %d", ledger.ErrNotFound, r.ID, r.Revision)
	}
	index := make(map[string]int, len(rows))
	for i, row := range rows {
		index[row.ID] = i
	}
	initial := len(rows)
	// Rows that changed since the revision was recorded (and compensating rows).
	prefix := rowPrefix(r.ID, r.Revision)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		var row ledger.RowRecord
		id := string(it.Item().Key()[len(prefix):])
		var base *ledger.RowRecord
		if i, ok := index[id]; ok && i < initial {
			b := rows[i] // rows[:initial] are the initial rows until their record is read
			base = &b
		}
		if err := it.Item().Value(func(v []byte) (err error) { row, err = decodeRowRecord(id, v, base); return err }); err != nil {
			return nil, fmt.Errorf("ledger: reading rows of run %q: %w", r.ID, err)
		}
		if i, ok := index[row.ID]; ok {
			rows[i] = row
		} else {
			index[row.ID] = len(rows)
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b ledger.RowRecord) int { return a.Ord - b.Ord })
	return rows, nil
}

// readOutputs returns the outputs of the rows that have one, by key, from
// one scan of the run's key records.
func readOutputs(txn *badger.Txn, runID string, rows []ledger.RowRecord) (map[string]json.RawMessage, error) {
	keyed := 0
	for _, row := range rows {
		if row.Key != "" {
			keyed++
		}
	}
	outputs := make(map[string]json.RawMessage, keyed)
	want := make(map[string]bool, keyed)
	for _, row := range rows {
		if row.Key != "" && hasOutput(row) {
			want[row.Key] = true
		}
	}
	if len(want) == 0 {
		return outputs, nil
	}
	prefix := runPrefix(kindKeyRec, runID)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		key := keyFromName(item.Key()[len(prefix):])
		if !want[key] {
			continue
		}
		err := item.Value(func(v []byte) (err error) {
			outputs[key], err = keyRecOutput(v)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("ledger: reading key records of run %q: %w", runID, err)
		}
	}
	return outputs, nil
}

// Doc returns the Run JSON document (header and actions from one snapshot).
// Errors: ErrNotFound, ErrClosed.
func (l *Ledger) Doc(ctx context.Context, runID string) (ledger.RunDoc, error) {
	var d ledger.RunDoc
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
func (l *Ledger) Key(ctx context.Context, key string) (ledger.KeyRecord, error) {
	var rec ledger.KeyRecord
	err := l.view(ctx, func(txn *badger.Txn) error {
		var runID string
		ok, err := getDecoded(txn, keyIdxKey(key), func(v []byte) error { runID = string(v); return nil })
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: key %s", ledger.ErrNotFound, key)
		}
		if collecting, err := isCollecting(txn, runID); err != nil || collecting {
			return cmp.Or(err, fmt.Errorf("%w: key %s of run %q", ledger.ErrCollected, key, runID))
		}
		ok, err = getDecoded(txn, keyRecKey(runID, key), func(v []byte) (err error) {
			rec, err = decodeKeyRec(runID, key, v)
			return err
		})
		switch {
		case err != nil:
			return fmt.Errorf("ledger: reading key %s: %w", key, err)
		case !ok:
			return fmt.Errorf("%w: key %s is indexed to run %q, which has no record of it", ledger.ErrFormat, key, runID)
		}
		return ledger.ResolveKey(txnResolver(txn, runID), &rec)
	})
	return rec, err
}

// Events returns up to limit events of a run with seq > after (limit <= 0:
// all), in seq order. A run without events (or unknown) gives none.
// Errors: ErrClosed.
func (l *Ledger) Events(ctx context.Context, runID string, after uint64, limit int) ([]ledger.Event, error) {
	var out []ledger.Event
	if after == math.MaxUint64 {
		return nil, ctx.Err()
	}
	err := l.view(ctx, func(txn *badger.Txn) error {
		if collecting, err := isCollecting(txn, runID); err != nil || collecting {
			return err // a run being collected has no events left to read
		}
		prefix := runPrefix(kindEvent, runID)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 128})
		defer it.Close()
		for it.Seek(eventKey(runID, after+1)); it.Valid(); it.Next() {
			if limit > 0 && len(out) == limit {
				break
			}
			k := it.Item().Key()
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: malformed event key", ledger.ErrFormat)
			}
			var ev ledger.Event
			err := it.Item().Value(func(v []byte) (err error) {
				ev, err = decodeEvent(runID, beUint64(k[len(prefix):]), v)
				return err
			})
			if err != nil {
				return fmt.Errorf("ledger: reading events of run %q: %w", runID, err)
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}
