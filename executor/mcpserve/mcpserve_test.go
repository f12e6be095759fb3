package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/mcpserve"
	"github.com/docketrun/docket/executor/mcpserve/mcpservetest"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// bundle is what a test needs: the world, a Badger ledger in a temporary
// directory, the engine, docket as an MCP server over streamable HTTP.
type bundle struct {
	world *mcpservetest.World
	led   ledger.Store
	eng   *executor.Engine
	srv   *mcpserve.Server
	url   string
}

type opts struct {
	policy executor.Policy
	wait   time.Duration
}

func setup(t testing.TB, o opts) *bundle {
	t.Helper()
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	f, err := httptool.Parse(mcpservetest.ToolsFile(w.URL), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	led, err := badgerdb.Open(ctx, badgerdb.Config{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	quiet := slog.New(slog.DiscardHandler)
	eng, err := executor.New(executor.Config{Ledger: led, Tools: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcpserve.New(mcpserve.Config{Engine: eng, Ledger: led, Tools: reg, Policy: o.policy, Wait: o.wait, Progress: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &bundle{world: w, led: led, eng: eng, srv: srv, url: hs.URL}
}

// client connects a new MCP session (a new client, as after a reconnect).
// progress, when set, is told every progress message.
func (b *bundle) client(t testing.TB, progress chan<- string) *mcp.ClientSession {
	t.Helper()
	copts := &mcp.ClientOptions{}
	if progress != nil {
		copts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params.Message:
			default:
			}
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, copts)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: b.url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(ctx context.Context, cs *mcp.ClientSession, tool string, args any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta}
	return cs.CallTool(ctx, p)
}

func mustCall(t *testing.T, cs *mcp.ClientSession, tool string, args any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := call(ctx, cs, tool, args, meta)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return r
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func runOf(r *mcp.CallToolResult) string {
	s, _ := r.Meta["io.docket/run_id"].(string)
	return s
}

// waitFor waits until cond holds on the run's document, woken by its events.
func (b *bundle) waitFor(t *testing.T, runID string, cond func(ledger.RunDoc) bool) ledger.RunDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, err := b.led.GetRun(ctx, runID); err == nil {
			break
		} else if !errors.Is(err, ledger.ErrNotFound) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s never recorded", runID)
		case <-time.After(10 * time.Millisecond): // the run does not exist yet: nothing to subscribe to
		}
	}
	sub, err := b.led.Subscribe(ctx, runID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for {
		doc, err := b.led.Doc(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if cond(doc) {
			return doc
		}
		select {
		case <-sub.C:
		case <-ctx.Done():
			t.Fatalf("run %s: condition never held; last: %+v", runID, doc.Run)
		}
	}
}

func TestToolsListShowsClassesAsAnnotations(t *testing.T) {
	b := setup(t, opts{})
	cs := b.client(t, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		got[tl.Name] = tl
	}
	type hints struct{ ro, idem, destr bool }
	want := map[string]hints{
		"catalog":     {ro: true, idem: true, destr: false},
		"set_setting": {idem: true, destr: true},
		"charge":      {idem: true, destr: true},
		"send_email":  {destr: true},
	}
	for name, h := range want {
		tl, ok := got[name]
		if !ok {
			t.Fatalf("tool %s not listed (got %v)", name, res.Tools)
		}
		a := tl.Annotations
		if a == nil || a.ReadOnlyHint != h.ro || a.IdempotentHint != h.idem || a.DestructiveHint == nil || *a.DestructiveHint != h.destr || a.OpenWorldHint == nil || !*a.OpenWorldHint {
			t.Errorf("%s: annotations %+v, want %+v (open world)", name, a, h)
		}
		if tl.InputSchema == nil {
			t.Errorf("%s: no input schema", name)
		}
	}
	if tl := got["send_email"]; tl.Meta["io.docket/effect"] != "at_most_once" {
		t.Errorf("send_email _meta: %v", tl.Meta)
	}
	for _, own := range []string{mcpserve.ToolProposePlan, mcpserve.ToolRunStatus, mcpserve.ToolWaiting} {
		if _, ok := got[own]; !ok {
			t.Errorf("docket's own tool %s not listed", own)
		}
	}
}

// A keyed call whose connection is cut while the provider is answering:
// the client retries the identical call, in the same session, in a new
// session naming the same session run, and with its own key in yet another
// session; the provider charged once per intended call.
func TestRetryAfterCutConnectionChargesOnce(t *testing.T) {
	b := setup(t, opts{})
	args := map[string]any{"customer": "acme", "amount": 50}

	for _, tc := range []struct {
		name  string
		meta  mcp.Meta
		retry func(t *testing.T) *mcp.ClientSession // the session the retry uses
	}{
		{name: "same session", meta: nil},
		{name: "new session, named run", meta: mcp.Meta{mcpserve.MetaRunID: "agent-7"}},
		{name: "new session, client key", meta: mcp.Meta{mcpserve.MetaIdempotencyKey: "charge-acme-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.world.Effects().Charges
			b.world.Hold()
			first := b.client(t, nil)
			ctx, cut := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := call(ctx, first, "charge", args, tc.meta)
				done <- err
			}()
			if got := <-b.world.Arrived(); got != "charge" {
				t.Fatalf("arrived %q", got)
			}
			// The provider made the charge and has not answered: cut the call.
			cut()
			if err := <-done; err == nil {
				t.Fatal("the cut call returned no error")
			}
			retryIn := first
			if tc.meta != nil {
				// A new connection (the old one is left as a vanished
				// client leaves it).
				retryIn = b.client(t, nil)
			}
			res := make(chan *mcp.CallToolResult, 1)
			go func() { res <- mustCall(t, retryIn, "charge", args, tc.meta) }()
			b.world.Release()
			r := <-res
			if r.IsError {
				t.Fatalf("retry: error result: %s", text(r))
			}
			if !strings.Contains(text(r), `"ch_`) {
				t.Errorf("retry result %q: want the charge", text(r))
			}
			// Once more, after it settled: the recorded outcome, no request.
			reqs := b.world.Effects().ChargeRequests
			again := mustCall(t, retryIn, "charge", args, tc.meta)
			if text(again) != text(r) {
				t.Errorf("third call %q, want the first outcome %q", text(again), text(r))
			}
			e := b.world.Effects()
			if e.Charges != before+1 {
				t.Errorf("charges %d, want %d (one per intended call)", e.Charges, before+1)
			}
			if e.ChargeRequests != reqs {
				t.Errorf("a settled identical call sent %d more requests", e.ChargeRequests-reqs)
			}
		})
	}
}

// Policy all: the first email is sent at once; the identical repeat waits
// for a person (a waiting result past the bound, then picked up by the
// next identical call once approved); a rejected repeat is an error result
// and sends nothing.
func TestAtMostOnceRepeatNeedsPerson(t *testing.T) {
	b := setup(t, opts{policy: executor.PolicyAll, wait: 200 * time.Millisecond})
	cs := b.client(t, nil)
	args := map[string]any{"to": "ada@example.com", "subject": "welcome"}
	r := mustCall(t, cs, "send_email", args, nil)
	if r.IsError || !strings.Contains(text(r), `"n":1`) {
		t.Fatalf("first email: %v %s", r.IsError, text(r))
	}
	// The repeat: waits for a person, past the bound says so.
	r2 := mustCall(t, cs, "send_email", args, nil)
	if r2.IsError || !strings.HasPrefix(text(r2), "WAITING FOR A PERSON") || !strings.Contains(text(r2), "approval") {
		t.Fatalf("repeat: %v %s", r2.IsError, text(r2))
	}
	repeat := runOf(r2)
	if repeat == runOf(r) || repeat == "" {
		t.Fatalf("repeat run %q (first %q)", repeat, runOf(r))
	}
	doc, err := b.led.Doc(context.Background(), repeat)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc.Run.Goal, "REPEAT #2") {
		t.Errorf("the reviewer is not told it is a repeat: goal %q", doc.Run.Goal)
	}
	// Retrying while it waits: still the same waiting run, nothing sent.
	if r3 := mustCall(t, cs, "send_email", args, nil); runOf(r3) != repeat {
		t.Errorf("a retry while waiting made run %s, want %s", runOf(r3), repeat)
	}
	if n := b.world.Effects().Emails["ada@example.com"]; n != 1 {
		t.Fatalf("emails %d before any approval, want 1", n)
	}
	// A person approves: the next identical call picks the decision up.
	if err := b.eng.ApproveAll(context.Background(), repeat, "test"); err != nil {
		t.Fatal(err)
	}
	r4 := mustCall(t, cs, "send_email", args, nil)
	if r4.IsError || runOf(r4) != repeat || !strings.Contains(text(r4), `"n":2`) {
		t.Fatalf("after approval: %v %s (run %s)", r4.IsError, text(r4), runOf(r4))
	}
}

// Policy safe: an email waits for approval with the call open, telling the
// client its progress; a person approves and the open call returns the
// output. Its identical repeat waits too, and a person's rejection ends the
// open call with an error result; one email in all.
func TestWaitingCallStaysOpenWithProgress(t *testing.T) {
	b := setup(t, opts{wait: time.Minute})
	progress := make(chan string, 64)
	cs := b.client(t, progress)
	args := map[string]any{"to": "grace@example.com", "subject": "welcome"}
	open := func() <-chan *mcp.CallToolResult {
		p := &mcp.CallToolParams{Name: "send_email", Arguments: args, Meta: mcp.Meta{mcpserve.MetaRunID: "s2"}}
		p.SetProgressToken("t1")
		res := make(chan *mcp.CallToolResult, 1)
		go func() {
			r, err := cs.CallTool(context.Background(), p)
			if err != nil {
				t.Error(err)
			}
			res <- r
		}()
		return res
	}
	first := "s2.c_" + hashOf(t, "send_email", args)[:16]
	res := open()
	if msg := <-progress; !strings.Contains(msg, "approval") || !strings.Contains(msg, first) {
		t.Errorf("progress message %q: want approval and run %s", msg, first)
	}
	if n := b.world.Effects().EmailRequests; n != 0 {
		t.Fatalf("%d email requests before the approval", n)
	}
	if err := b.eng.ApproveAll(context.Background(), first, "test"); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r == nil || r.IsError || !strings.Contains(text(r), `"n":1`) {
		t.Fatalf("approved call: %+v", r)
	}
	res = open()
	rep := b.waitFor(t, first+".2", func(d ledger.RunDoc) bool { return d.Run.Status == ledger.RunAwaitingApproval })
	if err := b.eng.Reject(context.Background(), rep.Run.ID, rep.Actions[0].ID, "already sent", "test"); err != nil {
		t.Fatal(err)
	}
	r = <-res
	if r == nil || !r.IsError || !strings.Contains(text(r), "rejected") {
		t.Fatalf("rejected repeat: %+v", r)
	}
	if e := b.world.Effects(); e.Emails["grace@example.com"] != 1 || e.EmailRequests != 1 {
		t.Errorf("effects %+v, want one email", e)
	}
}

func hashOf(t *testing.T, tool string, args any) string {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	h, err := mcpserve.CallHash(tool, raw)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// An email whose connection is cut after it was sent: its outcome is
// unknown, the call says so, a retry never sends again, and once a person
// says what happened the identical call returns that.
func TestUnknownOutcomeWaitsForPersonNeverResends(t *testing.T) {
	b := setup(t, opts{policy: executor.PolicyAll, wait: 100 * time.Millisecond})
	cs := b.client(t, nil)
	b.world.EmailFault("drop")
	args := map[string]any{"to": "barbara@example.com", "subject": "hi"}
	r := mustCall(t, cs, "send_email", args, nil)
	if r.IsError || !strings.Contains(text(r), "may or may not have happened: a person is checking") {
		t.Fatalf("unknown outcome: %v %s", r.IsError, text(r))
	}
	b.world.EmailFault("")
	r2 := mustCall(t, cs, "send_email", args, nil)
	if runOf(r2) != runOf(r) || !strings.Contains(text(r2), "may or may not have happened") {
		t.Fatalf("retry of an unknown outcome: run %s (want %s): %s", runOf(r2), runOf(r), text(r2))
	}
	if e := b.world.Effects(); e.EmailRequests != 1 {
		t.Fatalf("email requests %d, want 1", e.EmailRequests)
	}
	doc, err := b.led.Doc(context.Background(), runOf(r))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Resolve(context.Background(), doc.Run.ID, doc.Actions[0].ID, ledger.Resolution{Done: json.RawMessage(`{"sent_to":"barbara@example.com","checked":true}`), By: "test"}); err != nil {
		t.Fatal(err)
	}
	r3 := mustCall(t, cs, "send_email", args, nil)
	if r3.IsError || !strings.Contains(text(r3), `"checked":true`) {
		t.Fatalf("after the person's resolution: %v %s", r3.IsError, text(r3))
	}
	if e := b.world.Effects(); e.EmailRequests != 1 {
		t.Errorf("email requests %d, want 1", e.EmailRequests)
	}
}

func TestDefiniteFailuresAndRefusalsAreErrors(t *testing.T) {
	b := setup(t, opts{policy: executor.PolicyAll})
	cs := b.client(t, nil)
	b.world.EmailFault("reject")
	r := mustCall(t, cs, "send_email", map[string]any{"to": "x@example.com", "subject": "s"}, nil)
	if !r.IsError || !strings.Contains(text(r), "failed and did not happen") {
		t.Errorf("a 400: %v %s", r.IsError, text(r))
	}
	// It did not happen: the identical call is a new attempt.
	b.world.EmailFault("")
	if r := mustCall(t, cs, "send_email", map[string]any{"to": "x@example.com", "subject": "s"}, nil); r.IsError || !strings.Contains(text(r), `"n":1`) {
		t.Errorf("the identical call after a definite failure: %v %s", r.IsError, text(r))
	}
	key := mcp.Meta{mcpserve.MetaIdempotencyKey: "k-1"}
	if r := mustCall(t, cs, "charge", map[string]any{"customer": "a", "amount": 1}, key); r.IsError {
		t.Fatalf("keyed charge: %s", text(r))
	}
	r = mustCall(t, cs, "charge", map[string]any{"customer": "a", "amount": 2}, key)
	if !r.IsError || !strings.Contains(text(r), "already used for a different call") {
		t.Errorf("a key reused for other arguments: %v %s", r.IsError, text(r))
	}
	r = mustCall(t, cs, "charge", map[string]any{"customer": "${a1.output.id}", "amount": 2}, nil)
	if !r.IsError || !strings.Contains(text(r), "refused") {
		t.Errorf("a reference in MCP arguments: %v %s", r.IsError, text(r))
	}
	r = mustCall(t, cs, "charge", map[string]any{"customer": "a", "amount": 2}, mcp.Meta{mcpserve.MetaRunID: "bad/run"})
	if !r.IsError || !strings.Contains(text(r), "refused") {
		t.Errorf("a bad run id: %v %s", r.IsError, text(r))
	}
	if e := b.world.Effects(); e.Charges != 1 {
		t.Errorf("charges %d, want 1", e.Charges)
	}
	// Read-only calls run every time, each recorded as its own run.
	r1 := mustCall(t, cs, "catalog", map[string]any{}, nil)
	r2 := mustCall(t, cs, "catalog", map[string]any{}, nil)
	if r1.IsError || r2.IsError || runOf(r1) == runOf(r2) || !strings.Contains(text(r1), "welcome-pack") {
		t.Errorf("read-only calls: %s (%s), %s (%s)", text(r1), runOf(r1), text(r2), runOf(r2))
	}
	// Identical idempotent calls: the first outcome, one write.
	for range 2 {
		if r := mustCall(t, cs, "set_setting", map[string]any{"name": "tz", "value": "UTC"}, nil); r.IsError {
			t.Fatal(text(r))
		}
	}
	if e := b.world.Effects(); e.SettingPuts != 1 || e.SettingReqs != 1 {
		t.Errorf("setting writes %d from %d requests, want 1 from 1 (the repeat returns the first outcome)", e.SettingPuts, e.SettingReqs)
	}
}

func TestOwnToolsProposeStatusWaiting(t *testing.T) {
	b := setup(t, opts{policy: executor.PolicyAll})
	cs := b.client(t, nil)
	planArgs := map[string]any{
		"goal": "onboard acme",
		"actions": []any{
			map[string]any{"id": "c1", "tool": "charge", "args": map[string]any{"customer": "acme", "amount": 10}},
			map[string]any{"id": "e1", "tool": "send_email", "args": map[string]any{"to": "acme@example.com", "subject": "${c1.output.id}"}, "depends_on": []string{"c1"}},
		},
	}
	r := mustCall(t, cs, mcpserve.ToolProposePlan, planArgs, nil)
	if r.IsError {
		t.Fatal(text(r))
	}
	runID := runOf(r)
	if again := mustCall(t, cs, mcpserve.ToolProposePlan, planArgs, nil); runOf(again) != runID {
		t.Errorf("the same proposal made run %s, want %s", runOf(again), runID)
	}
	doc := b.waitFor(t, runID, func(d ledger.RunDoc) bool { return d.Run.Status == ledger.RunAwaitingApproval })
	for _, a := range doc.Actions {
		if a.Status != ledger.StatusPending {
			t.Errorf("proposed action %s is %s, want pending (a person reviews every action)", a.ID, a.Status)
		}
	}
	w := mustCall(t, cs, mcpserve.ToolWaiting, map[string]any{}, nil)
	if !strings.Contains(text(w), runID) || !strings.Contains(text(w), `"for":"approval"`) {
		t.Errorf("waiting: %s", text(w))
	}
	if b.world.Effects().ChargeRequests != 0 {
		t.Fatal("a proposed plan ran before review")
	}
	if err := b.eng.ApproveAll(context.Background(), runID, "test"); err != nil {
		t.Fatal(err)
	}
	doc, err := b.eng.Resume(context.Background(), runID, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The email's subject came from the charge: it is shown again, resolved,
	// and approved as sent (executor/README.md, Approvals: an approval binds what the reviewer saw).
	if doc.Run.Status == ledger.RunAwaitingApproval {
		if err := b.eng.ApproveAll(context.Background(), runID, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.eng.Resume(context.Background(), runID, nil); err != nil {
			t.Fatal(err)
		}
	}
	st := mustCall(t, cs, mcpserve.ToolRunStatus, map[string]any{"run_id": runID}, nil)
	if st.IsError || !strings.Contains(text(st), "is completed") {
		t.Errorf("status: %s", text(st))
	}
	if r := mustCall(t, cs, mcpserve.ToolRunStatus, map[string]any{"run_id": "nope"}, nil); !r.IsError {
		t.Errorf("status of an unknown run: %s", text(r))
	}
	bad := mustCall(t, cs, mcpserve.ToolProposePlan, map[string]any{"actions": []any{map[string]any{"id": "x", "tool": "nope", "args": map[string]any{}}}}, nil)
	if !bad.IsError {
		t.Errorf("a plan with an unknown tool: %s", text(bad))
	}
}

// Shutdown lets a call in flight finish and be recorded before it returns.
func TestShutdownLetsCallsInFlightFinish(t *testing.T) {
	b := setup(t, opts{})
	cs := b.client(t, nil)
	b.world.Hold()
	args := map[string]any{"customer": "zed", "amount": 3}
	go call(context.Background(), cs, "charge", args, mcp.Meta{mcpserve.MetaIdempotencyKey: "shutdown-1"})
	<-b.world.Arrived()
	stopped := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b.srv.Shutdown(ctx)
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Shutdown returned while a call was in flight")
	case <-time.After(50 * time.Millisecond): // it must still be waiting for the held call
	}
	b.world.Release()
	<-stopped
	doc, err := b.led.Doc(context.Background(), mcpserve.KeyedRunID("shutdown-1"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Run.Status != ledger.RunCompleted {
		t.Errorf("after Shutdown the call's run is %s, want completed (its outcome recorded)", doc.Run.Status)
	}
}
