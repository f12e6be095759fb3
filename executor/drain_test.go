package executor

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// After Drain no attempt starts: a call in flight when it was called ends
// (here with an unknown outcome, as a call timing out does) and is recorded
// as unknown, without the retry its class would allow; an action ready but
// not started is not claimed; the drive ends with ErrDraining. The next
// start (a new process) calls the keyed action again with the same key and
// finishes the run.
func TestDrainStartsNoNewAttempt(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	pay := &tooltest.Tool{SpecValue: spec("pay", tools.Keyed)}
	pay.CallFunc = func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		if calls.Add(1) == 1 {
			close(arrived)
			<-release
			return nil, errors.New("read tcp: connection reset by peer") // sent, no answer: unknown
		}
		return json.RawMessage(`{"ok":true}`), nil
	}
	b := setup(t, []tools.Tool{pay}, func(c *Config) { c.Parallelism = 1 })
	p := mkPlan(t, pa("a1", "pay", `{"n":1}`), pa("a2", "pay", `{"n":2}`), pa("a3", "pay", `{"n":3}`, "a1"))

	done := make(chan error, 1)
	go func() {
		_, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll})
		done <- err
	}()
	<-arrived
	b.eng.Drain()
	b.eng.Drain() // twice is fine
	close(release)
	err := <-done
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls after Drain, want the one in flight only", n)
	}
	if !errors.Is(err, ErrDraining) {
		t.Fatalf("Run after Drain: %v, want ErrDraining", err)
	}
	doc := b.doc("r1")
	a1 := row(t, doc, "a1")
	rec, err := b.led.Key(context.Background(), a1.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != ledger.StatusPending || rec.Failure != ledger.FailureUnknown || !rec.MaybeTookEffect || rec.Attempt != 1 {
		t.Fatalf("a1's key after Drain: %+v, want attempt 1 pending with an unknown outcome", rec)
	}
	for _, id := range []string{"a2", "a3"} {
		if r := row(t, doc, id); r.Attempts != 0 || r.Key != "" {
			t.Fatalf("action %s was claimed after Drain: %+v", id, r)
		}
	}
	wantStatus(t, doc, ledger.RunRunning)

	b.restart() // the next process
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunCompleted)
	cs := pay.Calls()
	if len(cs) != 4 || cs[1].Key != a1.Key || cs[1].Attempt != 2 {
		t.Fatalf("calls after the restart: %+v, want a1 again with its key (attempt 2), then a2 and a3", cs)
	}
}

// A call cut off when the grace ends (its drive's context is cancelled after
// Drain) has an unknown outcome: an at-most-once action asks a person.
func TestDrainCutOffAtMostOnce(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	send := &tooltest.Tool{SpecValue: spec("send", tools.AtMostOnce)}
	send.CallFunc = func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		close(arrived)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	b := setup(t, []tools.Tool{send})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.eng.Run(ctx, "r1", mkPlan(t, pa("s", "send", `{}`)), &RunOptions{Policy: PolicyAll})
		done <- err
	}()
	<-arrived
	b.eng.Drain()
	cancel() // the end of the grace
	if err := <-done; err == nil {
		t.Fatal("Run cut off by its context returned no error")
	}
	s := row(t, b.doc("r1"), "s")
	if s.Status != ledger.StatusNeedsReview || len(send.Calls()) != 1 {
		t.Fatalf("the cut-off at-most-once action: %+v after %d calls, want needs_review after 1", s, len(send.Calls()))
	}
}
