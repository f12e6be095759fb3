package planner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/planner"
)

// streamServer is a scripted OpenAI-compatible server that streams its
// replies as server-sent events, flushing every chunk; before the chunk
// at hold (of the first reply) it waits for release, so a test can see what
// was reported while the reply was still being written.
type streamServer struct {
	t       *testing.T
	replies [][]string // chunks (JSON) per request
	hold    int
	release chan struct{}
	n       int
	reqs    []map[string]any
}

func (s *streamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	raw, _ := io.ReadAll(r.Body)
	json.Unmarshal(raw, &body)
	s.reqs = append(s.reqs, body)
	i := s.n
	s.n++
	if body["stream"] != true {
		s.t.Errorf("request %d is not streamed: %s", i, raw)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for k, c := range s.replies[i] {
		if i == 0 && k == s.hold && s.release != nil {
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "data: %s\n\n", c)
		fl.Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func chunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

// A streamed plan: the model's text arrives in pieces, each tool call is
// reported as soon as the next one starts (while the reply is still being
// written), each queued action after the reply; the plan exists only when
// Plan returns. Cancelling while the model writes returns no plan.
func TestPlanStreaming(t *testing.T) {
	t.Parallel()
	first := []string{
		chunk(`{"role":"assistant","content":"Two "}`, ""),
		chunk(`{"content":"contacts."}`, ""),
		chunk(`{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"crm_create_contact","arguments":"{\"name\":\"A\","}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"email\":\"a@x\",\"note\":null,\"tags\":null}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"crm_create_contact","arguments":"{\"name\":\"B\",\"email\":\"b@x\",\"note\":null,\"tags\":null}"}}]}`, ""),
		chunk(`{}`, "tool_calls"),
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
	}
	second := []string{chunk(`{"role":"assistant","content":"Done."}`, "stop")}

	newPlanner := func(t *testing.T, srv *httptest.Server) *planner.Planner {
		reg, _, _, _, _ := registry(t)
		p, err := planner.New(planner.Config{BaseURL: srv.URL + "/v1", APIKey: testKey, Model: "m", Tools: reg,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("progress while the model writes", func(t *testing.T) {
		t.Parallel()
		ss := &streamServer{t: t, replies: [][]string{first, second}, hold: 5, release: make(chan struct{})}
		srv := httptest.NewServer(ss)
		defer srv.Close()
		p := newPlanner(t, srv)
		var steps []planner.Progress
		ctx := planner.WithProgress(context.Background(), func(pr planner.Progress) {
			steps = append(steps, pr)
			if pr.Kind == planner.ProgressCall && pr.Round == 1 && len(ss.replies) > 0 {
				// the first call is reported before the server sent the
				// rest of the reply (it waits for this release)
				select {
				case <-ss.release:
				default:
					close(ss.release)
				}
			}
		})
		done := make(chan struct{})
		var res *planner.Result
		var err error
		go func() {
			defer close(done)
			res, err = p.Plan(ctx, planner.Request{Goal: "two contacts"})
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("planning did not finish: the first call was not reported while the reply was held")
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Plan.Actions) != 2 || res.Usage.TotalTokens < 10 {
			t.Fatalf("plan %+v usage %+v", res.Plan.Actions, res.Usage)
		}
		var kinds, text []string
		for _, s := range steps {
			kinds = append(kinds, string(s.Kind))
			if s.Kind == planner.ProgressText {
				text = append(text, s.Text)
			}
		}
		want := "round text text call call action action round text"
		if got := strings.Join(kinds, " "); got != want {
			t.Errorf("progress %q, want %q", got, want)
		}
		if strings.Join(text, "|") != "Two |contacts.|Done." {
			t.Errorf("text pieces %q", text)
		}
		if steps[3].Tool != "crm.create_contact" || !strings.Contains(string(steps[3].Args), `"a@x"`) {
			t.Errorf("first call reported as %+v", steps[3])
		}
		if a := steps[5].Action; a == nil || a.ID != "a1" {
			t.Errorf("first action reported as %+v", steps[5])
		}
		var ex struct {
			Attempts []struct {
				Streamed bool            `json:"streamed"`
				Response json.RawMessage `json:"response"`
			} `json:"attempts"`
		}
		if err := json.Unmarshal(res.Exchange, &ex); err != nil || len(ex.Attempts) != 2 || !ex.Attempts[0].Streamed ||
			!strings.Contains(string(ex.Attempts[0].Response), `"tool_calls"`) {
			t.Errorf("exchange: %v %s", err, res.Exchange)
		}
		if ss.reqs[0]["stream_options"] == nil {
			t.Errorf("usage not asked for: %v", ss.reqs[0])
		}
	})

	t.Run("a crash while thinking records nothing", func(t *testing.T) {
		t.Parallel()
		ss := &streamServer{t: t, replies: [][]string{first, second}, hold: 5, release: make(chan struct{})}
		srv := httptest.NewServer(ss)
		defer srv.Close()
		p := newPlanner(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx = planner.WithProgress(ctx, func(pr planner.Progress) {
			if pr.Kind == planner.ProgressCall {
				cancel() // the process dies while the model is still writing
			}
		})
		res, err := p.Plan(ctx, planner.Request{Goal: "two contacts"})
		if res != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("res %v err %v, want no plan and context.Canceled", res, err)
		}
	})

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{Stream: planner.StreamOff}, text("nothing to do"))
		ctx := planner.WithProgress(context.Background(), func(planner.Progress) {})
		if _, err := p.Plan(ctx, planner.Request{Goal: "x"}); err != nil {
			t.Fatal(err)
		}
		if b.model.requests()[0].body["stream"] == true {
			t.Errorf("stream sent although off")
		}
	})
}
