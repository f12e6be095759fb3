package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/docketrun/docket/ledger"
)

// The drive's loop: one goroutine owns the drive's state (sched). It picks
// ready actions, prepares them, writes their claims in one Apply together
// with the outputs of the actions that just succeeded (the commit points of
// the exactly-once rules: a claim before its call, an outcome recorded
// before its dependents are claimed), and hands the claimed actions to
// workers. A worker does the action's I/O (the key's record, the call,
// lookups, retries with their backoff, and the ledger writes of its own
// attempts) on a copy of its row, and sends the act back on inbox when it
// is done; the loop absorbs it and decides what next.

// loop starts ready actions until nothing is in flight and nothing more can
// start.
//
// An action counts as in flight until its outcome is in its row, so
// "nothing in flight" means every row this drive touched is up to date; and
// the loop only stops when nothing changed since it last looked for ready
// ones (gen), so an outcome that lands between the look and the check is
// never missed.
func (d *driver) loop(ctx context.Context) {
	for {
		gen := d.gen
		var acts []*act
		if ctx.Err() == nil {
			acts, _ = d.start(ctx, nil)
		}
		d.spawn(ctx, acts)
		idle := d.inflight == 0
		stop := d.fatal != nil || d.redrive
		if idle && (stop || d.gen == gen) {
			return
		}
		if idle {
			continue // something changed while we looked: look again
		}
		if j := d.solo; j != nil {
			// The loop would only wait for it: worked here, without a
			// hand-off to a worker and back (two goroutine switches, each
			// waking a thread, at every step of a chain).
			d.solo = nil
			if d.inflight == 1 {
				d.work(j.ctx, j.a)
			} else {
				d.handOff(*j)
			}
		}
		d.receive(ctx, <-d.inbox)
	}
}

// receive absorbs a and every other outcome already sent, then records the
// successes among them in one batch.
func (d *driver) receive(ctx context.Context, a *act) {
	var wins []*act
	for {
		if a.how == endSucceeded {
			wins = append(wins, a)
		} else {
			d.absorbEnd(a)
		}
		select {
		case a = <-d.inbox:
			continue
		default:
		}
		break
	}
	if len(wins) > 0 {
		d.succeed(ctx, wins)
	}
}

// spawn hands acts to workers; each sends its act back on inbox.
//
// A worker that sent its act back waits for the drive's next one (idle),
// until the loop stops: a call goes deep (the tool, its argument checks,
// the transport), and a new goroutine would grow its stack, copying it, at
// every call of a chain. An act never waits for a worker: with none idle,
// it gets a new one.
//
// An act that would be alone in flight is kept for the loop instead
// (solo), which works it itself when it is still alone once the loop has
// nothing else to do but wait for it.
func (d *driver) spawn(ctx context.Context, acts []*act) {
	if len(acts) == 0 {
		return
	}
	if j := d.solo; j != nil {
		d.solo = nil
		d.handOff(*j)
	}
	for _, a := range acts {
		a.row = a.n.row // the worker's copy; the loop takes it back with the outcome
		j := job{ctx, a}
		if len(acts) == 1 && d.inflight == 1 {
			d.solo = &j
			return
		}
		d.handOff(j)
	}
}

// handOff gives j to an idle worker, or to a new one.
func (d *driver) handOff(j job) {
	select {
	case d.idle <- j:
	default:
		go d.worker(j)
	}
}

// job is an act for a worker, with the context spawn gave it.
type job struct {
	ctx context.Context
	a   *act
}

// worker works j, then each job spawn hands it, until the loop stops
// (stopWorkers).
func (d *driver) worker(j job) {
	for ok := true; ok; j, ok = <-d.idle {
		d.work(j.ctx, j.a)
	}
}

// stopWorkers ends the idle workers once the loop stopped (nothing is in
// flight, so every worker is idle or on its way there).
func (d *driver) stopWorkers() { close(d.idle) }

// absorbEnd takes in a worker's act that ended other than with an output
// to record: its row, how the run fails, and it leaves the flight.
func (d *driver) absorbEnd(a *act) {
	d.freedSlot(a)
	d.absorbEffects(a)
	d.setRow(a.n, a.row)
	if a.notDue != nil {
		d.wait(a.n, *a.notDue)
		a.notDue = nil
		a.endSpan(Done{Status: a.row.Status})
		return
	}
	d.done(a.n)
	a.endSpan(Done{Status: a.row.Status, Adopted: a.adopted})
}

// absorbEffects takes in what a's worker found about the run: a failure,
// a fatal error, a stale claim.
func (d *driver) absorbEffects(a *act) {
	if a.failMsg != "" {
		d.fail(a.failMsg, false)
	}
	d.setFatal(a.fatal)
	if a.stale {
		d.redrive = true
	}
	a.failMsg, a.fatal, a.stale = "", nil, false
}

// win is an action that succeeded, as recorded in a batch's lead.
type win struct {
	a   *act
	out json.RawMessage
	op  int // index of its Succeed in the lead (-1: adopted and linked, nothing to write)
}

// succeed records the outputs of wins together with the claims of the
// actions they make ready, and hands those to workers.
//
// An action stays in flight until its row holds its outcome: a join that
// depends on two actions finishing at the same time finds both settled,
// or one in this batch.
func (d *driver) succeed(ctx context.Context, acts []*act) {
	var wins, large []win
	for _, a := range acts {
		w := win{a: a, out: a.out, op: -1}
		if !(a.adopted && a.linked()) {
			w.op = 0
		}
		if len(w.out) > maxMergedOutput && w.op >= 0 {
			// A larger output may be refused (ErrTooLarge): it must not take
			// claims down with it.
			large = append(large, w)
			continue
		}
		wins = append(wins, w)
	}
	if len(wins) == 1 && len(large) == 0 && wins[0].op >= 0 && d.isLast(wins[0].a.n) {
		if d.completeWith(ctx, wins[0].a, wins[0].out) {
			d.endWin(wins[0].a)
			return
		}
	}
	for _, w := range large {
		d.commitWins(ctx, []win{w}, false)
	}
	if len(wins) > 0 {
		d.commitWins(ctx, wins, true)
	}
}

// commitWins writes the outputs of wins, with the claims of what they make
// ready when pick is true, and takes in the results.
func (d *driver) commitWins(ctx context.Context, wins []win, pick bool) {
	var lead []ledger.Op
	fin := map[*node]json.RawMessage{}
	for i := range wins {
		w := &wins[i]
		w.a.n.done = true
		fin[w.a.n] = w.out
		if w.op >= 0 {
			w.op = len(lead)
			lead = append(lead, ledger.Succeed(w.a.key, w.a.attempt, w.out))
		}
	}
	if !pick {
		fin = nil
	}
	acts, res, err := d.startWith(ctx, lead, fin, pick)
	if err != nil {
		for _, w := range wins {
			w.a.releaseKey()
			d.endWin(w.a)
		}
		return
	}
	var failed []string
	for _, w := range wins {
		if w.op >= 0 && res[w.op].Err != nil {
			failed = append(failed, w.a.n.id)
		}
	}
	if len(failed) > 0 {
		// An output was not recorded. Claims written with it must not go ahead.
		for _, b := range acts {
			b.row = b.n.row
			d.abandon(ctx, b, "not started: the output of "+strings.Join(failed, ", ")+" could not be recorded")
			d.absorbEnd(b)
		}
		acts = nil
	}
	for _, w := range wins {
		var r *ledger.Result
		if w.op >= 0 {
			r = &res[w.op]
		}
		d.recordWin(ctx, w, r)
	}
	d.spawn(ctx, acts)
}

// recordWin takes in the result r of w's Succeed (nil: nothing was written).
func (d *driver) recordWin(ctx context.Context, w win, r *ledger.Result) {
	a := w.a
	defer d.endWin(a)
	defer a.releaseKey()
	if r != nil && r.Err != nil {
		switch cur := conflictRecord(r.Err); {
		case errors.Is(r.Err, ledger.ErrTooLarge):
			d.park(ctx, a, fmt.Sprintf("the call succeeded but its output could not be recorded: %v", r.Err))
		case cur != nil && cur.State == ledger.StatusSucceeded:
			a.succeeded(cur.Output)
		default:
			a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record output", Err: r.Err})
		}
		return
	}
	a.succeeded(w.out)
	d.reportEnded(a)
	if h := d.e.cfg.Hooks.AfterOutcome; h != nil {
		h(a.n.id)
	}
	if a.adopted {
		d.e.obs.Adopted(d.info(a))
	}
	d.e.log.Debug("action succeeded", "run_id", d.runID, "action_id", a.n.id, "key", a.key, "attempt", a.attempt, "adopted", a.adopted)
}

// endWin takes a succeeded act back from flight (its row holds its
// outcome, or why it could not be recorded).
func (d *driver) endWin(a *act) {
	d.freedSlot(a)
	d.absorbEffects(a)
	d.setRow(a.n, a.row)
	d.leave()
	a.endSpan(Done{Status: a.row.Status, Adopted: a.adopted})
}

// start picks ready nodes up to the free slots, prepares them and writes
// their claims. It returns the acts to work on.
func (d *driver) start(ctx context.Context, lead []ledger.Op) ([]*act, []ledger.Result) {
	acts, res, _ := d.startWith(ctx, lead, nil, true)
	return acts, res
}

// startWith picks ready nodes (pick: up to the free slots; the nodes
// finishing, fin, free theirs), prepares them and writes lead (the outputs
// of fin) together with their claims in one Apply. It returns the acts to
// work on and the results of lead.
func (d *driver) startWith(ctx context.Context, lead []ledger.Op, fin map[*node]json.RawMessage, pick bool) ([]*act, []ledger.Result, error) {
	var picks []*node
	if pick && d.canPick() && ctx.Err() == nil && !d.e.draining() {
		finishing := make(map[*node]bool, len(fin))
		for n := range fin {
			finishing[n] = true
		}
		picks = d.pick(d.e.cfg.Parallelism-d.inflight+len(fin), finishing)
	}
	outputs := d.outputs(picks, fin)
	// Decided one after another: each sees, in the run's totals, the
	// actions prepared before it to be claimed in the same commit.
	var preps []prep
	var planned []ledger.Action
	for _, n := range picks {
		p := d.prepare(ctx, n, outputs, planned)
		if c, ok := p.(prepClaim); ok {
			planned = append(planned, ledger.Action{ID: n.id, Tool: n.row.Tool, Key: c.a.key, Args: c.a.args,
				Status: ledger.StatusClaimed, Attempts: 1})
		}
		preps = append(preps, p)
	}
	return d.commit(ctx, lead, preps)
}

// commit writes lead with what preps decided in one Apply, under the run's
// gate (so that once Pause or Cancel returns no new claim is written), and
// takes in the results.
func (d *driver) commit(ctx context.Context, lead []ledger.Op, preps []prep) ([]*act, []ledger.Result, error) {
	if h := d.e.cfg.Hooks.BeforeClaim; h != nil {
		// Outside the gate's lock: a hook may pause or cancel the run.
		for _, p := range preps {
			if c, ok := p.(prepClaim); ok {
				h(c.a.n.id)
			}
		}
	}
	f := batchFacts{failing: d.failErr != "", runID: d.runID}
	d.reserveKeys(preps, f.failing)
	if !d.resumed.Load() && planBatch(lead, preps, f).writes() {
		// Moving a paused or awaiting run to running needs the gate's write lock.
		if err := d.markRunning(ctx); err != nil {
			d.setFatal(err)
		}
	}
	var b *batch
	var res []ledger.Result
	var err error
	d.g.read(func(halted bool) {
		f.halted = halted
		b = planBatch(lead, preps, f)
		switch {
		case d.create != nil:
			res, err = d.recordNew(context.WithoutCancel(ctx), b)
		case len(b.ops) > 0:
			res, err = d.e.led.Apply(context.WithoutCancel(ctx), b.ops...)
		}
	})
	out := d.absorbBatch(b, res, err, d.runID, d.e.clock.Now())
	for _, rel := range out.release {
		rel()
	}
	d.logNotes(out.notes)
	if h := d.e.cfg.Hooks.AfterClaim; h != nil {
		for _, a := range out.claimed {
			h(a.n.id)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return out.work, res[:b.lead], nil
}

// errRecordedBefore: the run a drive was to record was recorded before.
var errRecordedBefore = errors.New("the run was recorded before")

// recordNew writes b with the record of the run being created (d.create):
// in one Apply when b holds only claims, each made InNewRun (refused unless
// that Apply created the run), else the record first, then b. It clears
// d.create once the run is recorded, or sets d.before when it was recorded
// before (then nothing of b was written). It returns the results of b.
func (d *driver) recordNew(ctx context.Context, b *batch) ([]ledger.Result, error) {
	nr := d.create
	ops := []ledger.Op{nr.op}
	together := b.lead == 0 && len(b.ops) > 0 && len(b.ops) == len(b.slots) &&
		!slices.ContainsFunc(b.slots, func(sl slot) bool { _, ok := sl.p.(prepClaim); return !ok })
	if together {
		for _, o := range b.ops {
			ops = append(ops, o.InNewRun())
		}
	}
	res, err := d.e.led.Apply(ctx, ops...)
	if err != nil {
		d.createErr = err
		return nil, err
	}
	stored, created, err := res[0].CreatedRun()
	if err != nil || !created {
		// Nothing of b was written: b is absorbed as a failed Apply, the
		// loop stops, and driveNew checks the run, then drives it as read.
		d.before = &res[0]
		return nil, errRecordedBefore
	}
	d.create = nil
	d.e.created(nr, stored)
	if together {
		return res[1:], nil
	}
	if len(b.ops) == 0 {
		return nil, nil
	}
	return d.e.led.Apply(ctx, b.ops...)
}

// reserveKeys reserves in this process the keys that preps claim or fail
// in the batch; a key another goroutine holds is left unreserved (the
// worker waits for it).
func (d *driver) reserveKeys(preps []prep, failing bool) {
	for _, p := range preps {
		var a *act
		switch p := p.(type) {
		case prepClaim:
			if !failing {
				a = p.a
			}
		case prepFail:
			a = p.a
		}
		if a != nil {
			a.release, _, _ = takeKey(d.e.led, a.key)
		}
	}
}

func (d *driver) logNotes(notes []note) {
	for _, n := range notes {
		if n.warn {
			d.e.log.Warn(n.msg, "run_id", d.runID, "action_id", n.id, "key", n.key, "error", n.err)
		} else {
			d.e.log.Info(n.msg, "run_id", d.runID, "action_id", n.id, "error", n.err)
		}
	}
}

// markRunning moves a paused or awaiting_approval run to running before its
// first new claim in this drive. Workers call it too (a retry's claim).
func (d *driver) markRunning(ctx context.Context) error {
	if d.resumed.Load() {
		return nil
	}
	return d.g.write(func() error {
		if d.resumed.Swap(true) {
			return nil // another goroutine of this drive did it meanwhile
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
	})
}

// completeWith records the last action's outcome and the run's completion in
// one Apply (one sync less per run). It reports false, having written
// nothing, when the run's status forbids it (paused or cancelled meanwhile).
func (d *driver) completeWith(ctx context.Context, a *act, out json.RawMessage) bool {
	var wrote bool
	var res []ledger.Result
	var err error
	d.g.write(func() error {
		switch d.g.status {
		case ledger.RunRunning, ledger.RunPaused, ledger.RunAwaitingApproval:
			if d.g.pausedByPerson {
				return nil
			}
		default:
			return nil
		}
		wrote = true
		a.n.done = true
		var doc ledger.RunDoc
		res, doc, err = applyDoc(context.WithoutCancel(ctx), d.e.led, d.runID, ledger.Succeed(a.key, a.attempt, out),
			ledger.SetRunStatus(d.runID, ledger.RunCompleted, ledger.EventRunCompleted, "", nil))
		if err == nil && res[0].Err == nil && res[1].Err == nil {
			d.endDoc = doc
		}
		if err == nil && res[0].Err != nil {
			// The status went through without the output: take it back; the
			// drive's end sets the right one.
			if _, rerr := apply(context.WithoutCancel(ctx), d.e.led, ledger.SetRunStatus(d.runID, ledger.RunRunning, "", "", nil)); rerr != nil {
				err = errors.Join(rerr, res[0].Err)
				return nil
			}
			d.g.status = ledger.RunRunning
			return nil
		}
		if err == nil {
			d.g.status = ledger.RunCompleted
		}
		return nil
	})
	if !wrote {
		return false
	}
	defer a.releaseKey()
	switch {
	case err != nil:
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record output", Err: err})
	case errors.Is(res[0].Err, ledger.ErrTooLarge):
		d.park(ctx, a, fmt.Sprintf("the call succeeded but its output could not be recorded: %v", res[0].Err))
	case res[0].Err != nil:
		a.setFatal(&ActionError{RunID: d.runID, ActionID: a.n.id, Key: a.key, Op: "record output", Err: res[0].Err})
	default:
		a.succeeded(out)
		d.reportEnded(a)
		d.e.obs.RunStatus(d.runID, ledger.RunCompleted)
		d.settled = true
		if h := d.e.cfg.Hooks.AfterOutcome; h != nil {
			h(a.n.id)
		}
		d.e.log.Info("run status", "run_id", d.runID, "status", string(ledger.RunCompleted))
	}
	return true
}

// read runs f holding the gate for reading (halted: the run may not start
// new actions), as every new claim does.
func (g *gate) read(f func(halted bool)) {
	g.claimMu.RLock()
	defer g.claimMu.RUnlock()
	f(g.halted())
}

// write runs f holding the gate for writing, as a change of the run's
// status does.
func (g *gate) write(f func() error) error {
	g.claimMu.Lock()
	defer g.claimMu.Unlock()
	return f()
}
