package ui_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// effectWorld is an HTTP world that counts effects per path and keeps the
// bodies it was sent. POST /slow blocks until release is closed.
type effectWorld struct {
	srv      *httptest.Server
	mu       sync.Mutex
	bodies   map[string][]string
	started  chan struct{}
	release  chan struct{}
	startOne sync.Once
}

func newEffectWorld(t *testing.T) *effectWorld {
	w := &effectWorld{bodies: map[string][]string{}, started: make(chan struct{}), release: make(chan struct{})}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/slow" {
			w.startOne.Do(func() { close(w.started) })
			select {
			case <-w.release:
			case <-r.Context().Done():
				return
			}
		}
		w.mu.Lock()
		w.bodies[r.URL.Path] = append(w.bodies[r.URL.Path], string(b))
		w.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprint(rw, `{"ok":true}`)
	}))
	t.Cleanup(func() {
		w.releaseAll()
		w.srv.Close()
	})
	return w
}

func (w *effectWorld) releaseAll() {
	select {
	case <-w.release:
	default:
		close(w.release)
	}
}

func (w *effectWorld) sent(path string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies[path]...)
}

func (w *effectWorld) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-w.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow call never started")
	}
}

func (w *effectWorld) toolsFile() []byte {
	tool := func(name, effect, path string) map[string]any {
		t := map[string]any{"name": name, "description": name, "effect": effect,
			"input_schema": map[string]any{"type": "object"},
			"request":      map[string]any{"method": "POST", "url": w.srv.URL + path}, "timeout": "30s"}
		if effect == "keyed" {
			t["key_header"] = "Idempotency-Key"
		}
		return t
	}
	b, _ := json.Marshal(map[string]any{"version": 1, "tools": []any{
		tool("slow", "keyed", "/slow"), tool("put", "keyed", "/put"), tool("email", "at_most_once", "/email"),
	}})
	return b
}

func semanticsSetup(t *testing.T) (*bundle, *effectWorld) {
	w := newEffectWorld(t)
	b := setup(t, options{
		toolsFile: func(*demoworld.World) []byte { return w.toolsFile() },
		tune:      func(c *ui.Config) { c.Executor.BusyWait = 20 * time.Millisecond },
	})
	return b, w
}

// slowThenPut: c waits for a, which stays in flight until the world lets it go.
const slowThenPut = `{"goal":"g","actions":[{"id":"a","tool":"slow","args":{}},{"id":"c","tool":"put","args":{"v":1},"depends_on":["a"]}]}`

// Review and replay changes that land while the run is being driven
// (issue 24.3, 24.4): refused with 409 conflict, never accepted and then lost.
func TestChangesWhileDrivenAreRefusedNotLost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		path string
		body string
	}{
		{"edit of an action whose dependency is in flight", "/actions/c/edit", `{"args":{"v":2}}`},
		{"replay while the run is running", "/replay", `{"plan":{"goal":"g","actions":[{"id":"a","tool":"slow","args":{}},{"id":"c","tool":"put","args":{"v":2},"depends_on":["a"]}]}}`},
		{"reject of an approved action while its dependency is in flight", "/actions/c/reject", `{"reason":"no"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, w := semanticsSetup(t)
			if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "r", "plan": json.RawMessage(slowThenPut), "approve": "all"}, nil); code != http.StatusCreated {
				t.Fatalf("create: %d", code)
			}
			w.waitStarted(t)
			var eb errorBody
			if code := b.call("POST", "/v1/runs/r"+tc.path, json.RawMessage(tc.body), &eb); code != http.StatusConflict || eb.Error.Code != "conflict" {
				t.Fatalf("%s while a is in flight: %d %+v, want 409 conflict", tc.path, code, eb)
			}
			w.releaseAll()
			doc := b.waitStatus("r", ledger.RunCompleted)
			if got := w.sent("/put"); len(got) != 1 || got[0] != `{"v":1}` {
				t.Fatalf("put sent %q, want exactly one {\"v\":1}", got)
			}
			if doc.Run.Revision != 1 || string(doc.Actions[1].Args) != `{"v":1}` {
				t.Fatalf("ledger: revision %d, c args %s; want what was sent", doc.Run.Revision, doc.Actions[1].Args)
			}
			// Once the drive stopped (the run's status is written before its
			// drive ends: wait for the end), the same edit is a review
			// again... of a finished action: refused as not reviewable, not
			// as busy.
			if code := b.call("GET", "/v1/runs/r?wait=60s", nil, nil); code != http.StatusOK {
				t.Fatalf("wait for the drive to stop: %d", code)
			}
			if code := b.call("POST", "/v1/runs/r/actions/c/edit", map[string]any{"args": map[string]any{"v": 3}}, &eb); code != http.StatusConflict || eb.Error.Code != "not_reviewable" {
				t.Fatalf("edit after the run: %d %+v, want 409 not_reviewable", code, eb)
			}
		})
	}
}

// A person's pause holds (issue 24.10): approving an action of a paused run
// records the approval and starts nothing; only POST /resume continues it.
// Resume of a cancelled run is refused, and cancel skips what never started.
func TestPauseHoldsUntilResumeAndCancelSkips(t *testing.T) {
	t.Parallel()
	b, w := semanticsSetup(t)
	plan := `{"goal":"g","actions":[{"id":"p","tool":"put","args":{"v":1}},{"id":"q","tool":"put","args":{"v":2}}]}`
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "r", "plan": json.RawMessage(plan), "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	b.waitStatus("r", ledger.RunAwaitingApproval)
	if code := b.call("POST", "/v1/runs/r/pause", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("pause: %d", code)
	}
	if code := b.call("POST", "/v1/runs/r/actions/p/approve", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	var d runDoc
	b.call("GET", "/v1/runs/r?wait=1m", nil, &d)
	if d.Status != "paused" || len(w.sent("/put")) != 0 {
		t.Fatalf("after pause + approve: run %s, %d puts; want paused, none", d.Status, len(w.sent("/put")))
	}
	if code := b.call("POST", "/v1/runs/r/resume", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("resume: %d", code)
	}
	b.call("GET", "/v1/runs/r?wait=1m", nil, &d)
	if st, _ := d.action("p"); st != "succeeded" || len(w.sent("/put")) != 1 {
		t.Fatalf("after resume: p %s, %d puts; want succeeded, 1", st, len(w.sent("/put")))
	}
	if code := b.call("POST", "/v1/runs/r/cancel", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
	var eb errorBody
	if code := b.call("POST", "/v1/runs/r/resume", map[string]any{}, &eb); code != http.StatusConflict {
		t.Fatalf("resume of a cancelled run: %d %+v, want 409", code, eb)
	}
	b.call("GET", "/v1/runs/r?wait=1m", nil, &d)
	if st, _ := d.action("q"); d.Status != "cancelled" || st != "skipped" {
		t.Fatalf("cancelled run: %s, q %s; want cancelled, q skipped", d.Status, st)
	}
	if n := len(w.sent("/put")); n != 1 {
		t.Fatalf("%d puts, want 1", n)
	}
}

// A replay is acknowledged only once its revision is recorded. Regression
// (chaos seed 898077140037105890, p16): the answer waited for "the drive has
// begun", which an attempt of the drive already going on satisfied, so the
// service answered 200 and the replay was then refused as busy: acknowledged
// and lost. Here an action is retried every few milliseconds (its server
// answers 503) while the replay waits for the drive to stop.
func TestReplayIsAcknowledgedOnlyOnceRecorded(t *testing.T) {
	t.Parallel()
	var busy atomic.Bool
	busy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if busy.Load() {
			http.Error(rw, `{"error":"try again"}`, http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprint(rw, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	tf, _ := json.Marshal(map[string]any{"version": 1, "tools": []any{map[string]any{
		"name": "put", "description": "put", "effect": "keyed", "key_header": "Idempotency-Key",
		"input_schema": map[string]any{"type": "object"}, "timeout": "5s",
		"request": map[string]any{"method": "POST", "url": srv.URL + "/put"}}}})
	b := setup(t, options{
		toolsFile: func(*demoworld.World) []byte { return tf },
		tune: func(c *ui.Config) {
			c.Executor.BusyWait = time.Second
			c.Executor.Retry = executor.RetryPolicy{MaxAttempts: 1 << 20, Base: 5 * time.Millisecond, Max: 5 * time.Millisecond, MaxElapsed: time.Hour}
		},
	})
	plan := `{"goal":"g","actions":[{"id":"p","tool":"put","args":{"v":1}}]}`
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "r", "plan": json.RawMessage(plan), "approve": "all"}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	var eb errorBody
	edited := `{"plan":{"goal":"g","actions":[{"id":"p","tool":"put","args":{"v":2}}]}}`
	code := b.call("POST", "/v1/runs/r/replay", json.RawMessage(edited), &eb)
	busy.Store(false)
	doc := b.waitStatus("r", ledger.RunCompleted)
	switch {
	case code == http.StatusOK && doc.Run.Revision != 2:
		t.Fatalf("replay answered 200, yet the run ended at revision %d: acknowledged and lost", doc.Run.Revision)
	case code != http.StatusOK && code != http.StatusConflict:
		t.Fatalf("replay while the run retries: %d %+v, want 409 conflict (or 200 with the revision recorded)", code, eb)
	case code == http.StatusConflict && doc.Run.Revision != 1:
		t.Fatalf("replay refused with 409, yet revision %d was recorded", doc.Run.Revision)
	}
}
