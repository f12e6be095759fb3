package executor

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// recObserver writes down what the engine reports, one line per call.
type recObserver struct {
	mu    sync.Mutex
	lines []string
}

func (o *recObserver) add(format string, a ...any) {
	o.mu.Lock()
	o.lines = append(o.lines, fmt.Sprintf(format, a...))
	o.mu.Unlock()
}

func (o *recObserver) PlanRecorded(runID string, rev, n int) {
	o.add("plan %s rev=%d n=%d", runID, rev, n)
}
func (o *recObserver) AttemptStarted(a AttemptInfo) {
	o.add("start %s %s %s #%d", a.ActionID, a.Tool, a.Class, a.Attempt)
}
func (o *recObserver) AttemptEnded(a AttemptInfo, r AttemptResult) {
	if r.OK {
		o.add("end %s #%d ok", a.ActionID, a.Attempt)
		return
	}
	o.add("end %s #%d %s", a.ActionID, a.Attempt, r.Failure)
}
func (o *recObserver) LookupDone(a AttemptInfo, found bool) {
	o.add("lookup %s #%d found=%v", a.ActionID, a.Attempt, found)
}
func (o *recObserver) Adopted(a AttemptInfo) { o.add("adopted %s #%d", a.ActionID, a.Attempt) }
func (o *recObserver) NeedsReview(a AttemptInfo, _ string) {
	o.add("review %s #%d", a.ActionID, a.Attempt)
}
func (o *recObserver) RunStatus(runID string, st ledger.RunStatus) { o.add("status %s %s", runID, st) }

func (o *recObserver) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.lines
	o.lines = nil
	return l
}

// TestObserverSeesWhatTheLedgerRecords: every report comes after the fact is
// recorded and says what the events say: a retry after "not sent", a lookup
// that finds the effect of a lost reply, an at-most-once unknown outcome that
// needs a person, and the run's status changes.
func TestObserverSeesWhatTheLedgerRecords(t *testing.T) {
	obs := &recObserver{}
	w := tooltest.NewWorld()
	w.FaultFunc = func(tool string, c tools.Call, n int) tooltest.Fault {
		switch {
		case tool == "send" && n == 1:
			return tooltest.FailNotSent
		case tool == "crm" && n == 1, tool == "charge":
			return tooltest.LoseReply
		}
		return tooltest.NoFault
	}
	b := setup(t, []tools.Tool{
		w.Tool(spec("send", tools.Keyed)),
		w.Tool(spec("crm", tools.Lookup)),
		w.Tool(spec("charge", tools.AtMostOnce)),
	}, func(c *Config) { c.Observer = obs })

	doc := b.run("r1", mkPlan(t, pa("a1", "send", `{}`), pa("a2", "crm", `{}`, "a1")), PolicyAll)
	wantStatus(t, doc, ledger.RunCompleted)
	got := obs.take()
	want := []string{
		"plan r1 rev=1 n=2",
		"start a1 send keyed #1", "end a1 #1 not_sent",
		"start a1 send keyed #2", "end a1 #2 ok",
		"start a2 crm lookup #1", "end a2 #1 unknown",
		"lookup a2 #2 found=true",
		"status r1 completed",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("observer saw\n  %q\nwant\n  %q", got, want)
	}
	// 3 calls and the claim under which the lookup's find is recorded.
	if n := b.count("r1", "action.claimed"); n != 4 {
		t.Fatalf("%d claims recorded, want 4 (3 calls the observer saw, 1 to record the lookup's find)", n)
	}
	if n := b.count("r1", "action.attempt_failed"); n != 2 {
		t.Fatalf("%d failed attempts recorded, want 2 (the observer saw 2)", n)
	}

	doc = b.run("r2", mkPlan(t, pa("c1", "charge", `{"amount":5}`)), PolicyAll)
	wantStatus(t, doc, ledger.RunPaused)
	got = obs.take()
	want = []string{
		"plan r2 rev=1 n=1",
		"start c1 charge at_most_once #1", "end c1 #1 unknown",
		"review c1 #1",
		"status r2 paused",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("observer saw\n  %q\nwant\n  %q", got, want)
	}
	if n := b.count("r2", "action.needs_review"); n != 1 {
		t.Fatalf("%d needs_review events, want 1", n)
	}
}
