package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// The cross-node person (NodesConfig.Control): on a share of the runs a
// person acts through a node other than the one the run was submitted to,
// while that node drives it and nodes keep being killed. What the person
// did is then checked against the ledger's events and the world's log of
// write requests (crossAudit).

// OpReject rejects an action that has not started; OpApprove submits the run
// with approve "none" and approves its actions, a few at a time.
const (
	OpReject  = "reject"
	OpApprove = "approve"
)

// crossOp is what the person does to one run of the nodes experiment,
// drawn from its own random stream (newRand(seed, "nodes-control", n)), so
// the plans, kills and cancels of a seed stay those of earlier versions.
type crossOp struct {
	Op    string        // "" for none
	Home  int           // the node slot the run is submitted to
	Delay time.Duration // from submitting the run to the operation
	Hold  time.Duration // how long a pause holds before the resume
	Pick  float64       // which action an edit or a reject takes
}

// crossFor draws run n's operation: a little over one run in two gets one.
func crossFor(seed uint64, n, nodes int) crossOp {
	rng := newRand(seed, "nodes-control", n)
	x := rng.Float64()
	c := crossOp{
		Home:  rng.IntN(nodes),
		Delay: 20*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond))),
		Hold:  100*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))),
		Pick:  rng.Float64(),
	}
	switch {
	case x < 0.15:
		c.Op = OpPause
	case x < 0.30:
		c.Op = OpEdit
	case x < 0.40:
		c.Op = OpReject
	case x < 0.55:
		c.Op = OpApprove
	}
	return c
}

// CrossControl counts what the cross-node person did and what the checks
// found. Operations count the service's acknowledgements (200); every one
// went to a node other than the run's home node.
type CrossControl struct {
	Runs           int `json:"runs"`            // runs a person acted on
	Pauses         int `json:"pauses"`          // pauses acknowledged
	Resumes        int `json:"resumes"`         // resumes acknowledged
	Edits          int `json:"edits"`           // edits acknowledged
	EditsRefused   int `json:"edits_refused"`   // edits answered 409 (the action had started)
	Rejects        int `json:"rejects"`         // rejects acknowledged
	RejectsRefused int `json:"rejects_refused"` // rejects answered 409
	Approvals      int `json:"approvals"`       // actions approved (after an edit, or in a run submitted with approve none)
	Late           int `json:"late"`            // operations that found the run ended or nothing left to act on
	// What was checked: runs whose events were read, write requests the
	// world received that were compared with them.
	RunsChecked     int `json:"runs_checked"`
	RequestsChecked int `json:"requests_checked"`
	// Violations: an action started while a person's pause held (in the
	// ledger's events, or a request the world received between the pause's
	// acknowledgement and the resume); an effect with arguments an edit had
	// replaced; a rejected action that started; an action claimed before
	// any approval, or (in a run submitted with approve none) claimed after
	// an edit before a person approved the edited arguments.
	PauseViolations    int `json:"pause_violations"`
	EditViolations     int `json:"edit_violations"`
	RejectViolations   int `json:"reject_violations"`
	ApprovalViolations int `json:"approval_violations"`
	// Budgets: runs whose charges budget usage was compared with the
	// world's charges, and those that differ.
	BudgetChecked    int `json:"budget_checked"`
	BudgetMismatches int `json:"budget_mismatches"`
	// Violations is the sum of the violations and budget mismatches.
	Violations int `json:"violations"`
}

// person is the cross-node person's progress through one run.
type person struct {
	c        crossOp
	runID    string
	plan     genPlan
	phase    string    // "delay", "hold", "approve", "approving", "" when done
	next     time.Time // when the phase acts
	pauseAck time.Time // the pause's 200 arrived
	resumeAt time.Time // the resume was sent (zero: never)
	edited   string    // the action an acknowledged edit changed
	tries    int
	// editApproved: in a run submitted with approve none, whether the
	// person still has to edit an action they approved (then approve it
	// again: the first approval no longer counts).
	editApproved bool
	reapprove    time.Time // not before then is the edited action approved again
}

// crossRecord is what the audit needs of a run the person acted on.
type crossRecord struct {
	op                 string
	pauseAck, resumeAt time.Time
}

func (x *nodesExp) newPerson(n int, runID string, planRaw []byte) *person {
	if !x.cfg.Control {
		return nil
	}
	c := crossFor(x.cfg.Seed, n, x.cfg.Nodes)
	if c.Op == "" {
		return nil
	}
	p := &person{c: c, runID: runID, phase: "delay", next: time.Now().Add(c.Delay)}
	json.Unmarshal(planRaw, &p.plan)
	if c.Op == OpApprove {
		p.phase, p.next = "approving", time.Now().Add(c.Delay/4)
		p.editApproved = true
	}
	x.mu.Lock()
	x.rep.Control.Runs++
	x.mu.Unlock()
	return p
}

// step does what the person has to do now to run d (as just read), through a
// node other than the run's home.
func (x *nodesExp) step(ctx context.Context, token string, p *person, d *runDoc) error {
	if p.phase == "" || time.Now().Before(p.next) {
		return nil
	}
	runPath := "/v1/runs/" + url.PathEscape(p.runID)
	ended := d.Status == "completed" || d.Status == "failed" || d.Status == "cancelled"
	count := func(f func(c *CrossControl)) {
		x.mu.Lock()
		f(x.rep.Control)
		x.mu.Unlock()
	}
	late := func() error {
		count(func(c *CrossControl) { c.Late++ })
		p.phase = ""
		return nil
	}
	post := func(path string, body any) (int, []byte, error) {
		code, b, _, err := x.callVia(ctx, token, "POST", runPath+path, body, -1, p.c.Home)
		return code, b, err
	}
	switch {
	case p.c.Op == OpPause && p.phase == "delay":
		if ended {
			return late()
		}
		code, b, err := post("/pause", map[string]any{})
		switch {
		case err != nil:
			return err
		case code == http.StatusConflict:
			return late()
		case code != http.StatusOK:
			return fmt.Errorf("pause answered %d: %s", code, bytes.TrimSpace(b))
		}
		p.pauseAck = time.Now()
		count(func(c *CrossControl) { c.Pauses++ })
		p.phase, p.next = "hold", time.Now().Add(p.c.Hold)
	case p.c.Op == OpPause && p.phase == "hold":
		p.resumeAt = time.Now()
		code, b, err := post("/resume", map[string]any{})
		switch {
		case err != nil:
			return err
		case code == http.StatusOK:
			count(func(c *CrossControl) { c.Resumes++ })
		case code != http.StatusConflict: // 409: cancelled meanwhile
			return fmt.Errorf("resume answered %d: %s", code, bytes.TrimSpace(b))
		}
		p.phase = ""
	case (p.c.Op == OpEdit || p.c.Op == OpReject) && p.phase == "delay":
		a, args := pickCross(p.plan, d, p.c.Pick, p.c.Op == OpEdit)
		if ended || a == "" {
			return late()
		}
		var code int
		var b []byte
		var err error
		if p.c.Op == OpEdit {
			code, b, err = post("/actions/"+url.PathEscape(a)+"/edit", map[string]any{"args": args})
		} else {
			code, b, err = post("/actions/"+url.PathEscape(a)+"/reject", map[string]any{"reason": "chaos: a person declined it"})
		}
		switch {
		case err != nil:
			return err
		case code == http.StatusConflict:
			count(func(c *CrossControl) {
				if p.c.Op == OpEdit {
					c.EditsRefused++
				} else {
					c.RejectsRefused++
				}
			})
			p.phase = ""
			return nil
		case code != http.StatusOK:
			return fmt.Errorf("%s %s answered %d: %s", p.c.Op, a, code, bytes.TrimSpace(b))
		}
		if p.c.Op == OpReject {
			count(func(c *CrossControl) { c.Rejects++ })
			p.phase = ""
			return nil
		}
		count(func(c *CrossControl) { c.Edits++ })
		// An edit clears the action's approval: approve the new arguments,
		// a while later (as a person would), through another node again.
		p.edited, p.phase, p.next = a, "approve", time.Now().Add(100*time.Millisecond+time.Duration(p.c.Pick*float64(700*time.Millisecond)))
	case p.phase == "approve":
		a := actionOf(d, p.edited)
		if ended || a == nil || a.Status != "pending" || a.Attempts != 0 {
			p.phase = ""
			return nil
		}
		code, b, err := post("/actions/"+url.PathEscape(p.edited)+"/approve", map[string]any{})
		switch {
		case err != nil:
			return err
		case code == http.StatusOK:
			count(func(c *CrossControl) { c.Approvals++ })
			p.phase = ""
		default:
			// The run was paused for a person or is being cancelled: read
			// it again and try again a while.
			if p.tries++; p.tries > 50 {
				return fmt.Errorf("approving edited action %s answered %d: %s", p.edited, code, bytes.TrimSpace(b))
			}
			p.next = time.Now().Add(200 * time.Millisecond)
		}
	case p.phase == "approving":
		if ended {
			p.phase = ""
			return nil
		}
		if p.editApproved {
			// Edit an action approved and not started yet: the approval was
			// for the old arguments; the loop approves it again later.
			approved := &runDoc{}
			for _, a := range d.Actions {
				if a.Status == "approved" {
					approved.Actions = append(approved.Actions, a)
				}
			}
			if a, args := pickCross(p.plan, approved, p.c.Pick, true); a != "" {
				p.editApproved = false
				code, b, err := post("/actions/"+url.PathEscape(a)+"/edit", map[string]any{"args": args})
				switch {
				case err != nil:
					return err
				case code == http.StatusOK:
					count(func(c *CrossControl) { c.Edits++ })
					p.edited, p.reapprove = a, time.Now().Add(300*time.Millisecond+time.Duration(p.c.Pick*float64(time.Second)))
				case code == http.StatusConflict:
					count(func(c *CrossControl) { c.EditsRefused++ })
				default:
					return fmt.Errorf("edit %s answered %d: %s", a, code, bytes.TrimSpace(b))
				}
			}
		}
		var waiting []string
		for _, a := range d.Actions {
			if a.Status == "pending" && a.Attempts == 0 && (a.ID != p.edited || time.Now().After(p.reapprove)) {
				waiting = append(waiting, a.ID)
			}
		}
		rng := newRand(x.cfg.Seed, "nodes-approve", p.runID, time.Now().UnixNano())
		rng.Shuffle(len(waiting), func(i, j int) { waiting[i], waiting[j] = waiting[j], waiting[i] })
		for _, id := range waiting[:min(len(waiting), 1+rng.IntN(3))] {
			code, b, err := post("/actions/"+url.PathEscape(id)+"/approve", map[string]any{})
			switch {
			case err != nil:
				return err
			case code == http.StatusOK:
				count(func(c *CrossControl) { c.Approvals++ })
			case code != http.StatusConflict: // 409: approved meanwhile, started, or the run ended
				return fmt.Errorf("approving %s answered %d: %s", id, code, bytes.TrimSpace(b))
			}
		}
		p.next = time.Now().Add(30*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond))))
	}
	return nil
}

// crossTools are the tools whose effect the world files under an argument
// the plan writes literally (no reference): an edit changes it, so a request
// with the old value is one the audit recognizes.
var crossTools = map[string]bool{ToolCharge: true, ToolContact: true, ToolLead: true, ToolEmail: true}

// pickCross chooses an action of the run that has not started, whose world
// identity is its own (no twin shares it), and for an edit returns its
// edited arguments (the plan's, references kept). "" when none is left.
func pickCross(p genPlan, cur *runDoc, pick float64, edit bool) (string, map[string]any) {
	twin := map[string]bool{}
	for _, g := range p.Actions {
		if base, ok := strings.CutSuffix(g.ID, "_twin"); ok {
			twin[base], twin[g.ID] = true, true
		}
	}
	var cands []genAction
	for _, g := range p.Actions {
		x := actionOf(cur, g.ID)
		if x == nil || !crossTools[g.Tool] || twin[g.ID] || x.Attempts != 0 || (x.Status != "pending" && x.Status != "approved") {
			continue
		}
		cands = append(cands, g)
	}
	if len(cands) == 0 {
		return "", nil
	}
	g := cands[min(int(pick*float64(len(cands))), len(cands)-1)]
	if !edit {
		return g.ID, nil
	}
	e, args := pickEdit(genPlan{Actions: []genAction{g}}, cur, 0)
	if e == nil {
		return "", nil
	}
	return e.Action, args
}

// event is a ledger event as GET /v1/runs/{id}/events answers it.
type event struct {
	Seq      uint64          `json:"seq"`
	Type     string          `json:"type"`
	ActionID string          `json:"action_id"`
	At       time.Time       `json:"at"`
	Data     json.RawMessage `json:"data"`
}

// events reads a run's events through any node.
func (x *nodesExp) events(ctx context.Context, token, runID string) ([]event, error) {
	var all []event
	after := uint64(0)
	for {
		code, b, _, err := x.call(ctx, token, "GET", fmt.Sprintf("/v1/runs/%s/events?limit=10000&after=%d", url.PathEscape(runID), after), nil)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("run %s: events answered %d: %s", runID, code, bytes.TrimSpace(b))
		}
		var page struct {
			Events []event `json:"events"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("run %s: reading its events: %w", runID, err)
		}
		if len(page.Events) == 0 {
			return all, nil
		}
		all = append(all, page.Events...)
		after = page.Events[len(page.Events)-1].Seq
	}
}

// crossAudit checks every run against its events and the world's log of
// write requests (w.Log), and the charges budget's usage against the
// world's charges; it returns the violations, for people. finals are the
// runs' last Run JSON, plans their plans by run id.
func (x *nodesExp) crossAudit(ctx context.Context, token string, w *Audit) ([]string, error) {
	c := x.rep.Control
	var out []string
	find := func(n *int, format string, a ...any) {
		*n++
		out = append(out, fmt.Sprintf(format, a...))
	}
	// The world's write requests by logical effect.
	byName := map[string][]Received{}
	for _, r := range w.Log {
		byName[r.Name] = append(byName[r.Name], r)
	}
	code, b, _, err := x.call(ctx, token, "GET", "/v1/budgets", nil)
	if err != nil {
		return nil, err
	}
	var usage budgetUsage
	if code != http.StatusOK || json.Unmarshal(b, &usage) != nil {
		return nil, fmt.Errorf("GET /v1/budgets answered %d: %s", code, bytes.TrimSpace(b))
	}
	x.mu.Lock()
	finals := append([]runDoc{}, x.finals...)
	x.mu.Unlock()
	for i := range finals {
		d := &finals[i]
		evs, err := x.events(ctx, token, d.RunID)
		if err != nil {
			return nil, err
		}
		c.RunsChecked++
		x.mu.Lock()
		n, rec := x.numbers[d.RunID], x.crossed[d.RunID]
		x.mu.Unlock()
		planRaw, _ := GeneratePlan(x.cfg.Seed, n)
		var plan genPlan
		json.Unmarshal(planRaw, &plan)

		// Which of the world's logical effects are this run's, and whose.
		owners := map[string][]string{} // world name -> actions
		planArgs := map[string]map[string]any{}
		for _, g := range plan.Actions {
			planArgs[g.ID] = g.Args
			if name := worldName(g.Tool, g.Args); name != "" {
				owners[name] = append(owners[name], g.ID)
			}
		}
		for _, a := range d.Actions {
			var args map[string]any
			if json.Unmarshal(a.Args, &args) == nil {
				if name := worldName(a.Tool, args); name != "" && !slices.Contains(owners[name], a.ID) {
					owners[name] = append(owners[name], a.ID)
				}
			}
		}
		// The run's history, per action.
		claims := map[string][]uint64{} // action -> seqs of its action.claimed events
		approved := map[string][]uint64{}
		var pausedSeq, resumedSeq uint64
		type change struct {
			seq  uint64
			args map[string]any
		}
		edits := map[string][]change{}
		rejected := map[string]uint64{}
		for _, e := range evs {
			switch e.Type {
			case "action.claimed":
				claims[e.ActionID] = append(claims[e.ActionID], e.Seq)
			case "action.approved":
				approved[e.ActionID] = append(approved[e.ActionID], e.Seq)
			case "action.edited":
				var data struct {
					Args map[string]any `json:"args"`
				}
				json.Unmarshal(e.Data, &data)
				edits[e.ActionID] = append(edits[e.ActionID], change{e.Seq, data.Args})
			case "action.rejected":
				rejected[e.ActionID] = e.Seq
			case "run.paused":
				var data struct {
					Reason string `json:"reason"`
				}
				json.Unmarshal(e.Data, &data)
				if data.Reason == "requested" && pausedSeq == 0 {
					pausedSeq = e.Seq
				}
			case "run.resumed":
				if pausedSeq != 0 && resumedSeq == 0 {
					resumedSeq = e.Seq
				}
			}
		}
		claimedBefore := func(id string, seq uint64) bool {
			return len(claims[id]) > 0 && claims[id][0] < seq
		}

		// Pause: no action's first claim between the person's pause and
		// the resume; in the world, no request of an action not claimed
		// before the pause between its acknowledgement and the resume.
		if pausedSeq != 0 {
			for id, seqs := range claims {
				if s := seqs[0]; s > pausedSeq && (resumedSeq == 0 || s < resumedSeq) {
					find(&c.PauseViolations, "%s: action %s was first claimed (event %d) while a person's pause held (paused at event %d, resumed at %d)", d.RunID, id, s, pausedSeq, resumedSeq)
				}
			}
		}
		if rec != nil && !rec.pauseAck.IsZero() {
			if pausedSeq == 0 {
				find(&c.PauseViolations, "%s: a pause was acknowledged, the run has no run.paused event of a person", d.RunID)
			}
			end := rec.resumeAt
			for name, ids := range owners {
				early := false
				for _, id := range ids {
					early = early || (pausedSeq != 0 && claimedBefore(id, pausedSeq))
				}
				for _, r := range byName[name] {
					c.RequestsChecked++
					if !early && r.At.After(rec.pauseAck) && (end.IsZero() || r.At.Before(end)) {
						find(&c.PauseViolations, "%s: the world received %s at %s, after the pause was acknowledged (%s) and before the resume (%s), for %v, not claimed before the pause",
							d.RunID, name, r.At.Format(time.RFC3339Nano), rec.pauseAck.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano), ids)
					}
				}
			}
		}

		// Edits: accepted only before any claim; every claim after an edit
		// carries the edited arguments, approved after the edit; the world
		// never sees the arguments an edit replaced.
		for id, chs := range edits {
			a := actionOf(d, id)
			if a == nil {
				continue
			}
			path := editField[a.Tool]
			last := chs[len(chs)-1]
			if claimedBefore(id, chs[0].seq) {
				find(&c.EditViolations, "%s: action %s was edited (event %d) after it was claimed (event %d)", d.RunID, id, chs[0].seq, claims[id][0])
			}
			if a.Attempts > 0 && path != nil {
				if got, want := fieldOf(a.Args, path), fieldOf(mustMarshal(last.args), path); !reflect.DeepEqual(got, want) {
					find(&c.EditViolations, "%s: action %s ran with %s %v, edited to %v (event %d)", d.RunID, id, strings.Join(path, "."), got, want, last.seq)
				}
			}
			if s := firstAfter(claims[id], last.seq); s != 0 && rec != nil && rec.op == OpApprove {
				// Submitted with approve none: only a person's approval of
				// the edited arguments lets it start.
				if ap := firstAfter(approved[id], last.seq); ap == 0 || ap > s {
					find(&c.ApprovalViolations, "%s: action %s was claimed (event %d) after its edit (event %d) with no approval of the edited arguments before", d.RunID, id, s, last.seq)
				}
			}
			prev := planArgs[id]
			for _, ch := range chs {
				old := worldName(a.Tool, prev)
				if old != "" && old != worldName(a.Tool, ch.args) && len(owners[old]) == 1 {
					for _, r := range byName[old] {
						find(&c.EditViolations, "%s: the world received %s at %s: action %s's arguments before its edit (event %d)", d.RunID, old, r.At.Format(time.RFC3339Nano), id, ch.seq)
					}
				}
				prev = ch.args
			}
		}

		// Rejects: a rejected action never starts and never takes effect.
		for id, seq := range rejected {
			a := actionOf(d, id)
			if a == nil {
				continue
			}
			if len(claims[id]) > 0 {
				find(&c.RejectViolations, "%s: action %s was rejected (event %d) and claimed (event %d)", d.RunID, id, seq, claims[id][0])
			}
			if a.Attempts > 0 || a.Status == "succeeded" {
				find(&c.RejectViolations, "%s: action %s was rejected (event %d) and ended %s after %d attempts", d.RunID, id, seq, a.Status, a.Attempts)
			}
			if name := worldName(a.Tool, planArgs[id]); name != "" && len(owners[name]) == 1 {
				for _, r := range byName[name] {
					find(&c.RejectViolations, "%s: the world received %s at %s: action %s, rejected (event %d)", d.RunID, name, r.At.Format(time.RFC3339Nano), id, seq)
				}
			}
		}

		// Approvals: every action's first claim follows an approval.
		for id, seqs := range claims {
			if len(edits[id]) == 0 && (len(approved[id]) == 0 || approved[id][0] > seqs[0]) {
				find(&c.ApprovalViolations, "%s: action %s was claimed (event %d) before any approval", d.RunID, id, seqs[0])
			}
		}

		// Budget: the ledger's usage equals the world's charges.
		used, count := new(big.Rat), 0
		for _, u := range usage.Budgets {
			if u.Budget != BudgetCharges || u.Scope != "run:"+d.RunID {
				continue
			}
			r, ok := new(big.Rat).SetString(u.Used)
			if !ok {
				return nil, fmt.Errorf("GET /v1/budgets: used %q is not a decimal", u.Used)
			}
			used.Add(used, r)
			count += u.Count
		}
		mine := &Audit{}
		prefix := fmt.Sprintf("r%d-", n)
		for _, ch := range w.Charges {
			if strings.HasPrefix(ch.Reference, prefix) {
				mine.Charges = append(mine.Charges, ch)
			}
		}
		c.BudgetChecked++
		for _, f := range budgetFindings(d, mine, used, count) {
			find(&c.BudgetMismatches, "%s", f)
		}
	}
	c.Violations = c.PauseViolations + c.EditViolations + c.RejectViolations + c.ApprovalViolations + c.BudgetMismatches
	sort.Strings(out)
	return out, nil
}

// worldName is the world's name for the logical effect of a call of tool
// with args (as in Audit.Requests), "" when the args do not name it
// literally (a reference not resolved yet) or the tool has no effect.
func worldName(tool string, args map[string]any) string {
	svc := service[tool]
	if svc == "" || svc == "catalogue" || args == nil {
		return ""
	}
	id := identity(svc, args)
	if id == "" || strings.Contains(id, "${") {
		return ""
	}
	return svc + "/" + id
}

// firstAfter is the first of seqs (ascending) after seq, 0 if none.
func firstAfter(seqs []uint64, seq uint64) uint64 {
	for _, s := range seqs {
		if s > seq {
			return s
		}
	}
	return 0
}
