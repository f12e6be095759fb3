package badgerdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
)

// request is one Apply call (or CreateRun, AddRevision, Memo) waiting for the
// committer.
type request struct {
	ops         []ledger.Op
	results     []ledger.Result
	err         error // for the request as a whole: nothing of it was applied
	done        chan struct{}
	committedIn uint64 // commit number that carried it (0: nothing written)
	// excl, when set, is run by the committer alone (collect.go): after
	// every earlier request is durable, before any later one is evaluated;
	// its error is the request's.
	excl func() error
}

// entry is one pending write: the encoded value and the decoded object it
// came from (so later ops in the same batch read it without decoding).
type entry struct {
	key  []byte
	val  []byte
	obj  any
	size int64
	// stale: obj (a RunRecord, a KeyRecord) changed since val was
	// encoded; evalRequest encodes it once, at the end of the request,
	// however often the request rewrote it.
	stale bool
	// del: the commit deletes key (an index entry that moved).
	del bool
}

var (
	_ ledger.Tx             = (*batch)(nil)
	_ ledger.HashedAppender = (*batch)(nil)
)

// overlay is a set of pending writes over the committed store.
type overlay struct {
	m      map[string]*entry
	order  []string
	size   int64
	count  int64
	seqs   map[string]uint64 // last assigned event seq per run
	events []ledger.Event
}

func newOverlay() overlay {
	return overlay{m: make(map[string]*entry), seqs: make(map[string]uint64)}
}

// reset empties o for reuse (the batch keeps the entries themselves).
func (o *overlay) reset() {
	clear(o.m)
	clear(o.seqs)
	o.order, o.events = o.order[:0], o.events[:0]
	o.size, o.count = 0, 0
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
	// A read-only snapshot: it sees every commit that finished; the batch in
	// flight (if any) is consulted through l.inflight first.
	return &batch{l: l, txn: l.db.NewTransaction(false), base: newOverlay(), cur: newOverlay()}
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
	if f := b.l.inflight; f != nil {
		if e, ok := f.b.base.m[string(key)]; ok {
			return e, true
		}
	}
	if e, ok := b.l.cache.m[string(key)]; ok {
		return e, true
	}
	return nil, false
}

// recordCache holds recently written or read committed records, decoded, so
// the committer (the only writer, hence always in step with the store) mostly
// skips Badger reads and JSON decoding for the records an action touches
// twice (claim, then outcome). Bounded by value bytes: when full it is
// emptied. Cleared after a failed commit.
type recordCache struct {
	m    map[string]*entry
	size int64
}

const recordCacheBytes = 4 << 20
const recordCacheMaxValue = 2 << 10

func (c *recordCache) add(e *entry) {
	switch e.key[0] {
	case kindEvent, kindPlan, kindIndex, kindWake:
		return // never read back by the committer
	}
	if len(e.val) > recordCacheMaxValue {
		delete(c.m, string(e.key))
		return
	}
	if c.size > recordCacheBytes {
		clear(c.m)
		c.size = 0
	}
	c.m[string(e.key)] = e
	c.size += int64(len(e.key) + len(e.val) + 64)
}

// cacheRead remembers a committed record read from Badger.
func (b *batch) cacheRead(key []byte, obj any, val []byte) {
	b.l.cache.add(&entry{key: key, obj: obj, val: val})
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

func (b *batch) Run(runID string) (ledger.RunRecord, bool, error) {
	k := runKey(runID)
	if e, ok := b.lookup(k); ok {
		return e.obj.(ledger.RunRecord), true, nil
	}
	raw, ok, err := b.getRaw(k)
	if !ok || err != nil {
		return ledger.RunRecord{}, false, err
	}
	r, err := decodeRun(raw)
	if err != nil {
		return r, false, fmt.Errorf("ledger: run %q: %w", runID, err)
	}
	b.cacheRead(k, r, raw)
	return r, true, nil
}

func (b *batch) PutRun(r ledger.RunRecord) error {
	prev, existed, err := b.Run(r.ID)
	if err != nil {
		return err
	}
	k := runKey(r.ID)
	if e, ok := b.cur.m[string(k)]; ok && e.obj != nil {
		// Written earlier in this request (each event of a chained run
		// moves the header): encoded once, at accept.
		e.obj, e.stale = r, true
	} else {
		v, err := encodeRun(r)
		if err != nil {
			return err
		}
		b.put(k, r, v)
	}
	// The list index carries the status so that a filtered listing reads no
	// headers; it is rewritten only when the status changes.
	if !existed || prev.Status != r.Status {
		b.put(indexKey(r.CreatedAt.UnixNano(), r.ID), nil, []byte(r.Status))
	}
	if !prev.WakeAt.Equal(r.WakeAt) {
		b.moveWake(prev, r)
	}
	// Ended runs by end time, for the collector (collect.go); an entry left
	// by an earlier end (a replayed run) is dropped by the collector.
	if !r.EndedAt.IsZero() && (!existed || !prev.EndedAt.Equal(r.EndedAt)) {
		b.put(endedKey(r.EndedAt, r.ID), nil, endedValue(r))
	}
	return nil
}

// row returns a row of a revision: its row record if the row changed since
// the revision was recorded, else its initial state from the revision's rows
// blob.
func (b *batch) Row(runID string, rev int, actionID string) (ledger.RowRecord, bool, error) {
	k := rowKey(runID, rev, actionID)
	if e, ok := b.lookup(k); ok {
		return e.obj.(ledger.RowRecord), true, nil
	}
	raw, ok, err := b.getRaw(k)
	if err != nil {
		return ledger.RowRecord{}, false, err
	}
	if ok {
		var base *ledger.RowRecord
		if rowNeedsBase(raw) {
			if base, err = b.initialRow(runID, rev, actionID); err != nil {
				return ledger.RowRecord{}, false, err
			}
		}
		r, err := decodeRowRecord(actionID, raw, base)
		if err != nil {
			return r, false, fmt.Errorf("ledger: row %q/%q: %w", runID, actionID, err)
		}
		b.cacheRead(k, r, raw)
		return r, true, nil
	}
	blob, err := b.initialRows(runID, rev)
	if err != nil || blob == nil {
		return ledger.RowRecord{}, false, err
	}
	i, ok := blob.index[actionID]
	if !ok {
		return ledger.RowRecord{}, false, nil
	}
	return blob.rows[i], true, nil
}

// rowsBlob is a revision's rows as recorded, decoded and indexed.
type rowsBlob struct {
	rows  []ledger.RowRecord
	index map[string]int
}

func newRowsBlob(rows []ledger.RowRecord) *rowsBlob {
	b := &rowsBlob{rows: rows, index: make(map[string]int, len(rows))}
	for i, r := range rows {
		b.index[r.ID] = i
	}
	return b
}

func decodeRowsBlob(v []byte) (*rowsBlob, error) {
	rows, err := decodeRows(v)
	if err != nil {
		return nil, err
	}
	return newRowsBlob(rows), nil
}

// blobCache keeps decoded rows blobs of recent revisions for the committer,
// bounded by their number of rows (emptied when full).
type blobCache struct {
	m    map[string]*rowsBlob
	rows int
}

const blobCacheRows = 200_000

func (c *blobCache) add(key string, b *rowsBlob) {
	if c.rows+len(b.rows) > blobCacheRows {
		clear(c.m)
		c.rows = 0
	}
	c.m[key] = b
	c.rows += len(b.rows)
}

func (b *batch) initialRows(runID string, rev int) (*rowsBlob, error) {
	k := rowsBlobKey(runID, rev)
	if e, ok := b.lookup(k); ok {
		return e.obj.(*rowsBlob), nil
	}
	if rb, ok := b.l.blobs.m[string(k)]; ok {
		return rb, nil
	}
	raw, ok, err := b.getRaw(k)
	if !ok || err != nil {
		return nil, err
	}
	rb, err := decodeRowsBlob(raw)
	if err != nil {
		return nil, fmt.Errorf("ledger: rows of run %q revision %d: %w", runID, rev, err)
	}
	b.l.blobs.add(string(k), rb)
	return rb, nil
}

// initialRow returns a copy of a row's initial state (nil: the revision
// has no such row).
func (b *batch) initialRow(runID string, rev int, actionID string) (*ledger.RowRecord, error) {
	blob, err := b.initialRows(runID, rev)
	if err != nil || blob == nil {
		return nil, err
	}
	i, ok := blob.index[actionID]
	if !ok {
		return nil, nil
	}
	r := blob.rows[i]
	return &r, nil
}

// PutRow writes a row record: what changed since the row's initial state
// in the revision's rows record (ledger.Tx).
func (b *batch) PutRow(runID string, rev int, r ledger.RowRecord) error {
	base, err := b.initialRow(runID, rev, r.ID)
	if err != nil {
		return err
	}
	b.put(rowKey(runID, rev, r.ID), r, encodeRow(r, base))
	return nil
}

func (b *batch) KeyRun(key string) (string, bool, error) {
	k := keyIdxKey(key)
	if e, ok := b.lookup(k); ok {
		return string(e.val), true, nil
	}
	raw, ok, err := b.getRaw(k)
	if ok {
		b.cacheRead(k, nil, raw)
	}
	return string(raw), ok, err
}

func (b *batch) KeyRec(runID, key string) (ledger.KeyRecord, bool, error) {
	k := keyRecKey(runID, key)
	if e, ok := b.lookup(k); ok {
		return e.obj.(ledger.KeyRecord), true, nil
	}
	raw, ok, err := b.getRaw(k)
	if !ok || err != nil {
		return ledger.KeyRecord{}, false, err
	}
	rec, err := decodeKeyRec(runID, key, raw)
	if err != nil {
		return rec, false, fmt.Errorf("ledger: %w", err)
	}
	b.cacheRead(k, rec, raw)
	return rec, true, nil
}

// PutKeyRec writes a key record (ledger.Tx). It is encoded at the end of the
// request (evalRequest), once, however often the request rewrote it.
func (b *batch) PutKeyRec(rec ledger.KeyRecord, isNew bool) error {
	k := keyRecKey(rec.RunID, rec.Key)
	v := encodeKeyRec(rec)
	b.cur.put(&entry{key: k, val: v, obj: rec, size: estimate(k, v), stale: true})
	if isNew {
		b.put(keyIdxKey(rec.Key), nil, []byte(rec.RunID))
	}
	return nil
}

// Now is the ledger's clock, in UTC (ledger.Tx).
func (b *batch) Now() time.Time { return b.l.now() }

// Incarnation is the owner of claims made through this handle (ledger.Tx).
func (b *batch) Incarnation() string { return b.l.incarnation }

// MaxOutputBytes is Config.MaxOutputBytes (ledger.Tx).
func (b *batch) MaxOutputBytes() int { return b.l.cfg.MaxOutputBytes }

// PutRows records a revision's initial rows as one record (so that a plan of
// any size is one record: large ones go to the value log); rows that change
// later get their own row records, which take precedence (ledger.Tx).
func (b *batch) PutRows(runID string, rev int, rows []ledger.RowRecord) error {
	b.put(rowsBlobKey(runID, rev), newRowsBlob(rows), encodeRows(rows))
	return nil
}

// PutPlan records a plan revision (immutable) (ledger.Tx).
func (b *batch) PutPlan(runID string, rev int, planJSON []byte, argRefs map[string]string) error {
	v := planRecord(planJSON, argRefs)
	// Encoded again at the end of the request (planValue), once the
	// revision's rows are written: its actions may then be left to them.
	k := planKey(runID, rev)
	pp := pendingPlan{runID: runID, rev: rev, planJSON: planJSON, argRefs: argRefs, v: v}
	b.cur.put(&entry{key: k, val: v, obj: pp, size: estimate(k, v), stale: true})
	return nil
}

// pendingPlan is a plan revision written in the request being evaluated.
type pendingPlan struct {
	runID    string
	rev      int
	planJSON []byte
	argRefs  map[string]string
	v        []byte // its record without the rows (planRecord)
}

// planValue is the record of a plan revision: without its actions when the
// revision's rows (written by the same request) give them back, else v.
func (b *batch) planValue(pp pendingPlan) []byte {
	e, ok := b.lookup(rowsBlobKey(pp.runID, pp.rev))
	if !ok {
		return pp.v
	}
	rb, ok := e.obj.(*rowsBlob)
	if !ok {
		return pp.v
	}
	if v, ok := compactPlan(pp.planJSON, pp.argRefs, rb.rows); ok {
		return v
	}
	return pp.v
}

// Memo returns the memo (runID, name) as this batch sees it (ledger.Tx).
func (b *batch) Memo(runID, name string) (json.RawMessage, bool, error) {
	k := memoKey(runID, name)
	if e, ok := b.lookup(k); ok {
		return e.val, true, nil
	}
	return b.getRaw(k)
}

// PutMemo writes a memo (ledger.Tx).
func (b *batch) PutMemo(runID, name string, v json.RawMessage) error {
	b.put(memoKey(runID, name), nil, v)
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
	if f := b.l.inflight; f != nil {
		if s, ok := f.b.base.seqs[runID]; ok {
			return s, nil
		}
	}
	if s, ok := b.l.seqs[runID]; ok {
		return s, nil
	}
	s, err := loadLastSeq(b.txn, runID)
	if err != nil {
		return 0, err
	}
	// Committed state, and no batch in flight wrote to this run: safe to cache.
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
		return 0, fmt.Errorf("%w: malformed event key", ledger.ErrFormat)
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

// AppendEvent appends an event to the run's log in this batch (ledger.Tx).
func (b *batch) AppendEvent(runID string, typ ledger.EventType, actionID string, data json.RawMessage) error {
	last, err := b.lastSeq(runID)
	if err != nil {
		return err
	}
	ev := ledger.Event{Seq: last + 1, RunID: runID, Type: typ, ActionID: actionID, At: b.Now(), Data: data}
	v := encodeEvent(ev)
	b.put(eventKey(runID, ev.Seq), ev, v)
	b.cur.seqs[runID] = ev.Seq
	b.cur.events = append(b.cur.events, ev)
	return nil
}

// AppendHashedEvent is AppendEvent with the event's audit hash
// (ledger.HashedAppender).
func (b *batch) AppendHashedEvent(runID string, typ ledger.EventType, actionID string, data json.RawMessage, hash func(ledger.Event) string) (ledger.Event, error) {
	last, err := b.lastSeq(runID)
	if err != nil {
		return ledger.Event{}, err
	}
	ev := ledger.Event{Seq: last + 1, RunID: runID, Type: typ, ActionID: actionID, At: b.Now().UTC(), Data: data}
	ev.Hash = hash(ev)
	v := encodeEvent(ev)
	b.put(eventKey(runID, ev.Seq), ev, v)
	b.cur.seqs[runID] = ev.Seq
	b.cur.events = append(b.cur.events, ev)
	return ev, nil
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
	b.cur.reset()
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
func (l *Ledger) Apply(ctx context.Context, ops ...ledger.Op) ([]ledger.Result, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if err := ledger.Check(ops); err != nil {
		return ledger.FailedResults(len(ops), err), err
	}
	req := &request{ops: ops, done: make(chan struct{})}
	if err := l.submit(ctx, req); err != nil {
		return ledger.FailedResults(len(ops), err), err
	}
	if req.err != nil {
		return ledger.FailedResults(len(ops), req.err), req.err
	}
	return req.results, nil
}

func (l *Ledger) submit(ctx context.Context, req *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ledger.ErrClosed
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

// commitLoop evaluates requests in arrival order into a batch (one
// transaction) and hands the batch to the writer goroutine, which commits it
// (Badger syncs before Commit returns) and only then acknowledges its
// requests. While the writer commits batch k, every request that arrives is
// evaluated into batch k+1 on top of batch k's writes; batch k+1 is handed
// over as soon as batch k is durable (group commit with one batch in flight),
// and fails as a whole if batch k failed.
func (l *Ledger) commitLoop() {
	defer close(l.committerDone)
	writes := make(chan *flight, 1)
	writerDone := make(chan struct{})
	go l.writer(writes, writerDone)
	defer func() {
		close(writes)
		<-writerDone
	}()
	p := &pending{l: l, writes: writes}
	reqCh := l.reqCh
	for reqCh != nil || p.b != nil || l.inflight != nil {
		if l.inflight == nil && p.b != nil {
			p.flush()
			continue
		}
		var done chan error
		if l.inflight != nil {
			done = l.inflight.done
		}
		select {
		case err := <-done:
			p.settled(err)
		case r, ok := <-reqCh:
			if !ok {
				reqCh = nil
				continue
			}
			p.add(r)
		}
	}
}

// pending is the batch the commit loop fills (nil: none yet) and its
// requests: evaluated on top of the batch in flight, handed to the writer
// once that one is durable.
type pending struct {
	l      *Ledger
	writes chan<- *flight
	b      *batch
	in     []*request
}

// flush hands the batch to the writer; only with nothing in flight.
func (p *pending) flush() {
	if p.b != nil {
		p.l.handOff(p.writes, p.b, p.in)
		p.b, p.in = nil, nil
	}
}

// settled takes the outcome of the batch in flight: on failure the pending
// batch, evaluated on top of writes that did not commit, fails too.
func (p *pending) settled(err error) {
	p.l.finish(err)
	if err != nil && p.b != nil {
		// b was evaluated on top of writes that did not commit.
		p.b.txn.Discard()
		err = fmt.Errorf("ledger: commit: an earlier commit failed: %w", err)
		for _, r := range p.in {
			r.err, r.results = err, nil
			p.l.ack(r, 0, 0)
		}
		p.b, p.in = nil, nil
	}
	p.flush()
}

// add evaluates r into the pending batch. When r does not fit with the
// requests already in it, those are committed first and r goes into the
// next batch; a request that fits in no batch fails alone (ErrTooLarge).
func (p *pending) add(r *request) {
	l := p.l
	if r.excl != nil {
		p.exclusive(r)
		return
	}
	for {
		if p.b == nil {
			p.b = l.newBatch()
		}
		results, err := p.b.evalRequest(r)
		if err == nil && p.b.fits() {
			p.b.accept()
			r.results = results
			p.in = append(p.in, r)
			return
		}
		size := p.b.cur.size
		p.b.cur.reset()
		if err == nil && len(p.in) > 0 {
			// It does not fit with the others: commit them first.
			if l.inflight != nil {
				p.settled(<-l.inflight.done)
			} else {
				p.flush()
			}
			if l.inflight != nil {
				p.settled(<-l.inflight.done)
			}
			continue
		}
		if err == nil {
			err = fmt.Errorf("%w: the ops of one Apply exceed one transaction (%d bytes estimated, limit %d)",
				ledger.ErrTooLarge, size, l.maxBatchSize)
		}
		r.err = err
		l.ack(r, 0, 0)
		return
	}
}

// exclusive runs r.excl once nothing is pending or in flight, then forgets
// the cached records and seqs (excl may have deleted them).
func (p *pending) exclusive(r *request) {
	l := p.l
	for l.inflight != nil || p.b != nil {
		if l.inflight != nil {
			p.settled(<-l.inflight.done)
		} else {
			p.flush()
		}
	}
	r.err = r.excl()
	l.forgetCached()
	l.ack(r, 0, 0)
}

// flight is a batch handed to the writer.
type flight struct {
	b    *batch
	in   []*request
	done chan error
}

// handOff gives b to the writer (nothing may be in flight). Requests without
// writes are acknowledged at once: the state they read is durable.
func (l *Ledger) handOff(writes chan<- *flight, b *batch, in []*request) {
	b.txn.Discard()
	if len(b.base.order) == 0 {
		for _, r := range in {
			l.ack(r, 0, 0)
		}
		return
	}
	f := &flight{b: b, in: in, done: make(chan error, 1)}
	l.inflight = f
	writes <- f
}

// finish folds the result of the batch in flight into the committer's caches.
func (l *Ledger) finish(err error) {
	f := l.inflight
	l.inflight = nil
	if err != nil {
		// The store may hold part of it: forget cached seqs and records,
		// reload on next use.
		l.forgetCached()
		return
	}
	for r, s := range f.b.base.seqs {
		l.seqs[r] = s
	}
	for _, k := range f.b.base.order {
		l.cache.add(f.b.base.m[k])
	}
}

// forgetCached drops the committer's cached seqs and records: they are
// read again on next use.
func (l *Ledger) forgetCached() {
	clear(l.seqs)
	clear(l.cache.m)
	l.cache.size = 0
	clear(l.blobs.m)
	l.blobs.rows = 0
}

// writer commits batches in order and acknowledges their requests after the
// sync.
func (l *Ledger) writer(writes <-chan *flight, done chan<- struct{}) {
	defer close(done)
	var n uint64
	for f := range writes {
		n++
		// Admitted only if Badger can finish it and what it sets off
		// (space.go); a refused batch writes nothing.
		err := l.space.admit(commitBytes(f.b), l.log)
		if err == nil {
			err = l.write(f.b)
		}
		if err != nil {
			err = fmt.Errorf("ledger: commit: %w", translate(err))
			for _, r := range f.in {
				r.err, r.results = err, nil
				l.ack(r, 0, n-1)
			}
			f.done <- err
			continue
		}
		l.stats.commits.Add(1)
		l.stats.requests.Add(uint64(len(f.in)))
		l.stats.entries.Add(uint64(len(f.b.base.order)))
		if l.cfg.AfterSync != nil {
			l.cfg.AfterSync()
		}
		l.hub.Publish(f.b.base.events)
		for _, r := range f.in {
			l.ack(r, n, n)
		}
		f.done <- nil
	}
}

func (l *Ledger) write(b *batch) error {
	txn := l.db.NewTransaction(true)
	defer txn.Discard()
	for _, k := range b.base.order {
		e := b.base.m[k]
		if e.del {
			if err := txn.Delete(e.key); err != nil {
				return err
			}
			continue
		}
		if err := txn.SetEntry(badger.NewEntry(e.key, e.val)); err != nil {
			return err
		}
	}
	return txn.Commit() // SyncWrites: synced before it returns
}

// ack acknowledges a request. committedIn is the commit that carried its
// writes (0: none), synced the last commit known durable.
func (l *Ledger) ack(r *request, committedIn, synced uint64) {
	r.committedIn = committedIn
	if l.cfg.BeforeAck != nil {
		l.cfg.BeforeAck()
	}
	if l.testAck != nil {
		l.testAck(committedIn, synced)
	}
	close(r.done)
}

func translate(err error) error {
	switch {
	case errors.Is(err, badger.ErrDBClosed):
		return ledger.ErrClosed
	case errors.Is(err, badger.ErrTxnTooBig):
		return fmt.Errorf("%w: %v", ledger.ErrTooLarge, err)
	case isNoSpaceErr(err) && !errors.Is(err, ledger.ErrNoSpace):
		return fmt.Errorf("%w: %v", ledger.ErrNoSpace, err)
	}
	return err
}

// evalRequest evaluates a request's ops into b.cur. An error here is for the
// request as a whole (an encoding or read failure).
func (b *batch) evalRequest(r *request) ([]ledger.Result, error) {
	results, err := ledger.EvalApply(b, r.ops)
	if err != nil {
		return nil, err
	}
	for _, k := range b.cur.order {
		if e := b.cur.m[k]; e.stale {
			var v []byte
			var err error
			switch o := e.obj.(type) {
			case ledger.KeyRecord:
				v = encodeKeyRec(o)
			case pendingPlan:
				v = b.planValue(o)
			case ledger.RunRecord:
				v, err = encodeRun(o)
			default:
				err = fmt.Errorf("ledger: no encoding for a %T", e.obj)
			}
			if err != nil {
				return nil, err
			}
			b.cur.size += estimate(e.key, v) - e.size
			e.val, e.size, e.stale = v, estimate(e.key, v), false
		}
	}
	return results, nil
}

// Stats counts the committer's work since Open.
type Stats struct {
	Commits  uint64 // durable commits (one sync each)
	Requests uint64 // Apply calls (and CreateRun, AddRevision, Memo) carried by them
	Entries  uint64 // records written by them
}

type stats struct{ commits, requests, entries atomic.Uint64 }

// Stats returns the committer's counters: Requests/Commits is the average
// group-commit batch.
func (l *Ledger) Stats() Stats {
	return Stats{Commits: l.stats.commits.Load(), Requests: l.stats.requests.Load(), Entries: l.stats.entries.Load()}
}
