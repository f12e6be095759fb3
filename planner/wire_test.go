package planner_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/docketrun/docket/planner"
)

// captureTransport records requests (headers redacted, as a recorder must)
// and answers with one canned reply.
type captureTransport struct {
	mu     sync.Mutex
	reqs   []*http.Request
	bodies []string
	reply  string
}

func (c *captureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	rec := r.Clone(context.Background())
	rec.Header = planner.RedactHeaders(r.Header)
	c.mu.Lock()
	c.reqs = append(c.reqs, rec)
	c.bodies = append(c.bodies, string(b))
	c.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(c.reply)), Request: r}, nil
}

// A custom HTTPClient sees every request (evals record exchanges this way);
// RedactHeaders removes the key from what it keeps.
func TestHTTPClientAndRedactHeaders(t *testing.T) {
	t.Parallel()
	reg, _, _, _, _ := registry(t)
	ct := &captureTransport{reply: text("nothing to do").body}
	p, err := planner.New(planner.Config{BaseURL: "http://model.invalid/v1", APIKey: testKey, Model: "m", Tools: reg, HTTPClient: &http.Client{Transport: ct}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Plan(context.Background(), planner.Request{Goal: "hi"}); err != nil {
		t.Fatal(err)
	}
	if len(ct.reqs) != 1 || ct.reqs[0].URL.String() != "http://model.invalid/v1/chat/completions" {
		t.Fatalf("requests: %v", ct.reqs)
	}
	if got := ct.reqs[0].Header.Get("Authorization"); got != "[REDACTED]" {
		t.Errorf("recorded Authorization = %q", got)
	}
	if strings.Contains(ct.bodies[0], testKey) {
		t.Errorf("the key is in the request body")
	}
}

// A classic Azure OpenAI resource URL uses the deployment path, api-version
// and the api-key header.
func TestAzureEndpoint(t *testing.T) {
	t.Parallel()
	reg, _, _, _, _ := registry(t)
	ct := &captureTransport{reply: text("ok").body}
	p, err := planner.New(planner.Config{BaseURL: "https://contoso.openai.azure.com", APIKey: testKey, Model: "planner-4o",
		APIVersion: "2024-10-21", Tools: reg, HTTPClient: &http.Client{Transport: ct}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Plan(context.Background(), planner.Request{Goal: "hi"}); err != nil {
		t.Fatal(err)
	}
	u := ct.reqs[0].URL
	if u.Path != "/openai/deployments/planner-4o/chat/completions" || u.Query().Get("api-version") != "2024-10-21" {
		t.Errorf("Azure URL = %s", u)
	}
	if ct.reqs[0].Header.Get("Api-Key") != "[REDACTED]" || ct.reqs[0].Header.Get("Authorization") != "" {
		t.Errorf("Azure headers = %v", ct.reqs[0].Header)
	}
}

// A request go-openai refuses before sending is a configuration error, not
// retried.
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	reg, _, _, _, _ := registry(t)
	ct := &captureTransport{reply: text("ok").body}
	temp := float32(0.2)
	p, err := planner.New(planner.Config{BaseURL: "http://model.invalid/v1", Model: "o1-mini", Temperature: &temp, Tools: reg,
		HTTPClient: &http.Client{Transport: ct}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Plan(context.Background(), planner.Request{Goal: "hi"})
	if !errors.Is(err, planner.ErrConfig) || len(ct.reqs) != 0 {
		t.Fatalf("err = %v, %d requests sent", err, len(ct.reqs))
	}
}
