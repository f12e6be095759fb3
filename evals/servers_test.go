package evals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/planner"
)

// serverQuirks are the OpenAI-compatible servers' behaviours the planner
// handles (the README's servers table), each answered the way the named
// server does, recorded once in testdata/servers and replayed by
// TestServerQuirks with no network. DOCKET_RECORD_SERVERS=1 re-records them
// (after a change to the planner's prompt or requests).
var serverQuirks = []serverQuirk{
	{
		name: "llamacpp-args-object", server: "llama.cpp (some builds)",
		quirk: "tool call `arguments` as a JSON object, not text",
		replies: []quirkReply{
			{body: completion(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"crm_create_contact","arguments":{"name":"Ada","email":"ada@x.example","company":null}}}]}`, "tool_calls")},
			{body: completion(`{"role":"assistant","content":"Queued."}`, "stop")},
		},
		check: wantPlan(1, "arguments as JSON objects"),
	},
	{
		name: "deepseek-strict-refused", server: "DeepSeek, several gateways",
		quirk: `HTTP 400 for "strict": true in tool definitions`,
		replies: []quirkReply{
			{status: 400, body: `{"error":{"message":"Invalid request: unsupported parameter strict in tools[0].function","type":"invalid_request_error"}}`},
			{body: completion(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"crm_create_contact","arguments":"{\"name\":\"Ada\",\"email\":\"ada@x.example\",\"company\":null}"}}]}`, "tool_calls")},
			{body: completion(`{"role":"assistant","content":"Queued."}`, "stop")},
		},
		check: func(t *testing.T, res *planner.Result, err error, reqs []json.RawMessage) {
			wantPlan(1, `refused "strict"`)(t, res, err, reqs)
			if strings.Contains(string(reqs[0]), `"strict":true`) == false || strings.Contains(string(reqs[1]), `"strict":true`) {
				t.Errorf("the fallback request still sends strict, or the first did not")
			}
			if res != nil && !strings.Contains(string(res.Exchange), `sent again without \"strict\"`) {
				t.Errorf("the exchange does not record the fallback")
			}
		},
	},
	{
		name: "vllm-hermes-text", server: "vLLM / SGLang without a tool parser, some Ollama templates",
		quirk: "tool calls as `<tool_call>{…}</tool_call>` text in `content`",
		replies: []quirkReply{
			{body: completion(`{"role":"assistant","content":"I will create the contact.\n<tool_call>\n{\"name\": \"crm_create_contact\", \"arguments\": {\"name\": \"Ada\", \"email\": \"ada@x.example\"}}\n</tool_call>"}`, "stop")},
			{body: completion(`{"role":"assistant","content":"Queued."}`, "stop")},
		},
		check: wantPlan(1, "tool call parser"),
	},
	{
		name: "vllm-hermes-broken", server: "vLLM without a tool parser",
		quirk: "a `<tool_call>` block that is not a call: a clear error, never an empty plan",
		replies: []quirkReply{
			{body: completion(`{"role":"assistant","content":"<tool_call>\n{\"name\": \"crm_create_contact\", \"arguments\": {\"name\": \"Ada\"\n</tool_call>"}`, "stop")},
		},
		check: func(t *testing.T, res *planner.Result, err error, _ []json.RawMessage) {
			var pe *planner.PlanningError
			if !errors.As(err, &pe) || pe.Reason != planner.ReasonTextCalls || !strings.Contains(err.Error(), "tool call parser") {
				t.Errorf("err = %v, want a text_tool_calls planning error", err)
			}
		},
	},
	{
		name: "ollama-missing-ids", server: "Ollama, LM Studio, llama.cpp",
		quirk: "no tool call id, no `type`, `finish_reason` \"stop\" with tool calls, no usage",
		replies: []quirkReply{
			{body: `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"crm_create_contact","arguments":"{\"name\":\"Ada\",\"email\":\"ada@x.example\",\"company\":null}"}}]},"finish_reason":"stop"}]}`},
			{body: `{"id":"y","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Queued."},"finish_reason":null}]}`},
		},
		check: wantPlan(1, ""),
	},
	{
		name: "deepseek-reasoning-content", server: "DeepSeek-R1, vLLM with a reasoning parser",
		quirk: "`reasoning_content` next to the answer",
		replies: []quirkReply{
			{body: completion(`{"role":"assistant","reasoning_content":"The user wants a contact.","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"crm_create_contact","arguments":"{\"name\":\"Ada\",\"email\":\"ada@x.example\",\"company\":null}"}}]}`, "tool_calls")},
			{body: completion(`{"role":"assistant","content":"Queued."}`, "stop")},
		},
		check: wantPlan(1, ""),
	},
	{
		name: "json-prose-fence", server: "Ollama, LM Studio (json_schema mode)",
		quirk: "prose before a fenced plan (\"Here is the plan: ```json …\")", mode: planner.ModeJSONSchema,
		replies: []quirkReply{
			{body: completion(`{"role":"assistant","content":"Here is the plan:\n`+"```json"+`\n{\"actions\":[{\"id\":\"a1\",\"tool\":\"crm_create_contact\",\"args\":{\"name\":\"Ada\",\"email\":\"ada@x.example\",\"company\":null},\"depends_on\":[],\"why\":\"asked\"}]}\n`+"```"+`\nLet me know."}`, "stop")},
		},
		check: wantPlan(1, "around the plan object"),
	},
	{
		name: "json-think-preamble", server: "Qwen3, DeepSeek-R1 served without a reasoning parser (json_schema mode)",
		quirk: "`<think>…</think>` before the plan object", mode: planner.ModeJSONSchema,
		replies: []quirkReply{
			{body: completion(`{"role":"assistant","content":"<think>The user wants {a contact}.</think>\n{\"actions\":[{\"id\":\"a1\",\"tool\":\"crm_create_contact\",\"args\":{\"name\":\"Ada\",\"email\":\"ada@x.example\",\"company\":null},\"depends_on\":[],\"why\":\"asked\"}]}"}`, "stop")},
		},
		check: wantPlan(1, "around the plan object"),
	},
	{
		name: "not-a-completion", server: "a misconfigured gateway",
		quirk: "HTTP 200 with JSON that is not a chat completion: one request, a clear error, no retries",
		replies: []quirkReply{
			{body: `{"choices":"the upstream timed out"}`},
		},
		check: func(t *testing.T, res *planner.Result, err error, reqs []json.RawMessage) {
			var me *planner.ModelError
			if !errors.As(err, &me) || me.Attempts != 1 || me.Retryable() || !strings.Contains(err.Error(), "not a chat completion") || len(reqs) != 1 {
				t.Errorf("err = %v after %d requests, want one unretried request and a clear error", err, len(reqs))
			}
		},
	},
	{
		name: "openai-stream", server: "OpenAI, vLLM, llama.cpp, Ollama (stream: true)",
		quirk: "server-sent events: text pieces, a call split over chunks, usage last", stream: true,
		replies: []quirkReply{
			{contentType: "text/event-stream", body: sse(
				`{"id":"s","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Creating "}}]}`,
				`{"id":"s","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"the contact."}}]}`,
				`{"id":"s","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"crm_create_contact","arguments":""}}]}}]}`,
				`{"id":"s","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"name\":\"Ada\",\"email\":"}}]}}]}`,
				`{"id":"s","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ada@x.example\",\"company\":null}"}}]}}]}`,
				`{"id":"s","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`{"id":"s","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)},
			{contentType: "text/event-stream", body: sse(`{"id":"t","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"Queued."},"finish_reason":"stop"}]}`)},
		},
		check: func(t *testing.T, res *planner.Result, err error, reqs []json.RawMessage) {
			wantPlan(1, "")(t, res, err, reqs)
			if res != nil && res.Usage.TotalTokens != 15 {
				t.Errorf("usage = %+v", res.Usage)
			}
		},
	},
	{
		name: "stream-refused", server: "servers without stream_options",
		quirk: "HTTP 400 for a streamed request: asked again without streaming", stream: true,
		replies: []quirkReply{
			{status: 400, body: `{"error":{"message":"stream_options: extra inputs are not permitted"}}`},
			{body: completion(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"crm_create_contact","arguments":"{\"name\":\"Ada\",\"email\":\"ada@x.example\",\"company\":null}"}}]}`, "tool_calls")},
			{body: completion(`{"role":"assistant","content":"Queued."}`, "stop")},
		},
		check: wantPlan(1, "without streaming"),
	},
}

type serverQuirk struct {
	name, server, quirk string
	mode                planner.Mode
	stream              bool
	replies             []quirkReply
	check               func(t *testing.T, res *planner.Result, err error, reqs []json.RawMessage)
}

type quirkReply struct {
	status      int
	contentType string
	body        string
}

func completion(msg, finish string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-q","object":"chat.completion","created":1764460800,"model":"m","choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`, msg, finish)
}

func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// wantPlan checks a plan of n actions and, when warning is not empty, a
// warning containing it.
func wantPlan(n int, warning string) func(*testing.T, *planner.Result, error, []json.RawMessage) {
	return func(t *testing.T, res *planner.Result, err error, _ []json.RawMessage) {
		t.Helper()
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		if len(res.Plan.Actions) != n {
			t.Errorf("%d actions, want %d: %+v", len(res.Plan.Actions), n, res.Plan.Actions)
		}
		if warning != "" && !strings.Contains(strings.Join(res.Warnings, "\n"), warning) {
			t.Errorf("warnings %q lack %q", res.Warnings, warning)
		}
		if warning == "" && len(res.Warnings) > 0 {
			t.Errorf("unexpected warnings %q", res.Warnings)
		}
	}
}

const serverRecordings = "testdata/servers"

// quirkServer answers from q's replies in order.
func quirkServer(q serverQuirk) *httptest.Server {
	var mu sync.Mutex
	n := 0
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		if i >= len(q.replies) {
			http.Error(w, `{"error":{"message":"no more replies"}}`, 500)
			return
		}
		rep := q.replies[i]
		w.Header().Set("Content-Type", cmpOr(rep.contentType, "application/json"))
		w.WriteHeader(cmpOr(rep.status, 200))
		io.WriteString(w, rep.body)
	}))
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

func quirkConfig(q serverQuirk, baseURL string, rt http.RoundTripper) planner.Config {
	reg, err := LoadToolsFile(filepath.Join("testdata", "starter", "tools.json"))
	if err != nil {
		panic(err)
	}
	cfg := planner.Config{
		BaseURL: baseURL, APIKey: "sk-quirks-not-a-secret", Model: "quirky", Tools: reg, Mode: q.mode,
		HTTPClient: &http.Client{Transport: rt}, MaxRetries: 2,
		Sleep:  func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	cfg.Stream = planner.StreamOff
	if q.stream {
		cfg.Stream = planner.StreamOn
	}
	return cfg
}

// TestServerQuirks replays every quirk's recorded exchange through the
// planner and checks how it was handled.
func TestServerQuirks(t *testing.T) {
	t.Parallel()
	if os.Getenv("DOCKET_RECORD_SERVERS") == "1" {
		os.RemoveAll(serverRecordings)
		for _, q := range serverQuirks {
			srv := quirkServer(q)
			rec, err := NewRecorder(serverRecordings, srv.Client().Transport)
			if err != nil {
				t.Fatal(err)
			}
			p, err := planner.New(quirkConfig(q, srv.URL+"/v1", rec))
			if err != nil {
				t.Fatal(err)
			}
			p.Plan(WithCase(context.Background(), q.name, 1), planner.Request{Goal: "Create a contact for Ada, ada@x.example"})
			if err := rec.Save(q.name, 1); err != nil {
				t.Fatal(err)
			}
			srv.Close()
		}
	}
	for _, q := range serverQuirks {
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			rp, err := NewReplayer(serverRecordings)
			if err != nil {
				t.Fatal(err)
			}
			p, err := planner.New(quirkConfig(q, "https://replay.invalid/v1", rp))
			if err != nil {
				t.Fatal(err)
			}
			var steps []planner.Progress
			ctx := planner.WithProgress(WithCase(context.Background(), q.name, 1), func(pr planner.Progress) { steps = append(steps, pr) })
			res, err := p.Plan(ctx, planner.Request{Goal: "Create a contact for Ada, ada@x.example"})
			if errors.Is(err, ErrNoRecording) {
				t.Fatalf("%v\nre-record with DOCKET_RECORD_SERVERS=1 go test ./evals -run TestServerQuirks", err)
			}
			recs, rerr := readRecording(recordingFile(serverRecordings, caseTag{q.name, 1}))
			if rerr != nil {
				t.Fatal(rerr)
			}
			var reqs []json.RawMessage
			for _, ex := range recs {
				reqs = append(reqs, compactJSON(ex.Request))
			}
			q.check(t, res, err, reqs)
			if u := rp.Unused(); len(u) > 0 {
				t.Errorf("not replayed: %v", u)
			}
			if res != nil {
				queued := 0
				for _, s := range steps {
					if s.Kind == planner.ProgressAction {
						queued++
					}
				}
				if queued != len(res.Plan.Actions) {
					t.Errorf("%d actions reported as progress, %d planned", queued, len(res.Plan.Actions))
				}
			}
		})
	}
}
