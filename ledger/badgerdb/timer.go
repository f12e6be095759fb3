package badgerdb

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
)

// kindWake is the index of runs by wake time (ledger.Run.WakeAt):
//
//	w\0<wake unix nanos BE8><run>  -> empty
//
// one entry per run that waits, moved (deleted and written) in the commit
// that changes the run's wake time, so that finding the due runs reads
// only their entries, in time order.
const kindWake = 'w'

var _ ledger.WakeIndex = (*Ledger)(nil)

func wakeKey(at time.Time, runID string) []byte {
	b := make([]byte, 0, 10+len(runID))
	b = append(b, kindWake, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixNano()))
	return append(b, runID...)
}

// moveWake moves run r's wake index entry from prev's wake time to r's.
func (b *batch) moveWake(prev, r ledger.RunRecord) {
	if !prev.WakeAt.IsZero() {
		k := wakeKey(prev.WakeAt, r.ID)
		b.cur.put(&entry{key: k, del: true, size: estimate(k, nil)})
	}
	if !r.WakeAt.IsZero() {
		b.put(wakeKey(r.WakeAt, r.ID), nil, []byte{})
	}
}

// Wakes lists the runs whose wake time is at or before before, earliest
// first, at most limit (1000 when limit <= 0), reading only the wake
// index. Errors: ErrClosed.
func (l *Ledger) Wakes(ctx context.Context, before time.Time, limit int) ([]ledger.Wake, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []ledger.Wake
	prefix := []byte{kindWake, 0}
	err := l.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix) && len(out) < limit; it.Next() {
			k := it.Item().Key()
			if len(k) < 10 {
				continue
			}
			at := time.Unix(0, int64(binary.BigEndian.Uint64(k[2:10]))).UTC()
			if at.After(before) {
				break
			}
			out = append(out, ledger.Wake{RunID: string(k[10:]), At: at})
		}
		return nil
	})
	return out, err
}
