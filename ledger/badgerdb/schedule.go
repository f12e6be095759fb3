package badgerdb

import (
	"context"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
)

// Schedules (ledger.ScheduleKeeper) are records of their own kind, the JSON
// of ledger.EncodeSchedule, written in Badger transactions of their own
// (the committer never touches them). The database runs without conflict
// detection, so the writes take turns (Ledger.schedMu): a swap reads the
// version it replaces under the same lock, and the second of two swaps at
// one version gets ErrConflict.
const kindSchedule = 's' // s\0<schedule id> -> ledger.Schedule (JSON)

var _ ledger.ScheduleKeeper = (*Ledger)(nil)

func scheduleKey(id string) []byte { return simpleKey(kindSchedule, id) }

// update runs fn in a read-write transaction and commits it (synced:
// SyncWrites), one at a time, unless the ledger is closed.
func (l *Ledger) update(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ledger.ErrClosed
	}
	l.schedMu.Lock()
	defer l.schedMu.Unlock()
	return translate(l.db.Update(fn))
}

func readSchedule(txn *badger.Txn, id string) (sc ledger.Schedule, found bool, err error) {
	found, err = getDecoded(txn, scheduleKey(id), func(v []byte) (err error) { sc, err = ledger.DecodeSchedule(v); return err })
	if err != nil {
		return sc, false, fmt.Errorf("ledger: reading schedule %q: %w", id, err)
	}
	return sc, found, nil
}

func writeSchedule(txn *badger.Txn, sc ledger.Schedule) error {
	b, err := ledger.EncodeSchedule(sc)
	if err != nil {
		return err
	}
	return txn.Set(scheduleKey(sc.ID), b)
}

// CreateSchedule stores a new schedule (ledger.ScheduleKeeper).
func (l *Ledger) CreateSchedule(ctx context.Context, sc ledger.Schedule) (out ledger.Schedule, err error) {
	err = l.update(ctx, func(txn *badger.Txn) error {
		stored, found, err := readSchedule(txn, sc.ID)
		if err != nil {
			return err
		}
		var write bool
		if out, write, err = ledger.ScheduleCreate(stored, found, sc); err != nil || !write {
			return err
		}
		return writeSchedule(txn, out)
	})
	return out, err
}

// Schedule returns a schedule (ledger.ScheduleKeeper). Errors: ErrNotFound,
// ErrClosed, a read error.
func (l *Ledger) Schedule(ctx context.Context, id string) (sc ledger.Schedule, err error) {
	err = l.view(ctx, func(txn *badger.Txn) error {
		var found bool
		if sc, found, err = readSchedule(txn, id); err == nil && !found {
			err = fmt.Errorf("%w: schedule %q", ledger.ErrNotFound, id)
		}
		return err
	})
	return sc, err
}

// Schedules returns every schedule, by id (ledger.ScheduleKeeper).
func (l *Ledger) Schedules(ctx context.Context) ([]ledger.Schedule, error) {
	var all []ledger.Schedule
	err := l.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{kindSchedule, 0}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var sc ledger.Schedule
			if err := it.Item().Value(func(v []byte) (err error) { sc, err = ledger.DecodeSchedule(v); return err }); err != nil {
				return fmt.Errorf("ledger: reading schedule %q: %w", it.Item().Key(), err)
			}
			all = append(all, sc)
		}
		return nil
	})
	ledger.SortSchedules(all) // keys sort by id already; this states it
	return all, err
}

// SwapSchedule replaces a schedule at its version (ledger.ScheduleKeeper).
func (l *Ledger) SwapSchedule(ctx context.Context, sc ledger.Schedule) (out ledger.Schedule, err error) {
	err = l.update(ctx, func(txn *badger.Txn) error {
		stored, found, err := readSchedule(txn, sc.ID)
		if err != nil {
			return err
		}
		if out, err = ledger.ScheduleSwap(stored, found, sc); err != nil {
			return err
		}
		return writeSchedule(txn, out)
	})
	return out, err
}

// DeleteSchedule removes a schedule (ledger.ScheduleKeeper). Errors:
// ErrNotFound, ErrClosed, a write error.
func (l *Ledger) DeleteSchedule(ctx context.Context, id string) error {
	return l.update(ctx, func(txn *badger.Txn) error {
		if _, found, err := readSchedule(txn, id); err != nil || !found {
			if err == nil {
				err = fmt.Errorf("%w: schedule %q", ledger.ErrNotFound, id)
			}
			return err
		}
		return txn.Delete(scheduleKey(id))
	})
}
