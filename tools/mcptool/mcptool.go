package mcptool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// DefaultConnectTimeout bounds starting (or reaching) one server and listing
// its tools when Options.ConnectTimeout is zero.
const DefaultConnectTimeout = 30 * time.Second

// Options configures Connect. Every field is optional.
type Options struct {
	// Env reads the environment for {{env "NAME"}} in a server's env and
	// headers. Default: os.Getenv.
	Env func(string) string
	// Logger receives reconnects and dropped sessions. Default: discards.
	// A "component"="mcptool" attribute is added.
	Logger *slog.Logger
	// Stderr receives the local servers' standard error. Default: discarded.
	Stderr io.Writer
	// HTTPClient sends requests to remote servers; the server's headers are
	// added to every request. Default: a clone of http.DefaultClient.
	HTTPClient *http.Client
	// ConnectTimeout bounds starting or reaching one server and initializing
	// the session (also on a reconnect). Default: DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// TerminateGrace is how long closing a local server waits after closing
	// its stdin before it sends SIGTERM. Default: 2s.
	TerminateGrace time.Duration
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Env == nil {
		out.Env = os.Getenv
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	out.Logger = out.Logger.With("component", "mcptool")
	if out.Stderr == nil {
		out.Stderr = io.Discard
	}
	if out.HTTPClient == nil {
		c := *http.DefaultClient
		out.HTTPClient = &c
	}
	out.ConnectTimeout = cmp.Or(out.ConnectTimeout, DefaultConnectTimeout)
	out.TerminateGrace = cmp.Or(out.TerminateGrace, 2*time.Second)
	return out
}

// ErrNotListed is wrapped by the ConnectError of a server whose tool list
// does not match the tools file: the file classifies a tool (or names a
// lookup tool) that the server does not list, most often a misspelling.
// That is a mistake in the file (docket's exit 2), not a server that cannot
// be reached (exit 1).
var ErrNotListed = errors.New("the tools file names tools the server does not list")

// ConnectError reports a server that could not be connected, or whose tools
// do not match the tools file (then it wraps ErrNotListed).
type ConnectError struct {
	Server string
	Err    error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("mcp server %s: %v", e.Server, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Set is the tools of the connected servers. Close it to stop the local
// servers and end the sessions.
type Set struct {
	servers []*server
	tools   []tools.Tool
}

// Tools returns every server's tools, sorted by name.
func (s *Set) Tools() []tools.Tool { return append([]tools.Tool(nil), s.tools...) }

// Close ends every session and stops the local servers.
func (s *Set) Close() error {
	var errs []error
	for _, srv := range s.servers {
		if err := srv.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Connect connects to every server, lists its tools and builds one Tool per
// server tool. It fails (a *ConnectError naming the server) when a server
// cannot be reached or initialized, when the tools file classifies or names
// as a lookup a tool the server does not list, or when a tool's schema is
// not an object schema. On error every server already started is stopped.
func Connect(ctx context.Context, servers []toolsfile.MCPServer, o *Options) (*Set, error) {
	opts := o.withDefaults()
	set := &Set{}
	fail := func(err error) (*Set, error) {
		_ = set.Close()
		return nil, err
	}
	for _, cfg := range servers {
		srv, err := newServer(cfg, opts)
		if err != nil {
			return fail(&ConnectError{Server: cfg.Name, Err: err})
		}
		set.servers = append(set.servers, srv)
		ts, err := srv.listTools(ctx)
		if err != nil {
			return fail(&ConnectError{Server: cfg.Name, Err: err})
		}
		set.tools = append(set.tools, ts...)
	}
	sort.Slice(set.tools, func(i, j int) bool { return set.tools[i].Spec().Name < set.tools[j].Spec().Name })
	return set, nil
}

// server is one connection target; it owns at most one live session and
// replaces it when it breaks.
type server struct {
	cfg     toolsfile.MCPServer
	opts    Options
	env     []string          // rendered env entries for a local server
	headers map[string]string // rendered headers for a remote server
	client  *mcp.Client
	raw     *rawResults

	// progress, when set (tests), is called for every progress notification.
	progress func()

	mu      sync.Mutex
	sess    *session
	closed  bool
	closing sync.WaitGroup // sessions being closed in the background
}

// session is one live MCP session; done is closed when it ends.
type session struct {
	cs     *mcp.ClientSession
	cmd    *exec.Cmd   // local servers only
	stderr *tailWriter // local servers only: the end of their stderr
	done   chan struct{}
}

func (s *session) stderrTail() string {
	if s.stderr == nil {
		return ""
	}
	return s.stderr.String()
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.buf))
}

func (s *session) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func newServer(cfg toolsfile.MCPServer, opts Options) (*server, error) {
	s := &server{cfg: cfg, opts: opts, raw: newRawResults()}
	keys := func(m map[string]string) []string {
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	for _, k := range keys(cfg.Env) {
		v, err := toolsfile.ExpandEnv(cfg.Env[k], opts.Env)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", k, err)
		}
		s.env = append(s.env, k+"="+v)
	}
	if len(cfg.Headers) > 0 {
		s.headers = map[string]string{}
		for _, k := range keys(cfg.Headers) {
			v, err := toolsfile.ExpandEnv(cfg.Headers[k], opts.Env)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", k, err)
			}
			s.headers[k] = v
		}
	}
	if (cfg.Command == "") == (cfg.URL == "") {
		return nil, errors.New("needs exactly one of command and url")
	}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "docket", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{}, // no roots, sampling or elicitation
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			if f := s.progress; f != nil {
				f()
			}
		},
	})
	return s, nil
}

// redact removes the values rendered from the environment (env and
// headers) from text quoted in an error.
func (s *server) redact(text string) string {
	var secrets []string
	for _, kv := range s.env {
		if _, v, _ := strings.Cut(kv, "="); len(v) >= 4 {
			secrets = append(secrets, v)
		}
	}
	for _, v := range s.headers {
		if len(v) >= 4 {
			secrets = append(secrets, v)
		}
	}
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, v := range secrets {
		text = strings.ReplaceAll(text, v, "[redacted]")
	}
	return text
}

func (s *server) what() string {
	if s.cfg.Command != "" {
		return "command " + s.cfg.Command
	}
	return "url " + s.cfg.URL
}

// connect starts a new session. It does not touch s.sess.
func (s *server) connect(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	defer cancel()
	var t mcp.Transport
	sess := &session{done: make(chan struct{})}
	if s.cfg.Command != "" {
		// The process must outlive ctx (which only bounds the handshake), so
		// it is not tied to it; Close stops it.
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Env = append(os.Environ(), s.env...)
		sess.stderr = &tailWriter{max: 4 << 10}
		cmd.Stderr = io.MultiWriter(s.opts.Stderr, sess.stderr)
		// A server's own children may keep its stderr open after it exits:
		// do not wait for them past this.
		cmd.WaitDelay = s.opts.TerminateGrace
		sess.cmd = cmd
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: s.opts.TerminateGrace}
	} else {
		hc := *s.opts.HTTPClient
		hc.Transport = headerTransport{base: cmp.Or[http.RoundTripper](hc.Transport, http.DefaultTransport), headers: s.headers}
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: &hc, DisableStandaloneSSE: true}
	}
	cs, err := s.client.Connect(ctx, rawTransport{inner: t, raw: s.raw}, nil)
	if err != nil {
		if sess.cmd != nil && sess.cmd.Process != nil {
			_ = sess.cmd.Process.Kill()
			_ = sess.cmd.Wait()
		}
		if tail := s.redact(sess.stderrTail()); tail != "" {
			return nil, fmt.Errorf("connecting (%s): %w; the server's stderr ends with: %s", s.what(), err, tail)
		}
		return nil, fmt.Errorf("connecting (%s): %w", s.what(), err)
	}
	sess.cs = cs
	go func() {
		_ = cs.Wait()
		close(sess.done)
	}()
	return sess, nil
}

// current returns the live session, connecting (again) when there is none
// or the last one ended.
func (s *server) current(ctx context.Context) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the tool set was closed")
	}
	if s.sess != nil && s.sess.alive() {
		return s.sess, nil
	}
	if s.sess != nil {
		s.opts.Logger.Warn("reconnecting to MCP server: its session ended", "server", s.cfg.Name)
		s.closeLocked(s.sess)
		s.sess = nil
	}
	sess, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.sess = sess
	return sess, nil
}

// drop ends sess (if it is still the current one) so the next call starts a
// new one; used after a timeout, when the server may hang.
func (s *server) drop(sess *session, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == sess {
		s.opts.Logger.Warn("dropping MCP session", "server", s.cfg.Name, "reason", why)
		s.sess = nil
	}
	s.closeLocked(sess)
}

// closeLocked closes a session in the background: a local server gets
// TerminateGrace to exit after its stdin closes, then SIGTERM.
func (s *server) closeLocked(sess *session) {
	s.closing.Add(1)
	go func() {
		defer s.closing.Done()
		_ = sess.cs.Close()
	}()
}

func (s *server) close() error {
	s.mu.Lock()
	s.closed = true
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	var err error
	if sess != nil {
		if cerr := sess.cs.Close(); cerr != nil && sess.alive() {
			err = fmt.Errorf("mcp server %s: closing: %w", s.cfg.Name, cerr)
		}
	}
	s.closing.Wait()
	return err
}

// listTools lists the server's tools and builds them, checking the tools
// file's classifications and lookups against the list.
func (s *server) listTools(ctx context.Context) ([]tools.Tool, error) {
	sess, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	defer cancel()
	listed := map[string]*mcp.Tool{}
	for t, err := range sess.cs.Tools(lctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing tools: %w", err)
		}
		listed[t.Name] = t
	}
	names := make([]string, 0, len(listed))
	for n := range listed {
		names = append(names, n)
	}
	sort.Strings(names)
	var notListed []string
	for name, ft := range s.cfg.Tools {
		if listed[name] == nil {
			notListed = append(notListed, fmt.Sprintf("the tools file classifies tool %q, which the server does not list%s", name, didYouMean(name, names)))
		}
		if ft.Lookup != nil && listed[ft.Lookup.Tool] == nil {
			notListed = append(notListed, fmt.Sprintf("tool %q: lookup tool %q is not listed by the server%s", name, ft.Lookup.Tool, didYouMean(ft.Lookup.Tool, names)))
		}
	}
	if len(notListed) > 0 {
		sort.Strings(notListed)
		return nil, fmt.Errorf("%w: %s (it lists %s)", ErrNotListed, strings.Join(notListed, "; "), strings.Join(names, ", "))
	}
	var problems []string
	var out []tools.Tool
	for _, n := range names {
		t, err := newTool(s, listed[n])
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		out = append(out, t)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return out, nil
}

// didYouMean names the listed tool closest to name (by edit distance, at
// most a third of its length), as " (did you mean "x"?)", or "".
func didYouMean(name string, listed []string) string {
	best, bestD := "", len(name)/3+1
	for _, l := range listed {
		if d := editDistance(name, l); d < bestD {
			best, bestD = l, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Damerau–Levenshtein distance of a and b (an adjacent
// transposition counts one), over bytes.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// headerTransport adds a remote server's headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	return h.base.RoundTrip(r)
}

// marshalSchema turns a listed schema (a decoded map) back into JSON.
func marshalSchema(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}
