package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
)

// limitAPI is an API that counts the calls in flight and their peak, and
// the calls per Idempotency-Key. A call whose key block names waits until
// the test releases it.
type limitAPI struct {
	mu       sync.Mutex
	inFlight int
	peak     int
	calls    map[string]int
	hold     time.Duration
	arrived  chan string   // the first call of each key, as it arrives
	release  chan struct{} // closed: blocked calls answer
	blockAll bool
	once     sync.Once
}

func newLimitAPI(t *testing.T, hold time.Duration) (*limitAPI, string) {
	a := &limitAPI{calls: map[string]int{}, hold: hold, arrived: make(chan string, 256), release: make(chan struct{})}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	t.Cleanup(a.unblock)
	return a, srv.URL
}

func (a *limitAPI) unblock() { a.once.Do(func() { close(a.release) }) }

func (a *limitAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.inFlight++
	a.peak = max(a.peak, a.inFlight)
	a.calls[key]++
	first, block := a.calls[key] == 1, a.blockAll
	a.mu.Unlock()
	if first {
		a.arrived <- key
	}
	if block {
		<-a.release
	}
	time.Sleep(a.hold) // in flight for a while: other calls may overlap it
	a.mu.Lock()
	a.inFlight--
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q}`, key)
}

func (a *limitAPI) totals() (peak int, calls map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peak, copyCounts(a.calls)
}

func copyCounts(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// limitFiles writes a tools file with one keyed tool "hit" with the given
// limits, and a plan of n independent calls of it.
func limitFiles(t *testing.T, dir, url, limits string, n int) (tools, plan string) {
	t.Helper()
	tools = filepath.Join(dir, "tools.json")
	body := `{"version": 1, "tools": [{"name": "hit", "description": "hit", "effect": "keyed",
		"input_schema": {"type": "object"}, "request": {"method": "POST", "url": "` + url + `/hit"},
		"key_header": "Idempotency-Key", "key_ttl": "24h", "timeout": "30s", ` + limits + `}]}`
	if err := os.WriteFile(tools, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var acts []string
	for i := range n {
		acts = append(acts, fmt.Sprintf(`{"id": "h%d", "tool": "hit", "args": {"i": %d}}`, i, i))
	}
	plan = filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(`{"goal": "hit", "actions": [`+strings.Join(acts, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return tools, plan
}

// inprocCtx is inproc under ctx.
func inprocCtx(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	err := runEnv(ctx, args, testEnv(&out, &errb))
	return result{args: args, code: report(err, &errb), stdout: out.String(), stderr: errb.String()}
}

// TestToolLimitsAcrossNodes: three `docket run` commands, each its own
// ledger handle (a node) on one PostgreSQL, run 8 calls each of a tool with
// max_in_flight 2 and a rate of 10 per second against one API: the API
// never sees more than 2 calls at once, no second of the database's clock
// holds more than 10 claims, and every call happens once.
func TestToolLimitsAcrossNodes(t *testing.T) {
	t.Parallel()
	url, _ := sharedLedger(t)
	api, apiURL := newLimitAPI(t, 20*time.Millisecond)
	tools, plan := limitFiles(t, t.TempDir(), apiURL, `"max_in_flight": 2, "rate": {"per": "1s", "limit": 10}`, 8)
	var wg sync.WaitGroup
	results := make([]result, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = inproc(t, "run", "--ledger", url, "--tools", tools, "--plan", plan, "--run-id", fmt.Sprintf("node-%d", i))
		}()
	}
	wg.Wait()
	for _, r := range results {
		wantCode(t, r, exitOK)
		if d := doc(t, r); d.Status != "completed" {
			t.Fatalf("run %s: %s", d.RunID, d.Status)
		}
	}
	peak, calls := api.totals()
	if len(calls) != 24 {
		t.Fatalf("%d keys called, want 24", len(calls))
	}
	for k, n := range calls {
		if n != 1 {
			t.Fatalf("key %s called %d times", k, n)
		}
	}
	pg, err := postgres.Open(context.Background(), postgres.Config{URL: url, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	var starts []time.Time
	waits := 0
	for i := range results {
		evs, err := pg.Events(context.Background(), fmt.Sprintf("node-%d", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			switch ev.Type {
			case ledger.EventActionClaimed:
				starts = append(starts, ev.At)
			case ledger.EventLimitWait:
				waits++
			}
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range starts {
		n := 0
		for _, s := range starts[i:] {
			if s.Sub(starts[i]) < time.Second {
				n++
			}
		}
		most = max(most, n)
	}
	t.Logf("3 nodes, 24 calls: peak in flight at the API %d (max_in_flight 2); most claims in any 1s window %d (rate 10); %d waits noted; %v from first to last claim",
		peak, most, waits, starts[len(starts)-1].Sub(starts[0]))
	if peak > 2 || most > 10 {
		t.Fatalf("limits passed: peak in flight %d (max 2), %d claims in 1s (rate 10)", peak, most)
	}
	if waits == 0 {
		t.Fatal("no action waited")
	}
}

// TestToolSlotOfKilledProcess: a `docket run` holding the only slot of a
// tool (max_in_flight 1) is killed with SIGKILL while its call is in
// flight. The next process on the data directory does not wait for that
// slot: a slot whose owner is gone does not count. Resuming the killed run
// takes its claim over (keyed: the same key again) and completes it.
func TestToolSlotOfKilledProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	api, apiURL := newLimitAPI(t, 0)
	api.blockAll = true
	tools, plan := limitFiles(t, dir, apiURL, `"max_in_flight": 1`, 1)
	p := start(t, "", "run", "--data", data, "--tools", tools, "--plan", plan, "--run-id", "killed")
	var killedKey string
	select {
	case killedKey = <-api.arrived: // the child holds the slot, its call in flight
	case <-time.After(60 * time.Second):
		t.Fatalf("the child never called:\n%s", p.finish(t, true))
	}
	p.finish(t, true)
	api.mu.Lock()
	api.blockAll = false
	api.mu.Unlock()
	api.unblock() // the killed call's connection is gone; let its handler end

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a guard against a hang, not a measure
	defer cancel()
	r := inprocCtx(ctx, "run", "--data", data, "--tools", tools, "--plan", plan, "--run-id", "next")
	wantCode(t, r, exitOK)
	r = inprocCtx(ctx, "run", "--data", data, "--tools", tools, "--plan", plan, "--run-id", "killed")
	wantCode(t, r, exitOK)
	d := doc(t, r)
	if a := d.action("h0"); a.Status != "succeeded" || a.Key != killedKey || a.Attempts != 2 {
		t.Fatalf("the killed run's action: %+v (key of the killed call %s)", a, killedKey)
	}
	if _, calls := api.totals(); len(calls) != 2 || calls[killedKey] != 2 {
		t.Fatalf("calls %v: want the killed key twice (the same key again) and the next run's once", calls)
	}
}
