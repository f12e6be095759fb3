package ledger

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/docketrun/docket/plan"
)

// ErrCollected: the run is being deleted by the collector (its header is
// marked, see RunRecord.Collecting); it counts as not found.
var ErrCollected = fmt.Errorf("%w: run is being deleted by the collector", ErrNotFound)

// CollectOptions says what Collector.Collect deletes.
type CollectOptions struct {
	// Now is the time the deadlines are compared with; zero: the store's
	// clock.
	Now time.Time
	// Retention is how long every ended run is kept at least (the global
	// retention); 0: only runs with their own Run.Retention are collected.
	Retention time.Duration
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
}

// Validate rejects a negative retention.
func (o CollectOptions) Validate() error {
	if o.Retention < 0 {
		return fmt.Errorf("%w: negative retention %v", ErrInvalid, o.Retention)
	}
	return nil
}

// CollectReport is what Collect deleted (or, on a dry run, would delete).
type CollectReport struct {
	Runs    int   `json:"runs"`    // runs deleted with all their records
	Records int64 `json:"records"` // records of those runs (headers, revisions, rows, keys and their index, events, memos, blobs, holds)
	Bytes   int64 `json:"bytes"`   // their size as stored, when the backend knows it (0: not known)
	Buckets int   `json:"buckets"` // budget buckets whose window had passed
	// Kept counts ended runs past the retention that their keys still
	// protect (KeysUntil later than now).
	Kept int `json:"kept"`
}

// Add adds o's counts to r.
func (r *CollectReport) Add(o CollectReport) {
	r.Runs += o.Runs
	r.Records += o.Records
	r.Bytes += o.Bytes
	r.Buckets += o.Buckets
	r.Kept += o.Kept
}

// Ended reports whether s is a status a run ends in: completed, failed or
// cancelled.
func (s RunStatus) Ended() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// ended keeps EndedAt true to the status: set to now when the run becomes
// ended, kept while it stays ended, cleared when it leaves (a replay).
func (r *RunRecord) ended(now time.Time) {
	switch {
	case !r.Status.Ended():
		r.EndedAt = time.Time{}
	case r.EndedAt.IsZero():
		r.EndedAt = now
	}
}

// CollectAt is when run r may be deleted under the global retention:
// EndedAt plus the longer of global and the run's own Retention, and never
// before KeysUntil (the last time one of its keys protects: a keyed call's
// first claim plus the tool's key_ttl). ok is false while the run is not
// ended, and when neither retention is set (the run is kept for ever).
func CollectAt(r RunRecord, global time.Duration) (at time.Time, ok bool) {
	if !r.Status.Ended() || r.EndedAt.IsZero() {
		return time.Time{}, false
	}
	keep := max(global, time.Duration(r.Retention))
	if keep <= 0 {
		return time.Time{}, false
	}
	at = r.EndedAt.Add(keep)
	if r.KeysUntil.After(at) {
		at = r.KeysUntil
	}
	return at, true
}

// Collectable reports whether run r may be deleted at now under the global
// retention (CollectAt has passed).
func Collectable(r RunRecord, global time.Duration, now time.Time) bool {
	at, ok := CollectAt(r, global)
	return ok && !now.Before(at)
}

// ProtectedOnly reports whether run r is past its retention at now but
// kept because one of its keys still protects (CollectReport.Kept).
func ProtectedOnly(r RunRecord, global time.Duration, now time.Time) bool {
	if Collectable(r, global, now) || !r.Status.Ended() || r.EndedAt.IsZero() {
		return false
	}
	keep := max(global, time.Duration(r.Retention))
	return keep > 0 && !now.Before(r.EndedAt.Add(keep))
}

// BucketExpired reports whether budget bucket r's window has passed at now:
// no claim charges it again (a bucket without a window never expires).
func BucketExpired(r BudgetRecord, now time.Time) bool {
	return r.Every > 0 && !r.Window.IsZero() && !now.Before(r.Window.Add(r.Every))
}

// Duration is a length of time as JSON writes it: a string that
// plan.ParseDuration reads ("30d", "12h"); it reads that or an integer of
// nanoseconds.
type Duration time.Duration

// MarshalJSON writes d as plan.FormatDuration does.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(plan.FormatDuration(time.Duration(d)))
}

// UnmarshalJSON reads a duration string or an integer of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("a duration is a string such as \"30d\": %s", b)
		}
		*d = Duration(n)
		return nil
	}
	v, err := plan.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// retentionText is a retention as the Run JSON shows it ("" for none).
func retentionText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return plan.FormatDuration(d)
}

// WithKeyTTL tells a Claim how long the provider honours its key
// (tools.Spec.KeyTTL of a keyed tool): the run is then kept at least until
// the key's first claim plus ttl (RunRecord.KeysUntil), so that a replay
// within that time still finds the key's outcome. ttl 0 (or another op)
// changes nothing.
func (o Op) WithKeyTTL(ttl time.Duration) Op {
	c, ok := o.body.(*claimOp)
	if !ok || ttl <= 0 {
		return o
	}
	cc := *c
	cc.keyTTL = ttl
	o.body = &cc
	return o
}

// protect extends run's KeysUntil to cover rec's key for ttl from its
// first claim, and writes the header if that moved it.
func (b *batch) protect(run storedRun, rec KeyRecord, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	first := rec.FirstClaimedAt
	if first.IsZero() {
		first = rec.ClaimedAt
	}
	until := first.Add(ttl).UTC()
	cur, ok, err := b.tx.Run(run.ID)
	if err != nil || !ok {
		return err
	}
	if !until.After(cur.KeysUntil) {
		return nil
	}
	cur.KeysUntil = until
	return b.putRun(cur)
}
