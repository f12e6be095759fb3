package planner_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
)

// quirkScript loads the recorded replies of testdata/quirks/<dir>, in
// order: replyN.json is a 200 JSON answer, replyN.sse a 200 answer of
// server-sent events (text/event-stream), replyN.<status>.json a JSON
// answer with that HTTP status.
func quirkScript(t *testing.T, dir string) []reply {
	t.Helper()
	var script []reply
	for n := 1; ; n++ {
		matches, err := filepath.Glob(filepath.Join("testdata", "quirks", dir, "reply"+strconv.Itoa(n)+".*"))
		if err != nil {
			t.Fatal(err)
		}
		if len(matches) == 0 {
			break
		}
		if len(matches) > 1 {
			t.Fatalf("two replies numbered %d: %v", n, matches)
		}
		b, err := os.ReadFile(matches[0])
		if err != nil {
			t.Fatal(err)
		}
		r := reply{body: string(b)}
		parts := strings.Split(filepath.Base(matches[0]), ".")
		switch {
		case parts[len(parts)-1] == "sse":
			r.header = map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
		case len(parts) == 3:
			if r.status, err = strconv.Atoi(parts[1]); err != nil {
				t.Fatalf("%s: %v", matches[0], err)
			}
		}
		script = append(script, r)
	}
	if len(script) == 0 {
		t.Fatalf("no replies in testdata/quirks/%s", dir)
	}
	return script
}

const mailArgs = `{"to":"ops@example.com","subject":"Status","body":"All good"}`

// Recorded replies of servers that get tool calling wrong in ways seen in
// the field. Each either becomes the plan the model meant, with a warning
// naming the quirk, or fails with an error that quotes what the model said:
// never an empty plan reported as success.
func TestPlanQuirks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		dir  string
		cfg  planner.Config
		want []plan.Action // nil: an error is expected
		warn string        // in Result.Warnings
		// the error (want nil): its reason and what it must quote
		reason planner.Reason
		quote  []string
		// requests: whether each asked for a stream (nil: not checked)
		streamed []bool
	}{
		{dir: "fenced_call", warn: "fenced JSON", want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs), Why: "I'll send the status email."},
		}},
		{dir: "fenced_tool_calls", warn: "fenced JSON", want: []plan.Action{
			{ID: "a1", Tool: "crm.create_contact", Args: json.RawMessage(`{"name":"Ada Lovelace","email":"ada@example.com"}`)},
			{ID: "a2", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "mistral_list", warn: "[TOOL_CALLS]", want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "mistral_args", warn: "[TOOL_CALLS]", want: []plan.Action{
			{ID: "a1", Tool: "crm.create_contact", Args: json.RawMessage(`{"name":"Ada Lovelace","email":"ada@example.com"}`)},
			{ID: "a2", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "args_twice", warn: "encoded twice", want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "functions_prefix", warn: "namespace", want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "combined", warn: "encoded twice", want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "prose_json_call", warn: "fenced JSON", want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs), Why: "Sure, sending it now:  and that's all."},
		}},
		// after queued actions, call syntax in the closing text is said,
		// the plan kept
		{dir: "summary_call_syntax", warn: "check it is complete", want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		// not asked to stream (no progress function): the server streams
		// anyway; one request per turn, no retries, and later turns ask
		// for the stream
		{dir: "sse_unasked", warn: "server-sent events", streamed: []bool{false, true}, want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		// streaming off by configuration: each streamed answer is read,
		// requests stay without stream
		{dir: "sse_unasked", cfg: planner.Config{Stream: planner.StreamOff}, warn: "server-sent events", streamed: []bool{false, false}, want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "stream_only", warn: "only streams", streamed: []bool{false, true, true}, want: []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(mailArgs)},
		}},
		{dir: "mistral_broken", reason: planner.ReasonTextCalls, quote: []string{`[TOOL_CALLS] [{"name": "mail_send"`}},
		{dir: "fenced_broken", reason: planner.ReasonTextCalls, quote: []string{`{"name": "mail_send", "arguments": {"to": "ops@example.com" "subject"`}},
		{dir: "unknown_syntax", reason: planner.ReasonTextCalls, quote: []string{`[mail_send(to="ops@example.com"`}},
	}
	for _, tc := range cases {
		t.Run(tc.dir+"/stream="+string(tc.cfg.Stream), func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, tc.cfg, quirkScript(t, tc.dir)...)
			res, err := p.Plan(context.Background(), planner.Request{Goal: "send the status email"})
			reqs := b.model.requests()
			if tc.want == nil {
				var pe *planner.PlanningError
				if res != nil || !errors.As(err, &pe) || pe.Reason != tc.reason {
					t.Fatalf("err = %v (a result: %v); want a planning error with reason %s", err, res != nil, tc.reason)
				}
				for _, q := range tc.quote {
					if !strings.Contains(err.Error(), q) {
						t.Errorf("the error does not quote the model's %q:\n%v", q, err)
					}
				}
				if strings.Contains(err.Error(), testKey) {
					t.Errorf("the error holds the API key")
				}
			} else {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if got, want := mustJSON(t, res.Plan.Actions), mustJSON(t, tc.want); got != want {
					t.Errorf("actions\n got %s\nwant %s", got, want)
				}
				if !strings.Contains(strings.Join(res.Warnings, "\n"), tc.warn) {
					t.Errorf("warnings %q do not mention %q", res.Warnings, tc.warn)
				}
				if !strings.Contains(b.logs.String(), tc.warn) {
					t.Errorf("the quirk %q was not logged", tc.warn)
				}
				if len(b.create.Calls())+len(b.send.Calls())+len(b.charge.Calls()) != 0 {
					t.Errorf("a queued action ran while planning")
				}
				if len(reqs) > 1 {
					// the last turn answered each call the model made
					res := toolResults(t, reqs[len(reqs)-1])
					if len(res) != len(tc.want) {
						t.Errorf("the next turn answers %d calls, want %d: %v", len(res), len(tc.want), res)
					}
				}
			}
			if tc.streamed != nil {
				if len(reqs) != len(tc.streamed) {
					t.Fatalf("%d requests, want %d", len(reqs), len(tc.streamed))
				}
				for i, r := range reqs {
					if got := r.body["stream"] == true; got != tc.streamed[i] {
						t.Errorf("request %d: stream %v, want %v", i+1, got, tc.streamed[i])
					}
				}
			}
		})
	}
}

// Replies that only look like calls stay what they are: a fenced JSON
// value that is not a call, a tool named in prose.
func TestPlanQuirksNotCalls(t *testing.T) {
	t.Parallel()
	p, _ := setup(t, planner.Config{}, quirkScript(t, "not_calls")...)
	res, err := p.Plan(context.Background(), planner.Request{Goal: "anything to do?"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Actions) != 0 || !strings.Contains(res.Reply, "mail_send if you want") || len(res.Warnings) != 0 {
		t.Errorf("actions %v, reply %q, warnings %q", res.Plan.Actions, res.Reply, res.Warnings)
	}
}

// A stream-only server while streaming is off by configuration: one
// request, and an error that says how to turn streaming on.
func TestPlanStreamOnlyWhenOff(t *testing.T) {
	t.Parallel()
	script := quirkScript(t, "stream_only")[:1]
	p, b := setup(t, planner.Config{Stream: planner.StreamOff}, script...)
	_, err := p.Plan(context.Background(), planner.Request{Goal: "x"})
	var me *planner.ModelError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "stream must be true") || !strings.Contains(err.Error(), "--stream") {
		t.Fatalf("err = %v, want a model error quoting the server and naming --stream", err)
	}
	if n := len(b.model.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// An HTTP 400 that names an "upstream" is not a server asking for streams:
// one request, the server's error.
func TestPlanUpstreamIsNotStream(t *testing.T) {
	t.Parallel()
	p, b := setup(t, planner.Config{}, apiError(400, "upstream provider rejected the request: invalid tool schema", "invalid_request_error", nil))
	_, err := p.Plan(context.Background(), planner.Request{Goal: "x"})
	var me *planner.ModelError
	if !errors.As(err, &me) || me.Status != 400 || strings.Contains(err.Error(), "--stream") {
		t.Fatalf("err = %v, want the server's HTTP 400 without a streaming hint", err)
	}
	if reqs := b.model.requests(); len(reqs) != 1 || reqs[0].body["stream"] == true {
		t.Errorf("%d requests (want 1, not streamed)", len(reqs))
	}
}
