package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// peakServer is an API that counts the calls in flight and their peak, and
// how many calls it saw per key.
type peakServer struct {
	mu       sync.Mutex
	inFlight int
	peak     int
	calls    map[string]int
	hold     time.Duration // how long each call stays in flight
}

func newPeakServer(hold time.Duration) *peakServer {
	return &peakServer{calls: map[string]int{}, hold: hold}
}

func (s *peakServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
	s.calls[key]++
	s.mu.Unlock()
	time.Sleep(s.hold) // the call stays in flight: others may overlap it
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q}`, key)
}

func (s *peakServer) totals() (peak int, calls map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		c[k] = v
	}
	return s.peak, c
}

// limitedTools is one keyed HTTP tool "hit" with the limits given as the
// tools file writes them.
func limitedTools(t *testing.T, url, limits string) []tools.Tool {
	t.Helper()
	file := `{"version":1,"tools":[{"name":"hit","description":"hit","effect":"keyed","input_schema":{"type":"object"},
		"request":{"method":"POST","url":"` + url + `/hit"},"key_header":"Idempotency-Key","key_ttl":"24h","timeout":"10s",` + limits + `}]}`
	f, err := httptool.Parse([]byte(file), func(string) string { return "" })
	if err != nil {
		t.Fatalf("httptool.Parse: %v", err)
	}
	return f.Tools
}

func hitPlan(n int) *plan.Plan {
	p := &plan.Plan{Goal: "test"}
	for i := range n {
		p.Actions = append(p.Actions, pa(fmt.Sprintf("h%d", i), "hit", fmt.Sprintf(`{"i":%d}`, i)))
	}
	return p
}

// TestToolMaxInFlight: 20 independent actions of a tool with max_in_flight
// 2 run with at most 2 calls in flight at the API, every action once, with
// one attempt each (waiting is not an attempt), and the waits are shown as
// action.limit_wait events.
func TestToolMaxInFlight(t *testing.T) {
	t.Parallel()
	api := newPeakServer(5 * time.Millisecond)
	srv := httptest.NewServer(api)
	defer srv.Close()
	b := setup(t, limitedTools(t, srv.URL, `"max_in_flight": 2`))
	doc := b.run("r1", hitPlan(20), PolicySafe)
	wantStatus(t, doc, ledger.RunCompleted)
	peak, calls := api.totals()
	t.Logf("peak in flight %d", peak)
	if peak > 2 || peak < 1 {
		t.Fatalf("peak of calls in flight %d, want 1..2", peak)
	}
	if len(calls) != 20 {
		t.Fatalf("%d keys called, want 20", len(calls))
	}
	for k, n := range calls {
		if n != 1 {
			t.Fatalf("key %s called %d times", k, n)
		}
	}
	for _, a := range doc.Actions {
		if a.Status != ledger.StatusSucceeded || a.Attempts != 1 {
			t.Fatalf("action %s: %s after %d attempts, want succeeded after 1", a.ID, a.Status, a.Attempts)
		}
	}
	waits := map[string]bool{}
	for _, ev := range b.events("r1") {
		if ev.Type != ledger.EventLimitWait {
			continue
		}
		var d struct {
			Reason   string `json:"reason"`
			Tool     string `json:"tool"`
			InFlight int    `json:"in_flight"`
			Max      int    `json:"max_in_flight"`
			Attempt  int    `json:"attempt"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Reason != ledger.LimitInFlight || d.Tool != "hit" || d.InFlight != 2 || d.Max != 2 || d.Attempt != 1 {
			t.Fatalf("action.limit_wait %s", ev.Data)
		}
		if waits[ev.ActionID] {
			t.Fatalf("action %s noted its wait twice", ev.ActionID)
		}
		waits[ev.ActionID] = true
	}
	// All 20 are claimed in one commit: the ledger lets 2 through, and
	// the others try again from their workers, where most wait.
	if len(waits) == 0 {
		t.Fatal("no action noted a wait")
	}
}

// TestToolRate: a tool limited to 3 calls per second starts no more than 3
// in any second of the ledger's clock (the engine's sleeps advance it), and
// every action runs once.
func TestToolRate(t *testing.T) {
	t.Parallel()
	api := newPeakServer(0)
	srv := httptest.NewServer(api)
	defer srv.Close()
	b := setup(t, limitedTools(t, srv.URL, `"rate": {"per": "1s", "limit": 3}`))
	doc := b.run("r1", hitPlan(10), PolicySafe)
	wantStatus(t, doc, ledger.RunCompleted)
	if _, calls := api.totals(); len(calls) != 10 {
		t.Fatalf("%d keys called, want 10", len(calls))
	}
	// The starts the ledger counted are the claims' times (the engine's
	// sleeps move the clock while a commit runs, so the events' times may
	// differ from them).
	var starts []time.Time
	for _, a := range doc.Actions {
		rec, err := b.led.Key(t.Context(), a.Key)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, rec.ClaimedAt)
	}
	waited := b.count("r1", string(ledger.EventLimitWait))
	if waited == 0 {
		t.Fatal("no action waited")
	}
	for i := range starts {
		n := 0
		for _, s := range starts {
			if !s.Before(starts[i]) && s.Sub(starts[i]) < time.Second {
				n++
			}
		}
		if n > 3 {
			t.Fatalf("%d claims started within 1s from %v: %v", n, starts[i], starts)
		}
	}
}

// gateServer holds every call until release is closed.
type gateServer struct {
	release chan struct{}
	started chan struct{}
}

func (s *gateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.started <- struct{}{}:
	default: // nobody waits for it any more
	}
	<-s.release
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q}`, r.Header.Get("Idempotency-Key"))
}

// TestToolWaitShown: while an action waits for a slot of its tool, its row
// says so (tool_wait in the Run JSON); the claim that starts it clears it.
func TestToolWaitShown(t *testing.T) {
	t.Parallel()
	api := &gateServer{release: make(chan struct{}), started: make(chan struct{}, 2)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	b := setup(t, limitedTools(t, srv.URL, `"max_in_flight": 1`))
	done := make(chan ledger.RunDoc, 1)
	go func() {
		doc, err := b.eng.Run(context.Background(), "r1", hitPlan(2), &RunOptions{Policy: PolicySafe})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- doc
	}()
	<-api.started // one call holds the tool's only slot
	var waiting *ledger.Action
	guard := time.Now().Add(time.Minute) // a hang guard, not a speed limit
	for waiting == nil {
		if time.Now().After(guard) {
			close(api.release)
			t.Fatalf("no action of the run showed that it waits for its tool")
		}
		rows, err := b.led.Actions(context.Background(), "r1")
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rows {
			if r.ToolWait != nil {
				waiting = &rows[i]
			}
		}
		if waiting == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if w := waiting.ToolWait; w.Tool != "hit" || w.Reason != ledger.LimitInFlight || w.Since.IsZero() || waiting.Status != ledger.StatusPending && waiting.Status != ledger.StatusApproved {
		t.Fatalf("waiting action %s (%s): tool_wait %+v", waiting.ID, waiting.Status, w)
	}
	close(api.release)
	doc := <-done
	wantStatus(t, doc, ledger.RunCompleted)
	for _, a := range doc.Actions {
		if a.ToolWait != nil {
			t.Fatalf("action %s still shows a wait after the run: %+v", a.ID, a.ToolWait)
		}
	}
}
