package ledgertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// reopen closes l and opens the same data again when the store is durable;
// otherwise it keeps l (the checks after a reopen then run on the same
// handle).
func reopen(t *testing.T, open Opener, cfg Config, l ledger.Store, opts Options) ledger.Store {
	t.Helper()
	if !opts.Durable {
		return l
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return open(t, cfg)
}

func applyErr(t *testing.T, l ledger.Store, o ledger.Op) error {
	t.Helper()
	res, err := l.Apply(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Err
}

func onePlan() *plan.Plan {
	return &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}}
}

// A person's pause is a fact of the run record: it survives a reopen, other
// status changes keep it, and only SetPause with by == "" lifts it.
func testPause(t *testing.T, open Opener, opts Options) {
	ctx := context.Background()
	cfg := newConfig(t)
	l := open(t, cfg)
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Status: ledger.RunRunning, Policy: "safe"}, onePlan(),
		[]ledger.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := applyErr(t, l, ledger.SetPause("r", "alice", "", []byte(`{"by":"alice"}`))); err != nil {
		t.Fatal(err)
	}
	// A drive that writes paused for another reason keeps the person's pause.
	if err := applyErr(t, l, ledger.SetRunStatus("r", ledger.RunPaused, ledger.EventRunPaused, "", []byte(`{"reason":"needs_review"}`))); err != nil {
		t.Fatal(err)
	}
	l = reopen(t, open, cfg, l, opts)
	run, err := l.GetRun(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != ledger.RunPaused || run.PausedBy != "alice" {
		t.Fatalf("after reopen: status %s paused_by %q, want paused by alice", run.Status, run.PausedBy)
	}
	if err := applyErr(t, l, ledger.SetPause("r", "bob", "", nil)); err != nil {
		t.Fatalf("pausing a paused run again: %v", err)
	}
	if run, _ = l.GetRun(ctx, "r"); run.PausedBy != "alice" {
		t.Fatalf("a second pause changed paused_by to %q", run.PausedBy)
	}
	if err := applyErr(t, l, ledger.SetPause("r", "", ledger.RunRunning, []byte(`{"by":"bob"}`))); err != nil {
		t.Fatal(err)
	}
	if run, _ = l.GetRun(ctx, "r"); run.Status != ledger.RunRunning || run.PausedBy != "" {
		t.Fatalf("after resume: status %s paused_by %q", run.Status, run.PausedBy)
	}
	checkPauseEnds(t, l)
}

// checkPauseEnds: testPause's events after a pause, a second pause and a
// resume; a resume of a running run writes nothing; a completed or unknown
// run cannot be paused, nor resumed to a bogus status.
func checkPauseEnds(t *testing.T, l ledger.Store) {
	t.Helper()
	ctx := context.Background()
	evs, err := l.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, evs, 0)
	var types []ledger.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if n := len(types); n < 3 || types[n-3] != ledger.EventRunPaused || types[n-2] != ledger.EventRunPaused || types[n-1] != ledger.EventRunResumed {
		t.Fatalf("events %v: want ... run.paused, run.paused, run.resumed", types)
	}
	// Resuming a run nobody paused changes nothing.
	if err := applyErr(t, l, ledger.SetPause("r", "", ledger.RunRunning, nil)); err != nil {
		t.Fatal(err)
	}
	if after, _ := l.Events(ctx, "r", 0, 0); len(after) != len(evs) {
		t.Fatalf("a resume of a running run wrote %d events", len(after)-len(evs))
	}
	if err := applyErr(t, l, ledger.SetRunStatus("r", ledger.RunCompleted, ledger.EventRunCompleted, "", nil)); err != nil {
		t.Fatal(err)
	}
	var ce *ledger.ConflictError
	if err := applyErr(t, l, ledger.SetPause("r", "carol", "", nil)); !errors.As(err, &ce) {
		t.Fatalf("pausing a completed run: %v, want *ConflictError", err)
	}
	if err := applyErr(t, l, ledger.SetPause("nope", "carol", "", nil)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("pausing an unknown run: %v, want ErrNotFound", err)
	}
	if err := applyErr(t, l, ledger.SetPause("r", "", "bogus", nil)); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("resuming to a bogus status: %v, want ErrInvalid", err)
	}
}

// A status change away from paused ends a person's pause: a later pause for
// another reason (an action needs review) is not a person's. Regression: a
// leftover PausedBy made such a run wait for a resume nobody knew to give
// (chaos seed 898073905121015326 run 37).
func testLeavingPausedClearsPausedBy(t *testing.T, open Opener) {
	ctx := context.Background()
	l := open(t, newConfig(t))
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Status: ledger.RunRunning, Policy: "safe"}, onePlan(),
		[]ledger.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []ledger.Op{
		ledger.SetPause("r", "alice", "", []byte(`{"by":"alice"}`)),
		ledger.SetRunStatus("r", ledger.RunRunning, ledger.EventRunResumed, "", nil),
		ledger.SetRunStatus("r", ledger.RunPaused, ledger.EventRunPaused, "", []byte(`{"reason":"needs_review"}`)),
	} {
		if err := applyErr(t, l, o); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	run, err := l.GetRun(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != ledger.RunPaused || run.PausedBy != "" {
		t.Fatalf("status %s, paused by %q: want paused for review, by nobody", run.Status, run.PausedBy)
	}
}

// An accepted tools change is durable (it survives a reopen), says so with
// one run.tools_changed event, and an identical repeat writes nothing.
func testToolsHash(t *testing.T, open Opener, opts Options) {
	ctx := context.Background()
	cfg := newConfig(t)
	l := open(t, cfg)
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", ToolsHash: "sha256:old"}, onePlan(), nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second time is an identical repeat
		if err := applyErr(t, l, ledger.SetToolsHash("r", "sha256:new")); err != nil {
			t.Fatalf("SetToolsHash #%d: %v", i+1, err)
		}
	}
	if err := applyErr(t, l, ledger.SetToolsHash("nope", "sha256:new")); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	if err := applyErr(t, l, ledger.SetToolsHash("r", "")); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("empty hash: %v", err)
	}
	l = reopen(t, open, cfg, l, opts)
	run, err := l.GetRun(ctx, "r")
	if err != nil || run.ToolsHash != "sha256:new" {
		t.Fatalf("after reopen: %+v %v", run, err)
	}
	evs, err := l.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var changed []ledger.Event
	for _, e := range evs {
		if e.Type == ledger.EventRunToolsChanged {
			changed = append(changed, e)
		}
	}
	if len(changed) != 1 || string(changed[0].Data) != `{"from":"sha256:old","to":"sha256:new"}` {
		t.Fatalf("run.tools_changed events: %+v", changed)
	}
}

// Large args (stored once, as blobs, by backends that do so) come back as
// the bytes given, from every read and every result, and compare equal for
// identical repeats.
func testLargeArgs(t *testing.T, open Opener, opts Options) {
	b := setup(t, open)
	args := json.RawMessage(`{"blob":` + string(bigString(200<<10)) + `}`)
	p := &plan.Plan{Goal: "large", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: args}, {ID: "a2", Tool: "t", Args: args}}}
	if _, _, err := b.l.CreateRun(b.ctx, ledger.Run{ID: "r"}, p,
		[]ledger.Action{{ID: "a1", Tool: "t", Args: args, Status: ledger.StatusApproved}, {ID: "a2", Tool: "t", Args: args}}); err != nil {
		t.Fatal(err)
	}
	same := func(what string, got json.RawMessage) {
		t.Helper()
		if !bytes.Equal(got, args) {
			t.Fatalf("%s: %d bytes, want the %d bytes given", what, len(got), len(args))
		}
	}
	// Approving and editing a2 with the same large args are identical repeats.
	b.mustOK(t, ledger.Approve("r", "a2", args, "ann"))
	b.mustOK(t, ledger.Approve("r", "a2", bytes.Clone(args), "ann"))
	if res := b.mustOK(t, ledger.Edit("r", "a2", bytes.Clone(args), "ann")); res.Action.Status != ledger.StatusApproved {
		t.Fatalf("an edit to the same args changed the row: %+v", res.Action.Status)
	}
	k := key(t, "r", "a1", string(args))
	res := b.mustOK(t, ledger.Claim("r", "a1", "t", k, args, 1))
	same("claim result row args", res.Action.Args)
	same("claim result key args", res.Key.Args)
	same("claim result approved args", res.Action.ApprovedArgs)
	ce := b.mustConflict(t, ledger.Claim("r", "a1", "t", k, args, 1))
	same("conflict current args", ce.Current.Args)
	b.mustOK(t, ledger.Succeed(k, 1, json.RawMessage(`{"ok":true}`)))
	check := func(l ledger.Store) {
		t.Helper()
		acts, err := l.Actions(b.ctx, "r")
		if err != nil || len(acts) != 2 {
			t.Fatalf("Actions: %d, %v", len(acts), err)
		}
		same("Actions a1 args", acts[0].Args)
		same("Actions a2 approved args", acts[1].ApprovedArgs)
		rec, err := l.Key(b.ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		same("Key args", rec.Args)
		got, err := l.Plan(b.ctx, "r", 1)
		if err != nil {
			t.Fatal(err)
		}
		same("Plan args", got.Actions[1].Args)
		if h, _ := plan.Hash(got); h != mustHash(t, p) {
			t.Fatalf("stored plan hash %s differs", h)
		}
	}
	check(b.l)
	check(reopen(t, open, b.cfg, b.l, opts))
}

func mustHash(t *testing.T, p *plan.Plan) string {
	t.Helper()
	h, err := plan.Hash(p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Apply reports one error per op: an op's own error in its Result, and a
// failure of the call as a whole in every Result and as Apply's error.
// ApplyOne returns the op's error, whichever it is.
func testApplyErrors(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "r", 2)
	k := key(t, "r", "a1", `{"i":1}`)
	res, err := b.l.Apply(b.ctx,
		ledger.Claim("r", "a1", "t", k, json.RawMessage(`{"i":1}`), 1),
		ledger.Claim("r", "nope", "t", "k2", nil, 1),
		ledger.Claim("r", "a1", "t", k, json.RawMessage(`{"i":1}`), 1))
	if err != nil || len(res) != 3 {
		t.Fatalf("Apply = %d results, %v", len(res), err)
	}
	if res[0].Err != nil || !errors.Is(res[1].Err, ledger.ErrNotFound) || !errors.Is(res[2].Err, ledger.ErrConflict) {
		t.Fatalf("per-op errors: %v | %v | %v", res[0].Err, res[1].Err, res[2].Err)
	}
	r, err := ledger.ApplyOne(b.ctx, b.l, ledger.Succeed(k, 2, json.RawMessage(`1`)))
	var ce *ledger.ConflictError
	if !errors.As(err, &ce) || r.Err != err || r.Key.Attempt != 1 {
		t.Fatalf("ApplyOne of a refused op = %+v, %v", r, err)
	}
	if r, err := ledger.ApplyOne(b.ctx, b.l, ledger.Succeed(k, 1, json.RawMessage(`1`))); err != nil || r.Key.State != ledger.StatusSucceeded {
		t.Fatalf("ApplyOne = %+v, %v", r, err)
	}
	if r, err := ledger.ApplyOne(b.ctx, b.l, ledger.Op{}); !errors.Is(err, ledger.ErrInvalid) || r.Err != err {
		t.Fatalf("ApplyOne of the zero Op = %v, %v; want ErrInvalid", r.Err, err)
	}
	checkApplyWhole(t, b)
}

// checkApplyWhole: a failure of the call as a whole (a cancelled context, a
// closed store) is every op's error and Apply's.
func checkApplyWhole(t *testing.T, b *bundle) {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	res, err := b.l.Apply(ctx, ledger.Note("r", "test.note", "", nil), ledger.Note("r", "test.note", "", nil))
	if !errors.Is(err, context.Canceled) || len(res) != 2 || res[0].Err != err || res[1].Err != err {
		t.Fatalf("Apply with a cancelled context = %v, %v", res, err)
	}
	if err := b.l.Close(); err != nil {
		t.Fatal(err)
	}
	res, err = b.l.Apply(b.ctx, ledger.Note("r", "test.note", "", nil), ledger.Note("r", "test.note", "", nil))
	if !errors.Is(err, ledger.ErrClosed) || len(res) != 2 || !errors.Is(res[0].Err, ledger.ErrClosed) || !errors.Is(res[1].Err, ledger.ErrClosed) {
		t.Fatalf("Apply after Close = %v, %v", res, err)
	}
	if _, err := ledger.ApplyOne(b.ctx, b.l, ledger.Note("r", "test.note", "", nil)); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("ApplyOne after Close = %v", err)
	}
}
