package main

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Graph shapes people plan, as "id:dep,dep" lists: joins (fan-in of 2 and
// 3), a diamond, a join of joins, a fan-out and a wide plan.
var cmdShapes = map[string]string{
	"fan-in-2":      "a b c:a,b",
	"fan-in-3":      "a b x c:a,b,x",
	"diamond":       "a b:a c:a d:b,c",
	"join-of-joins": "a b c d ab:a,b cd:c,d all:ab,cd",
	"fan-out":       "r l1:r l2:r l3:r l4:r",
	"wide":          "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10",
}

// shapePlan turns a shape into plan JSON for the keyed tool "op"; every
// action references its dependencies' outputs.
func shapePlan(t *testing.T, name, shape string) []byte {
	t.Helper()
	type action struct {
		ID        string         `json:"id"`
		Tool      string         `json:"tool"`
		Args      map[string]any `json:"args"`
		DependsOn []string       `json:"depends_on,omitempty"`
	}
	var acts []action
	for _, f := range strings.Fields(shape) {
		id, deps, _ := strings.Cut(f, ":")
		a := action{ID: id, Tool: "op", Args: map[string]any{"id": id}}
		if deps != "" {
			a.DependsOn = strings.Split(deps, ",")
			for i, d := range a.DependsOn {
				a.Args[fmt.Sprintf("in%d", i)] = "${" + d + ".output.id}"
			}
		}
		acts = append(acts, a)
	}
	b, err := json.Marshal(map[string]any{"goal": "shape " + name, "actions": acts})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keyedAPI is a provider that honours Idempotency-Key and counts effects per
// key; with jitter it answers after a random delay of up to 2ms.
type keyedAPI struct {
	srv     *httptest.Server
	mu      sync.Mutex
	effects map[string]int
	outputs map[string]string
}

func startKeyedAPI(t *testing.T, jitter bool, seed uint64) *keyedAPI {
	t.Helper()
	k := &keyedAPI{effects: map[string]int{}, outputs: map[string]string{}}
	rnd := mrand.New(mrand.NewPCG(seed, 7))
	var rmu sync.Mutex
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "no key", http.StatusBadRequest)
			return
		}
		if jitter {
			rmu.Lock()
			d := time.Duration(rnd.IntN(2000)) * time.Microsecond
			rmu.Unlock()
			time.Sleep(d) // the provider's own latency
		}
		k.mu.Lock()
		out, ok := k.outputs[key]
		if !ok {
			k.effects[key]++
			out = fmt.Sprintf(`{"id":"op-%d"}`, len(k.outputs)+1)
			k.outputs[key] = out
		}
		k.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, out)
	}))
	t.Cleanup(k.srv.Close)
	return k
}

// toolsFile writes the tools file of one keyed tool "op"; extra adds fields
// to its definition.
func (k *keyedAPI) toolsFile(t *testing.T, dir string, extra ...map[string]any) string {
	t.Helper()
	op := map[string]any{
		"name": "op", "description": "A keyed write.", "effect": "keyed",
		"input_schema": map[string]any{"type": "object"},
		"request":      map[string]any{"method": "POST", "url": k.srv.URL + "/op"},
		"key_header":   "Idempotency-Key",
		"timeout":      "5s",
	}
	for _, e := range extra {
		for k, v := range e {
			op[k] = v
		}
	}
	tf := map[string]any{"version": 1, "tools": []any{op}}
	b, _ := json.Marshal(tf)
	p := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// check asserts that every key took effect exactly once and that there are n keys.
func (k *keyedAPI) check(t *testing.T, n int) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, c := range k.effects {
		if c != 1 {
			t.Fatalf("key %s took effect %d times", key, c)
		}
	}
	if len(k.effects) != n {
		t.Fatalf("%d keys took effect, want %d", len(k.effects), n)
	}
}

func wantCompleted(t *testing.T, what string, r result) {
	t.Helper()
	if r.code != exitOK {
		t.Fatalf("%s: exit %d, want 0\n%s", what, r.code, r)
	}
	d := doc(t, r)
	if d.Status != "completed" {
		t.Fatalf("%s: status %s\n%s", what, d.Status, r)
	}
}

// TestShapesCompleteThroughEveryEntry runs every shape many times through
// `docket run`, `docket fork` and `docket step`, against a provider that
// answers at once and one that answers after a jittered delay. Regression: a
// join stopped halfway ("stopped while running", exit 1) 9 times out of 10.
func TestShapesCompleteThroughEveryEntry(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for name, shape := range cmdShapes {
		for _, jitter := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/jitter=%v", name, jitter), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				api := startKeyedAPI(t, jitter, seed)
				toolsPath := api.toolsFile(t, dir)
				data := filepath.Join(dir, "data")
				planJSON := shapePlan(t, name, shape)
				planPath := filepath.Join(dir, "plan.json")
				if err := os.WriteFile(planPath, planJSON, 0o600); err != nil {
					t.Fatal(err)
				}
				n := len(strings.Fields(shape))
				const rounds = 4
				for i := range rounds {
					id := fmt.Sprintf("run-%d", i)
					wantCompleted(t, "run "+id, inproc(t, "run", "--data", data, "--tools", toolsPath, "--plan", planPath, "--run-id", id, "--approve", "all"))
					wantCompleted(t, "fork "+id, inproc(t, "fork", id, "--run-id", "fork-"+id, "--data", data, "--tools", toolsPath, "--approve", "all"))
					req := stepRequestJSON(t, fmt.Sprintf("step-%d", i), planJSON, "all")
					wantCompleted(t, "step", stepInproc(t, req, "--data", data, "--tools", toolsPath))
				}
				api.check(t, 3*rounds*n)
			})
		}
	}
}

// TestShapesCompleteThroughTheService posts every shape to `docket serve`
// (POST /v1/runs) and follows each run over its WebSocket to its end.
func TestShapesCompleteThroughTheService(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	api := startKeyedAPI(t, true, uint64(time.Now().UnixNano()))
	toolsPath := api.toolsFile(t, dir)
	const token = "shape-token-0123456789"
	s := startServe(t, nil, "--data", filepath.Join(dir, "data"), "--tools", toolsPath, "--token", token)
	s.token = token
	total := 0
	for name, shape := range cmdShapes {
		for i := range 3 {
			runID := fmt.Sprintf("%s-%d", name, i)
			body := map[string]any{"run_id": runID, "plan": json.RawMessage(shapePlan(t, name, shape)), "approve": "all"}
			if code := s.post(t, "/v1/runs", body, nil); code != http.StatusCreated {
				t.Fatalf("POST /v1/runs %s = %d", runID, code)
			}
			if got := followRun(t, s, runID); got != "run.completed" {
				t.Fatalf("run %s ended with %s, want run.completed", runID, got)
			}
			total += len(strings.Fields(shape))
		}
	}
	api.check(t, total)
}

// followRun reads a run's events over its WebSocket until the run ends and
// returns the final event's type.
func followRun(t *testing.T, s *served, runID string) string {
	t.Helper()
	u := "ws" + strings.TrimPrefix(s.base, "http") + "/v1/runs/" + runID + "/ws?after=0"
	h := http.Header{"Authorization": {"Bearer " + s.token}}
	c, resp, err := websocket.DefaultDialer.Dial(u, h)
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", u, err, resp)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		var m struct {
			Type  string `json:"type"`
			Event *struct {
				Type string `json:"type"`
			} `json:"event"`
		}
		if err := c.ReadJSON(&m); err != nil {
			t.Fatalf("run %s: reading events: %v", runID, err)
		}
		if m.Event == nil {
			continue // not an event (an ack)
		}
		switch ev := m.Event; ev.Type {
		case "run.completed", "run.failed", "run.paused", "run.cancelled", "run.awaiting_approval":
			return ev.Type
		}
	}
}
