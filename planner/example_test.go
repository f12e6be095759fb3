package planner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

// A model (here a two-reply stand-in speaking the chat-completions wire
// format) queues a keyed call; the planner returns it as a validated plan
// without running it.
func ExamplePlanner_Plan() {
	replies := []string{
		`{"id":"1","object":"chat.completion","created":1,"model":"demo","choices":[{"index":0,"finish_reason":"tool_calls",
		  "message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
		  "function":{"name":"crm_create","arguments":"{\"email\":\"ada@example.com\",\"note\":null}"}}]}}],
		  "usage":{"prompt_tokens":90,"completion_tokens":12,"total_tokens":102}}`,
		`{"id":"2","object":"chat.completion","created":2,"model":"demo","choices":[{"index":0,"finish_reason":"stop",
		  "message":{"role":"assistant","content":"Queued the contact for review."}}],
		  "usage":{"prompt_tokens":140,"completion_tokens":8,"total_tokens":148}}`,
	}
	n := 0
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, replies[n])
		n++
	}))
	defer model.Close()

	create := tools.Func(tools.Spec{Name: "crm.create", Description: "Create a contact.", Class: tools.Keyed},
		func(ctx context.Context, call tools.Call, in struct {
			Email string `json:"email"`
			Note  string `json:"note,omitempty"`
		}) (map[string]string, error) {
			return map[string]string{"id": "c_1"}, nil
		})
	reg, err := tools.NewRegistry(create)
	if err != nil {
		panic(err)
	}
	p, err := planner.New(planner.Config{BaseURL: model.URL + "/v1", Model: "demo", Tools: reg})
	if err != nil {
		panic(err)
	}
	res, err := p.Plan(context.Background(), planner.Request{Goal: "add ada@example.com"})
	if err != nil {
		panic(err)
	}
	out, _ := json.Marshal(res.Plan.Actions)
	fmt.Println(string(out))
	fmt.Println(res.Reply, res.Rounds, res.Usage.TotalTokens)
	// Output:
	// [{"id":"a1","tool":"crm.create","args":{"email":"ada@example.com"}}]
	// Queued the contact for review. 2 250
}
