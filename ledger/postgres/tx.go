package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/docketrun/docket/ledger"
)

// tx is one Apply's transaction. It implements ledger.Tx: every record it
// reads is locked (FOR UPDATE) and cached; writes go to the cache and are
// queued, so a reader of the same transaction sees the cache. An Apply is
// two round trips in the common case: begin sends BEGIN with the reads the
// ops are known to make (ledger.ReadSet) and the clock in one pipeline, and
// commit sends the writes, the runs' new last_seq, the lease check and
// COMMIT in another. A read the forecast missed is one more query.
type tx struct {
	s   *Store
	ctx context.Context
	ptx *pgx.Conn // in the transaction begin opened
	inc string
	now time.Time // the database's clock, read once (zero: not yet)

	// spec: a one round trip Apply, evaluated on what recent remembers
	// (spec.go); specMiss: it needed something else; ver: what it read.
	spec, specMiss bool
	ver            verify
	creates        []string // the runs the Apply records (ledger.Reads.Creates)
	xid            int64    // the transaction's id, read at commit (0: none)

	runs  map[string]*runEntry
	rows  map[rowKey]*rowEntry
	keys  map[string]*keyEntry
	memos map[pair]*valEntry
	blobs map[pair]*valEntry
	bud   *budgetCache           // budget buckets and holds read or written (budget.go)
	lim   map[string]*limitEntry // tool limits read or written (toollimit.go)

	batch  pgx.Batch
	events []ledger.Event
	evArgs []any // the events' INSERT parameters, eventParams each (queued at commit)
	// docs[i] names the run whose document commit reads, after the writes,
	// for the i-th Apply of the transaction ("": none), into docReads[i].
	docs     []string
	docReads []docRead
	ranges   map[string][2]uint64 // run -> first, last seq appended
	inserts  [][]rowKey           // PutRows' rows, a statement each, queued at commit
}

type runEntry struct {
	rec     ledger.RunRecord
	found   bool // the run exists (in the database or written here)
	inDB    bool // a row exists in the database (UPDATE, not INSERT)
	dirty   bool // rec was written: it is sent at commit, once
	lastSeq uint64
	seqs    bool  // events were appended: last_seq is written at commit
	xmin    int64 // the version a one round trip Apply remembered (0: none)
}

type rowKey struct {
	run string
	rev int
	id  string
}

// A row or key with an xmin was read by a one round trip Apply from
// recent: when the Apply writes it, the write is queued at commit, by the
// statement that checks it (verifyBatch), and once.
type rowEntry struct {
	rec    ledger.RowRecord
	found  bool
	dirty  bool  // written by this transaction
	xmin   int64 // the version remembered (0: none)
	unsent bool  // inserted by PutRows: its INSERT is queued at commit, with rec as it is then
}

type keyEntry struct {
	rec   ledger.KeyRecord
	found bool
	dirty bool  // written by this transaction
	xmin  int64 // the version remembered (0: none, or remembered absent)
}

type pair struct{ a, b string }

type valEntry struct {
	v     json.RawMessage
	found bool
}

var (
	_ ledger.Tx             = (*tx)(nil)
	_ ledger.HashedAppender = (*tx)(nil)
)

func newTx(s *Store, ctx context.Context, ptx *pgx.Conn) *tx {
	return &tx{s: s, ctx: ctx, ptx: ptx, inc: s.Incarnation(),
		runs: map[string]*runEntry{}, rows: map[rowKey]*rowEntry{}, keys: map[string]*keyEntry{},
		memos: map[pair]*valEntry{}, blobs: map[pair]*valEntry{}, ranges: map[string][2]uint64{}}
}

// Now is Config.Clock's time, else the transaction's reading of the
// database's clock.
func (t *tx) Now() time.Time {
	if t.s.cfg.Clock != nil {
		return t.s.cfg.Clock.Now().UTC().Truncate(time.Microsecond)
	}
	if t.now.IsZero() && !t.spec {
		if err := t.ptx.QueryRow(t.ctx, t.s.q.clock).Scan(&t.now); err != nil {
			// The next statement fails the same way and fails the Apply.
			return t.s.Now()
		}
		t.now = t.now.UTC()
	}
	return t.now
}

func (t *tx) Incarnation() string { return t.inc }
func (t *tx) MaxOutputBytes() int { return t.s.cfg.MaxOutputBytes }

// OwnerGone: owner's node lease expired by the database's clock, or owner
// has no node row.
func (t *tx) OwnerGone(owner string) (bool, error) {
	if owner == "" {
		return true, nil
	}
	if t.spec {
		return false, t.missed()
	}
	var gone bool
	err := t.ptx.QueryRow(t.ctx, t.s.q.ownerGone, owner).Scan(&gone)
	return gone, err
}

func (t *tx) run(runID string) (*runEntry, error) {
	if e, ok := t.runs[runID]; ok {
		return e, nil
	}
	if t.spec {
		return t.specRun(runID)
	}
	e := &runEntry{}
	var lastSeq int64
	err := scanRun(t.s.env, t.ptx.QueryRow(t.ctx, t.s.q.runForUpdate, runID), &e.rec, &lastSeq)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, err
	default:
		e.found, e.inDB, e.lastSeq = true, true, uint64(lastSeq)
	}
	t.runs[runID] = e
	return e, nil
}

func (t *tx) Run(runID string) (ledger.RunRecord, bool, error) {
	e, err := t.run(runID)
	if err != nil {
		return ledger.RunRecord{}, false, err
	}
	return e.rec, e.found, nil
}

func (t *tx) PutRun(r ledger.RunRecord) error {
	e, err := t.run(r.ID)
	if err != nil {
		return err
	}
	// Written at commit, with last_seq: a run an Apply writes several
	// times (its header, then its audit chain's position at every event)
	// is one statement.
	e.rec, e.found, e.dirty = r, true, true
	return nil
}

// queueRun queues the statement that writes run e at commit (none when it
// is unchanged, or a one round trip Apply's check wrote it: verifyBatch).
func (t *tx) queueRun(e *runEntry) {
	if e.xmin != 0 {
		return
	}
	if q, args := t.runWrite(e, false); q != "" {
		t.batch.Queue(q, args...)
	}
}

// runWrite is the statement that writes run e, and its arguments ("": none;
// guarded: its guard's, which checks the version remembered).
func (t *tx) runWrite(e *runEntry, guarded bool) (string, []any) {
	r := e.rec
	args := []any{r.ID, string(r.Status), r.Revision, t.s.env.sealText("runs.goal", r.Goal), r.Policy, r.PlanHash, r.ToolsHash,
		r.CreatedAt.UTC(), r.UpdatedAt.UTC(), t.s.env.sealText("runs.error", r.Error), r.PausedBy, r.Rows, r.RevHash, r.CreatedBy, r.Audit, r.AuditHash, int64(r.AuditSeq), wakeArg(r.WakeAt),
		time.Duration(r.Retention).Milliseconds(), timeOrNil(r.EndedAt), timeOrNil(r.KeysUntil)}
	var driver any // NULL: no event appended (a new run's), kept (an update's)
	if e.seqs {
		driver = t.inc
	}
	switch {
	case e.dirty && !e.inDB:
		return t.s.q.insertRun, append(args, int64(e.lastSeq), driver)
	case e.dirty && guarded:
		return t.s.q.updateRunIf, append(args, int64(e.lastSeq), driver)
	case e.dirty:
		return t.s.q.updateRun, append(args, int64(e.lastSeq), driver)
	case e.seqs && guarded:
		return t.s.q.setLastSeqIf, []any{r.ID, int64(e.lastSeq), t.inc}
	case e.seqs:
		return t.s.q.setLastSeq, []any{r.ID, int64(e.lastSeq), t.inc}
	}
	return "", nil
}

func (t *tx) Row(runID string, rev int, actionID string) (ledger.RowRecord, bool, error) {
	k := rowKey{runID, rev, actionID}
	if e, ok := t.rows[k]; ok {
		return e.rec, e.found, nil
	}
	if t.spec {
		e, err := t.specRow(k)
		if err != nil {
			return ledger.RowRecord{}, false, err
		}
		return e.rec, true, nil
	}
	e := &rowEntry{}
	err := scanRow(t.s.env, t.ptx.QueryRow(t.ctx, t.s.q.rowForUpdate, runID, rev, actionID), &e.rec, nil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return ledger.RowRecord{}, false, err
	default:
		e.found = true
	}
	t.rows[k] = e
	return e.rec, e.found, nil
}

func cloneRow(r ledger.RowRecord) ledger.RowRecord {
	r.Args, r.ApprovedArgs = bytes.Clone(r.Args), bytes.Clone(r.ApprovedArgs)
	r.DependsOn = slices.Clone(r.DependsOn)
	return r
}

func rowArgs(e *envelope, runID string, rev int, r ledger.RowRecord) []any {
	var deps []string
	if len(r.DependsOn) > 0 {
		deps = r.DependsOn
	}
	var gate, approvals []byte
	if r.Gate != nil {
		gate, _ = json.Marshal(r.Gate)
	}
	if len(r.Approvals) > 0 {
		approvals, _ = json.Marshal(r.Approvals)
	}
	var timer, toolWait []byte
	if r.Timer != nil {
		timer, _ = json.Marshal(r.Timer)
	}
	if r.ToolWait != nil {
		toolWait, _ = json.Marshal(r.ToolWait)
	}
	return []any{runID, rev, r.ID, r.Ord, r.Tool, r.Class, r.Key, string(r.Status), r.Attempts, nilIfEmpty(e.seal("actions.args", r.Args)), deps,
		e.sealText("actions.error", r.Error), nilIfEmpty(e.seal("actions.approved_args", r.ApprovedArgs)), r.Undo, nilIfEmpty(gate), nilIfEmpty(approvals), nilIfEmpty(timer), nilIfEmpty(toolWait)}
}

func (t *tx) PutRow(runID string, rev int, r ledger.RowRecord) error {
	r = cloneRow(r)
	k := rowKey{runID, rev, r.ID}
	e, ok := t.rows[k]
	if ok && e.unsent {
		// Not sent yet: its INSERT carries this version.
		e.rec = r
		return nil
	}
	if ok && e.xmin != 0 {
		t.rows[k] = &rowEntry{rec: r, found: true, dirty: true, xmin: e.xmin}
		return nil
	}
	// A row this transaction read or wrote before is there (statements run
	// in the order queued): an UPDATE by its key, cheaper than an upsert.
	q := t.s.q.upsertRow
	if ok && e.found {
		q = t.s.q.updateRow
	}
	t.batch.Queue(q, rowArgs(t.s.env, runID, rev, r)...)
	t.rows[k] = &rowEntry{rec: r, found: true, dirty: true}
	return nil
}

// PutRows inserts a revision's rows, up to maxRowsPerInsert of them per
// statement. The statements are queued at commit (queueInserts), so that a
// row the same transaction writes again (a new run's first claim) is
// inserted once, as it is written last.
func (t *tx) PutRows(runID string, rev int, rows []ledger.RowRecord) error {
	for chunk := range slices.Chunk(rows, maxRowsPerInsert) {
		ks := make([]rowKey, len(chunk))
		for i, r := range chunk {
			ks[i] = rowKey{runID, rev, r.ID}
			t.rows[ks[i]] = &rowEntry{rec: cloneRow(r), found: true, dirty: true, unsent: true}
		}
		t.inserts = append(t.inserts, ks)
	}
	return nil
}

// queueInserts queues PutRows' statements, before the statements that read
// the rows (the runs' writes, the documents).
func (t *tx) queueInserts() {
	for _, ks := range t.inserts {
		args := make([]any, 0, len(ks)*rowParams)
		for _, k := range ks {
			e := t.rows[k]
			args = append(args, rowArgs(t.s.env, k.run, k.rev, e.rec)...)
			e.unsent = false
		}
		t.batch.Queue(t.s.q.insertRows[len(ks)-1], args...)
	}
	t.inserts = nil
}

func (t *tx) PutPlan(runID string, rev int, planJSON []byte, argRefs map[string]string) error {
	var refs any
	if len(argRefs) > 0 {
		b, err := json.Marshal(argRefs)
		if err != nil {
			return err
		}
		refs = string(b)
	}
	t.batch.Queue(t.s.q.insertPlan, runID, rev, t.s.env.seal("revisions.plan", bytes.Clone(planJSON)), refs)
	return nil
}

func (t *tx) key(key string) (*keyEntry, error) {
	if e, ok := t.keys[key]; ok {
		return e, nil
	}
	if t.spec {
		return t.specKey(key), nil
	}
	e := &keyEntry{}
	err := scanKey(t.s.env, t.ptx.QueryRow(t.ctx, t.s.q.keyForUpdate, key), &e.rec)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, err
	default:
		e.found = true
	}
	t.keys[key] = e
	return e, nil
}

func (t *tx) KeyRun(key string) (string, bool, error) {
	e, err := t.key(key)
	if err != nil || !e.found {
		return "", false, err
	}
	return e.rec.RunID, true, nil
}

func (t *tx) KeyRec(runID, key string) (ledger.KeyRecord, bool, error) {
	e, err := t.key(key)
	if err != nil || !e.found || e.rec.RunID != runID {
		return ledger.KeyRecord{}, false, err
	}
	return e.rec, true, nil
}

func (t *tx) PutKeyRec(rec ledger.KeyRecord, isNew bool) error {
	e, err := t.key(rec.Key)
	if err != nil {
		return err
	}
	rec.Args, rec.Output = bytes.Clone(rec.Args), bytes.Clone(rec.Output)
	switch {
	case e.xmin != 0:
		// Remembered: written at commit by its check (verifyBatch).
	case e.found:
		t.batch.Queue(t.s.q.updateKey, keyArgs(t.s.env, rec)...)
	default:
		// A plain INSERT: a concurrent first claim of the same key meets
		// this one on the primary key, and the loser runs again.
		t.batch.Queue(t.s.q.insertKey, keyArgs(t.s.env, rec)...)
	}
	e.rec, e.found, e.dirty = rec, true, true
	return nil
}

func keyArgs(env *envelope, rec ledger.KeyRecord) []any {
	return []any{rec.Key, rec.RunID, rec.ActionID, rec.Tool, nilIfEmpty(env.seal("keys.args", rec.Args)), string(rec.State), rec.Attempt, rec.Owner,
		timeOrNil(rec.ClaimedAt), nilIfEmpty(env.seal("keys.output", rec.Output)), env.sealText("keys.error", rec.Error), rec.Retryable, timeOrNil(rec.UpdatedAt),
		timeOrNil(rec.FirstClaimedAt), rec.MaybeTookEffect, string(rec.Failure)}
}

func (t *tx) AppendEvent(runID string, typ ledger.EventType, actionID string, data json.RawMessage) error {
	_, err := t.AppendHashedEvent(runID, typ, actionID, data, nil)
	return err
}

// AppendHashedEvent is AppendEvent with the event's audit hash
// (ledger.HashedAppender); hash nil: none. The time hashed is the time
// stored (the database keeps microseconds, and so does Now).
func (t *tx) AppendHashedEvent(runID string, typ ledger.EventType, actionID string, data json.RawMessage, hash func(ledger.Event) string) (ledger.Event, error) {
	e, err := t.run(runID)
	if err != nil {
		return ledger.Event{}, err
	}
	if !e.found {
		return ledger.Event{}, fmt.Errorf("%w: run %q", ledger.ErrNotFound, runID)
	}
	e.lastSeq++
	e.seqs = true
	ev := ledger.Event{Seq: e.lastSeq, RunID: runID, Type: typ, ActionID: actionID, At: t.Now().UTC().Truncate(time.Microsecond), Data: bytes.Clone(data)}
	var h any // NULL: not chained
	if hash != nil {
		ev.Hash = hash(ev)
		h = ev.Hash
	}
	t.evArgs = append(t.evArgs, runID, int64(ev.Seq), string(typ), actionID, ev.At, nilIfEmpty(t.s.env.seal("events.data", ev.Data)), h)
	t.events = append(t.events, ev)
	r, ok := t.ranges[runID]
	if !ok {
		r[0] = ev.Seq
	}
	r[1] = ev.Seq
	t.ranges[runID] = r
	return ev, nil
}

func (t *tx) Blob(runID, hash string) (json.RawMessage, bool, error) {
	k := pair{runID, hash}
	if e, ok := t.blobs[k]; ok {
		return e.v, e.found, nil
	}
	if t.spec {
		return nil, false, t.missed()
	}
	e := &valEntry{}
	err := t.ptx.QueryRow(t.ctx, t.s.q.blob, runID, hash).Scan(&e.v)
	if err == nil {
		err = t.s.env.openInto("blobs.value", (*[]byte)(&e.v))
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, false, err
	default:
		e.found = true
	}
	t.blobs[k] = e
	return e.v, e.found, nil
}

func (t *tx) PutBlob(runID, hash string, v json.RawMessage) error {
	k := pair{runID, hash}
	if e, ok := t.blobs[k]; ok && e.found {
		return nil
	}
	t.batch.Queue(t.s.q.insertBlob, runID, hash, t.s.env.seal("blobs.value", bytes.Clone(v)))
	t.blobs[k] = &valEntry{v: bytes.Clone(v), found: true}
	return nil
}

func (t *tx) memo(runID, name string) (*valEntry, error) {
	k := pair{runID, name}
	if e, ok := t.memos[k]; ok {
		return e, nil
	}
	if t.spec {
		return nil, t.missed()
	}
	e := &valEntry{}
	err := t.ptx.QueryRow(t.ctx, t.s.q.memoForUpdate, runID, name).Scan(&e.v)
	if err == nil {
		err = t.s.env.openInto("memos.value", (*[]byte)(&e.v))
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, err
	default:
		e.found = true
	}
	t.memos[k] = e
	return e, nil
}

func (t *tx) Memo(runID, name string) (json.RawMessage, bool, error) {
	e, err := t.memo(runID, name)
	if err != nil {
		return nil, false, err
	}
	return e.v, e.found, nil
}

func (t *tx) PutMemo(runID, name string, v json.RawMessage) error {
	e, err := t.memo(runID, name)
	if err != nil {
		return err
	}
	if e.found {
		t.batch.Queue(t.s.q.updateMemo, runID, name, t.s.env.seal("memos.value", bytes.Clone(v)))
	} else {
		t.batch.Queue(t.s.q.insertMemo, runID, name, t.s.env.seal("memos.value", bytes.Clone(v)))
	}
	e.v, e.found = bytes.Clone(v), true
	return nil
}

// notifications returns the payloads of this transaction's NOTIFY, one per
// run it appended events to.
func (t *tx) notifications() []string {
	out := make([]string, 0, len(t.ranges))
	for id, r := range t.ranges {
		p, err := json.Marshal(notification{Sender: t.s.id, RunID: id, First: r[0], Last: r[1]})
		if err == nil {
			out = append(out, string(p))
		}
	}
	return out
}

// notification is the payload of a commit's NOTIFY: who sent it, which
// run, which seqs.
type notification struct {
	Sender string `json:"s"`
	RunID  string `json:"r"`
	First  uint64 `json:"f"`
	Last   uint64 `json:"l"`
}

// begin opens the transaction and reads what the ops are known to read
// (rs), locked, in one round trip: BEGIN, then the runs, the rows, the
// keys and the keys' budget holds (in that order, the order every Apply
// locks them in), then the database's clock, read once the locks are held.
// What it finds, and what it looked for and did not find, is cached; the
// rules' other reads go to the database.
func (t *tx) begin(rs ledger.Reads) error {
	f := newForecast(rs)
	b := t.queueReads(f)
	primeSend(t.ptx)
	br := t.ptx.SendBatch(t.ctx, b)
	defer br.Close()
	for range beginStatements {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if f.lockRuns() {
		if err := eachRow(br, t.cacheRun); err != nil {
			return err
		}
		t.absentRuns(f.runs)
	}
	if f.lockRows() {
		if err := eachRow(br, t.cacheRow); err != nil {
			return err
		}
		if err := eachRow(br, t.cacheKey); err != nil {
			return err
		}
		t.absentRowsAndKeys(rs, f.keys)
	}
	if f.lockHolds() {
		c := t.budgetCache()
		if err := eachRow(br, func(rows pgx.Rows) error { return cacheHold(c, rows) }); err != nil {
			return err
		}
		for _, k := range f.keys {
			if _, ok := c.holds[k]; !ok {
				c.holds[k] = &holdEntry{}
			}
		}
		if err := t.cacheLimits(br, f.keys); err != nil {
			return err
		}
	}
	if t.s.cfg.Clock == nil {
		if err := br.QueryRow().Scan(&t.now); err != nil {
			return err
		}
		t.now = t.now.UTC()
		t.s.recent.mark(t.now, time.Now())
	}
	return br.Close()
}

// forecast is begin's reads as the statements' arguments (never nil
// slices: an empty array, not NULL).
type forecast struct {
	runs, keys, rowRuns, rowActs []string
}

func newForecast(rs ledger.Reads) forecast {
	f := forecast{runs: rs.Runs, keys: rs.Keys, rowRuns: make([]string, len(rs.Rows)), rowActs: make([]string, len(rs.Rows))}
	for i, r := range rs.Rows {
		f.rowRuns[i], f.rowActs[i] = r.RunID, r.ActionID
	}
	if f.keys == nil {
		f.keys = []string{}
	}
	if f.runs == nil {
		f.runs = []string{}
	}
	return f
}

func (f forecast) lockRuns() bool  { return len(f.runs) > 0 || len(f.keys) > 0 }
func (f forecast) lockRows() bool  { return len(f.rowRuns) > 0 || len(f.keys) > 0 }
func (f forecast) lockHolds() bool { return len(f.keys) > 0 }

// queueReads is begin's pipeline.
func (t *tx) queueReads(f forecast) *pgx.Batch {
	var b pgx.Batch
	queueBegin(&b)
	if f.lockRuns() {
		b.Queue(t.s.q.lockRuns, f.runs, f.keys)
	}
	if f.lockRows() {
		b.Queue(t.s.q.lockRows, f.rowRuns, f.rowActs, f.keys)
		b.Queue(t.s.q.lockKeys, f.keys, f.rowRuns, f.rowActs)
	}
	if f.lockHolds() {
		b.Queue(t.s.q.lockHolds, f.keys)
		t.queueLimitReads(&b, f.keys)
	}
	if t.s.cfg.Clock == nil {
		b.Queue(t.s.q.clock)
	}
	return &b
}

// beginStatements is how many statements queueBegin queues.
const beginStatements = 2

// queueBegin queues the start of an Apply's transaction (beginStatements
// statements, each answered by an Exec).
func queueBegin(b *pgx.Batch) {
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	// The plans of the Apply's statements do not depend on their
	// arguments (lookups by primary key): planning them again at every
	// execution, which PostgreSQL does when it estimates a generic plan
	// dearer than a custom one, would cost more than running them.
	b.Queue(`SET LOCAL plan_cache_mode = force_generic_plan`)
}

// eachRow reads the next result of br, one row at a time.
func eachRow(br pgx.BatchResults, f func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (t *tx) cacheRun(rows pgx.Rows) error {
	e := &runEntry{found: true, inDB: true}
	var lastSeq int64
	if err := scanRun(t.s.env, rows, &e.rec, &lastSeq); err != nil {
		return err
	}
	e.lastSeq = uint64(lastSeq)
	t.runs[e.rec.ID] = e
	return nil
}

func (t *tx) cacheRow(rows pgx.Rows) error {
	var runID string
	var rev int
	var r ledger.RowRecord
	if err := scanRow(t.s.env, rowsWith(rows, &runID, &rev), &r, nil); err != nil {
		return err
	}
	t.rows[rowKey{runID, rev, r.ID}] = &rowEntry{rec: r, found: true}
	return nil
}

func (t *tx) cacheKey(rows pgx.Rows) error {
	e := &keyEntry{found: true}
	if err := scanKey(t.s.env, rows, &e.rec); err != nil {
		return err
	}
	t.keys[e.rec.Key] = e
	return nil
}

func cacheHold(c *budgetCache, rows pgx.Rows) error {
	e := &holdEntry{found: true}
	if err := scanHold(rows, &e.h); err != nil {
		return err
	}
	c.holds[e.h.Key] = e
	return nil
}

// absentRuns caches the runs looked for and not found as absent, as a
// query of them would have found.
func (t *tx) absentRuns(ids []string) {
	for _, id := range ids {
		if _, ok := t.runs[id]; !ok {
			t.runs[id] = &runEntry{}
		}
	}
}

// absentRowsAndKeys caches the rows and keys looked for and not found as
// absent: the keys asked for, the rows of keys found, the rows asked for
// and the keys those rows name.
func (t *tx) absentRowsAndKeys(rs ledger.Reads, keys []string) {
	for _, k := range keys {
		if e, ok := t.keys[k]; !ok {
			t.keys[k] = &keyEntry{}
		} else {
			t.absentRow(e.rec.RunID, e.rec.ActionID)
		}
	}
	for _, r := range rs.Rows {
		t.absentRow(r.RunID, r.ActionID)
		e := t.runs[r.RunID]
		if e == nil || !e.found {
			continue
		}
		if row := t.rows[rowKey{r.RunID, e.rec.Revision, r.ActionID}]; row.found && row.rec.Key != "" {
			if _, ok := t.keys[row.rec.Key]; !ok {
				t.keys[row.rec.Key] = &keyEntry{}
			}
		}
	}
}

// absentRow caches row actionID of its run's current revision as absent
// unless it was found.
func (t *tx) absentRow(runID, actionID string) {
	if e := t.runs[runID]; e != nil && e.found {
		k := rowKey{runID, e.rec.Revision, actionID}
		if _, ok := t.rows[k]; !ok {
			t.rows[k] = &rowEntry{}
		}
	}
}

// rowsWith reads two leading columns into a and b, then the rest into the
// destinations of the Scan it is given.
func rowsWith(rows pgx.Rows, a, b any) pgx.Row { return leadingCols{rows, []any{a, b}} }

type leadingCols struct {
	rows pgx.Rows
	lead []any
}

func (l leadingCols) Scan(dest ...any) error { return l.rows.Scan(append(l.lead, dest...)...) }

// commit sends the queued writes, the runs' new last_seq, the lease check
// and COMMIT in one round trip (the notifications go after the commit:
// notifier). A lapsed lease fails the lease check with a *LeaseError, so
// the server skips COMMIT and the transaction is rolled back, also when
// the ops wrote nothing (a conflict): a lapsed node learns it at its next
// Apply, whatever it was. An error that leaves the outcome unknown (the
// connection broke after the batch was sent) is a *commitUnknownError.
func (t *tx) commit() error { return t.commitAfter(nil, nil) }

// commitAfter is commit with the statements of pre (BEGIN and the checks of
// a one round trip Apply) first in the same pipeline, their results read by
// readPre.
func (t *tx) commitAfter(pre *pgx.Batch, readPre func(results) error) error {
	t.queueInserts()
	for chunk := range slices.Chunk(t.evArgs, maxRowsPerInsert*eventParams) {
		t.batch.Queue(t.s.q.insertEvents[len(chunk)/eventParams-1], chunk...)
	}
	for _, e := range t.runs {
		t.queueRun(e)
	}
	n := t.batch.Len()
	runs, holds, limits := t.stillAbsent()
	t.batch.Queue(t.s.q.leaseCheck, t.inc, runs, holds, limits, specStale+" absent")
	for _, id := range t.docs {
		if id != "" {
			t.batch.Queue(t.s.q.doc, id)
		}
	}
	t.batch.Queue(`COMMIT`)
	b := &t.batch
	if pre != nil {
		pre.QueuedQueries = append(pre.QueuedQueries, t.batch.QueuedQueries...)
		b = pre
	}
	var br results
	if t.s.rawOK(t.ptx, b) {
		rr, err := sendRaw(t.ctx, t.ptx, b)
		if err != nil {
			return commitErr(err)
		}
		br = rr
	} else {
		primeSend(t.ptx)
		br = t.ptx.SendBatch(t.ctx, b)
	}
	err := func() error {
		if readPre != nil {
			if err := readPre(br); err != nil {
				return err
			}
		}
		for i := 0; i < n; i++ {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		var ok, absent int
		var xid *int64
		if err := br.QueryRow().Scan(&ok, &xid, &absent); err != nil {
			if le := leaseError(t.inc, err); le != nil {
				return le
			}
			return err
		}
		if xid != nil {
			t.xid = *xid
		}
		t.docReads = make([]docRead, len(t.docs))
		for i, id := range t.docs {
			if id == "" {
				continue
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			d, err := t.s.scanDoc(rows)
			if pgCode(err) != "" {
				return err // the server's: nothing commits
			}
			if err == nil {
				// Else a row this process could not read, COMMIT sent all
				// the same: no document (Doc reads it, and says why).
				t.docReads[i] = d
			}
		}
		_, err := br.Exec()
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return commitErr(err)
}

// commitErr is the error of a commit's pipeline that failed with err: one
// that is not an answer of the server, and not safe to try again, says
// that COMMIT may have been carried out.
func commitErr(err error) error {
	if err != nil && pgCode(err) == "" && !errors.Is(err, ledger.ErrLeaseExpired) && !pgconn.SafeToRetry(err) {
		return &commitUnknownError{err}
	}
	return err
}

// leaseLapsed marks the lease check's failure (queries.leaseCheck).
const leaseLapsed = "docket-lease-lapsed"

var leaseLapsedRe = regexp.MustCompile(leaseLapsed + ` (-|\d+) (\d+)`)

// leaseError turns the lease check's failure into a *LeaseError (nil: err
// is another error).
func leaseError(inc string, err error) *LeaseError {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	m := leaseLapsedRe.FindStringSubmatch(pe.Message)
	if m == nil {
		return nil
	}
	le := &LeaseError{Incarnation: inc}
	if us, err := strconv.ParseInt(m[1], 10, 64); err == nil {
		le.Expired = time.UnixMicro(us).UTC()
	}
	if us, err := strconv.ParseInt(m[2], 10, 64); err == nil {
		le.Now = time.UnixMicro(us).UTC()
	}
	return le
}

func nilIfEmpty(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

func utcOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// scanRun reads runCols and one more column (last_seq, or the last event's
// time when extra is a **time.Time).
func scanRun(e *envelope, row pgx.Row, r *ledger.RunRecord, extra any) error {
	var status string
	var auditSeq, retentionMS int64
	var wake, ended, keysUntil *time.Time
	if err := row.Scan(&r.ID, &status, &r.Revision, &r.Goal, &r.Policy, &r.PlanHash, &r.ToolsHash, &r.CreatedAt, &r.UpdatedAt,
		&r.Error, &r.PausedBy, &r.Rows, &r.RevHash, &r.CreatedBy, &r.Audit, &r.AuditHash, &auditSeq, &wake, &retentionMS, &ended, &keysUntil, extra); err != nil {
		return err
	}
	r.WakeAt = utcOrZero(wake)
	if err := e.openInto("runs.goal", &r.Goal, "runs.error", &r.Error); err != nil {
		return err
	}
	r.AuditSeq = uint64(auditSeq)
	r.Retention = ledger.Duration(time.Duration(retentionMS) * time.Millisecond)
	r.EndedAt, r.KeysUntil = utcOrZero(ended), utcOrZero(keysUntil)
	r.Status = ledger.RunStatus(status)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return nil
}

// scanRow reads rowCols and, when output is not nil, one more column.
func scanRow(e *envelope, row pgx.Row, r *ledger.RowRecord, output *[]byte) error {
	var status string
	var args, approved, gate, approvals, timer, toolWait []byte
	dest := []any{&r.ID, &r.Ord, &r.Tool, &r.Class, &r.Key, &status, &r.Attempts, &args, &r.DependsOn, &r.Error, &approved, &r.Undo, &gate, &approvals, &timer, &toolWait}
	if output != nil {
		dest = append(dest, output)
	}
	if err := row.Scan(dest...); err != nil {
		return err
	}
	if err := e.openInto("actions.args", &args, "actions.approved_args", &approved, "actions.error", &r.Error); err != nil {
		return err
	}
	if output != nil {
		if err := e.openInto("keys.output", output); err != nil {
			return err
		}
	}
	r.Status, r.Args, r.ApprovedArgs = ledger.Status(status), args, approved
	if len(gate) > 0 {
		if err := json.Unmarshal(gate, &r.Gate); err != nil {
			return fmt.Errorf("%w: the gate of action %q: %v", ledger.ErrFormat, r.ID, err)
		}
	}
	if len(approvals) > 0 {
		if err := json.Unmarshal(approvals, &r.Approvals); err != nil {
			return fmt.Errorf("%w: the approvals of action %q: %v", ledger.ErrFormat, r.ID, err)
		}
	}
	if len(timer) > 0 {
		if err := json.Unmarshal(timer, &r.Timer); err != nil {
			return fmt.Errorf("%w: the timer of action %q: %v", ledger.ErrFormat, r.ID, err)
		}
	}
	if len(toolWait) > 0 {
		if err := json.Unmarshal(toolWait, &r.ToolWait); err != nil {
			return fmt.Errorf("%w: the tool wait of action %q: %v", ledger.ErrFormat, r.ID, err)
		}
	}
	if len(r.DependsOn) == 0 {
		r.DependsOn = nil
	}
	return nil
}

func scanKey(e *envelope, row pgx.Row, k *ledger.KeyRecord) error {
	var state, failure string
	var args, output []byte
	var claimed, updated, first *time.Time
	if err := row.Scan(&k.Key, &k.RunID, &k.ActionID, &k.Tool, &args, &state, &k.Attempt, &k.Owner, &claimed, &output,
		&k.Error, &k.Retryable, &updated, &first, &k.MaybeTookEffect, &failure); err != nil {
		return err
	}
	if err := e.openInto("keys.args", &args, "keys.output", &output, "keys.error", &k.Error); err != nil {
		return err
	}
	k.Args, k.Output, k.State, k.Failure = args, output, ledger.Status(state), ledger.Failure(failure)
	k.ClaimedAt, k.UpdatedAt, k.FirstClaimedAt = utcOrZero(claimed), utcOrZero(updated), utcOrZero(first)
	return nil
}
