package chaos

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// TestPlansFitTheTools: generated plans are valid plans whose arguments fit
// both tools files; they use every tool, identical twins and declines; the
// same seed gives the same plans.
func TestPlansFitTheTools(t *testing.T) {
	t.Parallel()
	regs := map[bool]*tools.Registry{}
	for _, protected := range []bool{true, false} {
		f, err := httptool.Parse(ToolsFile(ToolsOptions{Base: "http://127.0.0.1:1/ns", Protected: protected, Timeout: time.Second, LagDeclared: 2 * time.Second}), nil)
		if err != nil {
			t.Fatalf("tools file (protected %v): %v", protected, err)
		}
		reg, err := tools.NewRegistry(f.Tools...)
		if err != nil {
			t.Fatal(err)
		}
		regs[protected] = reg
		wantClass := map[string]tools.Class{ToolCatalogue: tools.ReadOnly, ToolContact: tools.Lookup, ToolLead: tools.Lookup,
			ToolCharge: tools.Keyed, ToolSettings: tools.Idempotent, ToolEmail: tools.AtMostOnce}
		for name, class := range wantClass {
			tl, ok := reg.Get(name)
			if !ok {
				t.Fatalf("tool %s missing", name)
			}
			if !protected && class != tools.ReadOnly {
				class = tools.Idempotent
			}
			if got := tl.Spec().Class; got != class {
				t.Errorf("protected %v: %s is %s, want %s", protected, name, got, class)
			}
		}
	}
	const seed = 11
	used := map[string]int{}
	twins, declines, total := 0, 0, 0
	for n := range 300 {
		b, size := GeneratePlan(seed, n)
		again, _ := GeneratePlan(seed, n)
		if !bytes.Equal(b, again) {
			t.Fatalf("seed %d plan %d differs between two generations", seed, n)
		}
		p, err := plan.Decode(b)
		if err != nil {
			t.Fatalf("seed %d plan %d: %v\n%s", seed, n, err, b)
		}
		if len(p.Actions) != size {
			t.Fatalf("size %d, plan has %d actions", size, len(p.Actions))
		}
		for protected, reg := range regs {
			if err := p.Validate(reg); err != nil {
				t.Fatalf("seed %d plan %d (protected %v): %v\n%s", seed, n, protected, err, b)
			}
		}
		for _, a := range p.Actions {
			used[a.Tool]++
			if strings.HasSuffix(a.ID, "_twin") {
				twins++
			}
			if strings.Contains(string(a.Args), "9500") {
				declines++
			}
		}
		total += size
	}
	if len(used) != 6 || twins == 0 || declines == 0 {
		t.Fatalf("300 plans use tools %v, %d twins, %d declines", used, twins, declines)
	}
	other, _ := GeneratePlan(seed+1, 0)
	first, _ := GeneratePlan(seed, 0)
	if bytes.Equal(first, other) {
		t.Fatalf("seeds %d and %d gave the same first plan", seed, seed+1)
	}
	t.Logf("300 plans: %d actions, %v, %d twins, %d declined charges", total, used, twins, declines)
}

func TestKillSchedule(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "b", "c"}
	timed, hooks := 0, 0
	for n := range 200 {
		for step := range maxSteps {
			k := killFor(5, n, step, ids)
			if k != killFor(5, n, step, ids) {
				t.Fatalf("kill %d/%d not reproducible", n, step)
			}
			switch {
			case step >= killSteps && k != (kill{}):
				t.Fatalf("step %d of run %d is killed (%v): runs must be able to finish", step, n, k)
			case k.After > 0:
				timed++
			case k.Point != "":
				hooks++
			}
		}
	}
	if timed < 100 || hooks < 100 {
		t.Fatalf("200 runs: %d timed kills and %d kills at crash points", timed, hooks)
	}
}

// doc builds a Run JSON for the audit tests.
func doc(actions ...docAction) *runDoc {
	return &runDoc{RunID: "r", Status: "completed", Actions: actions}
}

func act(id, tool, status string, attempts int, args, output string) docAction {
	return docAction{ID: id, Tool: tool, Status: status, Attempts: attempts, Args: json.RawMessage(args), Output: json.RawMessage(output)}
}

func TestAudit(t *testing.T) {
	t.Parallel()
	charge := `{"customer": "ct_1", "amount": 5, "currency": "EUR", "reference": "ref"}`
	mail := `{"to": "a@x", "template": "w"}`
	cases := []struct {
		name    string
		doc     *runDoc
		world   Audit
		retries map[string]int
		want    RunAudit
	}{{
		name: "exactly once",
		doc: doc(act("c", ToolCharge, "succeeded", 2, charge, `{"id": "ch_1"}`),
			act("e", ToolEmail, "succeeded", 1, mail, `{"message_id": "msg_2"}`)),
		world: Audit{Charges: []Charge{{ID: "ch_1", Reference: "ref"}}, Emails: []Email{{MessageID: "msg_2", To: "a@x", Template: "w"}},
			Requests: map[string]Requests{"payments/ref": {Received: 3, Processed: 1}, "email/a@x|w": {Received: 2, Processed: 1}}, LookupHits: 4},
		want: RunAudit{RepeatWrites: 3, LookupHits: 4},
	}, {
		name: "duplicate charge and re-executed email",
		doc: doc(act("c", ToolCharge, "succeeded", 1, charge, `{"id": "ch_1"}`),
			act("e", ToolEmail, "succeeded", 1, mail, `{"message_id": "msg_3"}`)),
		world: Audit{Charges: []Charge{{ID: "ch_1", Reference: "ref"}, {ID: "ch_2", Reference: "ref"}},
			Emails:   []Email{{MessageID: "msg_3", To: "a@x", Template: "w"}, {MessageID: "msg_4", To: "a@x", Template: "w"}},
			Requests: map[string]Requests{"email/a@x|w": {Received: 2, Processed: 2}}},
		want: RunAudit{Duplicates: map[string]int{"payments": 1, "email": 1}, AtMostOnceReexec: 1, RepeatWrites: 1},
	}, {
		name: "a person's retry allows a second execution",
		doc:  doc(act("e", ToolEmail, "succeeded", 2, mail, `{"message_id": "msg_4"}`)),
		world: Audit{Emails: []Email{{MessageID: "msg_4", To: "a@x", Template: "w"}},
			Requests: map[string]Requests{"email/a@x|w": {Received: 2, Processed: 2, Failed: 1}}},
		retries: map[string]int{"e": 1},
		want:    RunAudit{RepeatWrites: 1},
	}, {
		name: "twins take effect twice, each with its own output",
		doc: doc(act("c", ToolCharge, "succeeded", 1, charge, `{"id": "ch_1"}`),
			act("c_twin", ToolCharge, "succeeded", 1, charge, `{"id": "ch_1"}`)),
		world: Audit{Charges: []Charge{{ID: "ch_1", Reference: "ref"}, {ID: "ch_2", Reference: "ref"}}},
		want:  RunAudit{LostMissing: 1},
	}, {
		name:  "ledger says succeeded, world has nothing",
		doc:   doc(act("c", ToolCharge, "succeeded", 1, charge, `{"id": "ch_9"}`)),
		world: Audit{},
		want:  RunAudit{LostMissing: 1},
	}, {
		name: "effect of an action the ledger says failed, and one of no action",
		doc:  doc(act("c", ToolCharge, "failed", 1, charge, `null`)),
		world: Audit{Charges: []Charge{{ID: "ch_1", Reference: "ref"}},
			Emails: []Email{{MessageID: "msg_1", To: "z@x", Template: "w"}}},
		want: RunAudit{LostUnexplained: 2},
	}, {
		name: "settings: one change per distinct value; a wrong final value is lost",
		doc: doc(act("s", ToolSettings, "succeeded", 1, `{"account": "ct_1", "settings": {"plan": "pro"}}`, `{}`),
			act("t", ToolSettings, "succeeded", 1, `{"account": "ct_2", "settings": {"plan": "pro"}}`, `{}`)),
		world: Audit{Settings: map[string]Setting{
			"ct_1": {Value: json.RawMessage(`{"plan":"pro"}`), Changes: 2},
			"ct_2": {Value: json.RawMessage(`{"plan":"team"}`), Changes: 1},
		}},
		want: RunAudit{Duplicates: map[string]int{"settings": 1}, LostMissing: 1},
	}, {
		name:  "never claimed actions are not expected in the world",
		doc:   doc(act("c", ToolCharge, "skipped", 0, `{"customer": "${x.output.id}", "amount": 5, "currency": "EUR", "reference": "ref"}`, `null`)),
		world: Audit{},
		want:  RunAudit{},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := auditRun(c.doc, &c.world, c.retries)
			findings := got.Findings
			got.Findings = nil
			if c.want.Duplicates == nil {
				c.want.Duplicates = map[string]int{}
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(c.want)
			if !bytes.Equal(gb, wb) {
				t.Fatalf("audit\n got %s\nwant %s\nfindings %q", gb, wb, findings)
			}
			if (got.Duplicates["payments"]+got.Duplicates["email"]+got.Duplicates["settings"]+got.LostMissing+got.LostUnexplained+got.AtMostOnceReexec > 0) != (len(findings) > 0) {
				t.Fatalf("findings %q do not match the counts %s", findings, gb)
			}
		})
	}
}

// TestControlSchedule: a run's control is drawn from its own stream: the
// same seed gives the same control, every operation is drawn, about a third
// of the runs get one, and the runs the regression tests replay
// (cmd/docket TestChaosRegression*) get none, so they are still driven by
// docket run alone with the plans and kill points that found their bugs.
func TestControlSchedule(t *testing.T) {
	t.Parallel()
	ops := map[string]int{}
	for n := range 1000 {
		c := controlFor(5, n)
		if c != controlFor(5, n) {
			t.Fatalf("control of run %d not reproducible", n)
		}
		if c.Delay <= 0 || c.Hold <= 0 || c.Pick < 0 || c.Pick >= 1 {
			t.Fatalf("control %+v", c)
		}
		ops[c.Op]++
	}
	for _, op := range []string{OpPause, OpCancel, OpEdit, OpReplay} {
		if ops[op] < 30 {
			t.Errorf("1000 runs: %d get %s (%v)", ops[op], op, ops)
		}
	}
	if ops[""] < 600 || ops[""] > 730 {
		t.Errorf("1000 runs: %d without a control (%v)", ops[""], ops)
	}
	for _, r := range []struct {
		seed uint64
		n    int
	}{{2, 21}, {2, 35}, {20261130, 232}, {20261130, 317}} {
		if c := controlFor(r.seed, r.n); c.Op != "" {
			t.Errorf("seed %d run %d, replayed by a regression test, gets %s", r.seed, r.n, c.Op)
		}
	}
}

// TestPickEdit: an edit or replay changes the field the world files the
// effect under, of an action that has not started; none is left once every
// action has started.
func TestPickEdit(t *testing.T) {
	t.Parallel()
	b, _ := GeneratePlan(3, 4)
	var p genPlan
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	cur := &runDoc{}
	for _, a := range p.Actions {
		cur.Actions = append(cur.Actions, docAction{ID: a.ID, Tool: a.Tool, Status: "approved"})
	}
	cur.Actions[0].Status, cur.Actions[0].Attempts = "succeeded", 1
	for _, pick := range []float64{0, 0.5, 0.999} {
		e, args := pickEdit(p, cur, pick)
		if e == nil || e.Action == cur.Actions[0].ID || e.Old == e.New {
			t.Fatalf("pick %v: %+v", pick, e)
		}
		if got := fieldOf(mustMarshal(args), e.Path); got != e.New {
			t.Fatalf("pick %v: edited args hold %v at %v, want %v", pick, got, e.Path, e.New)
		}
		var tool string
		for _, a := range p.Actions {
			if a.ID == e.Action {
				tool = a.Tool
				if orig := fieldOf(mustMarshal(a.Args), e.Path); orig != e.Old {
					t.Fatalf("the plan was changed: %v, want %v", orig, e.Old)
				}
			}
		}
		if editField[tool] == nil {
			t.Fatalf("picked %s (%s), which has no effect to check", e.Action, tool)
		}
	}
	for i := range cur.Actions {
		cur.Actions[i].Attempts = 1
	}
	if e, _ := pickEdit(p, cur, 0.3); e != nil {
		t.Fatalf("every action started, picked %+v", e)
	}
}

// TestAuditControl: the expectations of acknowledged operations.
func TestAuditControl(t *testing.T) {
	t.Parallel()
	mk := func(status string, actions ...docAction) *runDoc {
		return &runDoc{RunID: "r", Status: status, Revision: 1, Actions: actions}
	}
	charge := func(ref string) string {
		return `{"customer": "ct_1", "amount": 5, "currency": "EUR", "reference": "` + ref + `"}`
	}
	chargeEdit := edited{Action: "c", Path: []string{"reference"}, Old: "ref", New: "ref-edited"}
	cases := []struct {
		name  string
		final *runDoc
		st    ctlState
		want  int // findings
		left  int // started actions left pending in a cancelled run
	}{{
		name:  "cancel: never-started skipped, in-flight settled",
		final: mk("cancelled", act("a", ToolCharge, "succeeded", 1, charge("a"), `{}`), act("b", ToolCharge, "skipped", 0, charge("b"), `null`)),
		st:    ctlState{cancel: mk("running", act("a", ToolCharge, "claimed", 1, charge("a"), `null`), act("b", ToolCharge, "approved", 0, charge("b"), `null`))},
	}, {
		name:  "cancel: an action not started at the cancel ran afterwards",
		final: mk("cancelled", act("b", ToolCharge, "succeeded", 1, charge("b"), `{}`)),
		st:    ctlState{cancel: mk("running", act("b", ToolCharge, "approved", 0, charge("b"), `null`))},
		want:  1,
	}, {
		name:  "cancel: the run did not end cancelled, an unknown outcome left claimed",
		final: mk("completed", act("a", ToolCharge, "claimed", 1, charge("a"), `null`)),
		st:    ctlState{cancel: mk("running", act("a", ToolCharge, "claimed", 1, charge("a"), `null`))},
		want:  2,
	}, {
		name:  "cancel: a started action waiting for its next attempt is left pending",
		final: mk("cancelled", act("a", ToolCharge, "pending", 1, charge("a"), `null`)),
		st:    ctlState{cancel: mk("running", act("a", ToolCharge, "pending", 1, charge("a"), `null`))},
		want:  1,
		left:  1,
	}, {
		name:  "edit accepted and honoured",
		final: mk("completed", act("c", ToolCharge, "succeeded", 1, charge("ref-edited"), `{}`)),
		st:    ctlState{accepted: []edited{chargeEdit}},
	}, {
		name:  "edit accepted, the action ran with the old arguments",
		final: mk("completed", act("c", ToolCharge, "succeeded", 1, charge("ref"), `{}`)),
		st:    ctlState{accepted: []edited{chargeEdit}},
		want:  1,
	}, {
		name:  "edit refused, the action ran with the new arguments",
		final: mk("completed", act("c", ToolCharge, "succeeded", 1, charge("ref-edited"), `{}`)),
		st:    ctlState{refused: []edited{chargeEdit}},
		want:  1,
	}, {
		name: "replay: what succeeded before keeps its key and output",
		final: &runDoc{RunID: "r", Status: "completed", Revision: 2, Actions: []docAction{
			{ID: "a", Tool: ToolCharge, Status: "succeeded", Attempts: 1, Key: "k1", Args: json.RawMessage(charge("a")), Output: json.RawMessage(`{"id": "ch_1"}`)},
			{ID: "c", Tool: ToolCharge, Status: "succeeded", Attempts: 1, Key: "k3", Args: json.RawMessage(charge("ref-edited")), Output: json.RawMessage(`{"id": "ch_2"}`)}}},
		st: ctlState{replayed: true, accepted: []edited{chargeEdit}, before: &runDoc{Revision: 1, Actions: []docAction{
			{ID: "a", Status: "succeeded", Key: "k1", Output: json.RawMessage(`{"id":"ch_1"}`)}, {ID: "c", Status: "approved"}}}},
	}, {
		name: "replay: an action that had succeeded ran again under a new key, and no new revision",
		final: &runDoc{RunID: "r", Status: "completed", Revision: 1, Actions: []docAction{
			{ID: "a", Tool: ToolCharge, Status: "succeeded", Attempts: 2, Key: "k2", Args: json.RawMessage(charge("a")), Output: json.RawMessage(`{"id": "ch_3"}`)}}},
		st: ctlState{replayed: true, before: &runDoc{Revision: 1, Actions: []docAction{
			{ID: "a", Status: "succeeded", Key: "k1", Output: json.RawMessage(`{"id":"ch_1"}`)}}}},
		want: 2,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := c.st
			got := auditControl(c.final, &st)
			if len(got) != c.want || len(st.leftPending) != c.left {
				t.Fatalf("findings %q (want %d), left pending %v (want %d)", got, c.want, st.leftPending, c.left)
			}
		})
	}
}
