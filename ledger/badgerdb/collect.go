package badgerdb

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
)

var _ ledger.Collector = (*Ledger)(nil)

// collectChunk is how many candidate runs one exclusive turn of the
// committer examines: writers wait for at most one chunk.
const collectChunk = 64

// runKinds are the per-run record kinds (runPrefix) a collected run loses.
var runKinds = []byte{kindPlan, kindRow, kindRows, kindKeyRec, kindEvent, kindMemo, kindBlob}

// markKey is the ended-index entry of a run whose header is marked
// Collecting: at time 0, so that the next Collect finds it first whatever
// its retention.
func markKey(runID string) []byte { return endedKey(time.Unix(0, 0), runID) }

// endedValue is an ended-index entry's value: 1 when the run has its own
// retention (without a global one, only those are read), else empty.
func endedValue(r ledger.RunRecord) []byte {
	if r.Retention > 0 {
		return []byte{1}
	}
	return []byte{}
}

func endedKey(at time.Time, runID string) []byte {
	b := make([]byte, 0, 10+len(runID))
	b = append(b, kindEnded, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixNano()))
	return append(b, runID...)
}

// Collect deletes the ended runs past their retention and the budget
// buckets past their window (ledger.Collector). Candidates come from the
// index of ended runs by end time (g\0), read in chunks up to the oldest end
// that can be due, so the work does not grow with live runs (without a
// global retention, the index is read whole but only the runs with a
// retention of their own are looked at). Each chunk is
// deleted while the committer waits (writers are held for one chunk), in
// three steps, each one synced commit or more: the headers are marked
// Collecting and leave the run list (reads then find no run), the records
// go, then the headers and their index entries. A process killed in
// between leaves marked headers, which reads treat as gone and the next
// Collect finishes. Bytes counts keys and values as Badger estimates
// them; the disk space comes back as the value log is garbage collected
// (Reclaim). Errors: ErrInvalid, ErrClosed, ErrNoSpace (a read-only
// directory), the context's error, Badger's.
func (l *Ledger) Collect(ctx context.Context, o ledger.CollectOptions) (ledger.CollectReport, error) {
	var rep ledger.CollectReport
	if err := o.Validate(); err != nil {
		return rep, err
	}
	if o.Now.IsZero() {
		o.Now = l.now()
	}
	if l.space.readOnly && !o.DryRun {
		return rep, fmt.Errorf("%w: the data directory was opened read-only (too little free space): nothing collected", ledger.ErrNoSpace)
	}
	if !o.DryRun {
		if err := l.backfillEnded(ctx); err != nil {
			return rep, fmt.Errorf("ledger: indexing ended runs: %w", translate(err))
		}
	}
	var from []byte
	for {
		cands, next, err := l.candidates(ctx, o, from)
		if err != nil {
			return rep, err
		}
		if len(cands) > 0 {
			var part ledger.CollectReport
			if o.DryRun {
				err = l.view(ctx, func(txn *badger.Txn) error {
					c := &collection{l: l, o: o, dry: true, read: txn}
					part, err = c.run(cands)
					return err
				})
			} else {
				err = l.exclusive(ctx, func() error {
					c := &collection{l: l, o: o, read: l.db.NewTransaction(false)}
					defer c.read.Discard()
					part, err = c.run(cands)
					return err
				})
			}
			rep.Add(part)
			if err != nil {
				return rep, fmt.Errorf("ledger: collecting runs: %w", translate(err))
			}
		}
		if next == nil {
			break
		}
		from = next
	}
	buckets, err := l.collectBuckets(ctx, o)
	rep.Buckets = buckets
	if err != nil {
		return rep, fmt.Errorf("ledger: collecting budget buckets: %w", translate(err))
	}
	if rep.Runs > 0 && !o.DryRun {
		l.reclaim(rep.Bytes)
	}
	return rep, nil
}

// exclusive runs fn in the committer, alone (committer.go).
func (l *Ledger) exclusive(ctx context.Context, fn func() error) error {
	req := &request{excl: fn, done: make(chan struct{})}
	if err := l.submit(ctx, req); err != nil {
		return err
	}
	return req.err
}

// candidates returns up to collectChunk entries of the ended-run index from
// from on (nil: the start) that may be due at o.Now, and where to go on (nil:
// done).
func (l *Ledger) candidates(ctx context.Context, o ledger.CollectOptions, from []byte) ([][]byte, []byte, error) {
	var out [][]byte
	var next []byte
	prefix := []byte{kindEnded, 0}
	if from == nil {
		from = prefix
	}
	err := l.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(from); it.ValidForPrefix(prefix); it.Next() {
			k := it.Item().Key()
			if len(k) < len(prefix)+8 {
				return fmt.Errorf("%w: malformed ended-run key", ledger.ErrFormat)
			}
			ended := time.Unix(0, int64(beUint64(k[len(prefix):])))
			// Every run is kept at least o.Retention after it ended; a
			// run with a longer one of its own is read and kept. Marked
			// runs (markKey, at 0) come first.
			if ended.UnixNano() != 0 && o.Retention > 0 && o.Now.Before(ended.Add(o.Retention)) {
				return nil
			}
			if len(out) == collectChunk {
				next = it.Item().KeyCopy(nil)
				return nil
			}
			if o.Retention == 0 && ended.UnixNano() != 0 && it.Item().ValueSize() == 0 {
				continue // no retention of its own and none global: kept
			}
			out = append(out, it.Item().KeyCopy(nil))
		}
		return nil
	})
	return out, next, err
}

// collection is one chunk's work: reads from read (a snapshot), deletes
// through write transactions of its own (none when dry).
type collection struct {
	l    *Ledger
	o    ledger.CollectOptions
	dry  bool
	read *badger.Txn
	w    *badger.Txn
	rep  ledger.CollectReport
}

// del deletes key (counting it), committing and starting a new write
// transaction when the current one is full.
func (c *collection) del(key []byte) error {
	if c.dry {
		return nil
	}
	if c.w == nil {
		c.w = c.l.db.NewTransaction(true)
	}
	err := c.w.Delete(key)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := c.commit(); err != nil {
			return err
		}
		c.w = c.l.db.NewTransaction(true)
		err = c.w.Delete(key)
	}
	return err
}

func (c *collection) set(key, val []byte) error {
	if c.w == nil {
		c.w = c.l.db.NewTransaction(true)
	}
	err := c.w.Set(key, val)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := c.commit(); err != nil {
			return err
		}
		c.w = c.l.db.NewTransaction(true)
		err = c.w.Set(key, val)
	}
	return err
}

// commit commits the write transaction (synced: SyncWrites).
func (c *collection) commit() error {
	if c.w == nil {
		return nil
	}
	err := c.w.Commit()
	c.w = nil
	return err
}

// count counts one record of a collected run.
func (c *collection) count(item *badger.Item) {
	c.rep.Records++
	c.rep.Bytes += item.EstimatedSize()
}

// dueRun is a run that a collection collects: its header as read.
type dueRun struct {
	id     string
	hdr    ledger.RunRecord
	header *badger.Item
}

// run examines the candidates (ended-index keys) and collects the due ones.
func (c *collection) run(cands [][]byte) (ledger.CollectReport, error) {
	defer func() {
		if c.w != nil {
			c.w.Discard()
		}
	}()
	runs, err := c.due(cands)
	if err != nil {
		return c.rep, err
	}
	// 1. Mark: reads and ops find no run from here on.
	if err := c.mark(runs); err != nil {
		return c.rep, err
	}
	if err := c.commit(); err != nil {
		return c.rep, err
	}
	// 2. The records.
	for _, r := range runs {
		if err := c.records(r.id); err != nil {
			return c.rep, err
		}
	}
	if err := c.commit(); err != nil {
		return c.rep, err
	}
	// 3. The headers and their index entries.
	if err := c.headers(runs); err != nil {
		return c.rep, err
	}
	return c.rep, c.commit()
}

// due reads the runs of the candidates and returns the due ones, deleting
// the candidates that no longer stand for a run.
func (c *collection) due(cands [][]byte) ([]dueRun, error) {
	var runs []dueRun
	seen := map[string]bool{}
	for _, k := range cands {
		id := string(k[2+8:])
		at := int64(beUint64(k[2:]))
		if seen[id] {
			continue // its mark and its end
		}
		item, err := c.read.Get(runKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			if err := c.del(k); err != nil { // left by a run deleted earlier
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		var hdr ledger.RunRecord
		if err := item.Value(func(v []byte) (err error) { hdr, err = decodeRun(v); return err }); err != nil {
			return nil, fmt.Errorf("run %q: %w", id, err)
		}
		switch {
		case hdr.Collecting: // a collect that was cut short: finish it
		case hdr.EndedAt.IsZero() || hdr.EndedAt.UnixNano() != at:
			if err := c.del(k); err != nil { // an earlier end of a replayed run
				return nil, err
			}
			continue
		case !ledger.Collectable(hdr, c.o.Retention, c.o.Now):
			if ledger.ProtectedOnly(hdr, c.o.Retention, c.o.Now) {
				c.rep.Kept++
			}
			continue
		}
		seen[id] = true
		runs = append(runs, dueRun{id: id, hdr: hdr, header: item})
	}
	return runs, nil
}

// mark counts the headers of runs and marks each one Collecting, out of the
// list index and with its mark in the ended index.
func (c *collection) mark(runs []dueRun) error {
	for _, r := range runs {
		c.rep.Runs++
		c.count(r.header)
		c.rep.Records++ // the list index entry
		if c.dry || r.hdr.Collecting {
			continue
		}
		r.hdr.Collecting = true
		v, err := encodeRun(r.hdr)
		if err != nil {
			return err
		}
		if err := c.set(runKey(r.id), v); err != nil {
			return err
		}
		if err := c.del(indexKey(r.hdr.CreatedAt.UnixNano(), r.id)); err != nil {
			return err
		}
		if err := c.set(markKey(r.id), []byte{}); err != nil {
			return err
		}
	}
	return nil
}

// headers deletes the headers of runs and their ended-index entries.
func (c *collection) headers(runs []dueRun) error {
	for _, r := range runs {
		if err := c.del(runKey(r.id)); err != nil {
			return err
		}
		if err := c.del(endedKey(r.hdr.EndedAt, r.id)); err != nil {
			return err
		}
		if err := c.del(markKey(r.id)); err != nil {
			return err
		}
	}
	return nil
}

// records deletes every per-run record of run id, and for each key record
// the key's index entry and budget hold.
func (c *collection) records(id string) error {
	for _, kind := range runKinds {
		prefix := runPrefix(kind, id)
		it := c.read.NewIterator(badger.IteratorOptions{Prefix: prefix})
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.KeyCopy(nil)
			c.count(item)
			if err := c.del(k); err != nil {
				it.Close()
				return err
			}
			if kind != kindKeyRec {
				continue
			}
			name := k[len(prefix):]
			if err := c.keyExtras(id, name); err != nil {
				it.Close()
				return err
			}
		}
		it.Close()
	}
	return nil
}

// keyExtras deletes a collected key's index entry (when it names run id)
// and its budget hold.
func (c *collection) keyExtras(id string, name []byte) error {
	idx := append([]byte{kindKeyIdx, 0}, name...)
	item, err := c.read.Get(idx)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
	case err != nil:
		return err
	default:
		var owner []byte
		if owner, err = item.ValueCopy(nil); err != nil {
			return err
		}
		if bytes.Equal(owner, []byte(id)) {
			c.count(item)
			if err := c.del(idx); err != nil {
				return err
			}
		}
	}
	hk := holdKey(keyFromName(name))
	item, err = c.read.Get(hk)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil
	case err != nil:
		return err
	}
	c.count(item)
	return c.del(hk)
}

// collectBuckets deletes (or counts) the budget buckets whose window has
// passed.
func (l *Ledger) collectBuckets(ctx context.Context, o ledger.CollectOptions) (int, error) {
	var due [][]byte
	prefix := []byte{kindBudget, 0}
	err := l.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var r ledger.BudgetRecord
			if err := it.Item().Value(func(v []byte) (err error) { r, err = decodeBudget(v); return err }); err != nil {
				return err
			}
			if ledger.BucketExpired(r, o.Now) {
				due = append(due, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil || o.DryRun || len(due) == 0 {
		return len(due), err
	}
	err = l.exclusive(ctx, func() error {
		c := &collection{l: l, o: o}
		defer func() {
			if c.w != nil {
				c.w.Discard()
			}
		}()
		for _, k := range due {
			if err := c.del(k); err != nil {
				return err
			}
		}
		return c.commit()
	})
	return len(due), err
}

// reclaim gives the space of what Collect deleted back to the file system.
// Badger learns which value-log entries are dead only from compactions
// (its discard statistics), so once the collects since the last reclaim
// deleted a value-log file's worth, and at least the size of the tree
// (so that compacting costs no more than what was deleted), the tree is
// compacted (Flatten: the tombstones meet the values they delete); then
// the value log is garbage collected: the files whose values are mostly
// dead are rewritten and removed. The GC ticker does the same as time
// goes by.
func (l *Ledger) reclaim(deleted int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed || l.space.readOnly {
		return
	}
	lsm, _ := l.db.Size()
	if l.deleted.Add(deleted) >= max(l.vlogFileSize(), lsm) {
		l.deleted.Store(0)
		if err := l.db.Flatten(1); err != nil {
			l.log.Warn("compacting after a collect", "err", err)
		}
	}
	l.vlogGC()
}

// metaEndedKey marks a directory whose runs that ended before the ledger
// recorded end times have been given one (backfillEnded).
var metaEndedKey = []byte{kindMeta, 0, 'e', 'n', 'd', 'e', 'd'}

// backfillEnded gives every ended run without an end time (recorded by a
// build before retention) its last change as end time, and its entry in
// the ended-run index, once per directory, in the committer's exclusive
// turn.
func (l *Ledger) backfillEnded(ctx context.Context) error {
	done := false
	if err := l.view(ctx, func(txn *badger.Txn) error {
		_, err := txn.Get(metaEndedKey)
		done = err == nil
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		return err
	}); err != nil || done {
		return err
	}
	return l.exclusive(ctx, func() error {
		c := &collection{l: l, read: l.db.NewTransaction(false)}
		defer c.read.Discard()
		defer func() {
			if c.w != nil {
				c.w.Discard()
			}
		}()
		prefix := []byte{kindIndex, 0}
		it := c.read.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			status, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if !ledger.RunStatus(status).Ended() {
				continue
			}
			id := string(it.Item().Key()[len(prefix)+8:])
			item, err := c.read.Get(runKey(id))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var hdr ledger.RunRecord
			if err := item.Value(func(v []byte) (err error) { hdr, err = decodeRun(v); return err }); err != nil {
				return fmt.Errorf("run %q: %w", id, err)
			}
			if !hdr.EndedAt.IsZero() || !hdr.Status.Ended() {
				continue
			}
			hdr.EndedAt = hdr.UpdatedAt
			v, err := encodeRun(hdr)
			if err != nil {
				return err
			}
			if err := c.set(runKey(id), v); err != nil {
				return err
			}
			if err := c.set(endedKey(hdr.EndedAt, id), endedValue(hdr)); err != nil {
				return err
			}
		}
		if err := c.set(metaEndedKey, []byte{1}); err != nil {
			return err
		}
		return c.commit()
	})
}
