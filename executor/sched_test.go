package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
)

// The drive loop's pure steps, tested like decide: which nodes a look
// picks (sched.pick), how a batch is laid out (planBatch), how the ledger's
// answer to it is taken in (sched.absorbBatch) and how a worker's end is
// (driver.absorbEnd). No ledger, no tools, no goroutines.

// pend is a pending action of tool "op" depending on deps.
func pend(id string, deps ...string) ledger.Action {
	return ledger.Action{ID: id, Tool: "op", Status: ledger.StatusPending, DependsOn: deps}
}

// claimedRow is a row claimed before (by a process that is gone).
func claimedRow(id string, deps ...string) ledger.Action {
	r := pend(id, deps...)
	r.Status, r.Key, r.Attempts = ledger.StatusClaimed, "dk1_"+id, 1
	return r
}

// retryRow is a row waiting for its next attempt after a failed one.
func retryRow(id string, deps ...string) ledger.Action {
	r := pend(id, deps...)
	r.Key, r.Attempts = "dk1_"+id, 1
	return r
}

// graph is the state of a drive that loaded rows.
func graph(rows ...ledger.Action) *sched {
	s := &sched{nodes: map[string]*node{}, undo: map[string]ledger.Action{}}
	for _, r := range rows {
		s.add(&node{id: r.ID, row: r})
	}
	s.wire(rows)
	return s
}

func ids(ns []*node) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.id)
	}
	return out
}

// look is one look of the loop for ready actions: the actions in fin
// succeed with the claims picked (their rows succeed after the pick), up
// to slots are picked.
type look struct {
	fin   []string
	slots int
	want  []string
}

func TestPickShapes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		rows  []ledger.Action
		fail  string // the run is failing
		looks []look
	}{
		{name: "chain", rows: []ledger.Action{pend("a"), pend("b", "a"), pend("c", "b")}, looks: []look{
			{slots: 4, want: []string{"a"}},
			{slots: 4, want: nil}, // b and c are parked: nothing to look at
			{fin: []string{"a"}, slots: 4, want: []string{"b"}},
			{fin: []string{"b"}, slots: 4, want: []string{"c"}},
			{fin: []string{"c"}, slots: 4, want: nil},
		}},
		{name: "join waits for both", rows: []ledger.Action{pend("a"), pend("b"), pend("c", "a", "b")}, looks: []look{
			{slots: 4, want: []string{"a", "b"}},
			{fin: []string{"a"}, slots: 4, want: nil}, // c now waits for b
			{fin: []string{"b"}, slots: 4, want: []string{"c"}},
		}},
		{name: "join whose two dependencies finish together", rows: []ledger.Action{pend("a"), pend("b"), pend("c", "a", "b")}, looks: []look{
			{slots: 4, want: []string{"a", "b"}},
			{fin: []string{"a", "b"}, slots: 4, want: []string{"c"}},
		}},
		{name: "diamond", rows: []ledger.Action{pend("a"), pend("b", "a"), pend("c", "a"), pend("d", "b", "c")}, looks: []look{
			{slots: 4, want: []string{"a"}},
			{fin: []string{"a"}, slots: 4, want: []string{"b", "c"}},
			{fin: []string{"c"}, slots: 4, want: nil},
			{fin: []string{"b"}, slots: 4, want: []string{"d"}},
		}},
		{name: "slots bound the picks, in plan order", rows: []ledger.Action{pend("a"), pend("b"), pend("c")}, looks: []look{
			{slots: 2, want: []string{"a", "b"}},
			{slots: 0, want: nil},
			{fin: []string{"a"}, slots: 1, want: []string{"c"}},
		}},
		{name: "a claimed row is picked before its dependencies succeed", rows: []ledger.Action{pend("a"), claimedRow("b", "a")}, looks: []look{
			{slots: 4, want: []string{"a", "b"}},
		}},
		{name: "failing: only what was claimed before is brought to an outcome", fail: "action x failed",
			rows: []ledger.Action{pend("a"), retryRow("b"), claimedRow("c"), pend("d", "a")}, looks: []look{
				{slots: 4, want: []string{"b", "c"}},
				{slots: 4, want: nil},
			}},
		{name: "finished rows are never picked", rows: []ledger.Action{
			{ID: "a", Status: ledger.StatusSucceeded}, {ID: "b", Status: ledger.StatusSkipped}, pend("c", "a"), pend("d", "b"),
		}, looks: []look{
			{slots: 4, want: []string{"c"}},
			{slots: 4, want: nil},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := graph(c.rows...)
			s.failErr = c.fail
			for i, l := range c.looks {
				fin := map[*node]bool{}
				for _, id := range l.fin {
					n := s.nodes[id]
					n.done = true // as the loop marks a node whose output it writes
					fin[n] = true
				}
				got := ids(s.pick(l.slots, fin))
				if fmt.Sprint(got) != fmt.Sprint(l.want) && !(len(got) == 0 && len(l.want) == 0) {
					t.Fatalf("look %d (fin %v): picked %v, want %v", i, l.fin, got, l.want)
				}
				for n := range fin {
					s.update(n, func(r *ledger.Action) { r.Status = ledger.StatusSucceeded })
					s.leave()
				}
			}
		})
	}
}

// TestPickOutputs: the picks see the outputs of succeeded nodes and of the
// nodes succeeding with them, never of others.
func TestPickOutputs(t *testing.T) {
	t.Parallel()
	s := graph(pend("a"), pend("b"), pend("c", "a", "b"))
	s.nodes["c"].refs = []string{"a", "b"}
	s.pick(4, nil)
	s.nodes["a"].done = true
	s.update(s.nodes["a"], func(r *ledger.Action) { r.Status, r.Output = ledger.StatusSucceeded, []byte(`1`) })
	s.leave()
	s.nodes["b"].done = true
	picks := s.pick(4, map[*node]bool{s.nodes["b"]: true})
	if fmt.Sprint(ids(picks)) != "[c]" {
		t.Fatalf("picked %v, want [c]", ids(picks))
	}
	out := s.outputs(picks, map[*node]json.RawMessage{s.nodes["b"]: json.RawMessage(`2`)})
	if string(out["a"]) != "1" || string(out["b"]) != "2" || len(out) != 2 {
		t.Fatalf("outputs %s, want a=1 b=2", out)
	}
}

// prepOf builds a prep of node n of s.
type prepOf func(s *sched) prep

func claimOf(id string, ops ...ledger.Op) prepOf {
	return func(s *sched) prep {
		a := newAct(s.nodes[id], "dk1_"+id, []byte(`{}`))
		a.fresh = true
		a.release = func() {}
		return prepClaim{a: a, ops: ops}
	}
}

func busyClaimOf(id string) prepOf {
	return func(s *sched) prep {
		a := newAct(s.nodes[id], "dk1_"+id, []byte(`{}`))
		a.fresh = true
		return prepClaim{a: a}
	}
}

func failOf(id string) prepOf {
	return func(s *sched) prep {
		a := newAct(s.nodes[id], "dk1_"+id, []byte(`{}`))
		a.release = func() {}
		return prepFail{a: a, msg: "resolve references: no such output", ops: []ledger.Op{
			ledger.Claim("r", id, "op", a.key, a.args, 1), ledger.FailWith(a.key, 1, "bad", false, ledger.FailureInvalidArgs, nil)}}
	}
}

func denyOf(id string) prepOf {
	return func(s *sched) prep {
		return prepDeny{n: s.nodes[id], reason: "denied by rule no", ops: []ledger.Op{ledger.Reject("r", id, "denied by rule no", "policy")}}
	}
}

func awaitOf(id string, shown bool) prepOf {
	return func(s *sched) prep {
		p := prepAwait{n: s.nodes[id]}
		if shown {
			p.shown = []byte(`{"x":1}`)
			p.ops = []ledger.Op{ledger.ShowResolved("r", id, p.shown)}
		}
		return p
	}
}

func workOf(id string) prepOf {
	return func(s *sched) prep { return prepWork{a: newAct(s.nodes[id], "dk1_"+id, []byte(`{}`))} }
}

// kinds names the slots of b, by prep type and node.
func kinds(b *batch) string {
	var out []string
	for _, sl := range b.slots {
		out = append(out, fmt.Sprintf("%s:%s/%d", strings.TrimPrefix(fmt.Sprintf("%T", sl.p), "executor."), sl.p.node().id, sl.count))
	}
	return strings.Join(out, " ")
}

func actIDs(as []*act) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.n.id)
	}
	return out
}

func nodeIDs(ns []*node) []string {
	out := []string{}
	for _, n := range ns {
		out = append(out, n.id)
	}
	return out
}

func TestPlanBatch(t *testing.T) {
	t.Parallel()
	rows := []ledger.Action{pend("a"), pend("b"), pend("c"), pend("d")}
	lead := []ledger.Op{ledger.Succeed("dk1_x", 1, []byte(`{}`))}
	decide := ledger.Decide("r", "a", ledger.Gate{Rule: "r1", Outcome: "allow"})
	cases := []struct {
		name   string
		preps  []prepOf
		facts  batchFacts
		ops    int
		slots  string
		work   []string
		back   []string
		await  []string
		drop   []string
		writes bool
	}{
		{name: "claims after the lead, the policy's decision before its claim",
			preps: []prepOf{claimOf("a", decide), claimOf("b")},
			ops:   4, slots: "prepClaim:a/1 prepClaim:b/1", writes: true, work: []string{}, drop: []string{}},
		{name: "a key another goroutine holds goes to a worker",
			preps: []prepOf{busyClaimOf("a"), failOf("b")},
			ops:   3, slots: "prepFail:b/2", work: []string{"a"}, writes: true, drop: []string{}},
		{name: "halted: only the lead and what a reviewer is shown",
			preps: []prepOf{claimOf("a"), denyOf("b"), awaitOf("c", true), workOf("d")}, facts: batchFacts{halted: true},
			ops: 2, slots: "prepAwait:c/1", work: []string{}, back: []string{"a", "b", "d"}, await: []string{"c"}, drop: []string{"a"}, writes: true},
		{name: "failing: no new claim, a denial and a bad argument still recorded",
			preps: []prepOf{claimOf("a"), denyOf("b"), failOf("c")}, facts: batchFacts{failing: true},
			ops: 4, slots: "prepDeny:b/1 prepFail:c/2", work: []string{}, back: []string{"a"}, drop: []string{"a"}, writes: true},
		{name: "waiting for approval with nothing to show writes nothing",
			preps: []prepOf{awaitOf("a", false), workOf("b")},
			ops:   1, slots: "", work: []string{"b"}, await: []string{"a"}, drop: []string{}},
		{name: "a dropped prep is given back",
			preps: []prepOf{func(s *sched) prep { return prepDrop{n: s.nodes["a"]} }},
			ops:   1, slots: "", work: []string{}, back: []string{"a"}, drop: []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := graph(rows...)
			var preps []prep
			for _, p := range c.preps {
				preps = append(preps, p(s))
			}
			b := planBatch(lead, preps, c.facts)
			if len(b.ops) != c.ops || b.lead != 1 {
				t.Errorf("%d ops (lead %d), want %d (lead 1)", len(b.ops), b.lead, c.ops)
			}
			if got := kinds(b); got != c.slots {
				t.Errorf("slots %q, want %q", got, c.slots)
			}
			for i, sl := range b.slots {
				if sl.first < b.lead || sl.first+sl.count > len(b.ops) || (i > 0 && sl.first < b.slots[i-1].first+b.slots[i-1].count) {
					t.Errorf("slot %d at [%d,%d) of %d ops overlaps", i, sl.first, sl.first+sl.count, len(b.ops))
				}
			}
			if fmt.Sprint(actIDs(b.work)) != fmt.Sprint(c.work) {
				t.Errorf("to workers %v, want %v", actIDs(b.work), c.work)
			}
			if fmt.Sprint(nodeIDs(b.giveBack)) != fmt.Sprint(orEmpty(c.back)) {
				t.Errorf("given back %v, want %v", nodeIDs(b.giveBack), c.back)
			}
			if fmt.Sprint(nodeIDs(b.awaitBack)) != fmt.Sprint(orEmpty(c.await)) {
				t.Errorf("awaiting %v, want %v", nodeIDs(b.awaitBack), c.await)
			}
			if fmt.Sprint(actIDs(b.drop)) != fmt.Sprint(c.drop) {
				t.Errorf("keys dropped %v, want %v", actIDs(b.drop), c.drop)
			}
			if b.writes() != c.writes {
				t.Errorf("writes %v, want %v", b.writes(), c.writes)
			}
		})
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ok is a result that went through; claimOK one of a claim.
func ok() ledger.Result { return ledger.Result{} }

func claimOK(id string) ledger.Result {
	return ledger.Result{Key: ledger.KeyRecord{Key: "dk1_" + id, State: ledger.StatusClaimed, Attempt: 1, ClaimedAt: t0}}
}

func refused(err error) ledger.Result { return ledger.Result{Err: err} }

func TestAbsorbBatch(t *testing.T) {
	t.Parallel()
	conflict := &ledger.ConflictError{Op: "claim", Current: ledger.KeyRecord{Key: "dk1_b", State: ledger.StatusSucceeded, Attempt: 1}}
	type wantRow struct {
		id     string
		status ledger.Status
	}
	cases := []struct {
		name    string
		rows    []ledger.Action
		preps   []prepOf
		results []ledger.Result // one per op, lead (none) excluded
		err     error
		work    []string
		rows2   []wantRow
		fail    string // a substring of the run's failure ("": none)
		reject  bool
		redrive bool
		fatal   bool
		repick  []string // what the next look picks
	}{
		{name: "join: both claims held go to workers",
			rows:  []ledger.Action{pend("a"), pend("b"), pend("c", "a", "b")},
			preps: []prepOf{claimOf("a"), claimOf("b")}, results: []ledger.Result{claimOK("a"), claimOK("b")},
			work: []string{"a", "b"}, rows2: []wantRow{{"a", ledger.StatusClaimed}, {"b", ledger.StatusClaimed}, {"c", ledger.StatusPending}}},
		{name: "a sibling refused by a budget is decided again; the other runs",
			rows:  []ledger.Action{pend("a"), pend("b")},
			preps: []prepOf{claimOf("a"), claimOf("b")}, results: []ledger.Result{claimOK("a"), refused(ledger.ErrBudgetExceeded)},
			work: []string{"a"}, rows2: []wantRow{{"a", ledger.StatusClaimed}, {"b", ledger.StatusPending}}, repick: []string{"b"}},
		{name: "a stale refusal: nothing more starts, the run is read again",
			rows:  []ledger.Action{pend("a"), pend("b")},
			preps: []prepOf{claimOf("a"), claimOf("b")}, results: []ledger.Result{refused(&ledger.StaleError{}), claimOK("b")},
			work: []string{"b"}, redrive: true, rows2: []wantRow{{"a", ledger.StatusPending}}},
		{name: "not due yet: it waits, off the scan; a sibling runs and the one behind it is ready",
			rows:  []ledger.Action{pend("a"), pend("b"), pend("c")},
			preps: []prepOf{claimOf("a"), claimOf("b")}, results: []ledger.Result{refused(&ledger.NotDueError{DueAt: t0.Add(3600e9)}), claimOK("b")},
			work: []string{"b"}, rows2: []wantRow{{"a", ledger.StatusPending}, {"b", ledger.StatusClaimed}}, repick: []string{"c"}},
		{name: "not due without a time (a dependency has not succeeded, as the ledger sees it): read again",
			rows:  []ledger.Action{pend("a"), pend("b")},
			preps: []prepOf{claimOf("a"), claimOf("b")}, results: []ledger.Result{refused(&ledger.NotDueError{}), claimOK("b")},
			work: []string{"b"}, redrive: true, rows2: []wantRow{{"a", ledger.StatusPending}}},
		{name: "a claim that meets another record: the worker decides from it",
			rows:  []ledger.Action{pend("b")},
			preps: []prepOf{claimOf("b")}, results: []ledger.Result{refused(conflict)},
			work: []string{"b"}, rows2: []wantRow{{"b", ledger.StatusPending}}},
		{name: "denied: rejected, the run fails without compensation",
			rows:  []ledger.Action{pend("a"), pend("b", "a")},
			preps: []prepOf{denyOf("a")}, results: []ledger.Result{ok()},
			work: []string{}, rows2: []wantRow{{"a", ledger.StatusRejected}}, fail: "was denied", reject: true},
		{name: "bad arguments: failed at once, the run fails",
			rows:  []ledger.Action{pend("a")},
			preps: []prepOf{failOf("a")}, results: []ledger.Result{ok(), ok()},
			work: []string{}, rows2: []wantRow{{"a", ledger.StatusFailed}}, fail: "action a failed: resolve references"},
		{name: "shown to a reviewer: it waits, the row holds what will be sent",
			rows:  []ledger.Action{pend("a"), pend("b")},
			preps: []prepOf{awaitOf("a", true), claimOf("b")}, results: []ledger.Result{ok(), claimOK("b")},
			work: []string{"b"}, rows2: []wantRow{{"a", ledger.StatusPending}, {"b", ledger.StatusClaimed}}},
		{name: "the Apply fails: the drive stops, nothing goes to a worker",
			rows:  []ledger.Action{pend("a"), pend("b")},
			preps: []prepOf{claimOf("a"), workOf("b")}, err: errors.New("disk full"),
			work: []string{}, fatal: true, rows2: []wantRow{{"a", ledger.StatusPending}}},
		{name: "a claim refused for another reason stops the drive",
			rows:  []ledger.Action{pend("a")},
			preps: []prepOf{claimOf("a")}, results: []ledger.Result{refused(ledger.ErrNotFound)},
			work: []string{}, fatal: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := graph(c.rows...)
			var want []string
			for _, p := range c.preps {
				want = append(want, p(s).node().id)
			}
			picked := ids(s.pick(len(c.preps), nil))
			if fmt.Sprint(picked) != fmt.Sprint(want) {
				t.Fatalf("setup: picked %v, want %v", picked, want)
			}
			var preps []prep
			released := 0
			for _, p := range c.preps {
				pp := p(s)
				if a := actOf(pp); a != nil && a.release != nil {
					a.release = func() { released++ }
				}
				preps = append(preps, pp)
			}
			b := planBatch(nil, preps, batchFacts{runID: "r"})
			res := c.results
			if c.err == nil && len(res) != len(b.ops) {
				t.Fatalf("setup: %d results for %d ops", len(res), len(b.ops))
			}
			out := s.absorbBatch(b, res, c.err, "r", t0)
			if fmt.Sprint(actIDs(out.work)) != fmt.Sprint(c.work) {
				t.Errorf("to workers %v, want %v", actIDs(out.work), c.work)
			}
			for _, a := range out.work {
				if a.attempt == 1 && (a.row.Status != ledger.StatusClaimed || a.release == nil) {
					t.Errorf("%s claimed in the batch, but its copy of the row is %s (key reserved: %v)", a.n.id, a.row.Status, a.release != nil)
				}
			}
			for _, r := range c.rows2 {
				if got := s.nodes[r.id].row.Status; got != r.status {
					t.Errorf("row %s is %s, want %s", r.id, got, r.status)
				}
			}
			if !strings.Contains(s.failErr, c.fail) || (c.fail == "") != (s.failErr == "") {
				t.Errorf("failure %q, want %q", s.failErr, c.fail)
			}
			if s.rejected != c.reject || s.redrive != c.redrive || (s.fatal != nil) != c.fatal {
				t.Errorf("rejected %v redrive %v fatal %v, want %v %v %v", s.rejected, s.redrive, s.fatal, c.reject, c.redrive, c.fatal)
			}
			for _, rel := range out.release {
				rel()
			}
			// Every key reserved for the batch is given back unless its
			// claim is held by a worker now.
			held := 0
			for _, a := range out.work {
				if a.release != nil {
					held++
				}
			}
			reserved := 0
			for _, p := range preps {
				if _, isClaim := p.(prepClaim); isClaim {
					reserved++
				} else if _, isFail := p.(prepFail); isFail {
					reserved++
				}
			}
			if released+held != reserved {
				t.Errorf("%d key reservations given back and %d held by workers, of %d", released, held, reserved)
			}
			// In flight: exactly the acts handed to workers.
			if s.inflight != len(out.work) {
				t.Errorf("%d in flight, want %d (the workers')", s.inflight, len(out.work))
			}
			if got := ids(s.pick(4, nil)); s.canPick() && fmt.Sprint(orEmpty(got)) != fmt.Sprint(orEmpty(c.repick)) {
				t.Errorf("next look picks %v, want %v", got, c.repick)
			}
		})
	}
}

// TestAbsorbEnd: the loop takes a worker's act back: its row, how the run
// fails, and what the next look may start.
func TestAbsorbEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		how     end
		row     func(r *ledger.Action)
		failMsg string
		fatal   error
		stale   bool
		fail    bool
		redrive bool
		next    []string
	}{
		{name: "unknown outcome of an at-most-once call: needs review, its dependent waits",
			how: endRecorded, row: func(r *ledger.Action) { r.Status = ledger.StatusNeedsReview }},
		{name: "a definite failure fails the run",
			how: endRecorded, row: func(r *ledger.Action) { r.Status = ledger.StatusFailed }, failMsg: "action a failed: 400", fail: true},
		{name: "cancelled while in flight: claimed, never sent, back to pending",
			how: endStopped, row: func(r *ledger.Action) { r.Status = ledger.StatusPending }},
		{name: "a retryable failure left for the next drive (shutting down)",
			how: endStopped, row: func(r *ledger.Action) { r.Status, r.Error = ledger.StatusPending, "503" }},
		{name: "a retry's claim refused as stale: the run is read again",
			how: endStopped, stale: true, redrive: true},
		{name: "the ledger failed: the drive stops",
			how: endStopped, fatal: errors.New("disk full")},
		{name: "mirrored a key another drive skipped: its dependent never starts",
			how: endRecorded, row: func(r *ledger.Action) { r.Status = ledger.StatusSkipped }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := &driver{sched: *graph(pend("a"), pend("b", "a"), pend("c"))}
			picks := d.pick(1, nil)
			if fmt.Sprint(ids(picks)) != "[a]" {
				t.Fatalf("setup: picked %v", ids(picks))
			}
			a := newAct(picks[0], "dk1_a", nil)
			a.claimed(1, ledger.KeyRecord{ClaimedAt: t0}, t0)
			d.setRow(a.n, a.row)
			a.how, a.failMsg, a.fatal, a.stale = c.how, c.failMsg, c.fatal, c.stale
			if c.row != nil {
				c.row(&a.row)
			}
			gen := d.gen
			d.absorbEnd(a)
			if d.inflight != 0 || !a.n.done || d.gen == gen {
				t.Errorf("in flight %d, done %v, gen moved %v: want 0, true, true", d.inflight, a.n.done, d.gen != gen)
			}
			if d.nodes["a"].row.Status != a.row.Status {
				t.Errorf("row %s, want the worker's %s", d.nodes["a"].row.Status, a.row.Status)
			}
			if (d.failErr != "") != c.fail || d.redrive != c.redrive || (d.fatal != nil) != (c.fatal != nil) {
				t.Errorf("failing %q redrive %v fatal %v, want %v %v %v", d.failErr, d.redrive, d.fatal, c.fail, c.redrive, c.fatal != nil)
			}
			// b depends on a, which did not succeed: only c may start.
			next := ids(d.pick(4, nil))
			want := []string{"c"}
			if c.fail {
				want = nil
			}
			if fmt.Sprint(orEmpty(next)) != fmt.Sprint(orEmpty(want)) {
				t.Errorf("next look picks %v, want %v", next, want)
			}
			if slices.Contains(next, "a") {
				t.Errorf("a picked again in the same drive")
			}
		})
	}
}
