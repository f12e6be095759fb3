package httptool

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httpspan"
	"github.com/docketrun/docket/tools/toolsfile"
)

var (
	_ tools.Tool     = (*Tool)(nil)
	_ tools.Looker   = (*LookupTool)(nil)
	_ slog.LogValuer = (*Tool)(nil)
)

// Tool is an HTTP tool from a tools file. Safe for concurrent use. It holds
// the environment values its templates use; they never appear in its errors
// or in its log value.
type Tool struct {
	def    *toolsfile.Tool
	client *http.Client
	now    func() time.Time
	max    int64
	names  argNames
	// hidden are what errors and log values never show, longest first: the
	// environment values and the credentials typed into the file's request
	// and lookup (toolsfile.Request.LiteralSecrets).
	hidden []string
}

// LookupTool is a Tool with a lookup block: it also implements tools.Looker.
type LookupTool struct{ *Tool }

// Spec returns the tool's spec.
func (t *Tool) Spec() tools.Spec { return t.def.Spec }

// LogValue describes the tool without any environment value.
func (t *Tool) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("tool", t.def.Spec.Name),
		slog.String("class", string(t.def.Spec.Class)),
		slog.String("method", t.def.Request.Method),
		slog.String("url", t.redact(t.def.Request.URL.String())),
	)
}

// String describes the tool without any environment value.
func (t *Tool) String() string {
	return t.redact(fmt.Sprintf("%s (%s %s %s)", t.def.Spec.Name, t.def.Spec.Class, t.def.Request.Method, t.def.Request.URL.String()))
}

// GoString keeps environment values out of %#v.
func (t *Tool) GoString() string { return "httptool.Tool{" + t.String() + "}" }

// Call sends the request and classifies its failure (tools/README.md, Failures): nothing
// written → tools.NotSent; 429, or 503 with Retry-After → tools.RetryAfter;
// 409 on a keyed tool → tools.InFlight; other 4xx except 408/409/425 →
// tools.Permanent (with the response body, truncated); 408, 409 on other
// tools, 425, 3xx (redirects are not followed), 5xx, timeouts, resets after
// sending, unreadable or oversized 2xx bodies → a plain error (outcome unknown).
func (t *Tool) Call(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	resp, body, err := t.do(ctx, t.def.Request, call, true)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, t.statusError(t.def.Request, resp, body)
	}
	out, err := selectOutput(resp.StatusCode, body, t.def.Output, false)
	if err != nil {
		return nil, t.errorf(t.def.Request, "%d response: %v (the request took effect; outcome recorded as unknown)", resp.StatusCode, err)
	}
	return out, nil
}

// Lookup runs the lookup block: found "nonempty" → a 2xx answer whose
// selected value (after the lookup's output pointer; an array's first element)
// is a non-empty array or object; an empty array or object, null, an index
// past the end of an array ("/results/0" on "results": []), or 404 → not
// found. found "status_200" → 200 is found, 404 not found. Other statuses
// are errors classified as for Call.
func (t *LookupTool) Lookup(ctx context.Context, call tools.Call) (json.RawMessage, bool, error) {
	l := t.def.Lookup
	resp, body, err := t.do(ctx, l.Request, call, false)
	if err != nil {
		return nil, false, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, false, nil
	case l.Found == "status_200" && resp.StatusCode == http.StatusOK,
		l.Found == "nonempty" && resp.StatusCode >= 200 && resp.StatusCode <= 299:
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		return nil, false, t.errorf(l.Request, "lookup answered %d (found: %s wants 200 or 404)", resp.StatusCode, l.Found)
	default:
		return nil, false, t.statusError(l.Request, resp, body)
	}
	out, err := selectOutput(resp.StatusCode, body, l.Output, true)
	if errors.Is(err, errNothing) && l.Found == "status_200" {
		out, err = selectOutput(resp.StatusCode, body, l.Output, false) // 200 is found, even if empty
	}
	if err != nil {
		if errors.Is(err, errNothing) {
			return nil, false, nil
		}
		return nil, false, t.errorf(l.Request, "lookup %d response: %v", resp.StatusCode, err)
	}
	if l.Found == "nonempty" && isEmpty(out) {
		return nil, false, nil
	}
	return out, true, nil
}

var errNothing = errors.New("nothing selected")

func isEmpty(v json.RawMessage) bool {
	s := string(bytes.TrimSpace(v))
	if s == "null" || s == "" {
		return true
	}
	var x any
	if json.Unmarshal(v, &x) != nil {
		return true
	}
	switch x := x.(type) {
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// do builds and sends one request and reads its body (up to the cap).
func (t *Tool) do(ctx context.Context, r *toolsfile.Request, call tools.Call, isCall bool) (*http.Response, []byte, error) {
	req, err := t.build(ctx, r, call, isCall)
	if err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, tools.NotSent(t.errorf(r, "not sent: %v", err))
	}
	ctx, cancel := context.WithTimeout(ctx, t.def.Spec.Timeout)
	defer cancel()
	var writes atomic.Int32
	trace := &httptrace.ClientTrace{WroteHeaders: func() { writes.Add(1) }}
	req = req.WithContext(httptrace.WithClientTrace(ctx, trace))
	// The request's client span (a child of the attempt's or lookup's span,
	// HTTP semantic conventions, secrets redacted from url.full) and the
	// trace context headers: the called service's work becomes its child.
	// Nothing is made or set when ctx carries no span (tracing off).
	req, end := httpspan.Start(req, t.redact)
	// Sent once per call: Go's client sends a request with an
	// Idempotency-Key header again by itself, on a new connection, when a
	// kept-alive one closes after the request was written and before an
	// answer; an answer to that copy (a 429: nothing done) would then speak
	// for a call whose first copy may have taken effect. Without GetBody a
	// request with a body is never sent again; one without a body that was
	// (writes) has an unknown outcome whatever the answer says, unless 2xx.
	req.GetBody = nil
	resp, err := t.client.Do(req)
	end(resp, err)
	if err != nil {
		inner := err
		var ue *url.Error
		if errors.As(err, &ue) {
			inner = ue.Err // url.Error's text holds the resolved URL
		}
		if writes.Load() == 0 {
			return nil, nil, tools.NotSent(t.wrap(r, inner, "not sent"))
		}
		return nil, nil, t.wrap(r, inner, "sent, outcome unknown")
	}
	defer resp.Body.Close()
	if n := writes.Load(); n > 1 && isCall && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		return nil, nil, t.errorf(r, "%s to a copy the HTTP client sent again (%d sent: a connection closed after the request and before an answer), outcome unknown", resp.Status, n)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, t.max+1))
	if err != nil {
		return nil, nil, t.wrap(r, err, fmt.Sprintf("%d response, reading the body (outcome unknown)", resp.StatusCode))
	}
	if int64(len(body)) > t.max {
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return nil, nil, t.tooLarge(r, resp, int64(len(body)), isCall)
		}
		body = body[:t.max]
	}
	return resp, body, nil
}

// overCapMeasure bounds how much of an answer over the cap is read (and
// discarded) to say how large it was.
const overCapMeasure = 256 << 20

// tooLarge is the error for a 2xx answer over the response cap: a definite
// failure (calling again gives the same answer) wrapping
// tools.ErrOutputTooLarge, naming the cap and the answer's size. The call
// took effect: the executor decides by effect class what that means.
func (t *Tool) tooLarge(r *toolsfile.Request, resp *http.Response, read int64, isCall bool) error {
	n := read
	if resp.ContentLength > n {
		n = resp.ContentLength
	} else if m, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, overCapMeasure)); m > 0 {
		n += m
	}
	size := fmt.Sprintf("%s, %d bytes", mib(n), n)
	if n > read && n == read+overCapMeasure && resp.ContentLength < 0 {
		size = "more than " + size
	}
	what := "the call took effect but its answer"
	if !isCall {
		what = "the lookup's answer"
	}
	msg := fmt.Sprintf("tool %q: %s %s: %s (%d response, %s) exceeds the %s output cap (%d bytes)",
		t.def.Spec.Name, r.Method, r.URL, what, resp.StatusCode, size, mib(t.max), t.max)
	return tools.Permanent(&toolError{msg: t.redact(msg), err: tools.ErrOutputTooLarge})
}

// mib formats a byte count in MiB ("8 MiB", "9.5 MiB").
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// build checks the arguments and builds the request; its errors are
// tools.Permanent (nothing was sent; the same call would be refused again).
func (t *Tool) build(ctx context.Context, r *toolsfile.Request, call tools.Call, isCall bool) (*http.Request, error) {
	args, err := decodeArgs(call.Args)
	if err == nil {
		err = t.names.check(args, r)
	}
	if err != nil {
		return nil, tools.Permanent(t.wrap(r, err, "arguments"))
	}
	d := &toolsfile.Data{Args: args, Key: call.Key, Env: t.def.Env}
	req, err := t.newRequest(ctx, r, d, isCall)
	if err != nil {
		return nil, tools.Permanent(t.wrap(r, err, "building the request"))
	}
	return req, nil
}

func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	v, err := tools.DecodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a JSON object, got %s", tools.JSONKind(v))
	}
	return m, nil
}

func (t *Tool) newRequest(ctx context.Context, r *toolsfile.Request, d *toolsfile.Data, isCall bool) (*http.Request, error) {
	u, err := r.URL.RenderGuardedURL(d)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	var body io.Reader
	var hasBody bool
	switch {
	case r.HasBody:
		b, err := marshal(toolsfile.RenderBody(r.Body, d))
		if err != nil {
			return nil, fmt.Errorf("body: %v", err)
		}
		body, hasBody = bytes.NewReader(b), true
	case r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH":
		b, err := marshal(d.Args)
		if err != nil {
			return nil, fmt.Errorf("body: %v", err)
		}
		body, hasBody = bytes.NewReader(b), true
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return nil, errors.New("the URL does not parse once filled in")
	}
	for _, h := range r.Headers {
		v := h.Value.Render(d)
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf("header %s: value contains a line break", h.Name)
		}
		req.Header.Set(h.Name, v)
	}
	if isCall && t.def.KeyHeader != "" {
		req.Header.Set(t.def.KeyHeader, d.Key)
	}
	if hasBody && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "docket")
	}
	return req, nil
}

// marshal encodes v without HTML escaping ("&" stays "&").
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// statusError classifies a non-2xx answer.
func (t *Tool) statusError(r *toolsfile.Request, resp *http.Response, body []byte) error {
	code := resp.StatusCode
	snippet := truncate(body, 512)
	base := t.errorf(r, "%s: %s", resp.Status, snippet)
	switch {
	case code == http.StatusTooManyRequests:
		d, _ := retryAfter(resp.Header.Get("Retry-After"), t.now())
		return tools.RetryAfter(d, base)
	case code == http.StatusServiceUnavailable:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), t.now()); ok {
			return tools.RetryAfter(d, base)
		}
		return base
	case code == http.StatusConflict && t.def.Spec.Class == tools.Keyed && r == t.def.Request:
		d, _ := retryAfter(resp.Header.Get("Retry-After"), t.now())
		return tools.InFlight(d, base)
	case code == http.StatusRequestTimeout || code == http.StatusConflict || code == http.StatusTooEarly:
		return base
	case code >= 400 && code <= 499:
		return tools.Permanent(base)
	case code >= 300 && code <= 399:
		// A 303 after a POST usually means "done, see there": the effect may exist.
		return t.errorf(r, "%s (redirects are not followed; outcome unknown)", resp.Status)
	}
	return base // 5xx and anything unexpected: outcome unknown
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		const maxSeconds = int64(1<<63-1) / int64(time.Second)
		return time.Duration(min(n, maxSeconds)) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

func truncate(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "…(truncated)"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}

// selectOutput turns a 2xx body into the recorded output: the value at
// pointer (or the whole JSON body); a non-JSON body becomes
// {"status": N, "body": "text"}. firstOfArray (lookups) takes an array's
// first element unless the pointer's last step already indexed an array, and
// an empty array or an index past the end of an array selects nothing
// (errNothing), so that "/results" and "/results/0" select alike.
func selectOutput(status int, body []byte, pointer string, firstOfArray bool) (json.RawMessage, error) {
	if !json.Valid(body) {
		if pointer != "" {
			return nil, fmt.Errorf("the body is not JSON, cannot select %s", pointer)
		}
		if firstOfArray {
			if len(bytes.TrimSpace(body)) == 0 {
				return nil, errNothing
			}
		}
		return marshal(map[string]any{"status": status, "body": string(body)})
	}
	if pointer == "" && !firstOfArray {
		return append(json.RawMessage(nil), bytes.TrimSpace(body)...), nil
	}
	v, err := tools.DecodeJSON(body)
	if err != nil {
		return nil, err
	}
	v, indexed, err := resolvePointer(v, pointer)
	if err != nil {
		if firstOfArray && errors.Is(err, errPastEnd) {
			return nil, errNothing
		}
		return nil, err
	}
	if arr, ok := v.([]any); ok && firstOfArray && !indexed {
		if len(arr) == 0 {
			return nil, errNothing
		}
		v = arr[0]
	}
	return marshal(v)
}

// errPastEnd is a pointer's index past the end of an array it reached.
var errPastEnd = errors.New("index past the end of the array")

// resolvePointer returns the value at p in v and whether p's last step
// indexed an array. An index past the end of an array is an error wrapping
// errPastEnd (a lookup's "not found"); any other miss is a plain error.
func resolvePointer(v any, p string) (any, bool, error) {
	toks, err := toolsfile.SplitPointer(p)
	if err != nil {
		return nil, false, err
	}
	cur := v
	indexed := false
	for i, tk := range toks {
		at := "/" + strings.Join(toks[:i+1], "/")
		switch c := cur.(type) {
		case map[string]any:
			x, ok := c[tk]
			if !ok {
				return nil, false, fmt.Errorf("the response has nothing at %s", at)
			}
			cur, indexed = x, false
		case []any:
			n, err := strconv.Atoi(tk)
			if err != nil || n < 0 || (len(tk) > 1 && tk[0] == '0') {
				return nil, false, fmt.Errorf("the response has nothing at %s (array of %d)", at, len(c))
			}
			if n >= len(c) {
				return nil, false, fmt.Errorf("the response has nothing at %s (array of %d): %w", at, len(c), errPastEnd)
			}
			cur, indexed = c[n], true
		default:
			return nil, false, fmt.Errorf("the response has nothing at %s (%s)", at, tools.JSONKind(cur))
		}
	}
	return cur, indexed, nil
}

// errorf makes an error naming the tool and the request as written in the
// file (never as sent: the sent URL may hold environment values), with every
// environment value the tool knows redacted from the text.
func (t *Tool) errorf(r *toolsfile.Request, format string, a ...any) error {
	return &toolError{msg: t.redact(fmt.Sprintf("tool %q: %s %s: ", t.def.Spec.Name, r.Method, r.URL) + fmt.Sprintf(format, a...))}
}

func (t *Tool) wrap(r *toolsfile.Request, err error, what string) error {
	return &toolError{msg: t.redact(fmt.Sprintf("tool %q: %s %s: %s: %v", t.def.Spec.Name, r.Method, r.URL, what, err)), err: err}
}

// toolError is an error whose text was redacted; Unwrap keeps errors.Is
// working (context.DeadlineExceeded, syscall errors).
type toolError struct {
	msg string
	err error
}

func (e *toolError) Error() string { return e.msg }
func (e *toolError) Unwrap() error { return e.err }

// redact replaces every environment value and every credential typed into
// the file (and their URL-escaped forms) in s.
func (t *Tool) redact(s string) string {
	for _, v := range t.hidden {
		for _, form := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
			s = strings.ReplaceAll(s, form, "[redacted]")
		}
	}
	return s
}

// hiddenValues lists what redact replaces: the tool's environment values
// and the credentials typed into its file, each at least 3 bytes long
// (shorter ones cannot be told from ordinary text), longest first (so that
// a value holding another is replaced whole).
func hiddenValues(def *toolsfile.Tool) []string {
	var out []string
	for _, v := range def.Env {
		out = append(out, v)
	}
	out = append(out, def.Request.LiteralSecrets()...)
	if def.Lookup != nil {
		out = append(out, def.Lookup.Request.LiteralSecrets()...)
	}
	out = slices.DeleteFunc(out, func(v string) bool { return len(v) < 3 })
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(out)
}
