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

// Budget returns a budget bucket as this batch sees it (ledger.BudgetTx).
func (b *batch) Budget(id string) (ledger.BudgetRecord, bool, error) {
	var r ledger.BudgetRecord
	ok, err := b.getJSON(budgetKey(id), &r)
	return r, ok, err
}

// PutBudget writes a budget bucket (ledger.BudgetTx).
func (b *batch) PutBudget(r ledger.BudgetRecord) error { return b.putJSON(budgetKey(r.ID), r) }

// Hold returns a key's budget hold (ledger.BudgetTx).
func (b *batch) Hold(key string) (ledger.Hold, bool, error) {
	var h ledger.Hold
	ok, err := b.getJSON(holdKey(key), &h)
	return h, ok, err
}

// PutHold writes a key's budget hold (ledger.BudgetTx).
func (b *batch) PutHold(h ledger.Hold) error { return b.putJSON(holdKey(h.Key), h) }

func (b *batch) getJSON(k []byte, v any) (bool, error) {
	raw := []byte(nil)
	if e, ok := b.lookup(k); ok {
		raw = e.val
	} else {
		var found bool
		var err error
		if raw, found, err = b.getRaw(k); err != nil || !found {
			return false, err
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("ledger: decoding %q: %w", k, err)
	}
	return true, nil
}

func (b *batch) putJSON(k []byte, v any) error {
	raw, err := json.Marshal(v)
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
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &r) }); err != nil {
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
		ok, err := getDecoded(txn, holdKey(key), func(v []byte) error { return json.Unmarshal(v, &h) })
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
		ok, err := getDecoded(txn, budgetKey(id), func(v []byte) error { return json.Unmarshal(v, &r) })
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
