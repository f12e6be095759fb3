package executor

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/docketrun/docket/ledger"
)

// sched is what one drive knows of its run: the node graph with the rows,
// the scan of nodes that may still start, what is in flight and how the
// run is failing. One goroutine owns it (the drive's loop, driver.loop):
// workers never touch it, they send their outcome back (driver.inbox) and
// the loop absorbs it. Its methods do no I/O (no ledger, clock or log), so
// they are tested on their own like decide.
type sched struct {
	nodes    map[string]*node
	order    []string // topological, ties in plan order (no undo rows)
	undo     map[string]ledger.Action
	inflight int    // actions taken by this drive whose outcome is not yet in their rows
	gen      uint64 // bumped whenever an action leaves inflight or the scan changes for good
	failErr  string // first failure: no new action starts
	rejected bool   // the failure is a rejection (no compensation)
	fatal    error  // the ledger failed: stop
	// redrive: the ledger refused a claim decided on facts that changed
	// (another writer paused, cancelled, edited, rejected): start nothing
	// more; once in-flight actions are recorded the run is driven again
	// from a fresh read.
	redrive bool
	settled bool // the run's final status was written with the last outcome
	// undoAwaiting lists compensating actions waiting for a person's approval.
	undoAwaiting []string

	// scan holds, in order, the nodes pick may still take or must keep
	// an eye on (in flight): not done, not awaiting a person, not parked.
	// unparked are parked nodes whose blocker succeeded, merged back into
	// scan (by pos) at pick's next look.
	scan     []*node
	unparked []*node
	// scanVisits counts the nodes pick looked at (Engine.scanVisits).
	scanVisits uint64
	// unsucceeded counts the nodes whose row is not succeeded (kept by
	// build and setRow), so that isLast is O(1).
	unsucceeded int

	// tmpl holds, for rows whose args were written back resolved (shown
	// to a reviewer), the args with references to resolve them from.
	tmpl map[string]json.RawMessage
}

// fail records the run's first failure.
func (s *sched) fail(msg string, rejected bool) {
	if s.failErr == "" {
		s.failErr = msg
		s.rejected = rejected
	} else if !rejected {
		s.rejected = false // a real failure also happened: compensate
	}
}

// setFatal records the first error that stops the drive.
func (s *sched) setFatal(err error) {
	if s.fatal == nil && err != nil {
		s.fatal = err
	}
}

// wire orders the nodes and wires their dependencies; rows are the rows of
// the nodes (not undo rows), as loaded.
func (s *sched) wire(rows []ledger.Action) {
	s.order = topo(rows)
	s.scan = make([]*node, len(s.order))
	for i, id := range s.order {
		n := s.nodes[id]
		s.scan[i], n.pos = n, i
		n.deps = make([]*node, len(n.row.DependsOn))
		for j, dep := range n.row.DependsOn {
			n.deps[j] = s.nodes[dep]
		}
	}
}

// add puts a node loaded from row r in the graph.
func (s *sched) add(n *node) {
	r := n.row
	s.nodes[n.id] = n
	if r.Status != ledger.StatusSucceeded {
		s.unsucceeded++
	}
	switch r.Status {
	case ledger.StatusFailed:
		s.fail(fmt.Sprintf("action %s failed: %s", r.ID, r.Error), false)
	case ledger.StatusRejected:
		s.fail(rejectedMsg(r), true)
	}
}

// canPick reports whether new actions may start, as far as the drive's
// own state says.
func (s *sched) canPick() bool { return s.fatal == nil && !s.redrive }

// pick takes up to slots nodes off the scan that can start now and counts
// them in flight. fin are the nodes whose success is written with the
// claims of the picks (they count as succeeded). One pass over the scan
// picks and compacts it: done and awaiting nodes leave it for good,
// blocked ones are parked on their blocker.
func (s *sched) pick(slots int, fin map[*node]bool) []*node {
	for n := range fin {
		s.unpark(n) // its outcome is written with the claims picked now
	}
	s.mergeUnparked()
	var picks []*node
	w, i := 0, 0
	for ; i < len(s.scan) && len(picks) < slots; i++ {
		n := s.scan[i]
		s.scanVisits++
		keep, take := s.look(n, fin)
		if take {
			picks = append(picks, n)
		}
		if keep {
			s.scan[w], w = n, w+1
		}
	}
	w += copy(s.scan[w:], s.scan[i:])
	clear(s.scan[w:])
	s.scan = s.scan[:w]
	for _, n := range picks {
		n.started = true
		s.inflight++
	}
	return picks
}

// look is pick's verdict on one node of the scan: keep it on the scan,
// take it now.
func (s *sched) look(n *node, fin map[*node]bool) (keep, take bool) {
	switch {
	case n.done || n.awaiting || n.waiting:
		return false, false
	case n.started:
		return true, false
	case n.row.Status == ledger.StatusClaimed || (s.failErr != "" && sentBefore(n.row)):
		// Claimed before: bring it to an outcome even when failing (its
		// call may have taken effect; it is never skipped).
		return true, true
	case n.row.Status != ledger.StatusPending && n.row.Status != ledger.StatusApproved:
		// Finished before this drive (or by a person): no drive picks it
		// again, whatever happens to the others.
		return false, false
	case s.failErr != "":
		return true, false
	}
	if s.depsReady(n, fin) {
		return true, true
	}
	if n.blocker != nil && !sentBefore(n.row) {
		// Parked until its blocker succeeds (setRow, or pick with the
		// blocker finishing); a row claimed before stays on the scan, as a
		// failing drive must still pick it.
		n.blocker.waiters = append(n.blocker.waiters, n)
		return false, false
	}
	return true, false
}

// depsReady reports whether every dependency of n succeeded (or finishes
// now: fin), noting the first that did not as n's blocker.
func (s *sched) depsReady(n *node, fin map[*node]bool) bool {
	if b := n.blocker; b != nil && !fin[b] && b.row.Status != ledger.StatusSucceeded {
		return false // still waits for the same dependency
	}
	for _, dn := range n.deps {
		if dn == nil || (!fin[dn] && dn.row.Status != ledger.StatusSucceeded) {
			n.blocker = dn
			return false
		}
	}
	return true
}

// outputs gathers the outputs the picks refer to: of succeeded nodes, or
// of the nodes finishing with them (fin).
func (s *sched) outputs(picks []*node, fin map[*node]json.RawMessage) map[string]json.RawMessage {
	if len(picks) == 0 {
		return nil
	}
	out := map[string]json.RawMessage{}
	for _, n := range picks {
		for _, r := range n.refs {
			dn := s.nodes[r]
			if o, ok := fin[dn]; ok && dn != nil {
				out[r] = o
			} else if dn != nil && dn.row.Status == ledger.StatusSucceeded {
				out[r] = dn.row.Output
			}
		}
	}
	return out
}

// unpick gives n back: picked, but not worked on now; awaiting: it waits
// for a person and leaves the scan for good (the nodes behind it may start
// now, so the loop looks again).
func (s *sched) unpick(n *node, awaiting bool) {
	n.started = false
	s.inflight--
	if awaiting {
		n.awaiting = true
		s.gen++
	}
}

// retake gives n back to be picked and prepared again (a claim refused by
// a budget or as stale): the loop looks again.
func (s *sched) retake(n *node) {
	n.started = false
	s.inflight--
	s.gen++
}

// leave ends an action's time in flight: its row holds its outcome, or
// this drive gave it up.
func (s *sched) leave() {
	s.inflight--
	s.gen++
}

// done marks n finished by this drive and ends its time in flight.
func (s *sched) done(n *node) {
	n.done = true
	s.leave()
}

// setRow brings n's row to row, keeping the count of unsucceeded rows and
// unparking n's waiters when it succeeded.
func (s *sched) setRow(n *node, row ledger.Action) {
	was := n.row.Status == ledger.StatusSucceeded
	n.row = row
	if is := row.Status == ledger.StatusSucceeded; is != was && s.nodes[n.id] == n {
		if is {
			s.unsucceeded--
		} else {
			s.unsucceeded++
		}
	}
	if row.Status == ledger.StatusSucceeded {
		s.unpark(n)
	}
}

// update changes n's row with f (setRow).
func (s *sched) update(n *node, f func(*ledger.Action)) {
	row := n.row
	f(&row)
	s.setRow(n, row)
}

// unpark puts the nodes parked on n back for pick's next look.
func (s *sched) unpark(n *node) {
	s.unparked = append(s.unparked, n.waiters...)
	n.waiters = nil
}

// mergeUnparked merges the unparked nodes into scan, keeping it in the
// drive's order.
func (s *sched) mergeUnparked() {
	if len(s.unparked) == 0 {
		return
	}
	slices.SortFunc(s.unparked, func(a, b *node) int { return a.pos - b.pos })
	merged := make([]*node, 0, len(s.scan)+len(s.unparked))
	i, j := 0, 0
	for i < len(s.scan) && j < len(s.unparked) {
		if s.scan[i].pos < s.unparked[j].pos {
			merged, i = append(merged, s.scan[i]), i+1
		} else {
			merged, j = append(merged, s.unparked[j]), j+1
		}
	}
	merged = append(append(merged, s.scan[i:]...), s.unparked[j:]...)
	s.scan = merged
	clear(s.unparked)
	s.unparked = s.unparked[:0]
}

// isLast reports whether n is the run's last open action as this drive
// knows it: nothing else in flight, every other action succeeded.
func (s *sched) isLast(n *node) bool {
	if s.inflight != 1 || s.failErr != "" || s.fatal != nil || len(s.undo) > 0 {
		return false
	}
	// Every other node succeeded: n's own row is the only one not yet
	// succeeded (it is in flight, its outcome not recorded).
	if n.row.Status == ledger.StatusSucceeded || s.nodes[n.id] != n {
		return s.unsucceeded == 0
	}
	return s.unsucceeded == 1
}

// ready lists the open actions of rows whose dependencies all succeeded
// and that do not wait for a person.
func (s *sched) ready(rows []ledger.Action) []string {
	st := make(map[string]ledger.Status, len(rows))
	for _, r := range rows {
		st[r.ID] = r.Status
	}
	var out []string
	for _, r := range rows {
		if r.Undo || (r.Status != ledger.StatusPending && r.Status != ledger.StatusApproved) {
			continue
		}
		if n := s.nodes[r.ID]; n == nil || n.awaiting || n.waiting {
			continue
		}
		if !slices.ContainsFunc(r.DependsOn, func(dep string) bool { return st[dep] != ledger.StatusSucceeded }) {
			out = append(out, r.ID)
		}
	}
	return out
}
