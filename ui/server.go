package ui

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

// Config builds a Server. Zero values take the documented defaults.
type Config struct {
	// Ledger holds the runs. Required. The caller closes it after Shutdown.
	Ledger ledger.Store
	// Tools is the registry runs are planned and performed with. Required.
	Tools *tools.Registry
	// Executor is the configuration of the one engine the server builds;
	// its Ledger and Tools are set from the fields above, and its Observer,
	// when set, is told what the engine does besides the server's own metrics
	// and live views (executor.Observers). Zero: the executor's defaults.
	Executor executor.Config
	// Planner plans runs created from a goal or a conversation. Nil: such
	// requests are refused (501), plans are still accepted.
	Planner *planner.Planner
	// Tokens maps a token's name to its secret; each holds every scope
	// (admin). At least one token is required here or in ScopedTokens. The
	// name is recorded with every review decision ("token:NAME").
	Tokens map[string]string
	// ScopedTokens are tokens that hold only the scopes they list (an
	// agent's: read and submit; a person's: read, review, control). Names
	// are unique across Tokens and ScopedTokens.
	ScopedTokens []Token
	// RateLimit is how many requests per second each token may make on
	// average (HTTP requests and WebSocket messages); over it, 429 with
	// Retry-After. Zero: no limit. On a shared ledger (SharedLimits) the
	// budget is the token's on all nodes together.
	RateLimit float64
	// RateBurst is how many requests a token may make at once before
	// RateLimit applies. Default: twice RateLimit, at least 1.
	RateBurst int
	// MaxSocketsPerToken caps the WebSockets one token holds open; one more
	// is refused with 429. Zero: no cap.
	MaxSocketsPerToken int
	// SubmitBytesPerSecond is how many bytes of submitted bodies (POST
	// /v1/runs, replays, forks: plans a token asks the server to parse,
	// validate and record) each token may send per second on average;
	// SubmitBytesBurst how many at once. A body past the token's allowance
	// is refused with 429 and Retry-After before it is read. Defaults:
	// 1 MiB/s, bursts of four times MaxRunBodyBytes; negative: no budget.
	SubmitBytesPerSecond float64
	SubmitBytesBurst     int64
	// Warnings are shown in /readyz's answer (e.g. serving plain HTTP on a
	// non-loopback address); the service stays ready.
	Warnings []string
	// Origins are the origins, besides the server's own (the request's Host),
	// whose pages may open WebSockets and write with the session cookie,
	// e.g. "https://review.example.com".
	Origins []string
	// ToolsFile is the raw tools file (JSON), used to preview the HTTP
	// request an action will send. Nil: no previews.
	ToolsFile []byte
	// Notify, when set, is a URL called (POST, JSON {"run_id","status",
	// "waiting"}) whenever a run stops to wait for a person. Each delivery
	// carries a Docket-Delivery id (the same on every retry of it) and is
	// retried with backoff until it is answered 2xx or NotifyAttempts run out.
	Notify string
	// NotifySecret, when set, signs every webhook call: Docket-Signature:
	// t=UNIX,v2=hex(HMAC-SHA256(NotifySecret, ID + "." + UNIX + "." +
	// body)), ID being the call's Docket-Delivery. See VerifyWebhook.
	// Redirects are never followed (a 3xx answer is a failed call).
	NotifySecret string
	// NotifyAttempts caps the calls of one delivery. Default 5.
	NotifyAttempts int
	// NotifyBackoff is the wait after a delivery's first failed call,
	// doubled after each further one (up to a minute). Default 1s.
	NotifyBackoff time.Duration
	// Logger receives the server's records; component=ui is added. Default
	// slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes caps request bodies. Default 1 MiB.
	MaxBodyBytes int64
	// MaxRunBodyBytes caps POST /v1/runs bodies, which carry a plan as large
	// as the CLI accepts. Default: MaxBodyBytes when that is set, else
	// plan.MaxDocumentSize + 1 MiB (17 MiB).
	MaxRunBodyBytes int64
	// SessionTTL is how long a session cookie stays valid. Default 12h.
	SessionTTL time.Duration
	// MaxSessionsPerToken caps the live sessions made from one token (on
	// this server, or on all nodes together on a shared ledger:
	// SharedLimits); signing in once more ends the oldest of them. Default 32.
	MaxSessionsPerToken int
	// SignInRate is how many failed authentications (a wrong token, an
	// unknown session) per second one client address may make on average;
	// past SignInBurst of them, every authentication from the address is
	// answered 429 with Retry-After until its allowance refills. Zero: 1;
	// negative: no throttling.
	SignInRate float64
	// SignInBurst is how many failed authentications a client address may
	// make at once before SignInRate applies. Default 20.
	SignInBurst int
	// BodyTimeout is how long a request's body may take to arrive, from the
	// end of its headers; a client that sends it slower is cut off. Default
	// 1m.
	BodyTimeout time.Duration
	// Hosts are the host names (without port) the service answers to besides
	// IP addresses, localhost and the hosts of Origins; a request whose Host
	// header names another is refused with 421 (a page on another name that
	// resolves to this address: DNS rebinding). "*" accepts every name.
	Hosts []string
	// TrustProxy says the service is reached through a proxy that sets
	// X-Forwarded-Proto and X-Forwarded-For: a request it marks https counts
	// as secure (Secure __Host- session cookie, Strict-Transport-Security),
	// and sign-in throttling counts the address the proxy saw. Set it only
	// when no client can reach the service except through that proxy.
	TrustProxy bool
	// WSBuffer is how many messages may wait for one WebSocket client
	// before it is disconnected as too slow. Default 1024.
	WSBuffer int
	// WSSlowAfter is how long a message may wait for room in a full
	// client queue before the client is disconnected as too slow. Default 5s.
	WSSlowAfter time.Duration
	// WSPing is the WebSocket keepalive interval; a client that answers no
	// ping within twice this is disconnected. Default 20s.
	WSPing time.Duration
	// WSReadLimit caps one client message on a WebSocket. Default 64 KiB.
	WSReadLimit int64
	// Now gives the time (sessions, metrics). Default time.Now.
	Now func() time.Time
	// TraceID names the OpenTelemetry trace of a run's spans
	// (executor/oteltrace.TraceID) when tracing is on: every Run JSON the
	// server answers carries it as trace_id, and the page shows it. Planning
	// a goal runs in a span of Executor.Tracer (executor.WorkPlan). Nil: no
	// trace_id.
	TraceID func(runID string) string
}

// WithDefaults returns cfg with every zero field set to its default.
func (cfg Config) WithDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.MaxRunBodyBytes = cmp.Or(cfg.MaxRunBodyBytes, cfg.MaxBodyBytes, plan.MaxDocumentSize+1<<20)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, 1<<20)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, 12*time.Hour)
	cfg.MaxSessionsPerToken = cmp.Or(cfg.MaxSessionsPerToken, 32)
	cfg.SignInRate = cmp.Or(cfg.SignInRate, 1)
	cfg.SignInBurst = cmp.Or(cfg.SignInBurst, 20)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, time.Minute)
	cfg.WSBuffer = cmp.Or(cfg.WSBuffer, 1024)
	cfg.WSPing = cmp.Or(cfg.WSPing, 20*time.Second)
	cfg.WSSlowAfter = cmp.Or(cfg.WSSlowAfter, 5*time.Second)
	cfg.WSReadLimit = cmp.Or(cfg.WSReadLimit, 64<<10)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RateLimit > 0 && cfg.RateBurst == 0 {
		cfg.RateBurst = max(1, int(2*cfg.RateLimit))
	}
	cfg.SubmitBytesPerSecond = cmp.Or(cfg.SubmitBytesPerSecond, 1<<20)
	cfg.SubmitBytesBurst = cmp.Or(cfg.SubmitBytesBurst, 4*cfg.MaxRunBodyBytes)
	cfg.NotifyAttempts = cmp.Or(cfg.NotifyAttempts, 5)
	cfg.NotifyBackoff = cmp.Or(cfg.NotifyBackoff, time.Second)
	return cfg
}

func (cfg Config) validate() error {
	var errs []error
	if cfg.Ledger == nil {
		errs = append(errs, errors.New("the Ledger field is required"))
	}
	if cfg.Tools == nil {
		errs = append(errs, errors.New("the Tools field is required"))
	}
	if _, err := buildTokens(cfg); err != nil {
		errs = append(errs, err)
	}
	if cfg.RateLimit < 0 || cfg.RateBurst < 0 || cfg.MaxSocketsPerToken < 0 || cfg.NotifyAttempts < 1 || cfg.NotifyBackoff <= 0 {
		errs = append(errs, errors.New("RateLimit, RateBurst and MaxSocketsPerToken must not be negative, NotifyAttempts and NotifyBackoff must be positive"))
	}
	for _, o := range cfg.Origins {
		if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("origin %q: want scheme://host[:port]", o))
		}
	}
	if cfg.Notify != "" {
		if u, err := url.Parse(cfg.Notify); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, fmt.Errorf("notify URL %q: want an http(s) URL", cfg.Notify))
		}
	}
	for _, h := range cfg.Hosts {
		if !ValidHost(h) {
			errs = append(errs, fmt.Errorf("host %q: want a host name without scheme, port or path (e.g. docket.example.com), or *", h))
		}
	}
	if cfg.MaxSessionsPerToken < 1 || cfg.SignInBurst < 1 || cfg.BodyTimeout <= 0 {
		errs = append(errs, errors.New("MaxSessionsPerToken, SignInBurst and BodyTimeout must be positive"))
	}
	if cfg.SubmitBytesPerSecond > 0 && cfg.SubmitBytesBurst < cfg.MaxRunBodyBytes {
		errs = append(errs, fmt.Errorf("SubmitBytesBurst %d is smaller than MaxRunBodyBytes %d: the largest plan could never be submitted", cfg.SubmitBytesBurst, cfg.MaxRunBodyBytes))
	}
	if cfg.MaxBodyBytes < 1 || cfg.MaxRunBodyBytes < 1 || cfg.WSBuffer < 1 || cfg.WSPing <= 0 || cfg.WSSlowAfter <= 0 || cfg.WSReadLimit < 1 {
		errs = append(errs, errors.New("MaxBodyBytes, MaxRunBodyBytes, WSBuffer, WSPing, WSSlowAfter and WSReadLimit must be positive"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("ui: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// Server is the HTTP API, the WebSocket streams and the review page.
// Build it with New, serve Handler, call ResumeRunning once, and Shutdown at
// the end (before closing the ledger).
type Server struct {
	cfg     Config
	led     ledger.Store
	reg     *tools.Registry
	eng     *executor.Engine
	pl      *planner.Planner
	log     *slog.Logger
	mux     *http.ServeMux
	preview map[string]requestTemplate
	up      websocket.Upgrader
	metrics *metrics
	signals *signals // the engine's reports that requests wait for
	tokens  []tokenEntry
	limits  *limiter
	submits *buckets // bytes of submitted plans per token
	signins *signIns
	hosts   map[string]struct{} // names the Host header may give (hostAllowed)

	ctx    context.Context // drives and sockets; cancelled by Shutdown
	cancel context.CancelFunc

	mu        sync.Mutex
	closing   bool
	drives    map[string]int           // run id → drives going on (| again: drive once more)
	idle      map[string]chan struct{} // run id → closed when its drives are over
	watchers  map[string]*watcher      // runs followed for the all-runs stream
	lastSeq   map[string]uint64        // last event seen of runs no longer followed
	accepting map[string]bool
	sessions  sessionStore
	// reserver is the ledger when it is shared by several processes
	// (ledger.Reserver), nil otherwise.
	reserver ledger.Reserver
	sockets  map[*socket]struct{}
	joining  map[*joiner]struct{} // all-runs clients between their upgrade request and its answer
	driveWG  sync.WaitGroup
	socketWG sync.WaitGroup
	notifyWG sync.WaitGroup // webhook deliveries

	frames encodedCache // WebSocket frames of recent events

	// beforeWrite, when set (tests only), runs before each WebSocket message
	// is written, so a test can hold a writer back and fill its buffer.
	beforeWrite func()
	// afterUpgrade, when set (tests only), runs after an all-runs client's
	// upgrade is answered and before the socket is registered.
	afterUpgrade atomic.Pointer[func()]
}

type session struct {
	who     principal
	expires time.Time
}

// New validates cfg and builds the Server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Ledger, cfg.TraceID, cfg.Now)
	sig := newSignals()
	// One engine for the server, built once: it reports to the server's
	// metrics and live signals, and to the caller's Observer when one is set.
	ecfg := cfg.Executor
	ecfg.Ledger, ecfg.Tools = cfg.Ledger, cfg.Tools
	if ecfg.Logger == nil {
		ecfg.Logger = cfg.Logger
	}
	ecfg.Observer = executor.Observers(m.engine, m.ledger, sig, cfg.Executor.Observer)
	cfg.Executor = ecfg
	eng, err := executor.New(ecfg)
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	preview, err := parseTemplates(cfg.ToolsFile)
	if err != nil {
		return nil, fmt.Errorf("ui: tools file: %w", err)
	}
	toks, err := buildTokens(cfg)
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		tokens:    toks,
		limits:    newLimiter(cfg.RateLimit, cfg.RateBurst, cfg.MaxSocketsPerToken, cfg.Now),
		submits:   newBuckets(cfg.SubmitBytesPerSecond, float64(cfg.SubmitBytesBurst), cfg.Now),
		hosts:     allowedHosts(cfg),
		cfg:       cfg,
		led:       withTraceIDs(cfg.Ledger, cfg.TraceID),
		reg:       cfg.Tools,
		eng:       eng,
		pl:        cfg.Planner,
		log:       cfg.Logger.With("component", "ui"),
		preview:   preview,
		metrics:   m,
		signals:   sig,
		ctx:       ctx,
		cancel:    cancel,
		drives:    map[string]int{},
		idle:      map[string]chan struct{}{},
		watchers:  map[string]*watcher{},
		lastSeq:   map[string]uint64{},
		accepting: map[string]bool{},
		sockets:   map[*socket]struct{}{},
		joining:   map[*joiner]struct{}{},
	}
	s.signins = newSignIns(cfg.SignInRate, cfg.SignInBurst, cfg.Now, s.log)
	// The ledger's optional capabilities, asked of the ledger itself: s.led
	// may wrap it (withTraceIDs) in a type that has none of them.
	s.sessions = newSessionStore(cfg.Ledger, cfg.MaxSessionsPerToken, s.principalNamed)
	s.reserver, _ = cfg.Ledger.(ledger.Reserver)
	s.shareLimits()
	s.up = websocket.Upgrader{
		ReadBufferSize:  4096,
		WriteBufferSize: 4096,
		CheckOrigin:     s.originAllowed,
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			writeError(w, status, "websocket", reason.Error(), nil)
		},
	}
	s.routes()
	return s, nil
}

// Handler serves everything: the API, the streams, the page, health and
// metrics.
func (s *Server) Handler() http.Handler {
	return s.traced(s.metrics.instrument(s.guard(http.HandlerFunc(s.serve))))
}

// serve is the mux behind the answers ServeMux would give in its own plain
// text or HTML: an API path (under /v1/, /metrics, /healthz, /readyz) that
// is not clean gets 404 JSON naming the clean path, never a redirect (a
// client would resend a POST as GET, or follow it with the token); a method
// a path does not serve gets 405 JSON with Allow, on every path.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath() // what ServeMux matches and cleans
	clean := cleanPath(p)
	if isAPIPath(clean) {
		if clean != p {
			writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+p+": the path is not clean (did you mean "+clean+"?)", map[string]string{"clean_path": clean})
			return
		}
		if clean == "/v1" {
			s.notFound(w, r)
			return
		}
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		// No pattern matches: 404, or 405 when another method's does.
		if allow := s.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+p+" is not served: use "+strings.Join(allow, ", ")+" (see /v1/openapi.json)", map[string][]string{"allow": allow})
			return
		}
		if isAPIPath(clean) {
			s.notFound(w, r)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// allowed lists the methods some route serves r's path with (HEAD with GET),
// ignoring the catch-all 404 routes.
func (s *Server) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := s.mux.Handler(probe); pattern != "" && !catchAll[pattern] {
			out = append(out, m)
		}
	}
	return out
}

// catchAll are the patterns that answer 404 under /v1/ in JSON.
var catchAll = map[string]bool{"GET /v1/": true, "POST /v1/": true}

// isAPIPath says whether a clean path is the API's (its answers are JSON).
func isAPIPath(p string) bool {
	switch p {
	case "/v1", "/metrics", "/healthz", "/readyz":
		return true
	}
	return strings.HasPrefix(p, "/v1/")
}

// cleanPath is p as ServeMux cleans it: "." and ".." elements and repeated
// slashes removed, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path+" (see /v1/openapi.json)", nil)
}

// route is one endpoint; the table is checked against openapi.json.
type route struct {
	method, path string
	h            http.HandlerFunc
	public       bool // no token needed
}

func (s *Server) routeTable() []route {
	return []route{
		{"GET", "/healthz", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		}, true},
		{"GET", "/readyz", s.readyz, true},
		{"GET", "/metrics", s.serveMetrics, false},
		{"GET", "/v1/openapi.json", serveOpenAPI, true},
		{"POST", "/v1/session", s.createSession, true},
		{"DELETE", "/v1/session", s.deleteSession, false},
		{"GET", "/v1/session", s.whoami, false},
		{"GET", "/v1/tools", s.listTools, false},
		{"POST", "/v1/runs", s.createRun, false},
		{"GET", "/v1/runs", s.listRuns, false},
		{"GET", "/v1/runs/{id}", s.getRun, false},
		{"GET", "/v1/runs/{id}/plan", s.getPlan, false},
		{"GET", "/v1/runs/{id}/events", s.listEvents, false},
		{"GET", "/v1/runs/{id}/audit", s.audit, false},
		{"GET", "/v1/runs/{id}/ws", s.serveWS, false},
		{"GET", "/v1/ws", s.serveAllWS, false},
		{"POST", "/v1/runs/{id}/approve", s.approve, false},
		{"POST", "/v1/runs/{id}/reject", s.rejectPlan, false},
		{"POST", "/v1/runs/{id}/pause", s.pause, false},
		{"POST", "/v1/runs/{id}/resume", s.resume, false},
		{"POST", "/v1/runs/{id}/cancel", s.cancelRun, false},
		{"POST", "/v1/runs/{id}/replay", s.replay, false},
		{"POST", "/v1/runs/{id}/fork", s.fork, false},
		{"POST", "/v1/runs/{id}/actions/{action}/approve", s.approveAction, false},
		{"POST", "/v1/runs/{id}/actions/{action}/reject", s.rejectAction, false},
		{"POST", "/v1/runs/{id}/actions/{action}/edit", s.editAction, false},
		{"POST", "/v1/runs/{id}/actions/{action}/resolve", s.resolveAction, false},
		{"POST", "/v1/runs/{id}/actions/{action}/run_now", s.runNowAction, false},
		{"GET", "/v1/inbox", s.inbox, false},
		{"GET", "/v1/search/runs", s.searchRuns, false},
		{"GET", "/v1/runs/{id}/diff", s.getDiff, false},
		{"POST", "/v1/runs/{id}/diff", s.postDiff, false},
		{"GET", "/v1/budgets", s.budgets, false},
		{"POST", "/v1/schedules", s.createSchedule, false},
		{"GET", "/v1/schedules", s.listSchedules, false},
		{"GET", "/v1/schedules/{id}", s.getSchedule, false},
		{"DELETE", "/v1/schedules/{id}", s.deleteSchedule, false},
		{"POST", "/v1/schedules/{id}/pause", s.pauseSchedule, false},
		{"POST", "/v1/schedules/{id}/resume", s.resumeSchedule, false},
	}
}

func (s *Server) routes() {
	m := http.NewServeMux()
	s.mux = m
	for _, rt := range s.routeTable() {
		h := rt.h
		if !rt.public {
			h = s.auth(routeScope(rt.method, rt.path), h)
		}
		m.HandleFunc(rt.method+" "+rt.path, h)
	}
	for pattern := range catchAll {
		m.HandleFunc(pattern, s.notFound)
	}
	m.Handle("GET /", staticHandler())
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		writeError(w, http.StatusServiceUnavailable, "shutting_down", "the server is shutting down", nil)
		return
	}
	if _, _, err := s.led.ListRuns(r.Context(), ledger.ListOptions{Limit: 1}); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ledger", "the ledger is not available: "+err.Error(), nil)
		return
	}
	if len(s.cfg.Warnings) > 0 {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "warnings": s.cfg.Warnings})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// --- authentication ---

// maxSessionBody caps POST /v1/session's body, read before its token is
// known.
const maxSessionBody = 4 << 10

// cookieName is the name of the session cookie for r: over HTTPS (or
// behind a trusted TLS proxy) __Host-docket_session, which a browser keeps
// only when it is Secure, with Path=/ and no Domain, so no other host (a
// sibling subdomain, a plain-HTTP page of the same name) can set or shadow
// it; over plain HTTP docket_session. The name does not carry the port:
// the nodes of a shared ledger accept one another's sessions.
func (s *Server) cookieName(r *http.Request) string {
	if s.secure(r) {
		return "__Host-docket_session"
	}
	return "docket_session"
}

// sessionCookie is the session cookie for r holding value (empty and
// maxAge -1: the cookie that ends it).
func (s *Server) sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     s.cookieName(r),
		Value:    value,
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   s.secure(r),
		MaxAge:   maxAge,
	}
}

// who returns the authenticated caller's name ("token:NAME").
func who(r *http.Request) string {
	if p, ok := caller(r); ok {
		return "token:" + p.name
	}
	return "unknown"
}

// tokenPrincipal returns the caller the token tok stands for, if it is one
// of ours.
// approver is the authenticated caller as an approver: its name and its
// token's groups (recorded with each approval it gives).
func approver(r *http.Request) ledger.Approver {
	p, _ := caller(r)
	return ledger.Approver{By: who(r), Groups: slices.Clone(p.groups)}
}

func (s *Server) tokenPrincipal(tok string) (principal, bool) {
	return lookupToken(s.tokens, tok)
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// authFailed counts a refused authentication, logs it (aggregated per
// client address, never the token) and answers 401. A wrong token or an
// unknown session also takes from the client address's sign-in allowance.
func (s *Server) authFailed(w http.ResponseWriter, r *http.Request, reason, msg string) {
	s.metrics.authFailures.Add(1)
	// Sending no credentials is not a guess: logged, not counted.
	s.signins.fail(s.clientAddr(r), reason, reason != "no_token")
	writeError(w, http.StatusUnauthorized, "unauthorized", msg, nil)
}

// auth requires a bearer token or a session cookie whose token holds scope,
// and keeps the token within its rate limit. Writes authenticated by the
// cookie alone must come from an allowed origin.
func (s *Server) auth(scope Scope, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var p principal
		_, hasBearer := bearer(r)
		_, cookieErr := r.Cookie(s.cookieName(r))
		if (hasBearer || cookieErr == nil) && s.signInThrottled(w, r) {
			return
		}
		if tok, ok := bearer(r); ok {
			if p, ok = s.tokenPrincipal(tok); !ok {
				s.authFailed(w, r, "bad_token", "the bearer token is not valid")
				return
			}
		} else if c, err := r.Cookie(s.cookieName(r)); err == nil {
			sess, ok, err := s.lookupSession(r.Context(), c.Value)
			if err != nil {
				s.fail(w, fmt.Errorf("reading the session: %w", err))
				return
			}
			if !ok {
				s.authFailed(w, r, "bad_session", "the session has expired: sign in with the token again")
				return
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead && !s.originAllowed(r) {
				writeError(w, http.StatusForbidden, "bad_origin", "a write with the session cookie must come from the service's own page", nil)
				return
			}
			p = sess.who
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="docket"`)
			s.authFailed(w, r, "no_token", "send Authorization: Bearer TOKEN (or sign in on the page)")
			return
		}
		if !p.has(scope) {
			s.deny(w, p, scope, r.Method+" "+r.URL.Path)
			return
		}
		if wait, ok := s.limits.allow(p.name); !ok {
			s.tooMany(w, wait, fmt.Sprintf("token %s is over its rate limit (%g requests per second, bursts of %d)", p.name, s.cfg.RateLimit, s.cfg.RateBurst))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// originAllowed accepts requests without Origin (programs), the server's own
// origin, and the configured ones.
func (s *Server) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, allowed := range s.cfg.Origins {
		if strings.EqualFold(strings.TrimRight(allowed, "/"), o) {
			return true
		}
	}
	return false
}

// createSession trades a token (bearer header, or {"token"} in the body) for
// a session cookie.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	if !s.originAllowed(r) {
		writeError(w, http.StatusForbidden, "bad_origin", "sessions are created by the service's own page", nil)
		return
	}
	if s.signInThrottled(w, r) {
		return
	}
	tok, ok := bearer(r)
	if !ok {
		// Read before the token is known: small, and timed (guard).
		b, ok := s.readBodyMax(w, r, maxSessionBody)
		if !ok {
			return
		}
		var body struct {
			Token string `json:"token"`
		}
		if err := decodeStrict(b, &body); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
			return
		}
		tok = body.Token
	}
	p, ok := s.tokenPrincipal(tok)
	if !ok {
		s.authFailed(w, r, "bad_token", "the token is not valid")
		return
	}
	if wait, ok := s.limits.allow(p.name); !ok {
		s.tooMany(w, wait, fmt.Sprintf("token %s is over its rate limit (%g requests per second, bursts of %d)", p.name, s.cfg.RateLimit, s.cfg.RateBurst))
		return
	}
	id, err := randomHex(32)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error(), nil)
		return
	}
	now := s.cfg.Now()
	if err := s.sessions.start(r.Context(), id, p, now, now.Add(s.cfg.SessionTTL)); err != nil {
		s.fail(w, err)
		return
	}
	http.SetCookie(w, s.sessionCookie(r, id, int(s.cfg.SessionTTL/time.Second)))
	writeJSON(w, http.StatusOK, map[string]any{"name": p.name, "scopes": p.scopeNames(), "expires_at": now.Add(s.cfg.SessionTTL).UTC().Format(time.RFC3339)})
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(s.cookieName(r)); err == nil {
		if err := s.sessions.end(r.Context(), c.Value); err != nil {
			s.fail(w, fmt.Errorf("ending the session: %w", err))
			return
		}
	}
	http.SetCookie(w, s.sessionCookie(r, "", -1))
	w.WriteHeader(http.StatusNoContent)
}

// whoami tells the caller who it is and what it may do: "scopes" (admin
// expanded to every scope) and "may", the review and control ops and the
// run-level actions the token may take, so the page shows only those.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	planning := s.pl != nil
	p, _ := caller(r)
	groups := p.groups
	if groups == nil {
		groups = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"who": who(r), "planner": planning, "name": p.name, "scopes": p.scopeNames(), "groups": groups, "may": p.may()})
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading randomness: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// --- JSON in and out ---

// apiError is the body of every error answer.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func writeError(w http.ResponseWriter, status int, code, msg string, details any) {
	writeJSON(w, status, map[string]apiError{"error": {Code: code, Message: msg, Details: details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]apiError{"error": {Code: "internal", Message: "encoding the answer: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// readBody reads a size-capped body; false means an error answer was sent.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	return s.readBodyMax(w, r, s.cfg.MaxBodyBytes)
}

// readBodyMax reads a body of at most limit bytes; over it, 413 naming the
// limit and the body's size (when the request declared it).
func (s *Server) readBodyMax(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		msg := fmt.Sprintf("the request body is larger than %d bytes, the limit of this endpoint", limit)
		if r.ContentLength > limit {
			msg = fmt.Sprintf("the request body is %d bytes, larger than %d bytes, the limit of this endpoint", r.ContentLength, limit)
		}
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", msg, nil)
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "reading the request body: "+err.Error(), nil)
		return nil, false
	}
	return b, true
}

// readSubmitted reads a submitted plan's body (up to MaxRunBodyBytes),
// charged to the caller's budget of submitted bytes: by its Content-Length
// before anything is read, else by what was read. false means an error
// answer was sent.
func (s *Server) readSubmitted(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > 0 && r.ContentLength <= s.cfg.MaxRunBodyBytes {
		if !s.submitBudget(w, r, nil) {
			return nil, false
		}
		return s.readBodyMax(w, r, s.cfg.MaxRunBodyBytes)
	}
	b, ok := s.readBodyMax(w, r, s.cfg.MaxRunBodyBytes)
	if !ok || !s.submitBudget(w, r, b) {
		return nil, false
	}
	return b, true
}

// decode reads a JSON body strictly (unknown fields refused, one value).
// An empty body decodes as {}. false means an error answer was sent.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	b, ok := s.readBody(w, r)
	if !ok {
		return false
	}
	if err := decodeStrict(b, v); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return false
	}
	return true
}

func decodeStrict(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the request body is not valid: %w", err)
	}
	if dec.More() {
		return errors.New("the request body is not valid: more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("the request body is not valid: trailing data after the JSON value")
	}
	return nil
}
