package planner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// testKey is the API key the tests configure; it must never appear in
// anything the planner returns, logs or records.
const testKey = "sk-test-SECRET-9f8e7d6c5b4a"

// reply is one scripted answer of the fake model.
type reply struct {
	status int               // default 200
	header map[string]string // extra response headers
	body   string            // raw body, exactly as sent
	hang   bool              // answer nothing until the request is cancelled
}

// received is one request the fake model got.
type received struct {
	header http.Header
	raw    []byte
	body   map[string]any
}

// fakeModel is an OpenAI-compatible chat-completions server answering from a
// script, one reply per request, recording every request.
type fakeModel struct {
	t   *testing.T
	srv *httptest.Server

	got chan struct{} // one value per request received (buffered)

	mu     sync.Mutex
	script []reply
	reqs   []received
}

func newFakeModel(t *testing.T, script ...reply) *fakeModel {
	t.Helper()
	f := &fakeModel{t: t, script: script, got: make(chan struct{}, 1024)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		f.t.Errorf("fake model: request body is not JSON: %v", err)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		f.t.Errorf("fake model: unexpected %s %s", r.Method, r.URL.Path)
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, received{header: r.Header.Clone(), raw: raw, body: body})
	n := len(f.reqs)
	var rep reply
	ok := len(f.script) > 0
	if ok {
		rep, f.script = f.script[0], f.script[1:]
	}
	f.mu.Unlock()
	select {
	case f.got <- struct{}{}:
	default:
	}
	if !ok {
		f.t.Errorf("fake model: unexpected request %d (script exhausted)", n)
		http.Error(w, `{"error":{"message":"script exhausted","type":"test"}}`, http.StatusInternalServerError)
		return
	}
	if rep.hang {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range rep.header { // may replace the Content-Type
		w.Header().Set(k, v)
	}
	w.WriteHeader(max(rep.status, 200))
	io.WriteString(w, rep.body)
}

func (f *fakeModel) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.reqs...)
}

func (f *fakeModel) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.script)
}

// ---- wire-format builders ----

type call struct{ id, name, args string }

var replySeq atomic.Int64

func completion(message map[string]any, finish string, promptTokens, completionTokens int) string {
	var fr any = finish
	if finish == "" {
		fr = nil
	}
	b, _ := json.Marshal(map[string]any{
		"id":      fmt.Sprintf("chatcmpl-test%04d", replySeq.Add(1)),
		"object":  "chat.completion",
		"created": 1764460800,
		"model":   "gpt-test-2026-01-01",
		"choices": []any{map[string]any{"index": 0, "message": message, "logprobs": nil, "finish_reason": fr}},
		"usage": map[string]any{"prompt_tokens": promptTokens, "completion_tokens": completionTokens,
			"total_tokens": promptTokens + completionTokens},
		"system_fingerprint": "fp_test",
	})
	return string(b)
}

func toolCalls(content string, calls ...call) reply {
	tc := make([]any, len(calls))
	for i, c := range calls {
		tc[i] = map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}}
	}
	var ct any
	if content != "" {
		ct = content
	}
	return reply{body: completion(map[string]any{"role": "assistant", "content": ct, "tool_calls": tc, "refusal": nil}, "tool_calls", 100, 20)}
}

func text(content string) reply {
	return reply{body: completion(map[string]any{"role": "assistant", "content": content, "refusal": nil}, "stop", 100, 10)}
}

func apiError(status int, msg, typ string, header map[string]string) reply {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	return reply{status: status, body: string(b), header: header}
}

// fixture loads testdata/<dir>/<name>.
func fixture(t *testing.T, dir, name string) reply {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return reply{body: string(b)}
}

// ---- the tools ----

type bundle struct {
	reg     *tools.Registry
	search  *tooltest.Tool
	create  *tooltest.Tool
	send    *tooltest.Tool
	charge  *tooltest.Tool
	model   *fakeModel
	logs    *bytes.Buffer
	sleeps  *[]time.Duration
	sleepMu *sync.Mutex
}

func registry(t testing.TB) (*tools.Registry, *tooltest.Tool, *tooltest.Tool, *tooltest.Tool, *tooltest.Tool) {
	t.Helper()
	search := &tooltest.Tool{
		SpecValue: tools.Spec{Name: "crm.search", Description: "Search contacts by text.", Class: tools.ReadOnly,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","minLength":1},"limit":{"type":"integer","minimum":1}},"required":["query"]}`)},
		CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
			return json.RawMessage(`{"contacts":[{"id":"c_17","name":"Ada Lovelace","email":"ada@example.com"}]}`), nil
		},
	}
	create := &tooltest.Tool{
		SpecValue: tools.Spec{Name: "crm.create_contact", Description: "Create a contact.", Class: tools.Keyed,
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string"},"note":{"type":"string"},"tags":{"type":"array","items":{"type":"object","properties":{"label":{"type":"string"},"color":{"type":"string","enum":["red","blue"]}},"required":["label"]}}},"required":["name","email"]}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"created":{"type":"boolean"}},"required":["id"]}`)},
		CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
			return json.RawMessage(`{"id":"c_99","created":true}`), nil
		},
	}
	send := &tooltest.Tool{
		SpecValue: tools.Spec{Name: "mail/send", Description: "Send an email.", Class: tools.AtMostOnce,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"subject":{"type":"string"},"body":{"type":"string"}},"required":["to","subject","body"],"additionalProperties":false}`)},
		CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
			return json.RawMessage(`{"message_id":"m_1"}`), nil
		},
	}
	charge := &tooltest.Tool{
		SpecValue: tools.Spec{Name: "pay.charge", Description: "Charge a customer.", Class: tools.Idempotent,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"customer_id":{"type":"string"},"amount":{"type":"number"},"meta":{"type":"object"}},"required":["customer_id","amount"]}`)},
	}
	reg, err := tools.NewRegistry(search, create, send, charge)
	if err != nil {
		t.Fatal(err)
	}
	return reg, search, create, send, charge
}

// setup builds the tools, a fake model answering script, and a planner over
// both (cfg's zero fields filled for tests: no real sleeping, debug logs
// captured).
func setup(t *testing.T, cfg planner.Config, script ...reply) (*planner.Planner, *bundle) {
	t.Helper()
	b := &bundle{logs: &bytes.Buffer{}, sleeps: new([]time.Duration), sleepMu: &sync.Mutex{}}
	b.reg, b.search, b.create, b.send, b.charge = registry(t)
	b.model = newFakeModel(t, script...)
	cfg.BaseURL = b.model.srv.URL + "/v1"
	cfg.APIKey = testKey
	if cfg.Model == "" {
		cfg.Model = "gpt-test"
	}
	cfg.Tools = b.reg
	var logMu sync.Mutex
	cfg.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&logMu, b.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Sleep == nil {
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			b.sleepMu.Lock()
			*b.sleeps = append(*b.sleeps, d)
			b.sleepMu.Unlock()
			return ctx.Err()
		}
	}
	cfg.Now = func() time.Time { return time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC) }
	p, err := planner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if strings.Contains(b.logs.String(), testKey) {
			t.Errorf("the API key appears in the logs")
		}
		if n := b.model.left(); n != 0 && !t.Failed() {
			t.Errorf("%d scripted replies were not requested", n)
		}
	})
	return p, b
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ---- request inspection ----

func messages(t *testing.T, r received) []map[string]any {
	t.Helper()
	list, _ := r.body["messages"].([]any)
	out := make([]map[string]any, len(list))
	for i, m := range list {
		out[i], _ = m.(map[string]any)
	}
	return out
}

// toolResults maps tool_call_id to the content of the tool messages of r.
func toolResults(t *testing.T, r received) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range messages(t, r) {
		if m["role"] == "tool" {
			id, _ := m["tool_call_id"].(string)
			c, _ := m["content"].(string)
			if _, dup := out[id]; dup {
				t.Errorf("two tool results for call id %q", id)
			}
			out[id] = c
		}
	}
	return out
}

func lastUser(t *testing.T, r received) string {
	t.Helper()
	ms := messages(t, r)
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i]["role"] == "user" {
			s, _ := ms[i]["content"].(string)
			return s
		}
	}
	return ""
}

func toolDef(t *testing.T, r received, name string) map[string]any {
	t.Helper()
	list, _ := r.body["tools"].([]any)
	var names []string
	for _, d := range list {
		fn, _ := d.(map[string]any)["function"].(map[string]any)
		names = append(names, fmt.Sprint(fn["name"]))
		if fn["name"] == name {
			return fn
		}
	}
	sort.Strings(names)
	t.Fatalf("no tool %q in the request; tools: %v", name, names)
	return nil
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
