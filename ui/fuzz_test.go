package ui

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/docketrun/docket/tools"
)

// FuzzRequestBodies feeds arbitrary bytes to the handlers that parse request
// bodies (creating a run, review operations, sessions): every answer is JSON
// with a status, never a panic, and an invalid body never creates a run.
func FuzzRequestBodies(f *testing.F) {
	for _, seed := range []string{
		`{"goal":"onboard ACME"}`,
		`{"plan":{"actions":[{"id":"a","tool":"t","args":{}}]},"approve":"all"}`,
		`{"run_id":"x","plan":null}`,
		`{"actions":["a"]}`,
		`{"done":{"id":1},"retry":true}`,
		`{"args":{"x":1e400}}`,
		`{"token":"` + "\x00" + `"}`,
		`[1,2,3]`, `{"goal":"a"}{"goal":"b"}`, `{`, ``, `null`,
	} {
		f.Add([]byte(seed))
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		f.Fatal(err)
	}
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 16}.WithDefaults(), reg: reg, metrics: newMetrics(nil, nil, nil),
		accepting: map[string]bool{}, drives: map[string]int{}}
	s.sessions = newSessionStore(nil, s.cfg.MaxSessionsPerToken, s.principalNamed)
	s.cfg.Tokens = map[string]string{"t": "0123456789abcdef"}
	if s.tokens, err = buildTokens(s.cfg); err != nil {
		f.Fatal(err)
	}
	s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	s.limits = newLimiter(0, 0, 0, time.Now)
	s.signins = newSignIns(-1, 1, time.Now, s.log)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req createRequest
		trimmed := bytes.TrimSpace(body)
		// An empty (or all-space) body is {}; JSON null leaves every field unset.
		if err := decodeStrict(body, &req); err == nil && len(trimmed) > 0 && trimmed[0] != '{' && string(trimmed) != "null" {
			t.Fatalf("a body that is not an object decoded: %q", body)
		}
		var op reviewOp
		decodeStrict(body, &op)
		for _, h := range []http.HandlerFunc{s.createSession, func(w http.ResponseWriter, r *http.Request) {
			// createRun up to (not including) any ledger access: a body that
			// passes the checks would need a ledger, which this target has not.
			var req createRequest
			b, ok := s.readBody(w, r)
			if !ok {
				return
			}
			if err := decodeStrict(b, &req); err != nil {
				writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
				return
			}
			writeJSON(w, http.StatusOK, map[string]bool{"decoded": true})
		}} {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
			h(rec, r)
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("answer %d has content type %q", rec.Code, ct)
			}
			if rec.Code >= 400 && !bytes.Contains(rec.Body.Bytes(), []byte(`"error":{"code":`)) {
				t.Fatalf("error answer %d is not the error shape: %s", rec.Code, rec.Body)
			}
		}
	})
}
