package badgerdb

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
)

// Budgets (ledger/budget.go): buckets and holds are JSON records of their
// own kinds, written by the committer in the same Badger transaction as the
// claim or outcome that changes them.
const (
	kindBudget = 'u' // u\0<bucket id>  -> ledger.BudgetRecord (JSON)
	kindHold   = 'r' // r\0<key>        -> ledger.Hold (JSON)
)

var (
	_ ledger.BudgetTx     = (*batch)(nil)
	_ ledger.BudgetReader = (*Ledger)(nil)
)

func budgetKey(id string) []byte { return simpleKey(kindBudget, id) }
func holdKey(key string) []byte  { return simpleKey(kindHold, key) }

// A budget bucket and a hold are the JSON of their ledger types.
func encodeBudget(r ledger.BudgetRecord) ([]byte, error) { return json.Marshal(r) }

func decodeBudget(b []byte) (ledger.BudgetRecord, error) {
	return decodeJSON[ledger.BudgetRecord]("budget bucket", b)
}

func encodeHold(h ledger.Hold) ([]byte, error) { return json.Marshal(h) }

func decodeHold(b []byte) (ledger.Hold, error) { return decodeJSON[ledger.Hold]("budget hold", b) }

func decodeJSON[T any](what string, b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("%w: %s: %v", ledger.ErrFormat, what, err)
	}
	return v, nil
}

// Budget returns a budget bucket as this batch sees it (ledger.BudgetTx).
func (b *batch) Budget(id string) (ledger.BudgetRecord, bool, error) {
	return getRecord(b, budgetKey(id), decodeBudget)
}

// PutBudget writes a budget bucket (ledger.BudgetTx).
func (b *batch) PutBudget(r ledger.BudgetRecord) error {
	return putRecord(b, budgetKey(r.ID), r, encodeBudget)
}

// Hold returns a key's budget hold (ledger.BudgetTx).
func (b *batch) Hold(key string) (ledger.Hold, bool, error) {
	return getRecord(b, holdKey(key), decodeHold)
}

// PutHold writes a key's budget hold (ledger.BudgetTx).
func (b *batch) PutHold(h ledger.Hold) error { return putRecord(b, holdKey(h.Key), h, encodeHold) }

func getRecord[T any](b *batch, k []byte, decode func([]byte) (T, error)) (T, bool, error) {
	var v T
	raw := []byte(nil)
	if e, ok := b.lookup(k); ok {
		raw = e.val
	} else {
		var found bool
		var err error
		if raw, found, err = b.getRaw(k); err != nil || !found {
			return v, false, err
		}
	}
	v, err := decode(raw)
	if err != nil {
		return v, false, fmt.Errorf("ledger: decoding %q: %w", k, err)
	}
	return v, true, nil
}

func putRecord[T any](b *batch, k []byte, v T, encode func(T) ([]byte, error)) error {
	raw, err := encode(v)
	if err != nil {
		return err
	}
	b.put(k, nil, raw)
	return nil
}

// Budgets returns every budget bucket, sorted (ledger.SortBudgets).
// Errors: ErrClosed, a read error.
func (l *Ledger) Budgets(ctx context.Context) ([]ledger.BudgetRecord, error) {
	var out []ledger.BudgetRecord
	err := l.view(ctx, func(txn *badger.Txn) error {
		prefix := []byte{kindBudget, 0}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var r ledger.BudgetRecord
			if err := it.Item().Value(func(v []byte) (err error) { r, err = decodeBudget(v); return err }); err != nil {
				return fmt.Errorf("ledger: reading budget %q: %w", it.Item().Key(), err)
			}
			out = append(out, r)
		}
		return nil
	})
	ledger.SortBudgets(out)
	return out, err
}

// Hold returns the budget hold of key. Errors: ErrNotFound (the key
// reserved nothing), ErrClosed, a read error.
func (l *Ledger) Hold(ctx context.Context, key string) (ledger.Hold, error) {
	var h ledger.Hold
	err := l.view(ctx, func(txn *badger.Txn) error {
		ok, err := getDecoded(txn, holdKey(key), func(v []byte) (err error) { h, err = decodeHold(v); return err })
		if err != nil {
			return fmt.Errorf("ledger: reading the budget hold of key %s: %w", key, err)
		}
		if !ok {
			return fmt.Errorf("%w: no budget hold for key %s", ledger.ErrNotFound, key)
		}
		return nil
	})
	return h, err
}

// Budget returns one budget bucket. Errors: ErrNotFound (nothing was
// reserved from it), ErrClosed, a read error.
func (l *Ledger) Budget(ctx context.Context, id string) (ledger.BudgetRecord, error) {
	var r ledger.BudgetRecord
	err := l.view(ctx, func(txn *badger.Txn) error {
		ok, err := getDecoded(txn, budgetKey(id), func(v []byte) (err error) { r, err = decodeBudget(v); return err })
		if err != nil {
			return fmt.Errorf("ledger: reading budget bucket %s: %w", id, err)
		}
		if !ok {
			return fmt.Errorf("%w: budget bucket %s", ledger.ErrNotFound, id)
		}
		return nil
	})
	return r, err
}
