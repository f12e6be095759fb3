package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/tools/httpspan"
)

// maxReplyBytes bounds one HTTP response body from the model.
const maxReplyBytes = 32 << 20

// attempt is one HTTP request to the model, as recorded in the exchange.
// Headers are never recorded (the request's carry the API key).
type attempt struct {
	Round      int             `json:"round"`
	Attempt    int             `json:"attempt"`
	Status     int             `json:"status,omitempty"`
	DurationMS int64           `json:"duration_ms"`
	RetryAfter string          `json:"retry_after,omitempty"`
	Response   json.RawMessage `json:"response,omitempty"` // the body, when it is JSON
	Body       string          `json:"body,omitempty"`     // the body (clipped), when it is not
	Error      string          `json:"error,omitempty"`
	// Streamed: the reply came as server-sent events; Response is the chat
	// completion they assemble into.
	Streamed bool `json:"streamed,omitempty"`

	header    http.Header
	body      []byte
	dur       time.Duration
	sent      bool // the transport was reached
	read      bool // the whole body was read
	fixedArgs bool // tool call arguments came as JSON objects and were re-encoded
	stream    bool // the request asked for a streamed reply
	assembled []byte
}

// exchange is the whole model exchange of one planning: what was asked (the
// request parameters once, the final conversation) and every answer.
type exchange struct {
	Model      string                         `json:"model"`
	Mode       Mode                           `json:"mode"`
	PromptHash string                         `json:"prompt_hash"`
	Params     json.RawMessage                `json:"params"` // the request without its messages
	Messages   []openai.ChatCompletionMessage `json:"messages"`
	Attempts   []*attempt                     `json:"attempts"`
	Usage      Usage                          `json:"usage"`
	// Notes are the server quirks met and how they were handled (the
	// warnings of the planning), e.g. a refused "strict" and the fallback.
	Notes []string `json:"notes,omitempty"`
}

type attemptKey struct{}

// recordingTransport reads each response to the model into memory (bounded)
// so the exchange can keep the exact body, and notes the status and headers.
type recordingTransport struct {
	base http.RoundTripper
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	at, _ := req.Context().Value(attemptKey{}).(*attempt)
	if at != nil {
		at.sent = true
	}
	resp, err := t.base.RoundTrip(req)
	if at == nil || err != nil {
		return resp, err
	}
	at.Status = resp.StatusCode
	at.header = resp.Header
	if at.stream && resp.StatusCode/100 == 2 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// Streamed: the body is read as it arrives, and kept (bounded) for
		// the exchange as it passes.
		resp.Body = &teeBody{rc: resp.Body, at: at}
		return resp, nil
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes+1))
	resp.Body.Close()
	if rerr != nil {
		return nil, fmt.Errorf("reading the reply: %w", rerr)
	}
	if len(body) > maxReplyBytes {
		return nil, fmt.Errorf("reply larger than %d bytes", maxReplyBytes)
	}
	at.body = body
	at.read = true
	if resp.StatusCode/100 == 2 {
		if fixed, ok := fixArguments(body); ok {
			at.fixedArgs = true
			body = fixed
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// teeBody keeps what is read of a streamed body in its attempt.
type teeBody struct {
	rc io.ReadCloser
	at *attempt
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if len(t.at.body)+n <= maxReplyBytes {
		t.at.body = append(t.at.body, p[:n]...)
	}
	if err == io.EOF {
		t.at.read = true
	}
	return n, err
}

func (t *teeBody) Close() error { return t.rc.Close() }

// wrapClient returns a client like c whose transport records attempts and
// sends the trace context.
func wrapClient(c *http.Client) *http.Client {
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wc := *c
	// The model call's span (send) travels to the model's server in the
	// trace context headers (traceparent).
	wc.Transport = &recordingTransport{base: &httpspan.Inject{Base: base}}
	return &wc
}

// finish fills the attempt's recorded body.
func (a *attempt) finish(redact func([]byte) []byte) {
	if a.assembled != nil {
		a.Response = redact(a.assembled)
		return
	}
	if len(a.body) == 0 {
		return
	}
	b := redact(a.body)
	if json.Valid(b) {
		a.Response = b // compacted when the exchange is encoded
		return
	}
	a.Body = clip(string(b), 4096)
}

// retryAfter reads Retry-After (seconds or an HTTP date) or OpenAI's
// retry-after-ms from the attempt's answer; 0 when absent or unreadable.
func (a *attempt) retryAfter(now time.Time) time.Duration {
	if a.header == nil {
		return 0
	}
	if ms := a.header.Get("Retry-After-Ms"); ms != "" {
		if v, err := strconv.ParseFloat(ms, 64); err == nil && v >= 0 {
			a.RetryAfter = ms + "ms"
			return time.Duration(v * float64(time.Millisecond))
		}
	}
	ra := strings.TrimSpace(a.header.Get("Retry-After"))
	if ra == "" {
		return 0
	}
	a.RetryAfter = ra
	if secs, err := strconv.ParseFloat(ra, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(ra); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// redactor replaces the API key, in whatever JSON escaping, by [REDACTED].
func redactor(key string) func(string) string {
	if key == "" {
		return func(s string) string { return s }
	}
	forms := []string{key}
	if q, err := json.Marshal(key); err == nil {
		if e := string(q[1 : len(q)-1]); e != key {
			forms = append(forms, e)
		}
	}
	return func(s string) string {
		for _, f := range forms {
			if strings.Contains(s, f) {
				s = strings.ReplaceAll(s, f, "[REDACTED]")
			}
		}
		return s
	}
}

// bytesRedactor is redactor for bytes: b itself when it holds no key.
func bytesRedactor(key string) func([]byte) []byte {
	r := redactor(key)
	if key == "" {
		return func(b []byte) []byte { return b }
	}
	forms := [][]byte{[]byte(key)}
	if q, err := json.Marshal(key); err == nil && string(q[1:len(q)-1]) != key {
		forms = append(forms, q[1:len(q)-1])
	}
	return func(b []byte) []byte {
		for _, f := range forms {
			if bytes.Contains(b, f) {
				return []byte(r(string(b)))
			}
		}
		return b
	}
}

// RedactHeaders returns a copy of h safe to record or log: the credentials
// the planner sends (Authorization, api-key) and cookies are replaced by
// "[REDACTED]". For RoundTrippers that record exchanges (Config.HTTPClient).
func RedactHeaders(h http.Header) http.Header {
	out := h.Clone()
	for _, k := range []string{"Authorization", "Api-Key", "Proxy-Authorization", "Cookie", "Set-Cookie", "Openai-Organization"} {
		if _, ok := out[k]; ok {
			out[k] = []string{"[REDACTED]"}
		}
	}
	return out
}

// errorInBody is a 200 answer whose body is an API error object (some
// servers answer errors that way).
func errorInBody(body []byte) (string, bool) {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.Error) == 0 || string(v.Error) == "null" {
		return "", false
	}
	var e openai.APIError
	if json.Unmarshal(v.Error, &e) == nil && e.Message != "" {
		return e.Message, true
	}
	return clip(string(v.Error), 300), true
}

// isTimeout reports whether err is the attempt's own deadline.
func isTimeout(err error, attemptCtx, parent context.Context) bool {
	return parent.Err() == nil && (errors.Is(attemptCtx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded))
}
