package postgres

import (
	"bytes"
	"cmp"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// An Apply in one round trip. The records an Apply reads are most often the
// ones this process's last Apply on the same run wrote (a drive's outcome
// and next claim read the run, the key and rows it wrote a moment ago). The
// store remembers them with the transaction id that wrote them (recent);
// an Apply whose every read is remembered is evaluated on them at once,
// and its one pipeline sends BEGIN, statements that lock those records and
// fail unless each is still the version remembered (its xmin; a record the
// Apply writes is checked by its write, an UPDATE of that version only)
// and each record remembered absent is still absent, the other writes, the
// lease check and COMMIT. The rules' decision is made on exactly what the transaction
// holds locked, as in the two round trip path (tx.begin); when a record
// changed (another node, a person's review, a sweep), the pipeline fails
// before anything is written and the Apply runs the two round trip path.
//
// The clock: the rules' time is the database's clock read last (by any
// Apply of this store) plus the local monotonic time since its answer came
// back, never later than the database's clock; the first statement checks
// that it is not.

// errSpec: a one round trip Apply needs a record it does not remember;
// nothing was sent, the Apply takes the two round trip path.
var errSpec = errors.New("postgres: the record is not remembered")

// maxClockAge is how long a reading of the database's clock serves (older:
// the next Apply takes two round trips and reads it again), so that a drift
// between the two clocks stays far below what the check would refuse.
const maxClockAge = time.Second

// maxRecentRuns bounds the runs remembered (over it, all are forgotten).
const maxRecentRuns = 4096

// recent is what this store's commits wrote, with the transaction that
// wrote it (xmin of the tuples).
type recent struct {
	mu   sync.Mutex
	runs map[string]*recentRun
	keys map[string]string // key -> its run, for the keys remembered
	// limited and held: the tools with a limit row and the keys with a
	// budget hold seen by a commit (an Apply that reads one takes two
	// round trips: recent does not keep them).
	limited map[string]bool
	held    map[string]bool
	clock   time.Time // the database's clock, read last
	at      time.Time // when that reading came back (monotonic)
}

type recentRun struct {
	rec     ledger.RunRecord
	lastSeq uint64
	xmin    int64
	rows    map[rowKey]recentRec[ledger.RowRecord]
	keys    map[string]recentRec[ledger.KeyRecord]
}

type recentRec[T any] struct {
	rec  T
	xmin int64
}

// mark records a reading of the database's clock that came back at at.
func (r *recent) mark(clock, at time.Time) {
	r.mu.Lock()
	if clock.After(r.clock) {
		r.clock, r.at = clock, at
	}
	r.mu.Unlock()
}

// now is the database's clock as far as this store can tell without asking
// (false: it never read it).
func (r *recent) now() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clock.IsZero() || time.Since(r.at) > maxClockAge {
		return time.Time{}, false
	}
	return r.clock.Add(time.Since(r.at)).UTC().Truncate(time.Microsecond), true
}

// verify is what a one round trip Apply took as absent, checked by its
// first statements (the records it read from recent are the entries of
// the transaction with an xmin, and its keys).
type verify struct {
	noRuns []string // runs taken as absent
	holds  []string // budget holds taken as absent
	limits []string // tool limits taken as absent
}

// specRun is the run of a one round trip Apply: from recent, else errSpec.
func (t *tx) specRun(runID string) (*runEntry, error) {
	r := &t.s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := r.runs[runID]
	if rr == nil {
		if !slices.Contains(t.creates, runID) {
			return nil, t.missed()
		}
		// A run the Apply records: taken as absent; the pipeline checks
		// that it is.
		t.ver.noRuns = append(t.ver.noRuns, runID)
		e := &runEntry{}
		t.runs[runID] = e
		return e, nil
	}
	e := &runEntry{rec: rr.rec, found: true, inDB: true, lastSeq: rr.lastSeq, xmin: rr.xmin}
	t.runs[runID] = e
	return e, nil
}

func (t *tx) specRow(k rowKey) (*rowEntry, error) {
	r := &t.s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := t.runs[k.run]; e != nil && !e.found {
		// A run taken as absent has no rows.
		e := &rowEntry{}
		t.rows[k] = e
		return e, nil
	}
	rr := r.runs[k.run]
	if rr == nil {
		return nil, t.missed()
	}
	rec, ok := rr.rows[k]
	if !ok {
		return nil, t.missed()
	}
	e := &rowEntry{rec: cloneRow(rec.rec), found: true, xmin: rec.xmin}
	t.rows[k] = e
	return e, nil
}

// specKey is a key from recent; a key recent does not know is taken as
// absent (xmin 0), and the pipeline checks that it is.
func (t *tx) specKey(key string) *keyEntry {
	r := &t.s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &keyEntry{}
	if rr := r.runs[r.keys[key]]; rr != nil {
		if rec, ok := rr.keys[key]; ok {
			e.rec, e.found, e.xmin = rec.rec, true, rec.xmin
			// Its own copy, as a read from the database would be.
			e.rec.Args, e.rec.Output = bytes.Clone(rec.rec.Args), bytes.Clone(rec.rec.Output)
		}
	}
	t.keys[key] = e
	return e
}

// missed notes that the Apply cannot be evaluated from recent.
func (t *tx) missed() error {
	t.specMiss = true
	return errSpec
}

// verifyBatch is the start of a one round trip Apply's pipeline: BEGIN,
// then a statement for each record the Apply read from recent that locks it
// and fails unless it is still the version remembered: the Apply's write of
// the record (guard) when it writes it, else a verify statement (runs,
// rows, keys, each set sorted, the order every Apply locks them in). What
// it took as absent is checked by its INSERT when it writes it, else by the
// lease check (stillAbsent). The first statement also checks that the
// database's clock has reached the Apply's time, and returns the clock.
func (t *tx) verifyBatch() *pgx.Batch {
	var b pgx.Batch
	queueBegin(&b)
	now := t.now
	if t.s.cfg.Clock != nil {
		now = time.Time{} // a configured clock: nothing to check
	}
	var ids, written []string
	var xs []int64
	for _, id := range slices.Sorted(maps.Keys(t.runs)) {
		switch e := t.runs[id]; {
		case e.xmin == 0:
		case e.dirty || e.seqs:
			written = append(written, id)
		default:
			ids, xs = append(ids, id), append(xs, e.xmin)
		}
	}
	if len(ids) > 0 || len(written) == 0 {
		b.Queue(t.s.q.verifyRuns, nonNil(ids), nonNil(xs), now, specStale+" runs")
	}
	for _, id := range written {
		e := t.runs[id]
		q, args := t.runWrite(e, true)
		b.Queue(q, append(args, e.xmin, now, specStale+" run")...)
	}

	var rows []rowKey
	for k, e := range t.rows {
		if e.xmin != 0 {
			rows = append(rows, k)
		}
	}
	slices.SortFunc(rows, func(a, b rowKey) int {
		return cmp.Or(strings.Compare(a.run, b.run), strings.Compare(a.id, b.id))
	})
	var runs, acts []string
	var revs []int32
	xs = nil
	for _, k := range rows {
		if e := t.rows[k]; !e.dirty {
			runs, revs, acts, xs = append(runs, k.run), append(revs, int32(k.rev)), append(acts, k.id), append(xs, e.xmin)
		}
	}
	if len(runs) > 0 {
		b.Queue(t.s.q.verifyRows, runs, revs, acts, xs, specStale+" rows")
	}
	for _, k := range rows {
		if e := t.rows[k]; e.dirty {
			b.Queue(t.s.q.updateRowIf, append(rowArgs(t.s.env, k.run, k.rev, e.rec), e.xmin, now, specStale+" row")...)
		}
	}

	ids, xs = nil, nil
	keys := slices.Sorted(maps.Keys(t.keys))
	for _, k := range keys {
		// A key remembered absent has xmin 0 (no transaction has id 0);
		// written, it is inserted, which fails if it is not.
		if e := t.keys[k]; !e.dirty {
			ids, xs = append(ids, k), append(xs, e.xmin)
		}
	}
	if len(ids) > 0 {
		b.Queue(t.s.q.verifyKeys, ids, xs, specStale+" keys")
	}
	for _, k := range keys {
		if e := t.keys[k]; e.dirty && e.xmin != 0 {
			b.Queue(t.s.q.updateKeyIf, append(keyArgs(t.s.env, e.rec), e.xmin, now, specStale+" key")...)
		}
	}
	return &b
}

// stillAbsent is what a one round trip Apply took as absent and did not
// write (the commit's lease check checks them; a plain INSERT checks the
// rest): runs, budget holds, tool limit rows. Never nil.
func (t *tx) stillAbsent() (runs, holds, limits []string) {
	runs, holds, limits = []string{}, []string{}, []string{}
	for _, id := range t.ver.noRuns {
		if e := t.runs[id]; e == nil || !e.found {
			runs = append(runs, id)
		}
	}
	for _, key := range t.ver.holds {
		if e := t.bud.holds[key]; e == nil || !e.found {
			holds = append(holds, key)
		}
	}
	for _, tool := range t.ver.limits {
		if e := t.lim[tool]; e == nil || !e.found {
			limits = append(limits, tool)
		}
	}
	return runs, holds, limits
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// specStale starts the failure of a check of verifyBatch (the text of the
// server's error: the failure is told by its code, as any other).
const specStale = "docket-stale"

// remember records what t committed in transaction xid: the records it
// wrote, and (spec: they were checked unchanged) the ones it read. A record
// read and not written by a two round trip Apply is forgotten (its version
// is not known), and so is a run that ended.
func (s *Store) remember(t *tx, xid int64) {
	r := &s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil || len(r.runs) > maxRecentRuns || len(r.held) > maxRecentRuns {
		r.runs, r.keys, r.held = map[string]*recentRun{}, map[string]string{}, map[string]bool{}
	}
	if r.limited == nil {
		r.limited = map[string]bool{}
	}
	for tool, e := range t.lim {
		if e.found {
			r.limited[tool] = true
		}
	}
	if t.bud != nil {
		for key, e := range t.bud.holds {
			if e.found {
				r.held[key] = true
			}
		}
	}
	for id, e := range t.runs {
		rr := r.runs[id]
		switch {
		case !e.found || e.rec.Status.Ended():
			r.drop(id)
			continue
		case e.dirty || e.seqs:
			if rr == nil {
				rr = &recentRun{rows: map[rowKey]recentRec[ledger.RowRecord]{}, keys: map[string]recentRec[ledger.KeyRecord]{}}
				r.runs[id] = rr
			}
			rr.rec, rr.lastSeq, rr.xmin = e.rec, e.lastSeq, xid
		case rr == nil || !t.spec:
			r.drop(id)
			continue
		}
	}
	for k, e := range t.rows {
		rr := r.runs[k.run]
		switch {
		case rr == nil:
		case e.dirty:
			rr.rows[k] = recentRec[ledger.RowRecord]{cloneRow(e.rec), xid}
		case !t.spec || !e.found:
			delete(rr.rows, k)
		}
	}
	for key, e := range t.keys {
		if !e.found {
			continue
		}
		rr := r.runs[e.rec.RunID]
		switch {
		case rr == nil:
		case e.dirty:
			rr.keys[key] = recentRec[ledger.KeyRecord]{e.rec, xid}
			r.keys[key] = e.rec.RunID
		case !t.spec:
			delete(rr.keys, key)
		}
	}
}

// forget drops the runs an Apply read: one of their records changed.
func (s *Store) forget(t *tx) {
	r := &s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range t.runs {
		r.drop(id)
	}
	for _, e := range t.keys {
		if e.found {
			r.drop(e.rec.RunID)
		}
	}
}

func (r *recent) drop(runID string) {
	if rr := r.runs[runID]; rr != nil {
		for k := range rr.keys {
			delete(r.keys, k)
		}
		delete(r.runs, runID)
	}
}

// applySpec tries ops as a one round trip Apply. done is false, with a nil
// error, when it could not be evaluated from recent (nothing was sent) or
// when a check found a record changed (nothing was written; the
// transaction is to be rolled back): the caller takes the two round trip
// path. A commit error (err) is the Apply's, as tx.commit's.
func (t *tx) applySpec(ops []ledger.Op, docs []string) (res []ledger.Result, done bool, err error) {
	now, ok := t.s.recent.now()
	if !ok && t.s.cfg.Clock == nil {
		return nil, false, nil
	}
	t.spec, t.now, t.creates = true, now, ledger.ReadSet(ops).Creates
	res, err = ledger.EvalApply(t, ops)
	if t.specMiss || err != nil {
		// A hard error is the two round trip path's to report.
		return nil, false, nil
	}
	t.docs = docs
	pre := t.verifyBatch()
	checks := pre.Len() - beginStatements
	err = t.commitAfter(pre, func(br results) error {
		for range beginStatements {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		var clock time.Time
		if err := br.QueryRow().Scan(&clock); err != nil {
			return err
		}
		if t.s.cfg.Clock == nil {
			t.s.recent.mark(clock.UTC(), time.Now())
		}
		for range checks - 1 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err == nil:
		return res, true, nil
	case refused(err):
		return nil, false, err
	case pgCode(err) != "":
		// A check failed (a record changed: specStale), or the server
		// refused a write the checks did not foresee (a key another node
		// inserted since): nothing was written; the two round trip path
		// decides.
		t.s.forget(t)
		return nil, false, nil
	}
	return nil, false, err
}

// hasLimit reports whether a commit saw tool's limit row.
func (r *recent) hasLimit(tool string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.limited[tool]
}

// hasHold reports whether a commit saw key's budget hold.
func (r *recent) hasHold(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[key]
}
