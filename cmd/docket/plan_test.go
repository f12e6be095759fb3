package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

const fakeKey = "sk-cmd-test-0123456789"

// chatModel is an OpenAI-compatible server answering scripted bodies in
// order and recording the requests.
type chatModel struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	script []string
	bodies []map[string]any
	auth   []string
}

func newChatModel(t *testing.T, script ...string) *chatModel {
	t.Helper()
	m := &chatModel{t: t, script: script}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		json.Unmarshal(raw, &body)
		m.mu.Lock()
		m.bodies = append(m.bodies, body)
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		if len(m.script) == 0 {
			m.mu.Unlock()
			t.Errorf("model: unexpected request %d", len(m.bodies))
			http.Error(w, `{"error":{"message":"no more replies"}}`, 500)
			return
		}
		reply := m.script[0]
		m.script = m.script[1:]
		m.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, reply)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *chatModel) requests() []map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]map[string]any(nil), m.bodies...)
}

func wireReply(content string, calls ...[3]string) string {
	msg := map[string]any{"role": "assistant", "content": content}
	finish := "stop"
	if len(calls) > 0 {
		var tc []any
		for _, c := range calls {
			tc = append(tc, map[string]any{"id": c[0], "type": "function", "function": map[string]any{"name": c[1], "arguments": c[2]}})
		}
		msg["tool_calls"] = tc
		finish = "tool_calls"
	}
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": 1764460800, "model": "gpt-test",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}})
	return string(b)
}

// modelEnv is an Env whose OPENAI_* variables point at m.
func modelEnv(m *chatModel, stdin string, stdout, stderr io.Writer) Env {
	vars := map[string]string{"OPENAI_BASE_URL": m.srv.URL + "/v1", "OPENAI_API_KEY": fakeKey, "OPENAI_MODEL": "gpt-test", "USER": "tester"}
	return Env{Stdin: strings.NewReader(stdin), Stdout: stdout, Stderr: stderr, Getenv: func(k string) string { return vars[k] }}
}

func runWith(t *testing.T, env Env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env.Stdout, env.Stderr = &out, &errb
	err := runEnv(context.Background(), args, env)
	code = report(err, &errb)
	if strings.Contains(out.String()+errb.String(), fakeKey) {
		t.Errorf("the API key was printed")
	}
	return code, out.String(), errb.String()
}

func TestPlanCommand(t *testing.T) {
	b := setup(t)
	m := newChatModel(t,
		wireReply("", [3]string{"c1", "catalogue_price", `{"plan":"pro"}`}),
		wireReply("", [3]string{"c2", "crm_create_contact", `{"company":"ACME","email":"billing@acme.example"}`}),
		wireReply("", [3]string{"c3", "email_send", `{"to":"billing@acme.example","template":"welcome-pack","contact_id":"${a1.output.id}"}`}),
		wireReply("Contact first, then the welcome email."),
	)
	code, out, errOut := runWith(t, modelEnv(m, "", nil, nil), "plan", "--tools", b.tools, "--goal", "onboard ACME", "--max-tokens", "900", "--temperature", "0")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 2 || got["goal"] == nil || got["actions"] == nil {
		t.Fatalf("stdout is not {goal, actions}: %v\n%s", err, out)
	}
	p, err := plan.Decode([]byte(out))
	if err != nil || len(p.Actions) != 2 || p.Actions[1].Tool != "email_send" || p.Actions[1].DependsOn[0] != "a1" {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	if !strings.Contains(errOut, "model: Contact first") || !strings.Contains(errOut, "planned 2 actions in 4 model turns") {
		t.Errorf("stderr = %s", errOut)
	}
	reqs := m.requests()
	if reqs[0]["max_tokens"] != float64(900) || reqs[0]["temperature"] == nil {
		t.Errorf("flags not applied: max_tokens %v temperature %v", reqs[0]["max_tokens"], reqs[0]["temperature"])
	}
	if m.auth[0] != "Bearer "+fakeKey {
		t.Errorf("Authorization = %q", m.auth[0])
	}
	// The read-only lookup ran while planning; no side effect happened.
	if b.world.Requests("catalogue") != 1 || len(b.world.Effects()) != 0 {
		t.Errorf("catalogue requests %d, effects %v", b.world.Requests("catalogue"), b.world.Effects())
	}
	if _, err := os.Stat(b.data); !os.IsNotExist(err) {
		t.Errorf("docket plan created a data directory")
	}
}

func TestPlanCommandErrors(t *testing.T) {
	b := setup(t)
	cases := []struct {
		name   string
		script []string
		args   []string
		env    func(Env) Env
		code   int
		want   string
	}{
		{"no goal", nil, []string{"plan", "--tools", b.tools}, nil, exitBad, "--goal TEXT is required"},
		{"no model", nil, []string{"plan", "--tools", b.tools, "--goal", "x"}, func(e Env) Env {
			g := e.Getenv
			e.Getenv = func(k string) string {
				if k == "OPENAI_MODEL" {
					return ""
				}
				return g(k)
			}
			return e
		}, exitBad, "model name is required"},
		{"bad temperature", nil, []string{"plan", "--tools", b.tools, "--goal", "x", "--temperature", "warm"}, nil, exitBad, "--temperature"},
		{"truncated", []string{`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"{\"act"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`},
			[]string{"plan", "--tools", b.tools, "--goal", "x"}, nil, exitFailed, "cut off at its token limit"},
		{"unauthorized", []string{}, []string{"plan", "--tools", b.tools, "--goal", "x", "--base-url", "URL401"}, nil, exitBad, "HTTP 401"},
	}
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s.","type":"invalid_request_error","code":"invalid_api_key"}}`, r.Header.Get("Authorization")[7:])
	}))
	defer unauthorized.Close()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newChatModel(t, tc.script...)
			env := modelEnv(m, "", nil, nil)
			if tc.env != nil {
				env = tc.env(env)
			}
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "URL401" {
					args[i] = unauthorized.URL + "/v1"
				}
			}
			code, out, errOut := runWith(t, env, args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr:\n%s\nwant it to mention %q", code, tc.code, out, errOut, tc.want)
			}
		})
	}
}

// runGoal (what `docket run --goal` does): plan once, record, run; the same
// goal again resumes the recorded run without calling the model, even with
// no model configured.
func TestRunGoal(t *testing.T) {
	b := setup(t)
	m := newChatModel(t,
		wireReply("", [3]string{"c1", "crm_create_contact", `{"company":"ACME","email":"billing@acme.example"}`}),
		wireReply("", [3]string{"c2", "email_send", `{"to":"billing@acme.example","template":"welcome-pack","contact_id":"${a1.output.id}"}`}),
		wireReply("done"),
	)
	goal := "onboard ACME"
	do := func(env Env, runID string) (string, ledger.RunDoc, error) {
		t.Helper()
		ctx := context.Background()
		reg, closeTools, err := loadTools(ctx, b.tools, env)
		if err != nil {
			t.Fatal(err)
		}
		defer closeTools()
		l, err := openLedger(ctx, b.data, nil, env.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		eng, err := newEngine(env, l, reg)
		if err != nil {
			t.Fatal(err)
		}
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		mf := addModelFlags(fs)
		doc, err := runGoal(ctx, env, mf, reg, l, eng, goal, &runID, &executor.RunOptions{Policy: executor.PolicySafe})
		return runID, doc, err
	}
	var errb bytes.Buffer
	env := modelEnv(m, "", io.Discard, &errb)
	id, doc, err := do(env, "")
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if !strings.HasPrefix(id, "run_") || doc.Run.Goal != goal || len(doc.Actions) != 2 {
		t.Fatalf("run %s: %+v", id, doc.Run)
	}
	// safe: the lookup ran, the at-most-once email waits for a person.
	if doc.Actions[0].Status != ledger.StatusSucceeded || doc.Actions[1].Status != ledger.StatusPending {
		t.Fatalf("statuses %s %s", doc.Actions[0].Status, doc.Actions[1].Status)
	}
	if !strings.Contains(errb.String(), "planned 2 actions in 3 model turns") {
		t.Errorf("stderr = %s", errb.String())
	}

	// Rerun: no model configured at all, and the fake would refuse a request.
	errb.Reset()
	env.Getenv = func(string) string { return "" }
	id2, doc2, err := do(env, "")
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if id2 != id || len(m.requests()) != 3 || !strings.Contains(errb.String(), "using the recorded plan") {
		t.Fatalf("rerun: id %s (first %s), %d requests, stderr %s", id2, id, len(m.requests()), errb.String())
	}
	if doc2.Actions[0].Status != ledger.StatusSucceeded || b.world.Effects()["crm/billing@acme.example"] != 1 {
		t.Errorf("rerun repeated an effect: %v", b.world.Effects())
	}
	// The same explicit run id with another goal is refused.
	goal = "something else"
	if _, _, err := do(env, id); exitCode(err) != exitBad || !strings.Contains(err.Error(), "planned for another goal") {
		t.Errorf("other goal, same run id: %v", err)
	}
}
