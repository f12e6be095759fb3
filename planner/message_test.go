package planner

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestRequestJSONRoundTrip: a Request with every message field the chat and
// planning flows use (POST /v1/runs "messages", docket chat, recorded
// transcripts) decodes into docket's own Message and encodes back to the
// same bytes, field names and order as the OpenAI chat format writes them,
// whatever go-openai does.
func TestRequestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	in := []byte(`{"goal":"onboard ACME","messages":[` +
		`{"role":"system","content":"Answer in French."},` +
		`{"role":"user","content":"create the contact","name":"ops"},` +
		`{"role":"assistant","content":"on it","tool_calls":[{"id":"call_1","type":"function","function":{"name":"create_contact","arguments":"{\"email\":\"a@acme.example\"}"}}]},` +
		`{"role":"tool","content":"{\"queued\":true,\"action_id\":\"a1\"}","tool_call_id":"call_1"},` +
		`{"role":"assistant","refusal":"no","reasoning_content":"thinking","function_call":{"name":"legacy","arguments":"{}"}}]}`)
	var req Request
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		t.Fatal(err)
	}
	if len(req.Messages) != 5 || req.Messages[2].ToolCalls[0].Function.Name != "create_contact" || req.Messages[3].ToolCallID != "call_1" {
		t.Fatalf("decoded %+v", req)
	}
	out, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, in) {
		t.Errorf("round trip changed the JSON:\n got %s\nwant %s", out, in)
	}
	// Through the model's type and back, nothing is lost.
	back, err := json.Marshal(Request{Goal: req.Goal, Messages: fromOpenAI(toOpenAI(req.Messages))})
	if err != nil || !bytes.Equal(back, in) {
		t.Errorf("through go-openai and back:\n got %s (%v)\nwant %s", back, err, in)
	}
}

// TestProvenanceTyped: provenance goes into a plan's Meta and comes back
// typed; a value that is not a count is an error naming its key, an absent
// one is 0.
func TestProvenanceTyped(t *testing.T) {
	t.Parallel()
	p := Provenance{Usage: Usage{PromptTokens: 120, CompletionTokens: 30, TotalTokens: 150}, Rounds: 3, Repairs: 1}
	meta := map[string]string{"model": "m"}
	p.addTo(meta)
	if meta["total_tokens"] != "150" || meta["rounds"] != "3" {
		t.Fatalf("meta = %v", meta)
	}
	got, err := ReadProvenance(meta)
	if err != nil || got != p {
		t.Fatalf("read back %+v, %v; want %+v", got, err, p)
	}
	if got, err := ReadProvenance(map[string]string{"rounds": "2"}); err != nil || got != (Provenance{Rounds: 2}) {
		t.Errorf("partial meta: %+v, %v", got, err)
	}
	if _, err := ReadProvenance(map[string]string{"repairs": "2x"}); err == nil || !bytes.Contains([]byte(err.Error()), []byte(`repairs = "2x"`)) {
		t.Errorf("bad count: %v", err)
	}
}
