package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/docketrun/docket/plan"
)

// Applier is the write half of a Store: the helpers below implement
// CreateRun, AddRevision and Memo for every backend on top of its Apply.
type Applier interface {
	Apply(ctx context.Context, ops ...Op) ([]Result, error)
}

// ApplyOne applies a single op and returns its Result and its error,
// whichever it is: the op's own error (a *ConflictError, ErrNotFound,
// ErrInvalid, ...; nothing was written) or the commit's (ErrClosed, a
// context error, a disk error; nothing was written either). In both cases
// the returned error equals Result.Err, so a caller that only needs to
// know whether the op took effect checks one value.
func ApplyOne(ctx context.Context, s Store, op Op) (Result, error) {
	return applyOne(ctx, s, op)
}

func applyOne(ctx context.Context, a Applier, o Op) (Result, error) {
	res, err := a.Apply(ctx, o)
	if err != nil {
		return Result{Err: err}, err
	}
	return res[0], res[0].Err
}

// FailedResults is what Apply returns with a commit error: one Result per
// op, each carrying err (backends call it so that every Result holds its
// op's error, whatever failed).
func FailedResults(n int, err error) []Result {
	res := make([]Result, n)
	for i := range res {
		res[i].Err = err
	}
	return res
}

// CreateRunWith implements Store.CreateRun over a's Apply.
//
// CreateRun records a run with revision 1 of its plan and its initial action rows
// (in plan order, status pending or approved, class filled), plus events
// run.created and plan.recorded (and action.approved for pre-approved rows).
// If the run exists with the same plan hash it returns the stored run and
// created=false; with another plan hash, ErrPlanMismatch.
//
// r.ID is required; r.Status defaults to running and r.CreatedAt to now;
// r.Revision and r.PlanHash are set by the ledger (PlanHash = plan.Hash(p)).
// rows nil: one pending row per plan action (id, tool, args, depends_on).
// Errors: ErrPlanMismatch, ErrInvalid, ErrTooLarge, ErrClosed.
func CreateRunWith(ctx context.Context, a Applier, r Run, p *plan.Plan, rows []Action) (stored Run, created bool, err error) {
	op, err := NewRun(r, p, rows)
	if err != nil {
		return Run{}, false, err
	}
	res, err := applyOne(ctx, a, op)
	if err != nil {
		return Run{}, false, err
	}
	return res.CreatedRun()
}

// NewRun is CreateRun as an op, to be applied with others in one commit:
// claims made InNewRun after it in the same Apply start the run's first
// actions in the commit that records it. Its Result's CreatedRun says
// what it did; its Err is ErrPlanMismatch when the run exists with another
// plan. Arguments are checked here (ErrInvalid), as CreateRun checks them.
func NewRun(r Run, p *plan.Plan, rows []Action) (Op, error) {
	if err := validID("run id", r.ID); err != nil {
		return Op{}, err
	}
	if r.Status != "" && !r.Status.valid() {
		return Op{}, fmt.Errorf("%w: run status %q", ErrInvalid, r.Status)
	}
	rev, err := revisionOf(r.ID, p, rows)
	if err != nil {
		return Op{}, err
	}
	return Op{body: &createRunOp{revision: rev, run: r}}, nil
}

// CreatedRun is the result of a NewRun op: the run as stored and whether
// the op created it (false: it was recorded before with the same plan).
// err is the op's error (r.Err).
func (r Result) CreatedRun() (stored Run, created bool, err error) {
	if r.Err != nil {
		return Run{}, false, r.Err
	}
	return r.run, r.created, nil
}

// AddRevisionWith implements Store.AddRevision over a's Apply.
//
// AddRevision records revision n+1 of a run's plan with fresh rows (replay with
// edits) and event run.replayed {"revision","plan_hash","actions"}. Returns the
// new revision number. A plan identical to the current revision's (the same
// plan.Hash) records nothing and returns the current revision, so a retried
// call does not add a second revision. Errors: ErrNotFound, ErrInvalid,
// ErrTooLarge, ErrClosed.
func AddRevisionWith(ctx context.Context, a Applier, runID string, p *plan.Plan, rows []Action) (int, error) {
	if err := validID("run id", runID); err != nil {
		return 0, err
	}
	rev, err := revisionOf(runID, p, rows)
	if err != nil {
		return 0, err
	}
	res, err := applyOne(ctx, a, Op{body: &addRevisionOp{rev}})
	if err != nil {
		return 0, err
	}
	return res.rev, nil
}

// revisionOf prepares plan p (with rows) as a revision of run runID.
func revisionOf(runID string, p *plan.Plan, rows []Action) (revision, error) {
	if p == nil {
		return revision{}, fmt.Errorf("%w: nil plan", ErrInvalid)
	}
	hash, err := plan.Hash(p)
	if err != nil {
		return revision{}, fmt.Errorf("%w: hashing plan: %v", ErrInvalid, err)
	}
	if rows == nil {
		for _, a := range p.Actions {
			rows = append(rows, Action{ID: a.ID, Tool: a.Tool, Args: a.Args, DependsOn: a.DependsOn, Status: StatusPending})
		}
	}
	if err := checkRows(rows); err != nil {
		return revision{}, err
	}
	// Large args are stored once, as blobs that the plan record and the rows
	// refer to (large.go); hashed here, in the caller's goroutine.
	h, blobs := hasher{}, map[string]json.RawMessage{}
	pj, refs, err := planRecord(p, h, blobs)
	if err != nil {
		return revision{}, fmt.Errorf("%w: encoding plan: %v", ErrInvalid, err)
	}
	stored := make([]Action, len(rows))
	for i, a := range rows {
		a.Args, a.ApprovedArgs = h.ref(a.Args, blobs), h.ref(a.ApprovedArgs, blobs)
		stored[i] = a
	}
	return revision{runID: runID, planJSON: pj, planRefs: refs, planHash: hash, rows: stored, blobs: blobs}, nil
}

// MemoWith implements Store.Memo over a's Apply; maxOutputBytes bounds the
// value.
//
// Memo stores value under (runID, name) if nothing is stored yet and returns
// what is stored (so a value derived once, like a UUID or a time, never changes
// on resume). Durable before it returns (if the store is). The run need not
// exist. Errors: ErrInvalid (empty name or id, value not JSON), ErrTooLarge,
// ErrClosed.
func MemoWith(ctx context.Context, a Applier, maxOutputBytes int, runID, name string, value json.RawMessage) (json.RawMessage, error) {
	if err := validID("run id", runID); err != nil {
		return nil, err
	}
	if err := validID("memo name", name); err != nil {
		return nil, err
	}
	if len(value) > maxOutputBytes {
		return nil, fmt.Errorf("%w: memo of %d bytes exceeds %d", ErrTooLarge, len(value), maxOutputBytes)
	}
	if err := validJSON("memo value", value, true); err != nil {
		return nil, err
	}
	res, err := applyOne(ctx, a, Op{body: &memoOp{runID: runID, name: name, value: value}})
	if err != nil {
		return nil, err
	}
	return res.memo, nil
}

// validID checks a run id, action id, key or memo name: non-empty, at most
// 512 bytes, no NUL (backends may use NUL to separate key components).
func validID(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(s) > 512 {
		return fmt.Errorf("%w: %s longer than 512 bytes", ErrInvalid, what)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s contains NUL", ErrInvalid, what)
	}
	return nil
}

// Valid reports whether s is a run status.
func (s RunStatus) Valid() bool { return s.valid() }
