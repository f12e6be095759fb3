package ui

import (
	"cmp"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// guard is what every request passes before any route sees it: the Host
// header must name this service (a page of another name that resolves to
// this address, DNS rebinding, is refused 421), a secure request is answered
// with Strict-Transport-Security, and a request body must arrive within
// BodyTimeout and is capped at the largest body any route takes.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, "bad_host",
				"this service does not answer to the host name "+strconv.Quote(r.Host)+": open it by its address or a name it was started with (docket serve --host NAME)",
				map[string]string{"host": r.Host})
			return
		}
		if s.secure(r) {
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
		}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			// Once the body is read to its end, net/http lifts the deadline
			// (a long poll or an MCP call waiting for a person goes on); a
			// body not read to its end keeps it, so what the server discards
			// of it after the handler is cut off too. A writer without
			// deadlines (a test's recorder) is left as it is.
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
			r.Body = http.MaxBytesReader(w, r.Body, max(s.cfg.MaxBodyBytes, s.cfg.MaxRunBodyBytes))
		}
		next.ServeHTTP(w, r)
	})
}

// secure says whether r reached the service over HTTPS: directly, or
// through a proxy the service trusts (TrustProxy) that says so in
// X-Forwarded-Proto.
func (s *Server) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !s.cfg.TrustProxy {
		return false
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// clientAddr is the address a request came from: the connection's peer, or,
// behind a trusted proxy, the last address the proxy added to
// X-Forwarded-For.
func (s *Server) clientAddr(r *http.Request) string {
	if s.cfg.TrustProxy {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if a := strings.TrimSpace(last); a != "" {
				return a
			}
		}
	}
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// hostAllowed says whether a Host header names this service. IP addresses
// are always accepted (a page can only send one as its Host when its own
// origin is that address), and so are localhost and its subdomains (which
// resolve to this machine only); any other name must be in Hosts or be the
// host of one of Origins. "*" in Hosts accepts every name.
func (s *Server) hostAllowed(hostport string) bool {
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "" || h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if ip, _, _ := strings.Cut(h, "%"); net.ParseIP(ip) != nil {
		return true
	}
	_, ok := s.hosts[h]
	_, any := s.hosts["*"]
	return ok || any
}

// allowedHosts is the set of names Hosts and Origins allow, lowercased.
func allowedHosts(cfg Config) map[string]struct{} {
	out := map[string]struct{}{}
	for _, h := range cfg.Hosts {
		out[strings.TrimSuffix(strings.ToLower(h), ".")] = struct{}{}
	}
	for _, o := range cfg.Origins {
		if u, err := url.Parse(o); err == nil && u.Hostname() != "" {
			out[strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")] = struct{}{}
		}
	}
	return out
}

// ValidHost checks one Config.Hosts entry: a DNS name (or "*"), no scheme, port or
// path.
func ValidHost(h string) bool {
	if h == "*" {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// --- sign-in throttling ---

// signIns throttles failed authentications per client address: each wrong
// token or unknown session takes one from the address's bucket (SignInBurst
// at most, refilled at SignInRate per second); while it is empty, every
// authentication from that address is refused with 429 before its token is
// looked at. Refusals are logged once per address per signInLogEvery, with
// how many there were, never once each.
type signIns struct {
	rate  float64 // <0: no throttling
	burst float64
	now   func() time.Time
	log   *slog.Logger

	mu    sync.Mutex
	addrs map[string]*signInState

	shared *sharedBuckets // set: the ledger keeps the allowances for every node (sharedlimits.go)
}

type signInState struct {
	bucket
	failures  int // since the last log record
	throttled int // requests refused since the last log record
	logged    time.Time
}

// signInLogEvery is how often one client address's failures are logged.
const signInLogEvery = time.Minute

// signInSweepAt is the number of addresses above which addresses whose
// bucket is full again are forgotten.
const signInSweepAt = 4096

func newSignIns(rate float64, burst int, now func() time.Time, log *slog.Logger) *signIns {
	return &signIns{rate: rate, burst: float64(burst), now: now, log: log, addrs: map[string]*signInState{}}
}

// state returns addr's bucket, refilled to now (the caller holds mu).
func (l *signIns) state(addr string, now time.Time) *signInState {
	st, ok := l.addrs[addr]
	if !ok {
		if len(l.addrs) >= signInSweepAt {
			l.sweep(now)
		}
		st = &signInState{bucket: bucket{tokens: l.burst, at: now}}
		l.addrs[addr] = st
	}
	st.refill(now, l.rate, l.burst)
	return st
}

// sweep forgets the addresses that have nothing left to remember: a full
// bucket and nothing to log.
func (l *signIns) sweep(now time.Time) {
	for a, st := range l.addrs {
		full := st.tokens+now.Sub(st.at).Seconds()*l.rate >= l.burst
		if full && st.failures == 0 && st.throttled == 0 {
			delete(l.addrs, a)
		}
	}
}

// check says whether addr may try to authenticate now; when not, how long
// until it may.
func (l *signIns) check(addr string) (time.Duration, bool) {
	if l.rate < 0 {
		return 0, true
	}
	now := l.now()
	tokens, shared := 0.0, false
	if l.shared != nil {
		left, err := l.shared.left(addr, l.rate, l.burst)
		if err != nil {
			l.shared.failed(err)
		}
		tokens, shared = left, err == nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state(addr, now)
	if !shared {
		tokens = st.tokens
	}
	if tokens >= 1 {
		return 0, true
	}
	st.throttled++
	l.maybeLog(addr, st, now)
	return time.Duration((1 - tokens) / l.rate * float64(time.Second)), false
}

// fail records a failed authentication from addr (reason says which);
// costs says whether it takes from addr's allowance.
func (l *signIns) fail(addr, reason string, costs bool) {
	if costs && l.rate >= 0 && l.shared != nil {
		if _, _, err := l.shared.take(addr, 1, l.rate, l.burst); err != nil {
			l.shared.failed(err)
		}
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state(addr, now)
	if costs && l.rate >= 0 {
		st.tokens = max(0, st.tokens-1)
	}
	st.failures++
	l.maybeLog(addr, st, now, "last_reason", reason)
}

// maybeLog writes addr's record when none was written in the last
// signInLogEvery (the caller holds mu).
func (l *signIns) maybeLog(addr string, st *signInState, now time.Time, attrs ...any) {
	if !st.logged.IsZero() && now.Sub(st.logged) < signInLogEvery {
		return
	}
	args := append([]any{"remote", addr, "failures", st.failures, "throttled", st.throttled, "window", signInLogEvery}, attrs...)
	l.log.Warn("authentication failed", args...)
	st.logged, st.failures, st.throttled = now, 0, 0
}

// signInThrottled answers 429 to a client address over its failed-sign-in
// allowance; false means the request may go on.
func (s *Server) signInThrottled(w http.ResponseWriter, r *http.Request) bool {
	wait, ok := s.signins.check(s.clientAddr(r))
	if ok {
		return false
	}
	s.tooMany(w, wait, "too many failed sign-ins from this address")
	return true
}

// --- the HTTP server and its listener ---

// HTTPConfig sets the timeouts and connection limits of NewHTTPServer and
// LimitListener. Zero values take the documented defaults.
type HTTPConfig struct {
	// ReadHeaderTimeout is how long a client may take to send a request's
	// headers (a new connection's first request included). Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request. Default 2m.
	IdleTimeout time.Duration
	// MaxConnsPerClient caps the connections one client address holds open
	// at once; one more is closed as soon as it is accepted. Zero: 128;
	// negative: no cap. Behind a proxy every connection comes from the
	// proxy's address: raise it or turn it off there.
	MaxConnsPerClient int
	// Logger receives the server's own errors (TLS handshakes, refused
	// connections, logged once a minute per address). Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns cfg with every zero field set to its default.
func (cfg HTTPConfig) WithDefaults() HTTPConfig {
	cfg.ReadHeaderTimeout = cmp.Or(cfg.ReadHeaderTimeout, 10*time.Second)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, 2*time.Minute)
	if cfg.MaxConnsPerClient == 0 {
		cfg.MaxConnsPerClient = 128
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// NewHTTPServer is an http.Server for h with the timeouts a service open to
// a network needs: headers within ReadHeaderTimeout, kept-alive connections
// closed after IdleTimeout, headers at most 64 KiB. Request bodies are timed
// by the Server's own handler (Config.BodyTimeout), which lifts the limit
// once a body is read so that long polls, streams and WebSockets go on.
func NewHTTPServer(h http.Handler, cfg HTTPConfig) *http.Server {
	cfg = cfg.WithDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
}

// LimitListener wraps ln so that one client address holds at most
// cfg.MaxConnsPerClient connections at once: a connection past the cap is
// closed as soon as it is accepted (and counted in a log record, once a
// minute per address).
func LimitListener(ln net.Listener, cfg HTTPConfig) net.Listener {
	cfg = cfg.WithDefaults()
	if cfg.MaxConnsPerClient < 0 {
		return ln
	}
	return &limitListener{Listener: ln, max: cfg.MaxConnsPerClient, log: cfg.Logger, open: map[string]int{}, logged: map[string]time.Time{}}
}

type limitListener struct {
	net.Listener
	max int
	log *slog.Logger

	mu      sync.Mutex
	open    map[string]int
	refused map[string]int
	logged  map[string]time.Time
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(addr); err == nil {
			addr = h
		}
		if l.take(addr) {
			return &limitConn{Conn: c, release: func() { l.release(addr) }}, nil
		}
		c.Close()
	}
}

// take counts one more connection of addr; false when addr holds its cap.
func (l *limitListener) take(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr] < l.max {
		l.open[addr]++
		return true
	}
	if l.refused == nil {
		l.refused = map[string]int{}
	}
	l.refused[addr]++
	now := time.Now()
	if now.Sub(l.logged[addr]) >= time.Minute {
		l.log.Warn("connections refused: the client holds its cap of open connections", "remote", addr, "cap", l.max, "refused", l.refused[addr], "window", time.Minute)
		l.logged[addr] = now
		l.refused[addr] = 0
	}
	return false
}

func (l *limitListener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
		if l.refused[addr] == 0 {
			delete(l.refused, addr)
			delete(l.logged, addr)
		}
	}
}

// limitConn gives its place back once, when closed: before the socket
// closes, so that a client that sees its connection end may open another.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
