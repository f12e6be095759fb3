package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// request is one Apply call (or CreateRun, AddRevision, Memo) waiting for the
// committer.
type request struct {
	ops         []Op
	results     []Result
	err         error // for the request as a whole: nothing of it was applied
	done        chan struct{}
	committedIn uint64 // commit number that carried it (0: nothing written)
}

// entry is one pending write: the encoded value and the decoded object it
// came from (so later ops in the same batch read it without decoding).
type entry struct {
	key  []byte
	val  []byte
	obj  any
	size int64
}

// overlay is a set of pending writes over the committed store.
type overlay struct {
	m      map[string]*entry
	order  []string
	size   int64
	count  int64
	seqs   map[string]uint64 // last assigned event seq per run
	events []Event
}

func newOverlay() overlay {
	return overlay{m: make(map[string]*entry), seqs: make(map[string]uint64)}
}

func (o *overlay) put(e *entry) {
	k := string(e.key)
	if old, ok := o.m[k]; ok {
		o.size -= old.size
		o.count--
	} else {
		o.order = append(o.order, k)
	}
	o.m[k] = e
	o.size += e.size
	o.count++
}

// batch is the committer's view while it packs requests into one transaction:
// committed state (txn) under the accepted requests' writes (base) under the
// writes of the request being evaluated (cur).
type batch struct {
	l    *Ledger
	txn  *badger.Txn
	base overlay
	cur  overlay
}

func (l *Ledger) newBatch() *batch {
	return &batch{l: l, txn: l.db.NewTransaction(true), base: newOverlay(), cur: newOverlay()}
}

// estimate mirrors Badger's own accounting of a transaction's size: key plus
// version, the value if it stays in the LSM tree (else a value pointer), two
// meta bytes and ten bytes of per-entry overhead.
func estimate(key, val []byte) int64 {
	v := int64(len(val))
	if v >= valueThreshold {
		v = 12
	}
	return int64(len(key)) + 8 + v + 2 + 10
}

func (b *batch) lookup(key []byte) (*entry, bool) {
	if e, ok := b.cur.m[string(key)]; ok {
		return e, true
	}
	if e, ok := b.base.m[string(key)]; ok {
		return e, true
	}
	return nil, false
}

// getRaw returns the committed value of key (a copy), or found=false.
func (b *batch) getRaw(key []byte) ([]byte, bool, error) {
	item, err := b.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("ledger: reading: %w", err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, false, fmt.Errorf("ledger: reading value: %w", err)
	}
	return v, true, nil
}

func (b *batch) put(key []byte, obj any, val []byte) {
	b.cur.put(&entry{key: key, val: val, obj: obj, size: estimate(key, val)})
}

func (b *batch) run(runID string) (storedRun, bool, error) {
	k := runKey(runID)
	if e, ok := b.lookup(k); ok {
		return e.obj.(storedRun), true, nil
	}
	raw, ok, err := b.getRaw(k)
	if !ok || err != nil {
		return storedRun{}, false, err
	}
	var r storedRun
	if _, err := decode(raw, &r); err != nil {
		return r, false, fmt.Errorf("ledger: run %q: %w", runID, err)
	}
	return r, true, nil
}

func (b *batch) putRun(r storedRun) error {
	v, err := encode(r, nil)
	if err != nil {
		return err
	}
	b.put(runKey(r.ID), r, v)
	// The list index carries the status so that a filtered listing reads no headers.
	b.put(indexKey(r.CreatedAt.UnixNano(), r.ID), nil, []byte(r.Status))
	return nil
}

func (b *batch) row(runID string, rev int, actionID string) (storedRow, bool, error) {
	k := rowKey(runID, rev, actionID)
	if e, ok := b.lookup(k); ok {
		return e.obj.(storedRow), true, nil
	}
	raw, ok, err := b.getRaw(k)
	if !ok || err != nil {
		return storedRow{}, false, err
	}
	var r storedRow
	if _, err := decode(raw, &r); err != nil {
		return r, false, fmt.Errorf("ledger: row %q/%q: %w", runID, actionID, err)
	}
	return r, true, nil
}

func (b *batch) putRow(runID string, rev int, r storedRow) error {
	v, err := encode(r, nil)
	if err != nil {
		return err
	}
	b.put(rowKey(runID, rev, r.ID), r, v)
	return nil
}

func (b *batch) keyRun(key string) (string, bool, error) {
	k := keyIdxKey(key)
	if e, ok := b.lookup(k); ok {
		return string(e.val), true, nil
	}
	raw, ok, err := b.getRaw(k)
	return string(raw), ok, err
}

func (b *batch) keyRec(runID, key string) (KeyRecord, bool, error) {
	k := keyRecKey(runID, key)
	if e, ok := b.lookup(k); ok {
		return e.obj.(KeyRecord), true, nil
	}
	raw, ok, err := b.getRaw(k)
	if !ok || err != nil {
		return KeyRecord{}, false, err
	}
	rec, err := decodeKeyRec(raw)
	if err != nil {
		return rec, false, fmt.Errorf("ledger: key %s: %w", key, err)
	}
	return rec, true, nil
}

func (b *batch) putKeyRec(rec KeyRecord, isNew bool) error {
	v, err := encodeKeyRec(rec)
	if err != nil {
		return err
	}
	b.put(keyRecKey(rec.RunID, rec.Key), rec, v)
	if isNew {
		b.put(keyIdxKey(rec.Key), nil, []byte(rec.RunID))
	}
	return nil
}

// lastSeq returns the last event seq of a run, as seen by this batch.
func (b *batch) lastSeq(runID string) (uint64, error) {
	if s, ok := b.cur.seqs[runID]; ok {
		return s, nil
	}
	if s, ok := b.base.seqs[runID]; ok {
		return s, nil
	}
	if s, ok := b.l.seqs[runID]; ok {
		return s, nil
	}
	s, err := loadLastSeq(b.txn, runID)
	if err != nil {
		return 0, err
	}
	// Committed state: safe to cache now.
	b.l.seqs[runID] = s
	return s, nil
}

func loadLastSeq(txn *badger.Txn, runID string) (uint64, error) {
	prefix := runPrefix(kindEvent, runID)
	it := txn.NewIterator(badger.IteratorOptions{Reverse: true, Prefix: prefix})
	defer it.Close()
	it.Seek(append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	if !it.ValidForPrefix(prefix) {
		return 0, nil
	}
	k := it.Item().Key()
	if len(k) != len(prefix)+8 {
		return 0, fmt.Errorf("%w: malformed event key", ErrFormat)
	}
	return beUint64(k[len(prefix):]), nil
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}

// event appends an event to the run's log in this batch.
func (b *batch) event(runID, typ, actionID string, data json.RawMessage) error {
	last, err := b.lastSeq(runID)
	if err != nil {
		return err
	}
	ev := Event{Seq: last + 1, RunID: runID, Type: typ, ActionID: actionID, At: b.l.now(), Data: data}
	v, err := encodeEvent(ev)
	if err != nil {
		return err
	}
	b.put(eventKey(runID, ev.Seq), ev, v)
	b.cur.seqs[runID] = ev.Seq
	b.cur.events = append(b.cur.events, ev)
	return nil
}

// accept moves the current request's writes into the batch.
func (b *batch) accept() {
	for _, k := range b.cur.order {
		b.base.put(b.cur.m[k])
	}
	for r, s := range b.cur.seqs {
		b.base.seqs[r] = s
	}
	b.base.events = append(b.base.events, b.cur.events...)
	b.cur = newOverlay()
}

func (b *batch) fits() bool {
	return b.base.size+b.cur.size < b.l.maxBatchSize && b.base.count+b.cur.count < b.l.maxBatchCount
}

// Apply validates each op against the state left by the ops before it (in the
// same call and in earlier commits), commits all that are valid in one
// transaction with their events, syncs, and then returns one Result per op.
// The returned error is for the commit as a whole (ErrClosed, ErrTooLarge when
// the ops of this one call exceed one transaction, a disk error): then no op
// was applied. Once submitted, Apply waits for the commit even if ctx ends, so
// a caller never mistakes a committed claim for a lost one.
func (l *Ledger) Apply(ctx context.Context, ops ...Op) ([]Result, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	for i, o := range ops {
		if o.kind == opNone {
			return nil, fmt.Errorf("%w: op %d was not built with a constructor", ErrInvalid, i)
		}
	}
	req := &request{ops: ops, done: make(chan struct{})}
	if err := l.submit(ctx, req); err != nil {
		return nil, err
	}
	return req.results, req.err
}

func (l *Ledger) submit(ctx context.Context, req *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	select {
	case l.reqCh <- req:
	case <-ctx.Done():
		l.mu.RUnlock()
		return ctx.Err()
	}
	l.mu.RUnlock()
	<-req.done
	return nil
}

// commitLoop is the single writer: it takes every request waiting, evaluates
// them in order into one transaction, commits (Badger syncs before Commit
// returns), and only then acknowledges them.
func (l *Ledger) commitLoop() {
	defer close(l.committerDone)
	var commits, synced uint64
	for {
		first, ok := <-l.reqCh
		if !ok {
			return
		}
		pending := []*request{first}
		open := true
	drain:
		for len(pending) < 4096 {
			select {
			case r, ok := <-l.reqCh:
				if !ok {
					open = false
					break drain
				}
				pending = append(pending, r)
			default:
				break drain
			}
		}
		b := l.newBatch()
		var in []*request
		for i := 0; i < len(pending); {
			r := pending[i]
			results, err := b.evalRequest(r)
			if err == nil && b.fits() {
				b.accept()
				r.results = results
				in = append(in, r)
				i++
				continue
			}
			b.cur = newOverlay()
			if err == nil && len(in) > 0 {
				// Does not fit with the others: commit them, then retry it alone.
				commits++
				synced = l.commit(b, in, commits, synced)
				b, in = l.newBatch(), nil
				continue
			}
			if err == nil {
				err = fmt.Errorf("%w: the ops of one Apply exceed one transaction (%d bytes estimated, limit %d)",
					ErrTooLarge, b.cur.size, l.maxBatchSize)
			}
			r.err = err
			l.ack(r, synced)
			i++
		}
		if len(in) > 0 {
			commits++
			synced = l.commit(b, in, commits, synced)
		} else {
			b.txn.Discard()
		}
		if !open {
			return
		}
	}
}

// commit writes the batch, and acknowledges its requests after the sync.
func (l *Ledger) commit(b *batch, in []*request, n, synced uint64) uint64 {
	defer b.txn.Discard()
	var err error
	if len(b.base.order) > 0 {
		for _, k := range b.base.order {
			e := b.base.m[k]
			if err = b.txn.SetEntry(badger.NewEntry(e.key, e.val)); err != nil {
				break
			}
		}
		if err == nil {
			err = b.txn.Commit() // SyncWrites: synced before it returns
		}
		if err == nil {
			synced = n
			if l.cfg.AfterSync != nil {
				l.cfg.AfterSync()
			}
		}
	}
	if err != nil {
		// The store may hold part of it: forget cached seqs, reload on next use.
		clear(l.seqs)
		err = fmt.Errorf("ledger: commit: %w", translate(err))
		for _, r := range in {
			r.err, r.results = err, nil
			l.ack(r, synced)
		}
		return synced
	}
	for r, s := range b.base.seqs {
		l.seqs[r] = s
	}
	l.hub.publish(b.base.events)
	for _, r := range in {
		if len(b.base.order) > 0 {
			r.committedIn = n
		}
		l.ack(r, synced)
	}
	return synced
}

func (l *Ledger) ack(r *request, synced uint64) {
	if l.cfg.BeforeAck != nil {
		l.cfg.BeforeAck()
	}
	if l.testAck != nil {
		l.testAck(r.committedIn, synced)
	}
	close(r.done)
}

func translate(err error) error {
	switch {
	case errors.Is(err, badger.ErrDBClosed):
		return ErrClosed
	case errors.Is(err, badger.ErrTxnTooBig):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	}
	return err
}

// evalRequest evaluates a request's ops into b.cur. An error here is for the
// request as a whole (an encoding or read failure).
func (b *batch) evalRequest(r *request) ([]Result, error) {
	results := make([]Result, len(r.ops))
	for i, o := range r.ops {
		res, err := b.evalOp(o)
		if err != nil {
			return nil, err
		}
		results[i] = res
	}
	return results, nil
}
