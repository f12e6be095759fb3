package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// maxMergedOutput is the largest output whose Succeed shares an Apply call with
// dependents' claims; a larger one may be refused (ErrTooLarge) and must not
// take claims down with it.
const maxMergedOutput = 1 << 20

// node is one action of the run as this drive knows it.
type node struct {
	id       string
	row      ledger.Action // latest known row (kept up to date from our own writes)
	tool     tools.Tool
	spec     tools.Spec
	args     json.RawMessage // args to resolve: as planned or edited by a person (resolved data never)
	refs     []string        // action ids referenced by args
	started  bool            // taken by this drive
	done     bool            // this drive is finished with it (any outcome)
	awaiting bool            // waits for a person's approval
	// waiting: the ledger refused its first claim because it is not due
	// yet (timer.go); dueAt is when it is.
	waiting bool
	dueAt   time.Time
	// deps are the nodes of row.DependsOn (nil: not in this run); blocker
	// is the dep that kept it from starting at the last look.
	deps    []*node
	blocker *node
	// pos is the node's place in the drive's order. A node that waits for
	// its blocker is parked: taken off the scan and listed in the
	// blocker's waiters, which go back on the scan when the blocker
	// succeeds (or is the action finishing when start looks), so start
	// never walks over nodes that cannot start.
	pos     int
	waiters []*node
}

// driver drives one run once: from a load of its rows until nothing more can
// progress. Its sched is owned by the drive's goroutine (loop); workers
// read only the fields set before the loop starts, and resumed.
type driver struct {
	e     *Engine
	runID string
	g     *gate
	pol   Policy
	inc   string
	run   ledger.Run // as loaded: goal, creator, revision (policy input)
	// create: the run is not recorded yet; the loop's first commit
	// records it (commit), then clears create. before: what that commit
	// found instead, a run recorded before (the drive then stops).
	create    *newRun
	before    *ledger.Result
	createErr error // the error of the Apply that was to record it
	// endDoc: the run's document as the commit that completed it left it,
	// when the store read it in that commit (applyDoc); cleared by any
	// later write of this drive (recordWake). Else doc reads it.
	endDoc ledger.RunDoc

	sched
	inbox chan *act // workers send their act back when done with it
	idle  chan job  // an idle worker's next act (spawn)
	solo  *job      // an act alone in flight, for the loop to work itself (spawn)
	// resumed: markRunning ran in this drive (the loop's commit or a
	// worker's claim may be first).
	resumed atomic.Bool
}

// newDriver is a drive of run runID on gate g.
func newDriver(e *Engine, runID string, g *gate) *driver {
	return &driver{
		e: e, runID: runID, g: g, inc: e.led.Incarnation(),
		sched: sched{nodes: map[string]*node{}, undo: map[string]ledger.Action{}},
		inbox: make(chan *act, max(e.cfg.Parallelism, 1)),
		idle:  make(chan job),
	}
}

// drive drives run runID once, in a span of its own (Config.Tracer).
func (e *Engine) drive(ctx context.Context, runID string, nr *newRun) (ledger.RunDoc, error) {
	ctx, end := e.tracer.Start(ctx, Work{Kind: WorkRun, AttemptInfo: AttemptInfo{RunID: runID}})
	var doc ledger.RunDoc
	var err error
	if nr != nil {
		doc, err = e.driveNew(ctx, nr)
	} else {
		doc, err = e.driveOnce(ctx, runID)
	}
	for i := 0; errors.Is(err, errRedrive) && i < maxRedrives; i++ {
		doc, err = e.driveOnce(ctx, runID)
	}
	if errors.Is(err, errRedrive) {
		err = fmt.Errorf("executor: run %s: %d claims in a row were refused because the run or its actions changed meanwhile: %w", runID, maxRedrives+1, err)
	}
	end(Done{Err: err, RunStatus: doc.Run.Status})
	return doc, err
}

// errRedrive: a drive stopped because the ledger refused a claim decided on
// facts that changed (ledger.ErrStale); drive reads the run again.
var errRedrive = errors.New("claim decided on facts that changed")

// maxRedrives bounds the fresh reads of one drive: each follows a change by
// another writer, so many in a row mean something keeps changing the run.
const maxRedrives = 100

func (e *Engine) driveOnce(ctx context.Context, runID string) (ledger.RunDoc, error) {
	g := acquireGate(e.led, runID)
	defer releaseGate(e.led, runID, g)
	d := newDriver(e, runID, g)
	defer func() { e.scanVisits.Add(d.scanVisits) }()

	// The run and its rows from one read (one snapshot).
	var first ledger.RunDoc
	err := g.write(func() error {
		var err error
		if first, err = e.led.Doc(ctx, runID); err != nil {
			return err
		}
		g.status = first.Run.Status
		// A person's pause holds until an explicit resume (Engine.Unpause):
		// this drive concludes what is in flight and starts nothing new.
		g.pausedByPerson = first.Run.Status == ledger.RunPaused && first.Run.PausedBy != ""
		return nil
	})
	if err != nil {
		return ledger.RunDoc{}, fmt.Errorf("executor: run %s: %w", runID, err)
	}
	run, rows := first.Run, first.Actions
	if run.Status == ledger.RunCancelled {
		return d.doc(ctx, d.concludeCancelled(ctx))
	}
	if run.Status == ledger.RunCompleted {
		return first, nil // a completed run does not change: as just read
	}
	d.run = run
	if woke, err := d.woken(ctx); err != nil {
		return d.doc(ctx, err)
	} else if woke {
		// Its wake time was cleared by a commit of its own: read the rows
		// as they are now.
		if rows, err = e.led.Actions(ctx, runID); err != nil {
			return ledger.RunDoc{}, fmt.Errorf("executor: run %s: read actions: %w", runID, err)
		}
	}
	if d.tmpl, err = d.templates(ctx, run, rows); err != nil {
		return d.doc(ctx, err)
	}
	return d.proceed(ctx, rows)
}

// driveNew drives a run not recorded yet from the run and rows nr records:
// the loop's first commit records it with the first claims (commit). When
// the run was recorded before, it is checked as Record checks it, then
// driven as recorded (errRedrive: drive reads it).
func (e *Engine) driveNew(ctx context.Context, nr *newRun) (ledger.RunDoc, error) {
	runID := nr.run.ID
	g := acquireGate(e.led, runID)
	defer releaseGate(e.led, runID, g)
	d := newDriver(e, runID, g)
	defer func() { e.scanVisits.Add(d.scanVisits) }()
	_ = g.write(func() error {
		g.status = nr.run.Status
		return nil
	})
	d.run, d.create = nr.run, nr
	// A new run has no args resolved for review (templates): its rows
	// are as planned.
	doc, err := d.proceed(ctx, nr.rows)
	if d.before != nil {
		stored, created, err := d.before.CreatedRun()
		doc, _, err := e.recorded(ctx, nr, stored, created, err)
		if err != nil {
			return doc, err
		}
		return ledger.RunDoc{}, errRedrive
	}
	if d.create != nil {
		// The first commit failed, or the context ended before it: nothing
		// was recorded.
		return ledger.RunDoc{}, fmt.Errorf("executor: run %s: record run: %w", runID, cmp.Or(d.createErr, d.fatal, ctx.Err(), err))
	}
	return doc, err
}

// proceed runs the loop over rows (the run's, as read or being recorded)
// and concludes, returning the run's document.
func (d *driver) proceed(ctx context.Context, rows []ledger.Action) (ledger.RunDoc, error) {
	d.pol = Policy(d.run.Policy)
	if !d.pol.valid() {
		d.pol = PolicySafe
	}
	if err := d.load(rows); err != nil {
		if d.create != nil {
			return ledger.RunDoc{}, err
		}
		return d.doc(ctx, err)
	}
	d.loop(ctx)
	d.stopWorkers()
	if d.create != nil || d.before != nil {
		return ledger.RunDoc{}, nil // nothing recorded (driveNew)
	}
	err := d.end(ctx)
	if errors.Is(err, errRedrive) {
		return ledger.RunDoc{}, err
	}
	if err == nil && ctx.Err() == nil {
		err = d.recordWake(ctx)
	}
	return d.doc(ctx, err)
}

// doc returns the run's document as the ledger has it now, with err (or
// the read's error, when err is nil).
func (d *driver) doc(ctx context.Context, err error) (ledger.RunDoc, error) {
	if err == nil && d.endDoc.Run.ID != "" {
		return d.endDoc, nil
	}
	dc, derr := d.e.led.Doc(context.WithoutCancel(ctx), d.runID)
	if derr != nil && err == nil {
		err = fmt.Errorf("executor: run %s: read run: %w", d.runID, derr)
	}
	return dc, err
}

// end concludes a drive once its loop stopped: drive again (errRedrive),
// conclude a cancelled run, or finish.
func (d *driver) end(ctx context.Context) error {
	if d.fatal != nil {
		return d.fatal
	}
	if d.redrive && ctx.Err() == nil {
		return errRedrive
	}
	if d.cancelled() {
		// Cancelled while this drive ran: workers interrupted (a context that
		// ended, a lookup wait) may have left claims whose outcome is unknown.
		// Conclude them now, whatever the context: nothing else will.
		if err := d.concludeCancelled(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("executor: run %s: %w", d.runID, ctx.Err())
	}
	if d.e.draining() && !d.settled {
		// Stopped starting work (Drain): what is left waits for the next start.
		return fmt.Errorf("executor: run %s: %w", d.runID, ErrDraining)
	}
	return d.finish(ctx)
}

// load builds the nodes from the run's rows.
func (d *driver) load(rows []ledger.Action) error {
	var plain []ledger.Action
	for _, r := range rows {
		if r.Undo {
			d.undo[r.ID] = r
			continue
		}
		n, err := d.newNode(r)
		if err != nil {
			return err
		}
		d.add(n)
		plain = append(plain, r)
	}
	d.wire(plain)
	return nil
}

// newNode is the node of row r, with the references of its args.
func (d *driver) newNode(r ledger.Action) (*node, error) {
	t, ok := d.e.reg.Get(r.Tool)
	if !ok {
		return nil, &ActionError{RunID: d.runID, ActionID: r.ID, Key: r.Key, Op: "load",
			Err: fmt.Errorf("%w: %q (the tools changed since the run started?)", tools.ErrUnknownTool, r.Tool)}
	}
	n := &node{id: r.ID, row: r, tool: t, spec: t.Spec(), args: r.Args}
	if tm, ok := d.tmpl[r.ID]; ok {
		n.args = tm
	}
	if r.Key != "" {
		// Once claimed, a row's args are resolved data (its key was derived
		// from them): never parsed again.
		return n, nil
	}
	refs, err := plan.Refs(n.args)
	if err != nil {
		return nil, &ActionError{RunID: d.runID, ActionID: r.ID, Op: "load", Err: err}
	}
	for _, ref := range refs {
		if !slices.Contains(n.refs, ref.Action) {
			n.refs = append(n.refs, ref.Action)
		}
	}
	return n, nil
}

// topo orders rows dependencies first, ties broken by position.
func topo(rows []ledger.Action) []string {
	pos := make(map[string]int, len(rows))
	for i, r := range rows {
		pos[r.ID] = i
	}
	done := make(map[string]bool, len(rows))
	out := make([]string, 0, len(rows))
	for len(out) < len(rows) {
		progressed := false
		for _, r := range rows {
			if done[r.ID] {
				continue
			}
			ready := true
			for _, dep := range r.DependsOn {
				if _, known := pos[dep]; known && !done[dep] {
					ready = false
					break
				}
			}
			if ready {
				done[r.ID] = true
				out = append(out, r.ID)
				progressed = true
			}
		}
		if !progressed { // a cycle cannot be recorded; keep the rest in plan order
			for _, r := range rows {
				if !done[r.ID] {
					done[r.ID] = true
					out = append(out, r.ID)
				}
			}
		}
	}
	return out
}

// sentBefore reports whether a row waiting for another attempt was claimed
// before (a retryable failure, or a person's retry, left it pending): its
// earlier calls may have taken effect.
func sentBefore(r ledger.Action) bool {
	return !r.Undo && r.Key != "" && r.Attempts > 0 &&
		(r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved)
}

// act is one action being performed under one key.
type act struct {
	n       *node
	key     string
	args    json.RawMessage // resolved
	checked bool            // args validated against the tool's input schema by this drive (prepare)
	attempt int             // attempt number of the claim we hold (0: none)
	claimAt time.Time       // when our claim was recorded
	release func()          // in-process reservation of the key
	rec     *ledger.KeyRecord
	fresh   bool        // first claim under this key is prepared (approval checked)
	preOps  []ledger.Op // written together with the first claim (AddUndo)
	undoOf  string      // compensating action: the id of the action it undoes
	tries   int
	began   time.Time
	adopted bool // output taken from an existing succeeded key
	// charges are the budgets the key's first claim reserves (checkBudgets).
	charges []ledger.Charge
	// basis states to the ledger what the first claim was decided from
	// (ledger.Op.Decided, Uncounted): it re-checks all of it in the claim.
	basis func(ledger.Op) ledger.Op
	// limit is set while the action waits for a slot of its tool
	// (limits.go).
	limit *limitWait
	// maybeDone: an earlier attempt's outcome is unknown (or the provider
	// said a request with the key was in flight) and nothing has shown since
	// that it did not take effect. Retries that then run out on calls that
	// were not sent end in needs_review, not failed.
	maybeDone bool
	unknownAt time.Time // claim time of the latest attempt whose outcome is unknown
	first     time.Time // when attempt 1 of the key was claimed (the key record's FirstClaimedAt)
	// ended is how the latest tool call ended, reported to the Observer
	// once its outcome is recorded (record, succeed), then cleared.
	ended *AttemptResult

	// What the worker found, for the loop to absorb (driver.receive). row
	// is the worker's copy of the action's row, kept up to date with its
	// own writes; the loop takes it back with the act.
	row     ledger.Action
	how     end             // how the worker ended
	out     json.RawMessage // the output to record (how == endSucceeded)
	failMsg string          // the action failed the run
	fatal   error           // the ledger failed: the drive stops
	stale   bool            // a claim was refused as stale: drive again
	notDue  *time.Time      // the claim was refused: the action is due then (timer.go)
	span    func(Done)      // ends the action's span once its outcome is absorbed
}

// claimOp is the claim of attempt n of a.key; a first claim says what it
// was decided from, for the ledger to check again.
func (a *act) claimOp(runID string, n int) ledger.Op {
	o := ledger.Claim(runID, a.n.id, a.row.Tool, a.key, a.args, n).WithCharges(a.charges...).WithLimits(toolLimit(a.n.spec))
	if a.n.spec.Class == tools.Keyed {
		// The ledger keeps the run while the provider honours the key.
		o = o.WithKeyTTL(a.n.spec.KeyTTL)
	}
	if n == 1 && a.basis != nil {
		o = a.basis(o)
	}
	return o
}

func conflictRecord(err error) *ledger.KeyRecord {
	var ce *ledger.ConflictError
	if errors.As(err, &ce) {
		cur := ce.Current
		return &cur
	}
	return nil
}

func jsonEqual(a, b json.RawMessage) bool {
	if string(a) == string(b) {
		return true
	}
	ca, err1 := plan.Canonical(a)
	cb, err2 := plan.Canonical(b)
	return err1 == nil && err2 == nil && string(ca) == string(cb)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with maps of strings and numbers
	}
	return b
}

// errText shortens an error for events and rows.
func errText(err error) string {
	s := err.Error()
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// templates finds the unclaimed rows whose args the executor wrote back
// resolved (event action.args_resolved, later than any edit of the
// current revision) and returns the args to resolve them from: the last
// person's edit before it, else the recorded plan's. Resolved values are
// data: parsing them again as references would refuse text that contains
// "${", and lose the references for a later resolution.
func (d *driver) templates(ctx context.Context, run ledger.Run, rows []ledger.Action) (map[string]json.RawMessage, error) {
	if !slices.ContainsFunc(rows, func(r ledger.Action) bool {
		return !r.Undo && r.Key == "" && (r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved)
	}) {
		return nil, nil
	}
	evs, err := d.e.led.Events(ctx, d.runID, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("executor: run %s: read events: %w", d.runID, err)
	}
	shown, personArgs := shownArgs(evs)
	var out map[string]json.RawMessage
	var planned map[string]json.RawMessage
	for _, r := range rows {
		if r.Key != "" || !shown[r.ID] {
			continue
		}
		tm, ok := personArgs[r.ID]
		if !ok {
			if planned == nil {
				if planned, err = d.plannedArgs(ctx, run.Revision); err != nil {
					return nil, err
				}
			}
			if tm, ok = planned[r.ID]; !ok {
				continue
			}
		}
		if out == nil {
			out = map[string]json.RawMessage{}
		}
		out[r.ID] = tm
	}
	return out, nil
}

// shownArgs reads the current revision's events: shown lists the actions
// whose latest change of args was docket's resolution, personArgs the
// last args a person edited in.
func shownArgs(evs []ledger.Event) (shown map[string]bool, personArgs map[string]json.RawMessage) {
	shown, personArgs = map[string]bool{}, map[string]json.RawMessage{}
	for _, ev := range evs {
		switch ev.Type {
		case ledger.EventRunReplayed:
			clear(shown) // a new revision: its plan holds the edits before it
			clear(personArgs)
		case ledger.EventActionArgsResolved:
			shown[ev.ActionID] = true
		case ledger.EventActionEdited:
			var data struct {
				Args json.RawMessage `json:"args"`
			}
			if json.Unmarshal(ev.Data, &data) != nil {
				continue
			}
			shown[ev.ActionID] = false
			if len(data.Args) > 0 {
				personArgs[ev.ActionID] = data.Args
			}
		}
	}
	return shown, personArgs
}

// plannedArgs are the args of revision rev's plan, by action id.
func (d *driver) plannedArgs(ctx context.Context, rev int) (map[string]json.RawMessage, error) {
	p, err := d.e.led.Plan(ctx, d.runID, rev)
	if err != nil {
		return nil, fmt.Errorf("executor: run %s: read plan revision %d: %w", d.runID, rev, err)
	}
	planned := make(map[string]json.RawMessage, len(p.Actions))
	for _, a := range p.Actions {
		planned[a.ID] = a.Args
	}
	return planned, nil
}

// concludeCancelled settles what a cancelled run left open when the process
// that drove it stopped: nothing new starts, but an action claimed by a
// process that is gone, or waiting for a retry after an attempt whose outcome
// is unknown, may have taken effect: needs_review, so a person can say what
// happened. One waiting for a retry after attempts that surely did nothing is
// skipped. An action in flight in this process is left to its worker.
func (d *driver) concludeCancelled(ctx context.Context) error {
	rows, err := d.e.led.Actions(ctx, d.runID)
	if err != nil {
		return fmt.Errorf("executor: run %s: read actions: %w", d.runID, err)
	}
	for _, r := range rows {
		if r.Key == "" || (r.Status != ledger.StatusClaimed && !sentBefore(r)) {
			continue
		}
		release, _, ok := takeKey(d.e.led, r.Key)
		if !ok {
			continue // a worker of this process holds it: it concludes it
		}
		err := d.concludeOne(ctx, r)
		release()
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *driver) concludeOne(ctx context.Context, r ledger.Action) error {
	rec, err := d.e.led.Key(ctx, r.Key)
	if err != nil {
		return fmt.Errorf("executor: run %s: action %s: read key: %w", d.runID, r.ID, err)
	}
	if rec.State == ledger.StatusPending {
		// Waiting for its next attempt: as for a retry that meets the cancel.
		a := newAct(&node{id: r.ID, row: r}, r.Key, r.Args)
		a.maybeDone = recMaybeDone(rec)
		d.concludeOnCancel(ctx, a, rec.Attempt+1)
		return a.fatal
	}
	if rec.State != ledger.StatusClaimed {
		return nil
	}
	// Claimed by a process that is gone: its outcome is unknown.
	const why = "the run was cancelled while this action's outcome was unknown (the process driving it stopped); check the external system, then resolve it"
	res, err := d.e.led.Apply(context.WithoutCancel(ctx), ledger.NeedsReview(r.Key, rec.Attempt, why))
	if err != nil {
		return fmt.Errorf("executor: run %s: action %s: conclude after cancel: %w", d.runID, r.ID, err)
	}
	for _, x := range res {
		if x.Err != nil && !errors.Is(x.Err, ledger.ErrConflict) {
			return &ActionError{RunID: d.runID, ActionID: r.ID, Key: r.Key, Op: "conclude after cancel", Err: x.Err}
		}
	}
	if len(res) > 0 && res[0].Err == nil {
		spec, _ := d.e.reg.Spec(r.Tool)
		d.e.obs.NeedsReview(AttemptInfo{RunID: d.runID, ActionID: r.ID, Tool: r.Tool, Class: spec.Class, Key: r.Key, Attempt: rec.Attempt}, why)
	}
	d.e.log.Warn("cancelled run: action concluded", "run_id", d.runID, "action_id", r.ID, "key", r.Key, "state", string(rec.State))
	return nil
}
