package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/tooltest"
)

// fakeAPI is an HTTP provider that deduplicates by Idempotency-Key and counts
// effects per key. script decides what the n-th request to a path does.
type fakeAPI struct {
	mu       sync.Mutex
	seq      int
	requests map[string]int // path -> requests
	effects  map[string]int // key -> effects
	outputs  map[string][]byte
	order    []string // paths of performed effects, in order
	script   func(path string, n int) (status int, header http.Header, block bool)
}

func newFakeAPI(script func(path string, n int) (int, http.Header, bool)) *fakeAPI {
	return &fakeAPI{requests: map[string]int{}, effects: map[string]int{}, outputs: map[string][]byte{}, script: script}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) // so the server notices when the client hangs up
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	f.requests[r.URL.Path]++
	n := f.requests[r.URL.Path]
	f.mu.Unlock()
	status, hdr, block := http.StatusOK, http.Header(nil), false
	if f.script != nil {
		status, hdr, block = f.script(r.URL.Path, n)
	}
	if status == http.StatusTooManyRequests || (status >= 400 && status < 500) {
		for k, v := range hdr {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":"status %d"}`, status)
		return
	}
	if block {
		<-r.Context().Done() // the client gave up; the write still commits (late)
	}
	f.mu.Lock()
	out, ok := f.outputs[key]
	if !ok {
		f.seq++
		out = []byte(fmt.Sprintf(`{"id":"%s-%d"}`, strings.TrimPrefix(r.URL.Path, "/"), f.seq))
		f.outputs[key] = out
		f.effects[key]++
		f.order = append(f.order, r.URL.Path)
	}
	f.mu.Unlock()
	if block {
		return
	}
	w.WriteHeader(status) // a 500 after the effect: the answer is lost
	w.Write(out)
}

func (f *fakeAPI) totals() (effects int, dups []string, order []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, n := range f.effects {
		effects += n
		if n > 1 {
			dups = append(dups, k)
		}
	}
	return effects, dups, append([]string(nil), f.order...)
}

func httpTools(t *testing.T, url string) []tools.Tool {
	t.Helper()
	keyed := func(name, extra string) string {
		return `{"name":"` + name + `","description":"` + name + `","effect":"keyed","input_schema":{"type":"object"},
		"request":{"method":"POST","url":"{{env \"API\"}}/` + name + `"},"key_header":"Idempotency-Key","key_ttl":"24h","timeout":"300ms"` + extra + `}`
	}
	file := `{"version":1,"tools":[` +
		keyed("charge", `,"compensate":{"tool":"refund","args":{"charge":"${output.id}"}}`) + `,` +
		keyed("refund", "") + `,` + keyed("notify", "") + `,` + keyed("slow", "") + `,` + keyed("bad", "") + `]}`
	f, err := httptool.Parse([]byte(file), func(k string) string {
		if k == "API" {
			return url
		}
		return ""
	})
	if err != nil {
		t.Fatalf("httptool.Parse: %v", err)
	}
	return f.Tools
}

func TestHTTPTransientErrorsRetriedThenSucceed(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(func(path string, n int) (int, http.Header, bool) {
		switch {
		case path == "/charge" && n == 1:
			return http.StatusInternalServerError, nil, false // effect done, answer lost
		case path == "/notify" && n == 1:
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}}, false
		case path == "/slow" && n == 1:
			return http.StatusOK, nil, true // times out on the client, commits anyway
		}
		return http.StatusOK, nil, false
	})
	srv := httptest.NewServer(api)
	defer srv.Close()
	b := setup(t, httpTools(t, srv.URL))
	p := mkPlan(t, pa("c", "charge", `{"amount":5}`), pa("n", "notify", `{"to":"x"}`), pa("s", "slow", `{"v":1}`))
	doc := b.run("r1", p, PolicySafe)
	wantStatus(t, doc, ledger.RunCompleted)
	for _, id := range []string{"c", "n", "s"} {
		a := wantAction(t, doc, id, ledger.StatusSucceeded)
		if a.Attempts != 2 {
			t.Errorf("action %s: %d attempts, want 2", id, a.Attempts)
		}
	}
	effects, dups, _ := api.totals()
	if effects != 3 || len(dups) > 0 {
		t.Fatalf("effects %d, duplicates %v; want 3 and none", effects, dups)
	}
	sawRetryAfter := false
	for _, d := range b.sleepLog() {
		if d >= 7*time.Second {
			sawRetryAfter = true
		}
	}
	if !sawRetryAfter {
		t.Fatalf("no backoff honoured Retry-After 7s: %v", b.sleepLog())
	}
	// Every failed attempt is visible with its outcome and wait.
	var outcomes []string
	for _, ev := range b.events("r1") {
		if ev.Type == "action.attempt_failed" {
			var d struct {
				Outcome string `json:"outcome"`
				RetryIn string `json:"retry_in"`
			}
			json.Unmarshal(ev.Data, &d)
			if d.RetryIn == "" {
				t.Errorf("attempt_failed without retry_in: %s", ev.Data)
			}
			outcomes = append(outcomes, ev.ActionID+":"+d.Outcome)
		}
	}
	if len(outcomes) != 3 {
		t.Fatalf("attempt_failed events %v, want 3", outcomes)
	}
}

func TestHTTPPermanentFailureCompensatesInReverseOrder(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(func(path string, n int) (int, http.Header, bool) {
		if path == "/bad" {
			return http.StatusUnprocessableEntity, nil, false
		}
		return http.StatusOK, nil, false
	})
	srv := httptest.NewServer(api)
	defer srv.Close()
	b := setup(t, httpTools(t, srv.URL))
	p := mkPlan(t,
		pa("c1", "charge", `{"amount":1}`),
		pa("c2", "charge", `{"amount":2}`, "c1"),
		pa("x", "bad", `{"charge":"${c2.output.id}"}`, "c2"),
		pa("after", "notify", `{"to":"y"}`, "x"))
	doc := b.run("r1", p, PolicySafe)
	wantStatus(t, doc, ledger.RunFailed)
	if !strings.Contains(doc.Run.Error, "action x failed") {
		t.Fatalf("run error %q", doc.Run.Error)
	}
	wantAction(t, doc, "x", ledger.StatusFailed)
	wantAction(t, doc, "after", ledger.StatusSkipped)
	wantAction(t, doc, "c1", ledger.StatusCompensated)
	wantAction(t, doc, "c2", ledger.StatusCompensated)
	wantAction(t, doc, "c1.undo", ledger.StatusSucceeded)
	u2 := wantAction(t, doc, "c2.undo", ledger.StatusSucceeded)
	c2 := row(t, doc, "c2")
	var c2out struct{ ID string }
	json.Unmarshal(c2.Output, &c2out)
	if string(u2.Args) != `{"charge":"`+c2out.ID+`"}` {
		t.Fatalf("c2.undo args %s, want the charge id %s", u2.Args, c2out.ID)
	}
	_, dups, order := api.totals()
	if len(dups) > 0 {
		t.Fatalf("duplicates %v", dups)
	}
	want := []string{"/charge", "/charge", "/refund", "/refund"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("effects in order %v, want %v", order, want)
	}
	// Reverse completion order: c2's refund before c1's.
	var undone []string
	for _, ev := range b.events("r1") {
		if ev.Type == "action.compensated" {
			undone = append(undone, ev.ActionID)
		}
	}
	if fmt.Sprint(undone) != "[c2 c1]" {
		t.Fatalf("compensated in order %v, want [c2 c1]", undone)
	}
	// A rerun changes nothing.
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunFailed)
	if n := b.count("r1", "run.failed"); n != 1 {
		t.Fatalf("%d run.failed events", n)
	}
}

func TestCompensationCrashResumesWithoutUndoingTwice(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	w.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault {
		if tool == "bad" {
			return tooltest.Reject
		}
		return tooltest.NoFault
	}
	book := spec("book", tools.Keyed)
	book.Compensate = &tools.Compensation{Tool: "cancel", Args: json.RawMessage(`{"booking":"${output.id}"}`)}
	cancelSpec := spec("cancel", tools.Lookup) // every request is an effect: duplicates would show
	var b *bundle
	b = setup(t, []tools.Tool{w.Tool(book), w.Tool(cancelSpec), w.Tool(spec("bad", tools.Keyed))},
		crashAfterCall(&b, "b2.undo"))
	p := mkPlan(t, pa("b1", "book", `{"n":1}`), pa("b2", "book", `{"n":2}`, "b1"), pa("x", "bad", `{}`, "b2"))
	if _, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll}); err == nil {
		t.Fatal("Run: no error although the ledger closed during compensation")
	}
	b.restart()
	doc := b.resume("r1")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "b1", ledger.StatusCompensated)
	wantAction(t, doc, "b2", ledger.StatusCompensated)
	u1 := wantAction(t, doc, "b1.undo", ledger.StatusSucceeded)
	u2 := wantAction(t, doc, "b2.undo", ledger.StatusSucceeded)
	if dups := w.Duplicates(); len(dups) > 0 {
		t.Fatalf("undone twice: %v", dups)
	}
	if w.Effects(u1.Key) != 1 || w.Effects(u2.Key) != 1 {
		t.Fatalf("undo effects %d and %d, want 1 each", w.Effects(u1.Key), w.Effects(u2.Key))
	}
}

func TestRetriesOfUnknownOutcomeEndInNeedsReviewNeverFailed(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	w.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault { return tooltest.LoseReply }
	// Few attempts, so that they run out before the time budget.
	b := setup(t, []tools.Tool{w.Tool(spec("put", tools.Idempotent))}, func(c *Config) { c.Retry.MaxAttempts = 5 })
	doc := b.run("r1", mkPlan(t, pa("a", "put", `{"v":1}`)), PolicySafe)
	wantStatus(t, doc, ledger.RunPaused)
	a := wantAction(t, doc, "a", ledger.StatusNeedsReview)
	if a.Attempts != b.cfg.Retry.WithDefaults().MaxAttempts {
		t.Fatalf("attempts %d, want %d", a.Attempts, b.cfg.Retry.WithDefaults().MaxAttempts)
	}
	if n := b.count("r1", "action.attempt_failed"); n != a.Attempts-1 {
		t.Fatalf("%d attempt_failed events for %d attempts", n, a.Attempts)
	}
	// Backoff grows (jitter under a doubling cap).
	for i, d := range b.sleepLog() {
		if ceil := 200 * time.Millisecond << i; d > ceil {
			t.Fatalf("backoff %d is %v, above its cap %v", i+1, d, ceil)
		}
	}
}

func TestNotSentRetriedForEveryClassThenFailsWhenExhausted(t *testing.T) {
	t.Parallel()
	for _, class := range allClasses {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			var always atomic.Bool
			w.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault {
				if n <= 2 || always.Load() {
					return tooltest.FailNotSent
				}
				return tooltest.NoFault
			}
			b := setup(t, []tools.Tool{w.Tool(spec("t", class))})
			doc := b.run("r1", mkPlan(t, pa("a", "t", `{}`)), PolicyAll)
			wantStatus(t, doc, ledger.RunCompleted)
			a := wantAction(t, doc, "a", ledger.StatusSucceeded)
			if a.Attempts != 3 {
				t.Fatalf("attempts %d, want 3", a.Attempts)
			}
			if class != tools.ReadOnly && w.Effects(a.Key) != 1 {
				t.Fatalf("effects %d", w.Effects(a.Key))
			}
			always.Store(true)
			doc = b.run("r2", mkPlan(t, pa("a", "t", `{}`)), PolicyAll)
			wantStatus(t, doc, ledger.RunFailed)
			wantAction(t, doc, "a", ledger.StatusFailed)
		})
	}
}

func TestKeyInFlightRetriedThenNeedsReview(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	ft := &tooltest.Tool{SpecValue: spec("k", tools.Keyed), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		calls.Add(1)
		return nil, tools.InFlight(time.Second, fmt.Errorf("409 key in flight"))
	}}
	// Fewer attempts than "in flight" is asked about within the timeout.
	b := setup(t, []tools.Tool{noLook{ft}}, func(c *Config) { c.Retry.MaxAttempts = 5 })
	start := b.clock.Now()
	doc := b.run("r1", mkPlan(t, pa("a", "k", `{}`)), PolicySafe)
	wantStatus(t, doc, ledger.RunPaused)
	wantAction(t, doc, "a", ledger.StatusNeedsReview)
	// "In flight" is asked again until the earlier request must have ended
	// (its claim + the call timeout + the skew margin), not just for the
	// attempt budget: a provider may hold a key for the whole timeout.
	cfg := b.cfg.WithDefaults()
	if n := int(calls.Load()); n <= cfg.Retry.MaxAttempts {
		t.Fatalf("calls %d: gave up within the attempt budget (%d)", n, cfg.Retry.MaxAttempts)
	}
	if waited, bound := b.clock.Now().Sub(start), cfg.CallTimeout+cfg.SkewMargin; waited < bound {
		t.Fatalf("needs_review after %v, before the earlier request's timeout + margin (%v)", waited, bound)
	}
	for _, d := range b.sleepLog() {
		if d < time.Second {
			t.Fatalf("waited %v, less than the provider asked (1s)", d)
		}
	}
}

// TestKeyInFlightWaitsForTheEarlierRequest: the first request's connection
// breaks (outcome unknown) while the provider goes on processing it for 4s of
// a 20s timeout, answering 409 to the same key meanwhile. The executor keeps
// asking, with backoff, and records the one effect when the provider answers.
// Regression: four retries in about 2s, then needs_review.
func TestKeyInFlightWaitsForTheEarlierRequest(t *testing.T) {
	t.Parallel()
	var b *bundle
	var mu sync.Mutex
	var doneAt time.Time
	effects := 0
	ft := &tooltest.Tool{SpecValue: tools.Spec{Name: "k", Description: "k", Class: tools.Keyed, InputSchema: objSchema, Timeout: 20 * time.Second},
		CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
			mu.Lock()
			defer mu.Unlock()
			now := b.clock.Now()
			switch {
			case doneAt.IsZero():
				doneAt = now.Add(4 * time.Second) // the provider works on it for 4s
				effects++
				return nil, fmt.Errorf("connection reset by peer") // the client never hears back
			case now.Before(doneAt):
				return nil, tools.InFlight(0, fmt.Errorf("409: a request with this key is in progress"))
			}
			return json.RawMessage(`{"id":"ch_1"}`), nil // the stored answer for the key
		}}
	b = setup(t, []tools.Tool{noLook{ft}})
	doc := b.run("r1", mkPlan(t, pa("a", "k", `{}`)), PolicyAll)
	wantStatus(t, doc, ledger.RunCompleted)
	a := wantAction(t, doc, "a", ledger.StatusSucceeded)
	if string(a.Output) != `{"id":"ch_1"}` || effects != 1 {
		t.Fatalf("output %s, %d effects", a.Output, effects)
	}
	if n := len(ft.Calls()); n < 3 {
		t.Fatalf("%d calls: want the unknown one, at least one 409, then the answer", n)
	}
}

// TestDefiniteRefusalAfterUnknownOutcomeNeedsReview: attempt 1 commits but
// its answer is lost (500); attempt 2 is refused with a 4xx. The refusal says
// nothing about attempt 1, whose effect may exist: needs_review, not failed
// (failing would also compensate, or let a person retry into a duplicate).
func TestDefiniteRefusalAfterUnknownOutcomeNeedsReview(t *testing.T) {
	t.Parallel()
	for _, class := range []tools.Class{tools.Keyed, tools.Idempotent} {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			ft := &tooltest.Tool{SpecValue: spec("t", class), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
				if calls.Add(1) == 1 {
					return nil, fmt.Errorf("500 internal server error after the write")
				}
				return nil, tools.Permanent(fmt.Errorf("400 bad request"))
			}}
			b := setup(t, []tools.Tool{noLook{ft}})
			doc := b.run("r1", mkPlan(t, pa("a", "t", `{}`)), PolicyAll)
			wantStatus(t, doc, ledger.RunPaused)
			a := wantAction(t, doc, "a", ledger.StatusNeedsReview)
			if !strings.Contains(a.Error, "earlier attempt's outcome is unknown") {
				t.Fatalf("reason %q does not say why a person is asked", a.Error)
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("%d calls, want 2", n)
			}
		})
	}
}
