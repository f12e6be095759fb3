package ledger

import (
	"encoding/json"
	"fmt"
)

// succeedOp is Succeed: attempt n of key took effect with output.
type succeedOp struct {
	key    string
	n      int
	output json.RawMessage
}

// failOp is Fail and FailWith: attempt n of key failed.
type failOp struct {
	key       string
	n         int
	msg       string
	retryable bool
	failure   Failure
	data      json.RawMessage
	noEffect  bool // no attempt took effect (budget.go)
}

// needsReviewOp is NeedsReview: attempt n of key waits for a person.
type needsReviewOp struct {
	key    string
	n      int
	reason string
}

func (s *succeedOp) kind() opKind                   { return opSucceed }
func (f *failOp) kind() opKind                      { return opFail }
func (r *needsReviewOp) kind() opKind               { return opNeedsReview }
func (s *succeedOp) scope() (string, *bigValue)     { return "", nil }
func (f *failOp) scope() (string, *bigValue)        { return "", nil }
func (r *needsReviewOp) scope() (string, *bigValue) { return "", nil }

func (s *succeedOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validID("key", s.key); err != nil {
		return errResult(err), nil
	}
	if len(s.output) > b.tx.MaxOutputBytes() {
		return errResult(fmt.Errorf("%w: output of %d bytes exceeds %d", ErrTooLarge, len(s.output), b.tx.MaxOutputBytes())), nil
	}
	if err := validJSON("output", s.output, true); err != nil {
		return errResult(err), nil
	}
	return b.settle(s)
}

func (f *failOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validID("key", f.key); err != nil {
		return errResult(err), nil
	}
	var extra map[string]json.RawMessage
	if len(f.data) > 0 {
		if err := json.Unmarshal(f.data, &extra); err != nil {
			return errResult(fmt.Errorf("%w: fail data must be a JSON object", ErrInvalid)), nil
		}
	}
	return b.settle(&failing{failOp: f, extra: extra})
}

func (r *needsReviewOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validID("key", r.key); err != nil {
		return errResult(err), nil
	}
	return b.settle(r)
}

// outcome is what settle needs of Succeed, Fail or NeedsReview.
type outcome interface {
	kind() opKind
	attempt() (key string, n int)
	// want is the state the outcome leads to.
	want() Status
	// same reports whether rec, in state want at attempt n, records this
	// very outcome (an identical repeat).
	same(rec KeyRecord) bool
	// record writes the outcome into rec (whose outcome fields are reset)
	// and returns its event.
	record(rec *KeyRecord) (EventType, json.RawMessage, error)
	// releases reports whether the key's budget hold is given back.
	releases(rec KeyRecord) bool
}

// failing is a Fail with its data parsed.
type failing struct {
	*failOp
	extra map[string]json.RawMessage
}

func (s *succeedOp) attempt() (string, int)     { return s.key, s.n }
func (f *failing) attempt() (string, int)       { return f.key, f.n }
func (r *needsReviewOp) attempt() (string, int) { return r.key, r.n }

func (s *succeedOp) want() Status     { return StatusSucceeded }
func (r *needsReviewOp) want() Status { return StatusNeedsReview }
func (f *failing) want() Status {
	if f.retryable {
		return StatusPending
	}
	return StatusFailed
}

func (s *succeedOp) same(rec KeyRecord) bool { return jsonEqual(rec.Output, s.output) }
func (f *failing) same(rec KeyRecord) bool {
	return rec.Error == f.msg && rec.Retryable == f.retryable
}
func (r *needsReviewOp) same(rec KeyRecord) bool { return rec.Error == r.reason }

func (s *succeedOp) record(rec *KeyRecord) (EventType, json.RawMessage, error) {
	rec.Output = s.output
	return EventActionSucceeded, outputData(s.output), nil
}

func (r *needsReviewOp) record(rec *KeyRecord) (EventType, json.RawMessage, error) {
	rec.Error = r.reason
	rec.MaybeTookEffect = true
	return EventActionNeedsReview, obj("attempt", r.n, "reason", r.reason), nil
}

// record: action.attempt_failed (retryable) or action.failed, with data's
// fields and "attempt", "error", "outcome".
func (f *failing) record(rec *KeyRecord) (EventType, json.RawMessage, error) {
	rec.Error, rec.Retryable, rec.Failure = f.msg, f.retryable, f.failure
	if f.retryable && f.failure.mayHaveTakenEffect() {
		rec.MaybeTookEffect = true
	}
	evType, outcome := EventActionFailed, "failed"
	if f.retryable {
		evType, outcome = EventActionAttemptFailed, "retryable"
	}
	extra := f.extra
	if extra == nil {
		extra = map[string]json.RawMessage{}
	}
	extra["attempt"], _ = json.Marshal(f.n)
	extra["error"], _ = json.Marshal(f.msg)
	if _, ok := extra["outcome"]; !ok {
		extra["outcome"], _ = json.Marshal(cmpOr(string(f.failure), outcome))
	}
	data, err := json.Marshal(extra)
	return evType, data, err
}

func (s *succeedOp) releases(KeyRecord) bool     { return false }
func (r *needsReviewOp) releases(KeyRecord) bool { return false }

// releases: a definite failure, nothing happened: the budgets get it back
// (a retry takes it again with its claim).
func (f *failing) releases(rec KeyRecord) bool {
	definite := f.failure != FailureUnknown && f.failure != FailureKeyInFlight &&
		(f.want() == StatusFailed || !f.failure.mayHaveTakenEffect())
	return definite && (!rec.MaybeTookEffect || f.noEffect)
}

// settling is what an outcome found: the key's run, its record, the run
// and the row the record names (rowOK: there is one).
type settling struct {
	runID string
	rec   KeyRecord
	run   storedRun
	row   storedRow
	rowOK bool
}

func (s *settling) result(b *batch) Result {
	res := Result{Key: s.rec}
	if s.rowOK {
		res.Action = b.rowAction(s.runID, s.row, s.rec)
	}
	return res
}

// settle records an outcome of a claimed attempt: key record and linked
// row move to its state, with its event. Identical repeat: success.
func (b *batch) settle(o outcome) (Result, error) {
	key, n := o.attempt()
	s, found, err := b.readSettling(key)
	if err != nil {
		return Result{}, err
	}
	if !found {
		return errResult(fmt.Errorf("%w: key %s has no record", ErrNotFound, key)), nil
	}
	if s.rec.State == o.want() && s.rec.Attempt == n && o.same(s.rec) {
		return s.result(b), nil
	}
	if res, done, err := b.concludes(o.kind(), s, key, n); done || err != nil {
		return res, err
	}
	return b.writeOutcome(o, s, key)
}

// readSettling reads what an outcome of key applies to; found false: the
// key has no record.
func (b *batch) readSettling(key string) (*settling, bool, error) {
	runID, has, err := b.keyRun(key)
	if err != nil || !has {
		return nil, false, err
	}
	s := &settling{runID: runID}
	if s.rec, _, err = b.keyRec(runID, key); err != nil {
		return nil, false, err
	}
	if s.run, _, err = b.run(runID); err != nil {
		return nil, false, err
	}
	if s.row, s.rowOK, err = b.row(runID, s.run.Revision, s.rec.ActionID); err != nil {
		return nil, false, err
	}
	return s, true, nil
}

// concludes refuses an outcome of an attempt that is not claimed, and
// "outcome unknown" (NeedsReview) while the claim's owner may still be
// calling the tool.
func (b *batch) concludes(kind opKind, s *settling, key string, n int) (Result, bool, error) {
	var rowp *storedRow
	if s.rowOK {
		rowp = &s.row
	}
	rec := s.rec
	if rec.State != StatusClaimed || rec.Attempt != n {
		return b.conflict(kind, s.runID, rec.ActionID, key, rec, rowp, "attempt %d is not claimed", n), true, nil
	}
	if kind != opNeedsReview || rec.Owner == b.tx.Incarnation() {
		return Result{}, false, nil
	}
	// "Outcome unknown" is only true of a claim whose process is gone:
	// on a shared ledger another live node may still be calling the tool
	// (and will record what it did).
	gone, err := b.ownerGone(rec.Owner)
	if err != nil || gone {
		return Result{}, err != nil, err
	}
	return b.conflict(kind, s.runID, rec.ActionID, key, rec, rowp, "claim in flight on another node (its lease is live)"), true, nil
}

// writeOutcome writes the key record, the row when it is linked to key,
// and the outcome's event.
func (b *batch) writeOutcome(o outcome, s *settling, key string) (Result, error) {
	want := o.want()
	rec := &s.rec
	rec.State, rec.UpdatedAt = want, b.now()
	rec.Output, rec.Error, rec.Retryable, rec.Failure = nil, "", false, ""
	evType, data, err := o.record(rec)
	if err != nil {
		return Result{}, err
	}
	if o.releases(*rec) {
		if data, err = b.release(key, data); err != nil {
			return Result{}, err
		}
	}
	if err := b.putKeyRec(*rec, false); err != nil {
		return Result{}, err
	}
	if s.rowOK && s.row.Key == key {
		s.row.Status, s.row.Error, s.row.Attempts = want, rec.Error, rec.Attempt
		if err := b.putRow(s.runID, s.run.Revision, s.row); err != nil {
			return Result{}, err
		}
	}
	if err := b.event(s.runID, evType, rec.ActionID, data); err != nil {
		return Result{}, err
	}
	return s.result(b), nil
}
