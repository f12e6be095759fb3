package ui_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/planner/demomodel"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/ui"
)

const testToken = "test-token-0123456789"

// bundle is what a test needs: the server over a fresh ledger and the demo
// world, planned by the demo model.
type bundle struct {
	t         testing.TB
	srv       *ui.Server
	hs        *httptest.Server
	led       ledger.Store
	world     *demoworld.World
	reg       *tools.Registry
	toolsFile []byte
	dir       string
}

type options struct {
	tune      func(*ui.Config)
	toolsFile func(w *demoworld.World) []byte // default: the world's tools file
	model     http.RoundTripper               // default: the demo model
	dir       string                          // default: a new temporary directory
	subBuffer int                             // ledger SubscriberBuffer (default: the ledger's)
	env       map[string]string               // the tools file's environment
	tls       bool                            // serve HTTPS with a certificate the test makes
	wrap      func(ledger.Store) ledger.Store // the ledger the server sees (default: the Badger ledger itself)
}

// testTLSEnv, set to 1, serves every bundle over HTTPS (options.tls), so the
// whole suite runs once more over TLS: `DOCKET_TEST_TLS=1 go test ./ui/`
// (make test does).
const testTLSEnv = "DOCKET_TEST_TLS"

// allTLS says whether every bundle is served over HTTPS.
var allTLS = os.Getenv(testTLSEnv) == "1"

func setup(t testing.TB, o options) *bundle {
	t.Helper()
	w := demoworld.Start()
	t.Cleanup(w.Close)
	file := w.ToolsFile(demoworld.ToolsOptions{Timeout: "2s"})
	if o.toolsFile != nil {
		file = o.toolsFile(w)
	}
	f, err := httptool.Parse(file, func(k string) string { return o.env[k] })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		t.Fatal(err)
	}
	dir := o.dir
	if dir == "" {
		dir = t.TempDir()
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	led, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir, Logger: quiet, SubscriberBuffer: o.subBuffer})
	if err != nil {
		t.Fatal(err)
	}
	model := o.model
	if model == nil {
		model = demomodel.Transport()
	}
	pl, err := planner.New(planner.Config{BaseURL: demomodel.BaseURL, Model: demomodel.Model, Tools: reg, HTTPClient: &http.Client{Transport: model}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var seen ledger.Store = led
	if o.wrap != nil {
		seen = o.wrap(led)
	}
	cfg := ui.Config{
		Ledger:    seen,
		Tools:     reg,
		Planner:   pl,
		Tokens:    map[string]string{"alice": testToken},
		ToolsFile: file,
		Logger:    quiet,
		Executor:  executor.Config{SkewMargin: 10 * time.Millisecond, Retry: executor.RetryPolicy{Base: time.Millisecond, Max: 5 * time.Millisecond}},
	}
	if o.tune != nil {
		o.tune(&cfg)
	}
	srv, err := ui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var hs *httptest.Server
	if o.tls || allTLS {
		hs = httptest.NewUnstartedServer(srv.Handler())
		cr := testCert(t, "docket-test")
		// The client (hs.Client()) trusts Certificates[0]: the test-made one.
		hs.TLS = cr.TLSConfig()
		hs.TLS.Certificates = []tls.Certificate{*cr.Certificate()}
		// HTTP/2 as well, as docket serve's ServeTLS offers it: browsers
		// fetch over h2 and open WebSockets over HTTP/1.1.
		hs.EnableHTTP2 = true
		hs.StartTLS()
	} else {
		hs = httptest.NewServer(srv.Handler())
	}
	b := &bundle{t: t, srv: srv, hs: hs, led: led, world: w, reg: reg, toolsFile: file, dir: dir}
	t.Cleanup(b.stop)
	return b
}

// stop shuts everything down in order (idempotent).
func (b *bundle) stop() {
	if b.hs == nil {
		return
	}
	b.hs.CloseClientConnections()
	b.hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		b.t.Errorf("shutdown: %v", err)
	}
	if err := b.led.Close(); err != nil {
		b.t.Errorf("closing the ledger: %v", err)
	}
	b.hs = nil
}

// client is the HTTP client for b's server: over TLS it trusts the test's
// certificate. Tests use it (never http.DefaultClient), so they run over
// HTTPS as well as HTTP.
func (b *bundle) client() *http.Client { return b.hs.Client() }

// dialer is the WebSocket dialer for b's server, trusting what client
// trusts. Tests use it (never websocket.DefaultDialer).
func (b *bundle) dialer() *websocket.Dialer {
	d := *websocket.DefaultDialer
	if tr, ok := b.client().Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
		d.TLSClientConfig = tr.TLSClientConfig.Clone()
		// The client may speak HTTP/2; a WebSocket upgrade is HTTP/1.1.
		d.TLSClientConfig.NextProtos = nil
	}
	return &d
}

// secure says whether b serves HTTPS (options.tls or DOCKET_TEST_TLS=1).
func (b *bundle) secure() bool { return strings.HasPrefix(b.hs.URL, "https://") }

// wsURL is the WebSocket URL of path on b's server (ws or wss).
func (b *bundle) wsURL(path string) string {
	return "ws" + strings.TrimPrefix(b.hs.URL, "http") + path
}

// call sends an authenticated JSON request and decodes the answer into out
// (when not nil). It returns the status.
func (b *bundle) call(method, path string, body any, out any) int {
	b.t.Helper()
	return b.callWith(method, path, body, out, map[string]string{"Authorization": "Bearer " + testToken})
}

func (b *bundle) callWith(method, path string, body any, out any, headers map[string]string) int {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			b.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.hs.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := b.client().Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("%s %s: answer %d is not the expected JSON: %v\n%s", method, path, resp.StatusCode, err, raw)
		}
	}
	return resp.StatusCode
}

// runDoc is the Run JSON as a client reads it.
type runDoc struct {
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	Revision int    `json:"revision"`
	Goal     string `json:"goal"`
	Policy   string `json:"policy"`
	Error    string `json:"error"`
	Actions  []struct {
		ID        string          `json:"id"`
		Tool      string          `json:"tool"`
		Class     string          `json:"class"`
		Key       string          `json:"key"`
		Status    string          `json:"status"`
		Attempts  int             `json:"attempts"`
		Args      json.RawMessage `json:"args"`
		DependsOn []string        `json:"depends_on"`
		Output    json.RawMessage `json:"output"`
		Error     string          `json:"error"`
	} `json:"actions"`
}

func (d runDoc) action(id string) (status string, ok bool) {
	for _, a := range d.Actions {
		if a.ID == id {
			return a.Status, true
		}
	}
	return "", false
}

type errorBody struct {
	Error struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Details json.RawMessage `json:"details"`
	} `json:"error"`
}

// waitFor follows the run's events in the ledger until cond holds for the
// run's document (checked after every event), or fails after a deadline.
func (b *bundle) waitFor(runID string, what string, cond func(ledger.RunDoc) bool) ledger.RunDoc {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last uint64
	sub, err := b.led.Subscribe(ctx, runID, 0)
	if err != nil {
		b.t.Fatalf("subscribing to %s: %v", runID, err)
	}
	defer func() { sub.Close() }()
	for {
		doc, err := b.led.Doc(ctx, runID)
		if err != nil {
			b.t.Fatal(err)
		}
		if cond(doc) {
			return doc
		}
		select {
		case ev, ok := <-sub.C:
			if ok {
				last = ev.Seq
				continue
			}
			if !errors.Is(sub.Err(), ledger.ErrLagged) {
				b.t.Fatalf("run %s: waiting for %s: subscription ended (%v); run is %s", runID, what, sub.Err(), doc.Run.Status)
			}
			// This reader reads the run after every event and fell behind:
			// follow on from the last event it saw.
			if sub, err = b.led.Subscribe(ctx, runID, last); err != nil {
				b.t.Fatalf("resubscribing to %s: %v", runID, err)
			}
		case <-ctx.Done():
			b.t.Fatalf("run %s: %s did not happen in time; run is %s", runID, what, doc.Run.Status)
		}
	}
}

func (b *bundle) waitStatus(runID string, st ledger.RunStatus) ledger.RunDoc {
	b.t.Helper()
	return b.waitFor(runID, "status "+string(st), func(d ledger.RunDoc) bool { return d.Run.Status == st })
}

// dropServer answers nothing: it reads the request and closes the connection,
// so the caller cannot know whether the request took effect.
func dropServer(t testing.TB) (url string, hits func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	count := make(chan int, 1)
	count <- 0
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n := <-count
		count <- n + 1
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("no hijacker")
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String(), func() int { n := <-count; count <- n; return n }
}

// onboardingPlan is the demo plan as JSON for a request body.
func onboardingPlan(t testing.TB) json.RawMessage {
	t.Helper()
	return json.RawMessage(demoworld.OnboardingPlan())
}

func demomodelTransport() http.RoundTripper { return demomodel.Transport() }

// approveUntilDone approves whatever waits for a person until the run ends
// (an at-most-once action is shown again once its references resolve).
func (b *bundle) approveUntilDone(runID string) ledger.RunDoc {
	b.t.Helper()
	for range 10 {
		doc := b.waitFor(runID, "an end or a wait", func(d ledger.RunDoc) bool {
			switch d.Run.Status {
			case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled, ledger.RunPaused:
				return true
			case ledger.RunAwaitingApproval:
				for _, a := range d.Actions {
					if a.Status == ledger.StatusPending && a.Attempts == 0 {
						return true
					}
				}
			}
			return false
		})
		if doc.Run.Status != ledger.RunAwaitingApproval {
			return doc
		}
		if code := b.call("POST", "/v1/runs/"+runID+"/approve", map[string]any{"all": true}, nil); code != http.StatusOK {
			b.t.Fatalf("approve = %d", code)
		}
	}
	b.t.Fatalf("run %s still waits after 10 approvals", runID)
	return ledger.RunDoc{}
}
