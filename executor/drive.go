package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
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
// progress.
type driver struct {
	e     *Engine
	runID string
	g     *gate
	pol   Policy
	inc   string
	run   ledger.Run // as loaded: goal, creator, revision (policy input)

	mu         sync.Mutex
	nodes      map[string]*node
	order      []string // topological, ties in plan order (no undo rows)
	undo       map[string]ledger.Action
	inflight   int    // actions taken by this drive whose outcome is not yet in their rows
	settledGen uint64 // bumped whenever an action leaves inflight (its row holds its outcome)
	failErr    string // first failure: no new action starts
	rejected   bool   // the failure is a rejection (no compensation)
	fatal      error  // the ledger failed: stop
	// redrive: the ledger refused a claim decided on facts that changed
	// (another writer paused, cancelled, edited, rejected): start nothing
	// more; once in-flight actions are recorded the run is driven again
	// from a fresh read.
	redrive bool
	resumed bool
	settled bool // the run's final status was written with the last outcome
	// undoAwaiting lists compensating actions waiting for a person's approval.
	undoAwaiting []string

	// scan holds, in order, the nodes start may still pick or must keep
	// an eye on (in flight): not done, not awaiting a person, not parked.
	// unparked are parked nodes whose blocker succeeded, merged back into
	// scan (by pos) at start's next look.
	scan     []*node
	unparked []*node
	// scanVisits counts the nodes start looked at (Engine.scanVisits).
	scanVisits uint64
	// unsucceeded counts the nodes whose row is not succeeded (kept by load
	// and updateRow), so that isLast is O(1).
	unsucceeded int

	// tmpl holds, for rows whose args were written back resolved (shown
	// to a reviewer), the args with references to resolve them from.
	tmpl map[string]json.RawMessage

	wake chan struct{}
	wg   sync.WaitGroup
}

// drive drives run runID once, in a span of its own (Config.Tracer).
func (e *Engine) drive(ctx context.Context, runID string) (ledger.RunDoc, error) {
	ctx, end := e.tracer.Start(ctx, Work{Kind: WorkRun, AttemptInfo: AttemptInfo{RunID: runID}})
	doc, err := e.driveOnce(ctx, runID)
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
	d := &driver{
		e: e, runID: runID, g: g, inc: e.led.Incarnation(),
		nodes: map[string]*node{}, undo: map[string]ledger.Action{},
		wake: make(chan struct{}, 1),
	}
	defer func() { e.scanVisits.Add(d.scanVisits) }()
	doc := func(err error) (ledger.RunDoc, error) {
		dc, derr := e.led.Doc(context.WithoutCancel(ctx), runID)
		if derr != nil && err == nil {
			err = fmt.Errorf("executor: run %s: read run: %w", runID, derr)
		}
		return dc, err
	}

	g.claimMu.Lock()
	run, err := e.led.GetRun(ctx, runID)
	if err != nil {
		g.claimMu.Unlock()
		return ledger.RunDoc{}, fmt.Errorf("executor: run %s: %w", runID, err)
	}
	g.status = run.Status
	// A person's pause holds until an explicit resume (Engine.Unpause): this
	// drive concludes what is in flight and starts nothing new.
	g.pausedByPerson = run.Status == ledger.RunPaused && run.PausedBy != ""
	g.claimMu.Unlock()
	if run.Status == ledger.RunCancelled {
		return doc(d.concludeCancelled(ctx))
	}
	if run.Status == ledger.RunCompleted {
		return doc(nil)
	}
	d.run = run
	d.pol = Policy(run.Policy)
	if !d.pol.valid() {
		d.pol = PolicySafe
	}
	rows, err := e.led.Actions(ctx, runID)
	if err != nil {
		return ledger.RunDoc{}, fmt.Errorf("executor: run %s: read actions: %w", runID, err)
	}
	if d.tmpl, err = d.templates(ctx, run, rows); err != nil {
		return doc(err)
	}
	if err := d.load(rows); err != nil {
		return doc(err)
	}

	d.schedule(ctx)
	d.wg.Wait()
	if err := d.fatalErr(); err != nil {
		return doc(err)
	}
	d.mu.Lock()
	redrive := d.redrive
	d.mu.Unlock()
	if redrive && ctx.Err() == nil {
		return ledger.RunDoc{}, errRedrive
	}
	if d.cancelled() {
		// Cancelled while this drive ran: workers interrupted (a context that
		// ended, a lookup wait) may have left claims whose outcome is unknown.
		// Conclude them now, whatever the context: nothing else will.
		if err := d.concludeCancelled(context.WithoutCancel(ctx)); err != nil {
			return doc(err)
		}
	}
	if ctx.Err() != nil {
		return doc(fmt.Errorf("executor: run %s: %w", runID, ctx.Err()))
	}
	if d.e.draining() && !d.isSettled() {
		// Stopped starting work (Drain): what is left waits for the next start.
		return doc(fmt.Errorf("executor: run %s: %w", runID, ErrDraining))
	}
	if err := d.finish(ctx); err != nil {
		return doc(err)
	}
	return doc(nil)
}

// isSettled reports whether the run's final status was written with its
// last outcome.
func (d *driver) isSettled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settled
}

// load builds the nodes from the run's rows.
func (d *driver) load(rows []ledger.Action) error {
	var plain []ledger.Action
	for _, r := range rows {
		if r.Undo {
			d.undo[r.ID] = r
			continue
		}
		t, ok := d.e.reg.Get(r.Tool)
		if !ok {
			return &ActionError{RunID: d.runID, ActionID: r.ID, Key: r.Key, Op: "load",
				Err: fmt.Errorf("%w: %q (the tools changed since the run started?)", tools.ErrUnknownTool, r.Tool)}
		}
		n := &node{id: r.ID, row: r, tool: t, spec: t.Spec(), args: r.Args}
		if tm, ok := d.tmpl[r.ID]; ok {
			n.args = tm
		}
		var refs []plan.Ref
		if r.Key == "" {
			// Args with references to resolve. Once claimed, a row's args are
			// resolved data (its key was derived from them): never parsed again.
			var err error
			if refs, err = plan.Refs(n.args); err != nil {
				return &ActionError{RunID: d.runID, ActionID: r.ID, Op: "load", Err: err}
			}
		}
		for _, ref := range refs {
			if !slices.Contains(n.refs, ref.Action) {
				n.refs = append(n.refs, ref.Action)
			}
		}
		d.nodes[r.ID] = n
		if r.Status != ledger.StatusSucceeded {
			d.unsucceeded++
		}
		plain = append(plain, r)
		switch r.Status {
		case ledger.StatusFailed:
			d.failLocked(fmt.Sprintf("action %s failed: %s", r.ID, r.Error), false)
		case ledger.StatusRejected:
			d.failLocked(rejectedMsg(r), true)
		}
	}
	d.order = topo(plain)
	d.scan = make([]*node, len(d.order))
	for i, id := range d.order {
		n := d.nodes[id]
		d.scan[i], n.pos = n, i
		n.deps = make([]*node, len(n.row.DependsOn))
		for j, dep := range n.row.DependsOn {
			n.deps[j] = d.nodes[dep]
		}
	}
	return nil
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

// failLocked records the run's first failure. Call with d.mu held (or before
// any goroutine starts).
func (d *driver) failLocked(msg string, rejected bool) {
	if d.failErr == "" {
		d.failErr = msg
		d.rejected = rejected
	} else if !rejected {
		d.rejected = false // a real failure also happened: compensate
	}
}

func (d *driver) fail(msg string) {
	d.mu.Lock()
	d.failLocked(msg, false)
	d.mu.Unlock()
	d.poke()
}

func (d *driver) setFatal(err error) {
	d.mu.Lock()
	if d.fatal == nil {
		d.fatal = err
	}
	d.mu.Unlock()
	d.poke()
}

func (d *driver) fatalErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fatal
}

func (d *driver) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// schedule starts ready actions until nothing is in flight and nothing more can start.
//
// An action counts as in flight until its outcome is in its row (leave), so
// "nothing in flight" means every row this drive touched is up to date; and
// the scheduler only stops when no action settled since it last looked for
// ready ones (settledGen), so an outcome that lands between the look and the
// check (a join whose last dependency just finished) is never missed.
func (d *driver) schedule(ctx context.Context) {
	for {
		d.mu.Lock()
		gen := d.settledGen
		d.mu.Unlock()
		var acts []*act
		if ctx.Err() == nil {
			acts, _, _ = d.start(ctx, nil, nil, nil)
		}
		for _, a := range acts {
			d.spawn(ctx, a)
		}
		d.mu.Lock()
		idle := d.inflight == 0
		changed := d.settledGen != gen
		stop := d.fatal != nil || d.redrive
		d.mu.Unlock()
		if idle && (stop || (len(acts) == 0 && !changed)) {
			return
		}
		if idle && changed && len(acts) == 0 {
			continue // an outcome landed while we looked: look again
		}
		select {
		case <-d.wake:
		case <-ctx.Done():
			// In-flight actions see the same context and finish; wait for them.
			d.wg.Wait()
			return
		}
	}
}

func (d *driver) spawn(ctx context.Context, a *act) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.work(ctx, a)
	}()
}

// act is one action being performed under one key.
type act struct {
	n       *node
	key     string
	args    json.RawMessage // resolved and validated
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
}

// prepared is what preparing a node yields.
type prepared struct {
	n      *node
	a      *act
	claim  bool         // claim attempt 1 in the batch
	ops    []ledger.Op  // other ops for the batch (edit for review, fail of bad args)
	failed string       // resolving or validating failed (ops hold Claim+Fail)
	denied string       // the policy denied the call (ops hold Decide+Reject)
	gate   *ledger.Gate // the gate decided now, when it is to be recorded (Decide in ops)
	await  bool
	shown  json.RawMessage // resolved args written for the reviewer (await with an Edit op)
}

// start picks ready nodes (up to the free slots; finishing counts its own slot
// as free), prepares them and writes lead (the outcome of finishing) together
// with their claims in one Apply. It returns the acts to work on and the
// results of lead.
func (d *driver) start(ctx context.Context, lead []ledger.Op, finishing *act, out json.RawMessage) ([]*act, []ledger.Result, error) {
	d.mu.Lock()
	slots := d.e.cfg.Parallelism - d.inflight
	if finishing != nil {
		slots++ // its slot is free once its outcome is recorded with these claims
	}
	var picks []*node
	canStart := d.fatal == nil && !d.redrive && ctx.Err() == nil && !d.e.draining() && (finishing == nil || len(out) <= maxMergedOutput)
	if canStart {
		fin := (*node)(nil)
		if finishing != nil {
			fin = finishing.n
			d.unparkLocked(fin) // its outcome is written with the claims picked now
		}
		d.mergeUnparkedLocked()
		// One pass over scan that picks and compacts: done and awaiting
		// nodes leave it for good, blocked ones are parked on their blocker.
		w, i := 0, 0
		for ; i < len(d.scan) && len(picks) < slots; i++ {
			n := d.scan[i]
			d.scanVisits++
			if n.done || n.awaiting {
				continue
			}
			if n.started {
				d.scan[w], w = n, w+1
				continue
			}
			if n.row.Status == ledger.StatusClaimed || (d.failErr != "" && sentBefore(n.row)) {
				// Claimed before: bring it to an outcome even when failing (its
				// call may have taken effect; it is never skipped).
				picks = append(picks, n)
				d.scan[w], w = n, w+1
				continue
			}
			switch n.row.Status {
			case ledger.StatusPending, ledger.StatusApproved:
			default:
				// Finished before this drive (or by a person): no drive
				// picks it again, whatever happens to the others.
				continue
			}
			if d.failErr != "" {
				d.scan[w], w = n, w+1
				continue
			}
			ready := true
			if b := n.blocker; b == nil || b == fin || b.row.Status == ledger.StatusSucceeded {
				for j, dn := range n.deps {
					if dn != nil && dn == fin {
						continue
					}
					if dn == nil || dn.row.Status != ledger.StatusSucceeded {
						if n.row.DependsOn[j] == finishingID(finishing) {
							continue
						}
						ready, n.blocker = false, dn
						break
					}
				}
			} else {
				ready = false // still waits for the same dependency
			}
			switch {
			case ready:
				picks = append(picks, n)
			case n.blocker != nil && !sentBefore(n.row):
				// Parked until its blocker succeeds (updateRow, or start
				// with the blocker finishing); a row claimed before stays on
				// the scan, as a failing drive must still pick it.
				n.blocker.waiters = append(n.blocker.waiters, n)
				continue
			}
			d.scan[w], w = n, w+1
		}
		w += copy(d.scan[w:], d.scan[i:])
		clear(d.scan[w:])
		d.scan = d.scan[:w]
		for _, n := range picks {
			d.enterLocked(n)
		}
	}
	var outputs map[string]json.RawMessage
	if len(picks) > 0 {
		outputs = map[string]json.RawMessage{}
		for _, n := range picks {
			for _, r := range n.refs {
				if r == finishingID(finishing) {
					outputs[r] = out
				} else if dn := d.nodes[r]; dn != nil && dn.row.Status == ledger.StatusSucceeded {
					outputs[r] = dn.row.Output
				}
			}
		}
	}
	d.mu.Unlock()

	// Decided one after another: each sees, in the run's totals, the
	// actions prepared before it to be claimed in the same commit.
	var preps []*prepared
	var planned []ledger.Action
	for _, n := range picks {
		p := d.prepare(ctx, n, outputs, planned)
		if p.claim {
			planned = append(planned, ledger.Action{ID: n.id, Tool: n.row.Tool, Key: p.a.key, Args: p.a.args,
				Status: ledger.StatusClaimed, Attempts: 1})
		}
		preps = append(preps, p)
	}
	return d.commitStart(ctx, lead, preps)
}

// sentBefore reports whether a row waiting for another attempt was claimed
// before (a retryable failure, or a person's retry, left it pending): its
// earlier calls may have taken effect.
func sentBefore(r ledger.Action) bool {
	return !r.Undo && r.Key != "" && r.Attempts > 0 &&
		(r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved)
}

func (d *driver) failing() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failErr != ""
}

func finishingID(a *act) string {
	if a == nil {
		return ""
	}
	return a.n.id
}

// unstart gives nodes back (they were picked but will not be worked on now).
func (d *driver) unstart(ns []*node, awaiting bool) {
	if len(ns) == 0 {
		return
	}
	d.mu.Lock()
	for _, n := range ns {
		d.unpickLocked(n, awaiting)
	}
	if awaiting {
		// They leave the scan for good (a person decides): the actions
		// behind them in the scan may start now, so the scheduler looks
		// again even when nothing else settled.
		d.settledGen++
	}
	d.mu.Unlock()
}

// prepare resolves a node's references, validates the resolved args, derives
// the key and checks the approval.
//
// planned are the actions prepared before it in the same commit to be
// claimed: the run's totals count them.
func (d *driver) prepare(ctx context.Context, n *node, outputs map[string]json.RawMessage, planned []ledger.Action) *prepared {
	p := &prepared{n: n}
	row := n.row
	if row.Key != "" && (row.Status == ledger.StatusClaimed || sentBefore(row)) && d.failing() {
		// Failing: conclude the key it was claimed under, as recorded.
		p.a = &act{n: n, key: row.Key, args: row.Args}
		return p
	}
	if row.Status == ledger.StatusClaimed && row.Key != "" {
		// Claimed before (a restart, or another drive): decide from its key record.
		p.a = &act{n: n, key: row.Key, args: row.Args}
		return p
	}
	resolved := row.Args
	if row.Key == "" && len(n.refs) > 0 {
		r, err := plan.Resolve(n.args, outputs)
		if err != nil {
			return d.prepFail(n, fmt.Sprintf("resolve references: %v", err))
		}
		resolved = r
	}
	if err := d.e.reg.ValidateResolved(row.Tool, resolved); err != nil {
		return d.prepFail(n, fmt.Sprintf("resolved arguments: %v", err))
	}
	key, err := plan.Key(d.runID, n.id, row.Tool, resolved)
	if err != nil {
		return d.prepFail(n, fmt.Sprintf("derive key: %v", err))
	}
	p.a = &act{n: n, key: key, args: resolved}
	if row.Key == key && row.Attempts > 0 {
		return p // attempted before under this key: decide from the record
	}
	prun, uncounted := d.policyRun(n.id, n.spec, planned)
	bc := d.checkBudgets(ctx, row.Tool, resolved)
	var rec *ledger.KeyRecord
	if bc.gate != nil {
		// Exceeded, unless the key reserved its share before (a replay's
		// unchanged action): its hold is in the usage already and a claim
		// never reserves twice.
		if rec, err = d.key(ctx, n, key); err != nil {
			p.a, p.await = nil, true
			return p
		} else if rec != nil {
			bc = budgetCheck{}
		}
	}
	g := d.e.decideGate(d.pol, n.spec, policy.Input{ActionID: n.id, Key: key, Args: resolved, Run: prun}, bc)
	var decideOp []ledger.Op
	if (row.Gate != nil || g.Rule != "") && !gateEqual(row.Gate, g) {
		decideOp = []ledger.Op{ledger.Decide(d.runID, n.id, g)}
		p.gate = &g
	}
	ok, why := d.approved(n, resolved, g)
	if !ok && rec == nil {
		// Maybe the key has an outcome already (replay of an unchanged action).
		if rec, err = d.key(ctx, n, key); err != nil {
			p.a, p.await = nil, true
			return p
		}
	}
	// The replay preview decides with the same function (PreviewReplay).
	switch decideStart(startFacts{gate: g, approved: ok, rec: rec}) {
	case startDeny:
		// Never runs: recorded as rejected by the policy, with the rule's
		// message (the run fails; a new plan can do without it).
		reason := deniedReason(g)
		p.a = nil
		p.denied = reason
		p.ops = append(decideOp, ledger.Reject(d.runID, n.id, reason, "policy"))
		d.e.log.Info("action denied by policy", "run_id", d.runID, "action_id", n.id, "rule", g.Rule)
		return p
	case startKeep, startMirrorFailed, startMirrorReview, startMirrorSkipped, startRefuse:
		p.a.rec = rec // the worker mirrors the key's outcome
		return p
	case startAwait:
		p.a = nil
		p.await = true
		if !jsonEqual(row.Args, resolved) {
			// Show the reviewer what will be sent.
			p.ops = append(p.ops, ledger.ShowResolved(d.runID, n.id, resolved))
			p.shown = resolved
		}
		if decideOp == nil && row.Status == ledger.StatusApproved && (row.Gate != nil || p.shown == nil) {
			// Approved once, but the approvals no longer count (expired, or
			// given for other args: an "approve all" that read the row before
			// its references were resolved for review): the row says it
			// waits again, so the next "approve all" finds it. (An Edit to
			// the resolved args, above, already puts it back to pending.)
			decideOp = []ledger.Op{ledger.Decide(d.runID, n.id, g)}
			p.gate = &g
		}
		p.ops = append(p.ops, decideOp...)
		d.e.log.Debug("action waits for approval", "run_id", d.runID, "action_id", n.id, "reason", why)
		return p
	}
	// startRun
	p.a.fresh = true
	rowArgs, anyApproval := row.Args, d.anyApproval(n, g)
	p.a.basis = func(o ledger.Op) ledger.Op {
		o = o.Decided(rowArgs, g, anyApproval)
		if uncounted != nil {
			o = o.Uncounted(uncounted...)
		}
		return o
	}
	p.a.charges = bc.charges
	if g.Need > 0 {
		p.a.charges = bc.withOver() // approved: past the exceeded budgets too
	}
	p.claim = true
	p.ops = decideOp // written with the claim
	return p
}

// key reads key's record for prepare: nil when it has none; on a read
// error the drive stops (fatal) and err is set.
func (d *driver) key(ctx context.Context, n *node, key string) (*ledger.KeyRecord, error) {
	rec, err := d.e.led.Key(ctx, key)
	switch {
	case err == nil:
		return &rec, nil
	case errors.Is(err, ledger.ErrNotFound):
		return nil, nil
	}
	d.setFatal(&ActionError{RunID: d.runID, ActionID: n.id, Key: key, Op: "read key", Err: err})
	return nil, err
}

func (d *driver) prepFail(n *node, msg string) *prepared {
	key, err := plan.Key(d.runID, n.id, n.row.Tool, n.row.Args)
	if err != nil {
		key = "" // cannot even derive one: fatal below
	}
	p := &prepared{n: n, failed: msg}
	if key == "" {
		d.setFatal(&ActionError{RunID: d.runID, ActionID: n.id, Op: "prepare", Err: errors.New(msg)})
		return p
	}
	p.a = &act{n: n, key: key, args: n.row.Args}
	p.ops = []ledger.Op{
		ledger.Claim(d.runID, n.id, n.row.Tool, key, n.row.Args, 1),
		ledger.FailWith(key, 1, msg, false, ledger.FailureInvalidArgs, nil),
	}
	return p
}

// approved reports whether an action may be claimed with these resolved args
// under gate g without asking a person (ledger.Action.Satisfied, the rule the
// ledger checks again in the claim): g needs nobody, or enough distinct
// people approved exactly these args (not expired, not used, allowed by g).
func (d *driver) approved(n *node, resolved json.RawMessage, g ledger.Gate) (bool, string) {
	return n.row.Satisfied(g, resolved, d.run.CreatedBy, d.anyApproval(n, g), d.e.clock.Now())
}

// anyApproval: when only the run's policy asked for a person (no rule) and
// the tool is not at-most-once, any approval of the action counts, as it
// always did.
func (d *driver) anyApproval(n *node, g ledger.Gate) bool {
	return g.Rule == "" && n.spec.Class != tools.AtMostOnce
}

// policyRun is the run as the policy sees it for action skip of tool spec,
// with planned (actions about to be claimed with it) counted in its totals.
// The totals cost a pass over every row (O(actions) per call), so they are
// summed only when one of the rules that apply to spec can read the run;
// then uncounted lists the actions they leave out because they have not
// started, for the ledger to check that none has when the claim commits
// (nil when the totals are not read).
func (d *driver) policyRun(skip string, spec tools.Spec, planned []ledger.Action) (policy.Run, []string) {
	if !readsRun(d.e.rules(spec)) {
		return d.e.runInput(d.run, spec, nil, skip), nil
	}
	d.mu.Lock()
	rows := make([]ledger.Action, 0, len(d.nodes)+len(planned))
	uncounted := []string{}
	for _, n := range d.nodes {
		if slices.ContainsFunc(planned, func(a ledger.Action) bool { return a.ID == n.id }) {
			continue
		}
		rows = append(rows, n.row)
		if n.id != skip && !n.row.Undo && (n.row.Key == "" || n.row.Attempts == 0) &&
			(n.row.Status == ledger.StatusPending || n.row.Status == ledger.StatusApproved) {
			uncounted = append(uncounted, n.id)
		}
	}
	d.mu.Unlock()
	rows = append(rows, planned...)
	slices.Sort(uncounted)
	return d.e.runInput(d.run, spec, rows, skip), uncounted
}

// commitStart writes lead with the prepared claims in one Apply.
func (d *driver) commitStart(ctx context.Context, lead []ledger.Op, preps []*prepared) ([]*act, []ledger.Result, error) {
	type slot struct {
		p     *prepared
		first int // index of its first op
		count int
	}
	var acts []*act
	var ops []ledger.Op
	ops = append(ops, lead...)
	var slots []slot
	var giveBack, awaitBack []*node

	if h := d.e.cfg.Hooks.BeforeClaim; h != nil {
		// Outside the gate's lock: a hook may pause or cancel the run.
		for _, p := range preps {
			if p.claim {
				h(p.n.id)
			}
		}
	}
	d.g.claimMu.RLock()
	halted := d.g.halted()
	d.mu.Lock()
	failing := d.failErr != ""
	d.mu.Unlock()
	for _, p := range preps {
		switch {
		case p.await:
			if len(p.ops) > 0 {
				slots = append(slots, slot{p: p, first: len(ops), count: len(p.ops)})
				ops = append(ops, p.ops...)
			}
			awaitBack = append(awaitBack, p.n)
		case p.denied != "" && !halted:
			slots = append(slots, slot{p: p, first: len(ops), count: len(p.ops)})
			ops = append(ops, p.ops...)
		case p.a == nil:
			giveBack = append(giveBack, p.n)
		case halted:
			giveBack = append(giveBack, p.n)
		case p.claim && failing:
			giveBack = append(giveBack, p.n)
		case p.claim || p.failed != "":
			rel, _, ok := takeKey(d.e.led, p.a.key)
			if !ok {
				// Another goroutine of this process holds the key: wait for it in the worker.
				p.claim = false
				acts = append(acts, p.a)
				continue
			}
			p.a.release = rel
			if p.claim {
				ops = append(ops, p.ops...) // the policy's decision, recorded with the claim
				slots = append(slots, slot{p: p, first: len(ops), count: 1})
				ops = append(ops, p.a.claimOp(d.runID, 1))
			} else {
				slots = append(slots, slot{p: p, first: len(ops), count: len(p.ops)})
				ops = append(ops, p.ops...)
			}
		default:
			acts = append(acts, p.a) // decide from the key record in the worker
		}
	}
	if len(ops) == 0 {
		d.g.claimMu.RUnlock()
		d.unstart(giveBack, false)
		d.unstart(awaitBack, true)
		return acts, nil, nil
	}
	if len(slots) > 0 && !d.resumedDone() {
		// Moving a paused or awaiting run to running needs the write lock.
		d.g.claimMu.RUnlock()
		if err := d.markRunning(ctx); err != nil {
			d.setFatal(err)
		}
		d.g.claimMu.RLock()
		if d.g.halted() {
			// Paused or cancelled meanwhile: only lead goes through.
			for _, s := range slots {
				if s.p.a != nil && s.p.a.release != nil {
					s.p.a.release()
				}
				if s.p.await {
					continue
				}
				giveBack = append(giveBack, s.p.n)
			}
			ops = ops[:len(lead)]
			slots = nil
		}
	}
	var res []ledger.Result
	var err error
	if len(ops) > 0 {
		res, err = d.e.led.Apply(context.WithoutCancel(ctx), ops...)
	}
	d.g.claimMu.RUnlock()
	d.unstart(giveBack, false)
	d.unstart(awaitBack, true)
	if err != nil {
		for _, s := range slots {
			if s.p.a != nil && s.p.a.release != nil {
				s.p.a.release()
			}
		}
		d.mu.Lock()
		for _, s := range slots {
			if !s.p.await {
				d.doneLocked(s.p.n)
			}
		}
		for _, a := range acts {
			d.doneLocked(a.n)
		}
		d.mu.Unlock()
		d.setFatal(fmt.Errorf("executor: run %s: write claims: %w", d.runID, err))
		return nil, nil, err
	}
	for _, s := range slots {
		p := s.p
		switch {
		case p.await:
			if r := res[s.first]; r.Err == nil && p.shown != nil {
				d.updateRow(p.n, func(row *ledger.Action) {
					row.Args = p.shown
					row.ApprovedArgs = nil
					row.Approvals = nil
					row.Status = ledger.StatusPending
				})
			}
			if r := res[s.first+s.count-1]; r.Err == nil && p.gate != nil {
				d.updateRow(p.n, func(row *ledger.Action) { row.Gate, row.Status = p.gate, r.Action.Status })
			}
		case p.denied != "":
			if r := res[s.first+s.count-1]; r.Err == nil {
				d.updateRow(p.n, func(row *ledger.Action) {
					row.Status, row.Error, row.ApprovedArgs = ledger.StatusRejected, p.denied, nil
				})
				d.mu.Lock()
				d.failLocked(fmt.Sprintf("action %s was %s", p.n.id, p.denied), true)
				d.doneLocked(p.n)
				d.mu.Unlock()
			} else {
				d.done(p.n)
				d.setFatal(&ActionError{RunID: d.runID, ActionID: p.n.id, Op: "deny", Err: r.Err})
			}
		case p.failed != "":
			r0, r1 := res[s.first], res[s.first+1]
			p.a.release()
			if r0.Err == nil && r1.Err == nil {
				d.updateRow(p.n, func(row *ledger.Action) {
					row.Status, row.Key, row.Attempts, row.Error = ledger.StatusFailed, p.a.key, 1, p.failed
				})
				d.e.log.Warn("action failed before its call", "run_id", d.runID, "action_id", p.n.id, "key", p.a.key, "error", p.failed)
				d.mu.Lock()
				d.failLocked(fmt.Sprintf("action %s failed: %s", p.n.id, p.failed), false)
				d.doneLocked(p.n)
				d.mu.Unlock()
			} else {
				// Someone else got there first: decide from its record.
				p.a.release = nil
				p.a.fresh = false
				if cur := conflictRecord(r0.Err); cur != nil {
					p.a.rec = cur
				}
				acts = append(acts, p.a)
			}
		default:
			r := res[s.first]
			if r.Err == nil {
				d.claimed(p.a, 1, r.Key)
				acts = append(acts, p.a)
				continue
			}
			p.a.release()
			p.a.release = nil
			p.a.fresh = false
			if r.Action.ID == p.n.id {
				d.updateRow(p.n, func(row *ledger.Action) { *row = r.Action }) // e.g. linked to a succeeded key
			}
			if cur := conflictRecord(r.Err); cur != nil {
				p.a.rec = cur
				acts = append(acts, p.a)
				continue
			}
			if errors.Is(r.Err, ledger.ErrStale) {
				d.stale(p.n.id, r.Err)
				d.mu.Lock()
				d.unpickLocked(p.n, false)
				d.settledGen++
				d.mu.Unlock()
				continue
			}
			if errors.Is(r.Err, ledger.ErrBudgetExceeded) {
				// Another claim took the room since we read the usage:
				// prepare it again, decided on the new usage.
				d.e.log.Info("claim refused by a budget; deciding again", "run_id", d.runID, "action_id", p.n.id, "error", r.Err)
				d.mu.Lock()
				d.unpickLocked(p.n, false)
				d.settledGen++
				d.mu.Unlock()
				continue
			}
			d.done(p.n)
			d.setFatal(&ActionError{RunID: d.runID, ActionID: p.n.id, Key: p.a.key, Op: "claim", Err: r.Err})
		}
	}
	return acts, res[:len(lead)], nil
}

// claimOp is the claim of attempt n of a.key; a first claim says what it
// was decided from, for the ledger to check again.
func (a *act) claimOp(runID string, n int) ledger.Op {
	o := ledger.Claim(runID, a.n.id, a.n.row.Tool, a.key, a.args, n).WithCharges(a.charges...)
	if n == 1 && a.basis != nil {
		o = a.basis(o)
	}
	return o
}

// stale notes that the ledger refused a claim of action id decided on facts
// that changed (ledger.ErrStale): this drive starts nothing more and the
// run is driven again from a fresh read once what is in flight is recorded.
func (d *driver) stale(id string, err error) {
	d.e.log.Info("claim refused: the run or action changed since it was read; reading it again", "run_id", d.runID, "action_id", id, "error", err)
	d.mu.Lock()
	d.redrive = true
	d.mu.Unlock()
}

func conflictRecord(err error) *ledger.KeyRecord {
	var ce *ledger.ConflictError
	if errors.As(err, &ce) {
		cur := ce.Current
		return &cur
	}
	return nil
}

// claimed notes that we hold attempt n of a.key.
func (d *driver) claimed(a *act, n int, rec ledger.KeyRecord) {
	a.attempt = n
	a.claimAt = rec.ClaimedAt
	a.first = rec.FirstClaimedAt
	if a.began.IsZero() {
		a.began = d.e.clock.Now()
	}
	d.updateRow(a.n, func(row *ledger.Action) {
		row.Status, row.Key, row.Attempts, row.Args = ledger.StatusClaimed, a.key, n, a.args
	})
	if h := d.e.cfg.Hooks.AfterClaim; h != nil {
		h(a.n.id)
	}
}

// In-flight accounting, done only through these methods: an action is in
// flight from when start picks it until its row holds its outcome (or this
// drive gives it up). d.inflight counts them; the scheduler stops only when
// it is 0, and settledGen tells it that an outcome landed meanwhile.

// enterLocked takes n for this drive: in flight. Call with d.mu held.
func (d *driver) enterLocked(n *node) {
	n.started = true
	d.inflight++
}

// unpickLocked gives n back (picked, but not worked on now; awaiting: it
// waits for a person). Nothing settled. Call with d.mu held.
func (d *driver) unpickLocked(n *node, awaiting bool) {
	n.started = false
	if awaiting {
		n.awaiting = true
	}
	d.inflight--
}

// leaveLocked ends an action's time in flight; call it (with d.mu held) only
// once the action's row holds its outcome, or once this drive gave it up.
func (d *driver) leaveLocked() {
	d.inflight--
	d.settledGen++
}

// doneLocked marks n finished by this drive and ends its time in flight.
// Call with d.mu held.
func (d *driver) doneLocked(n *node) {
	n.done = true
	d.leaveLocked()
}

// done is doneLocked for callers not holding d.mu.
func (d *driver) done(n *node) {
	d.mu.Lock()
	d.doneLocked(n)
	d.mu.Unlock()
}

// leave is leaveLocked for callers not holding d.mu; it wakes the scheduler.
func (d *driver) leave() {
	d.mu.Lock()
	d.leaveLocked()
	d.mu.Unlock()
	d.poke()
}

func (d *driver) updateRow(n *node, f func(*ledger.Action)) {
	d.mu.Lock()
	was := n.row.Status == ledger.StatusSucceeded
	f(&n.row)
	if is := n.row.Status == ledger.StatusSucceeded; is != was && d.nodes[n.id] == n {
		if is {
			d.unsucceeded--
		} else {
			d.unsucceeded++
		}
	}
	if n.row.Status == ledger.StatusSucceeded {
		d.unparkLocked(n)
	}
	d.mu.Unlock()
}

// unparkLocked puts the nodes parked on n back for start's next look. Call
// with d.mu held.
func (d *driver) unparkLocked(n *node) {
	d.unparked = append(d.unparked, n.waiters...)
	n.waiters = nil
}

// mergeUnparkedLocked merges the unparked nodes into scan, keeping it in
// the drive's order. Call with d.mu held.
func (d *driver) mergeUnparkedLocked() {
	if len(d.unparked) == 0 {
		return
	}
	slices.SortFunc(d.unparked, func(a, b *node) int { return a.pos - b.pos })
	merged := make([]*node, 0, len(d.scan)+len(d.unparked))
	i, j := 0, 0
	for i < len(d.scan) && j < len(d.unparked) {
		if d.scan[i].pos < d.unparked[j].pos {
			merged, i = append(merged, d.scan[i]), i+1
		} else {
			merged, j = append(merged, d.unparked[j]), j+1
		}
	}
	merged = append(append(merged, d.scan[i:]...), d.unparked[j:]...)
	d.scan = merged
	clear(d.unparked)
	d.unparked = d.unparked[:0]
}

func (d *driver) resumedDone() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.resumed
}

// markRunning moves a paused or awaiting_approval run to running before its
// first new claim in this drive.
func (d *driver) markRunning(ctx context.Context) error {
	d.g.claimMu.Lock()
	defer d.g.claimMu.Unlock()
	d.mu.Lock()
	done := d.resumed
	d.resumed = true
	d.mu.Unlock()
	if done {
		return nil
	}
	switch d.g.status {
	case ledger.RunPaused, ledger.RunAwaitingApproval:
		if d.g.pausedByPerson {
			return nil
		}
		if _, err := apply(context.WithoutCancel(ctx), d.e.led, ledger.SetRunStatus(d.runID, ledger.RunRunning, ledger.EventRunResumed, "", nil)); err != nil {
			return fmt.Errorf("executor: run %s: resume: %w", d.runID, err)
		}
		d.g.status = ledger.RunRunning
		d.e.obs.RunStatus(d.runID, ledger.RunRunning)
		d.e.log.Info("run resumed", "run_id", d.runID)
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
	var suspects bool
	for _, r := range rows {
		if !r.Undo && r.Key == "" && (r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved) {
			suspects = true
			break
		}
	}
	if !suspects {
		return nil, nil
	}
	evs, err := d.e.led.Events(ctx, d.runID, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("executor: run %s: read events: %w", d.runID, err)
	}
	shown := map[string]bool{} // the latest change of the row's args was docket's resolution
	personArgs := map[string]json.RawMessage{}
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
	var out map[string]json.RawMessage
	var planned map[string]json.RawMessage
	for _, r := range rows {
		if r.Key != "" || !shown[r.ID] {
			continue
		}
		tm, ok := personArgs[r.ID]
		if !ok {
			if planned == nil {
				p, err := d.e.led.Plan(ctx, d.runID, run.Revision)
				if err != nil {
					return nil, fmt.Errorf("executor: run %s: read plan revision %d: %w", d.runID, run.Revision, err)
				}
				planned = make(map[string]json.RawMessage, len(p.Actions))
				for _, a := range p.Actions {
					planned[a.ID] = a.Args
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
		a := &act{n: &node{id: r.ID, row: r}, key: r.Key, args: r.Args}
		a.maybeDone = recMaybeDone(rec)
		d.concludeOnCancel(ctx, a, rec.Attempt+1)
		return d.fatalErr()
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
