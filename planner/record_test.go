package planner_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openLedger(t *testing.T, dir string) ledger.Store {
	t.Helper()
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// planRun plans run runID with p through executor/runs, as docket run --goal
// and docket step do: the plan as planned now, or read back (Recorded) when
// the run was recorded, and the run as the drive left it.
func planRun(ctx context.Context, p *planner.Planner, eng *executor.Engine, l ledger.Store, runID string, req planner.Request, o *executor.RunOptions) (*planner.Result, ledger.RunDoc, error) {
	conv, err := req.Conversation()
	if err != nil {
		return nil, ledger.RunDoc{}, err
	}
	ident := executor.Request{Goal: req.Goal, Messages: conv}
	if o != nil {
		ident.Policy = o.Policy
	}
	var res *planner.Result
	rr, doc, err := runs.Run(ctx, eng, l, runs.Request{RunID: runID, Identity: &ident, Options: o,
		Planner: func(ctx context.Context) (*plan.Plan, error) {
			r, err := p.Plan(ctx, req)
			if err != nil {
				return nil, err
			}
			res = r
			return r.Plan, nil
		}})
	if rr.Plan != nil && !rr.Planned {
		if res, err = planner.Recorded(ctx, l, runID); err != nil {
			return nil, doc, err
		}
	}
	return res, doc, err
}

// A goal is planned once: the plan is recorded by the executor before
// anything runs, and asking again returns it without calling the model.
func TestPlanRunRecordsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	p, b := setup(t, planner.Config{},
		toolCalls("", call{"c1", "crm_create_contact", `{"name":"Ada","email":"ada@x","note":"from the fair","tags":null}`}),
		toolCalls("", call{"c2", "mail_send", `{"to":"ada@x","subject":"Hi","body":"${a1.output.id}"}`}),
		text("done"),
	)
	l := openLedger(t, dir)
	eng, err := executor.New(executor.Config{Ledger: l, Tools: b.reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	req := planner.Request{Goal: "add Ada and mail her"}
	runID := planner.GoalRunID(req, b.reg.Hash())
	if !strings.HasPrefix(runID, "run_") || runID != planner.GoalRunID(req, b.reg.Hash()) || runID == planner.GoalRunID(planner.Request{Goal: "other"}, b.reg.Hash()) {
		t.Fatalf("GoalRunID = %q: must be stable and depend on the goal", runID)
	}
	rr, rrDoc, err := planRun(ctx, p, eng, l, runID, req, &executor.RunOptions{Policy: executor.PolicyNone})
	if err != nil {
		t.Fatal(err)
	}
	if rr.FromLedger || rrDoc.Run.Status != ledger.RunAwaitingApproval || len(rrDoc.Actions) != 2 {
		t.Fatalf("first planRun: from ledger %v, status %s, %d actions", rr.FromLedger, rrDoc.Run.Status, len(rrDoc.Actions))
	}
	if len(b.create.Calls())+len(b.send.Calls()) != 0 {
		t.Fatalf("policy none: nothing may run yet")
	}
	recorded, err := l.Plan(ctx, runID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if recorded.Meta["model"] != "gpt-test" || recorded.Meta["prompt_hash"] == "" || recorded.Meta["total_tokens"] != "350" || len(recorded.Transcript) == 0 {
		t.Errorf("recorded plan lacks provenance: meta %v, transcript %d bytes", recorded.Meta, len(recorded.Transcript))
	}
	n := len(b.model.requests())

	// Again, after approvals (the at-most-once mail is shown again once its
	// reference resolved): the recorded plan is used, the model is not called.
	var (
		rr2    *planner.Result
		rr2Doc ledger.RunDoc
	)
	for i := 0; i < 2; i++ {
		if err := eng.ApproveAll(ctx, runID, "test"); err != nil {
			t.Fatal(err)
		}
		if rr2, rr2Doc, err = planRun(ctx, p, eng, l, runID, req, nil); err != nil {
			t.Fatal(err)
		}
		if !rr2.FromLedger || len(b.model.requests()) != n {
			t.Fatalf("planRun %d called the model (from ledger %v, %d→%d requests)", i+2, rr2.FromLedger, n, len(b.model.requests()))
		}
	}
	if rr2Doc.Run.Status != ledger.RunCompleted || len(b.create.Calls()) != 1 || len(b.send.Calls()) != 1 {
		t.Fatalf("status %s, create %d, send %d", rr2Doc.Run.Status, len(b.create.Calls()), len(b.send.Calls()))
	}
	if got := string(b.send.Calls()[0].Args); got != `{"to":"ada@x","subject":"Hi","body":"c_99"}` {
		t.Errorf("mail args = %s, want the reference resolved", got)
	}
	if rr2.Usage.TotalTokens != 350 || rr2.Rounds != 3 || rr2.Reply != "done" {
		t.Errorf("read back: usage %+v rounds %d reply %q", rr2.Usage, rr2.Rounds, rr2.Reply)
	}
	if _, _, err := planRun(ctx, p, eng, l, runID, planner.Request{Goal: "something else"}, nil); !errors.Is(err, executor.ErrPlanMismatch) || len(b.model.requests()) != n {
		t.Errorf("another goal under the same run id: %v", err)
	}
	if rr2.Plan.Meta["prompt_hash"] != rr.Plan.Meta["prompt_hash"] {
		t.Errorf("prompt hash changed")
	}

	// The API key is nowhere in what the ledger holds.
	events, err := l.Events(ctx, runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := l.Doc(ctx, runID)
	for what, v := range map[string]any{"plan": recorded, "events": events, "run": doc} {
		if strings.Contains(mustJSON(t, v), testKey) {
			t.Errorf("the API key is in the ledger's %s", what)
		}
	}
	l.Close()
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, _ := os.ReadFile(path); bytes.Contains(data, []byte(testKey)) {
				t.Errorf("the API key is in ledger file %s", path)
			}
		}
		return nil
	})
}

// A crash (here: the context ending) while the model thinks leaves nothing
// recorded; the next attempt plans again.
func TestPlanRunCrashWhileThinking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, b := setup(t, planner.Config{},
		toolCalls("", call{"c1", "mail_send", `{"to":"a","subject":"s","body":"b"}`}),
		reply{hang: true},
		toolCalls("", call{"c1", "mail_send", `{"to":"a","subject":"s","body":"b"}`}),
		text("ok"),
	)
	l := openLedger(t, t.TempDir())
	defer l.Close()
	eng, err := executor.New(executor.Config{Ledger: l, Tools: b.reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		<-b.model.got
		<-b.model.got // the second request hangs: "crash" now
		cancel()
	}()
	_, _, err = planRun(cctx, p, eng, l, "run_crash", planner.Request{Goal: "mail"}, &executor.RunOptions{Policy: executor.PolicyNone})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if _, err := l.GetRun(ctx, "run_crash"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a run was recorded while thinking: %v", err)
	}
	if _, err := planner.Recorded(ctx, l, "run_crash"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Recorded = %v, want ErrNotFound", err)
	}
	rr, _, err := planRun(ctx, p, eng, l, "run_crash", planner.Request{Goal: "mail"}, &executor.RunOptions{Policy: executor.PolicyNone})
	if err != nil || rr.FromLedger || len(rr.Plan.Actions) != 1 {
		t.Fatalf("replan: %v", err)
	}
	if len(b.send.Calls()) != 0 {
		t.Errorf("nothing may run under policy none")
	}
}
