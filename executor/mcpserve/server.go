package mcpserve

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/mcptool"
)

// The _meta names a client may set on tools/call (executor/README.md, Use docket from any MCP client).
// The key's name is the one docket itself sends to the MCP servers behind a
// tools file (mcptool.KeyMeta): a docket in front of another docket mcp
// hands it its own action keys.
const (
	MetaRunID          = "io.docket/run_id"
	MetaIdempotencyKey = mcptool.KeyMeta
)

// Config builds a Server. Zero values take the documented defaults.
type Config struct {
	// Engine performs the calls. Required. Its ledger must be Ledger.
	Engine *executor.Engine
	// Ledger holds the runs. Required.
	Ledger ledger.Store
	// Tools is the registry the Engine was built with. Required.
	Tools *tools.Registry
	// Policy is stored with every call's run (executor.Policy): safe
	// (default) lets every call through that the tools file does not hold
	// for a person, except at_most_once ones.
	Policy executor.Policy
	// Wait bounds how long a call that waits for a person stays open before
	// its result says it waits. Default 60s; negative: the result says so
	// at once.
	Wait time.Duration
	// Progress is the interval of progress notifications while a call
	// waits (to clients that sent a progress token). Default 5s.
	Progress time.Duration
	// Session is the session id of sessions without an MCP session id
	// (stdio). Default: random, one per Server.
	Session string
	// ReviewHint says where a person decides, in waiting results ("on the
	// review page at http://127.0.0.1:8080/"). Default: a generic phrase.
	ReviewHint string
	// Logger receives the server's records; component=mcpserve is added.
	// Default slog.Default().
	Logger *slog.Logger
	// Version is reported to clients. Default "dev".
	Version string
}

// WithDefaults returns cfg with every zero field set to its default.
func (cfg Config) WithDefaults() Config {
	cfg.Policy = cmp.Or(cfg.Policy, executor.PolicySafe)
	cfg.Wait = cmp.Or(cfg.Wait, 60*time.Second)
	cfg.Progress = cmp.Or(cfg.Progress, 5*time.Second)
	if cfg.Session == "" {
		cfg.Session = "mcp_" + randomHex(8)
	}
	cfg.ReviewHint = cmp.Or(cfg.ReviewHint, "on docket's review page, or with docket approve / docket resolve")
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Version = cmp.Or(cfg.Version, "dev")
	return cfg
}

func (cfg Config) validate() error {
	var errs []error
	if cfg.Engine == nil {
		errs = append(errs, errors.New("the Engine field is required"))
	}
	if cfg.Ledger == nil {
		errs = append(errs, errors.New("the Ledger field is required"))
	}
	if cfg.Tools == nil {
		errs = append(errs, errors.New("the Tools field is required"))
	}
	switch cfg.Policy {
	case executor.PolicySafe, executor.PolicyAll, executor.PolicyNone:
	default:
		errs = append(errs, fmt.Errorf("the Policy field is %q: want safe, all or none", cfg.Policy))
	}
	if cfg.Progress <= 0 {
		errs = append(errs, errors.New("the Progress field must be positive"))
	}
	if !validSession.MatchString(cfg.Session) {
		errs = append(errs, fmt.Errorf("the Session field is %q: want 1-128 letters, digits or _.:-", cfg.Session))
	}
	if cfg.Tools != nil {
		for n, w := range tools.WireNames(cfg.Tools.Names()) {
			if strings.HasPrefix(w, ownPrefix) {
				errs = append(errs, fmt.Errorf("tool %q: clients would see it as %q, but the prefix %q is docket's own (rename the tool or the MCP server)", n, w, ownPrefix))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("mcpserve: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

var validSession = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// Server is docket as an MCP server. Build it with New, serve it over stdio
// (MCP().Run with an mcp.StdioTransport) or streamable HTTP (Handler), and
// Close it at the end (before closing the ledger).
type Server struct {
	cfg Config
	eng *executor.Engine
	led ledger.Store
	reg *tools.Registry
	log *slog.Logger
	mcp *mcp.Server
	// fromWire maps the names clients see to registry names.
	fromWire map[string]string
	ctx      context.Context // drives; cancelled by Close
	stop     context.CancelFunc

	mu       sync.Mutex
	closed   bool
	driving  map[string]bool  // run id → a drive of this server is going on
	again    map[string]bool  // run id → drive once more when it ends
	driveErr map[string]error // run id → how its last drive ended
	changed  chan struct{}    // closed (and replaced) when a drive ends
	wg       sync.WaitGroup
}

// New validates cfg and builds the Server with every tool of cfg.Tools and
// docket's own tools.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, eng: cfg.Engine, led: cfg.Ledger, reg: cfg.Tools,
		log: cfg.Logger.With("component", "mcpserve"), ctx: ctx, stop: stop,
		driving: map[string]bool{}, again: map[string]bool{}, driveErr: map[string]error{},
		changed: make(chan struct{}),
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "docket", Title: "docket: reviewable, exactly-once tool calls", Version: cfg.Version},
		&mcp.ServerOptions{Logger: slog.New(warnOnly{s.log.Handler()}), Instructions: instructions})
	s.fromWire = map[string]string{}
	for name, wire := range tools.WireNames(s.reg.Names()) {
		s.fromWire[wire] = name
		spec, _ := s.reg.Spec(name)
		s.mcp.AddTool(toolFor(spec, wire), s.callTool(spec))
	}
	s.addOwnTools()
	return s, nil
}

// warnOnly passes on the go-sdk's warnings and errors, not its record of
// every session connecting and disconnecting.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(as)} }
func (w warnOnly) WithGroup(g string) slog.Handler       { return warnOnly{w.Handler.WithGroup(g)} }

const instructions = "docket records every call that changes something before it runs and performs it exactly once; " +
	"some calls wait for a person to approve them. A result that says a call waits is not a failure: tell the user, " +
	"and call the same tool again with the same arguments later to learn the decision (it never runs twice). " +
	"Give a call _meta[\"" + MetaIdempotencyKey + "\"] to make it exactly once by your own key."

// MCP is the MCP server, for serving over a transport of the caller's choice
// (mcp.StdioTransport for stdio).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Handler serves MCP over streamable HTTP (mount it at /mcp). Each MCP
// session is a session of calls (see the package doc).
func (s *Server) Handler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, nil)
}

// Close stops the drives this server started at once (a drive stopped
// mid-call leaves its claim: the next drive settles it by class) and waits
// for them. Shutdown lets them finish first.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}

// Shutdown starts no new drive and waits for the drives going on to finish
// (their outcomes recorded) until ctx ends; then it stops the rest as Close
// does.
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	s.Close()
}

// ResumeRunning drives every run that was left running (a restart after a
// crash), as `docket serve` does at start. It returns how many it started.
func (s *Server) ResumeRunning(ctx context.Context) (int, error) {
	n, after := 0, ""
	for {
		page, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: ledger.RunRunning, After: after, Limit: 500})
		if err != nil {
			return n, fmt.Errorf("mcpserve: listing running runs: %w", err)
		}
		for _, r := range page {
			s.drive(r.ID)
			n++
		}
		if next == "" {
			return n, nil
		}
		after = next
	}
}

// toolFor is the MCP definition of a registry tool, seen as wire.
func toolFor(spec tools.Spec, wire string) *mcp.Tool {
	t := &mcp.Tool{
		Name:        wire,
		Title:       spec.Name,
		Description: spec.Description,
		InputSchema: json.RawMessage(spec.InputSchema),
		Annotations: annotations(spec.Class),
		Meta:        mcp.Meta{"io.docket/effect": string(spec.Class), "io.docket/tool": spec.Name},
	}
	if spec.Class == tools.AtMostOnce {
		t.Description = strings.TrimSpace(t.Description + "\n\n(docket: at most once; a person may need to approve it, and an identical repeat needs a person.)")
	}
	return t
}

// annotations are the hints that say what docket does with a tool of class c
// (table in the package doc).
func annotations(c tools.Class) *mcp.ToolAnnotations {
	t, f := true, false
	a := &mcp.ToolAnnotations{OpenWorldHint: &t}
	switch c {
	case tools.ReadOnly:
		a.ReadOnlyHint, a.IdempotentHint, a.DestructiveHint = true, true, &f
	case tools.Idempotent, tools.Keyed, tools.Lookup:
		a.IdempotentHint, a.DestructiveHint = true, &t
	default:
		a.DestructiveHint = &t
	}
	return a
}

// --- ids and keys ---

// callIdentity says which run and action a call is.
type callIdentity struct {
	session string // S
	keyed   bool   // the client gave a key
	hash    string // h: hex sha256(JCS([tool, args]))
	runID   string // occurrence 1 (or the keyed run, or the read-only run)
	action  string
}

// CallHash is h of the package doc: lowercase hex of sha256 of the JCS
// canonical form of [tool, args].
func CallHash(tool string, args json.RawMessage) (string, error) {
	canon, err := plan.Canonical(args)
	if err != nil {
		return "", err
	}
	name, err := json.Marshal(tool)
	if err != nil {
		return "", err
	}
	doc, err := jcs.Transform([]byte("[" + string(name) + "," + string(canon) + "]"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:]), nil
}

// KeyedRunID is the run of a call the client keyed with key.
func KeyedRunID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "mcpkey_" + hex.EncodeToString(sum[:])[:32]
}

// SessionRunID is S for an MCP session id.
func SessionRunID(mcpSession string) string {
	sum := sha256.Sum256([]byte(mcpSession))
	return "mcp_" + hex.EncodeToString(sum[:])[:16]
}

// occurrence is the run id of the nth identical call (n >= 1) of a session.
func (id callIdentity) occurrence(n int) string {
	if n <= 1 {
		return id.runID
	}
	return fmt.Sprintf("%s.%d", id.runID, n)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("mcpserve: reading randomness: %v", err)) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b)
}

// metaString reads a string _meta field; a present field of another type is
// an error.
func metaString(m mcp.Meta, name string) (string, error) {
	v, ok := m[name]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("_meta[%q] must be a non-empty string", name)
	}
	return s, nil
}

// identify works out the call's identity from its session, _meta and
// arguments.
func (s *Server) identify(req *mcp.CallToolRequest, spec tools.Spec, args json.RawMessage) (callIdentity, error) {
	var id callIdentity
	meta := req.Params.Meta
	named, err := metaString(meta, MetaRunID)
	if err != nil {
		return id, err
	}
	key, err := metaString(meta, MetaIdempotencyKey)
	if err != nil {
		return id, err
	}
	switch {
	case named != "":
		if !validSession.MatchString(named) {
			return id, fmt.Errorf("_meta[%q] %q: want 1-128 letters, digits or _.:-", MetaRunID, named)
		}
		id.session = named
	case req.Session != nil && req.Session.ID() != "":
		id.session = SessionRunID(req.Session.ID())
	default:
		id.session = s.cfg.Session
	}
	if id.hash, err = CallHash(spec.Name, args); err != nil {
		return id, fmt.Errorf("arguments: %w", err)
	}
	switch {
	case key != "":
		if len(key) > 255 {
			return id, fmt.Errorf("_meta[%q]: longer than 255 bytes", MetaIdempotencyKey)
		}
		id.keyed, id.runID, id.action = true, KeyedRunID(key), "call"
	case spec.Class == tools.ReadOnly:
		id.runID, id.action = id.session+".r_"+randomHex(8), "r_"+id.hash[:16]
	default:
		id.action = "c_" + id.hash[:16]
		id.runID = id.session + "." + id.action
	}
	return id, nil
}

// --- calls ---

func (s *Server) callTool(spec tools.Spec) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(strings.TrimSpace(string(args))) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		id, err := s.identify(req, spec, args)
		if err != nil {
			return errorResult("docket refused this call: %v", err), nil
		}
		runID, created, err := s.place(ctx, spec, id, args)
		if err != nil {
			return s.refusal(err, id), nil
		}
		if created {
			s.log.Info("call recorded", "run_id", runID, "tool", spec.Name, "class", string(spec.Class), "session", id.session)
		}
		return s.await(ctx, req, runID, id.action)
	}
}

// refusal turns an error from recording a call into its result.
func (s *Server) refusal(err error, id callIdentity) *mcp.CallToolResult {
	switch {
	case errors.Is(err, executor.ErrPlanMismatch) && id.keyed:
		return errorResult("docket refused this call: its %s was already used for a different call (another tool or other arguments); nothing was done. Use a new key for a new call.", MetaIdempotencyKey)
	case errors.Is(err, executor.ErrInvalidPlan):
		return errorResult("docket refused this call, nothing was done: %v", err)
	case errors.Is(err, executor.ErrToolsChanged):
		return errorResult("docket refused this call, nothing was done: the tool definitions changed since this call was first recorded (%v)", err)
	}
	s.log.Warn("recording a call failed", "run_id", id.runID, "err", err)
	return errorResult("docket could not record this call, so it did not run it: %v", err)
}

// place records the call as a run (or finds the run of the same call) and
// makes sure it is driven. It returns the run to wait for.
func (s *Server) place(ctx context.Context, spec tools.Spec, id callIdentity, args json.RawMessage) (string, bool, error) {
	if id.keyed || spec.Class == tools.ReadOnly {
		return s.record(ctx, id.runID, id, spec, args, s.cfg.Policy, "")
	}
	// Without a key: the first occurrence of an identical call in the
	// session, or a repeat. done is the latest occurrence whose action
	// succeeded (took effect, or a person said it did).
	var (
		last, done ledger.Run
		n          int
		firstAt    time.Time
	)
	for n = 1; ; n++ {
		r, err := s.led.GetRun(ctx, id.occurrence(n))
		if errors.Is(err, ledger.ErrNotFound) {
			break
		}
		if err != nil {
			return "", false, err
		}
		if n == 1 {
			firstAt = r.CreatedAt
		}
		if r.Status == ledger.RunCompleted {
			doc, err := s.led.Doc(ctx, r.ID)
			if err != nil {
				return "", false, err
			}
			if a, ok := actionOf(doc, id.action); ok && a.Status == ledger.StatusSucceeded {
				done = r
			}
		}
		last = r
	}
	switch {
	case n == 1:
		return s.record(ctx, id.occurrence(1), id, spec, args, s.cfg.Policy, "")
	case !finished(last.Status):
		// A retry of a call still going on (or waiting for a person).
		s.drive(last.ID)
		return last.ID, false, nil
	case done.ID == "":
		// Every earlier identical call failed, was rejected, skipped or
		// cancelled: none took effect, so this one is a new attempt under
		// the policy.
		return s.record(ctx, id.occurrence(n), id, spec, args, s.cfg.Policy,
			fmt.Sprintf(" (identical call #%d in this session; the earlier ones did not take effect)", n))
	case spec.Class != tools.AtMostOnce:
		// A possible retry: the outcome of the call that took effect.
		return done.ID, false, nil
	}
	why := fmt.Sprintf(" — REPEAT #%d: the same call (same tool, same arguments) was made in this session at %s (run %s) and took effect: approve only if it should happen again",
		n, firstAt.UTC().Format(time.RFC3339), done.ID)
	return s.record(ctx, id.occurrence(n), id, spec, args, executor.PolicyNone, why)
}

func finished(st ledger.RunStatus) bool {
	return st == ledger.RunCompleted || st == ledger.RunFailed || st == ledger.RunCancelled
}

// record records the call's run (or finds it recorded) and drives it.
func (s *Server) record(ctx context.Context, runID string, id callIdentity, spec tools.Spec, args json.RawMessage, pol executor.Policy, note string) (string, bool, error) {
	goal := "MCP call " + spec.Name + note
	if !id.keyed {
		goal = "MCP call " + spec.Name + " in session " + id.session + note
	}
	p := &plan.Plan{
		Goal:    goal,
		Actions: []plan.Action{{ID: id.action, Tool: spec.Name, Args: args}},
		Meta:    map[string]string{"source": "mcp", "mcp_session": id.session, "call_hash": id.hash},
	}
	res, err := runs.Create(ctx, s.eng, s.led, runs.Request{RunID: runID, Plan: p, Options: &executor.RunOptions{Policy: pol}})
	if err != nil {
		return "", false, err
	}
	s.drive(runID)
	return runID, res.Created, nil
}

// drive drives runID in the background under the server's context (never
// the request's), once more after the current drive if one is going on.
func (s *Server) drive(runID string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if s.driving[runID] {
		s.again[runID] = true
		s.mu.Unlock()
		return
	}
	s.driving[runID] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		for {
			_, err := s.eng.Resume(s.ctx, runID, nil)
			if err != nil && s.ctx.Err() == nil {
				s.log.Warn("drive stopped with an error", "run_id", runID, "err", err)
			}
			s.mu.Lock()
			if err != nil {
				s.driveErr[runID] = err
			} else {
				delete(s.driveErr, runID) // only failures are kept: the map stays small
			}
			if s.again[runID] && !s.closed {
				delete(s.again, runID)
				s.mu.Unlock()
				continue
			}
			delete(s.driving, runID)
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			return
		}
	}()
}

// driveState says whether a drive of runID is going on, how the last one
// ended, and a channel closed when a drive next ends.
func (s *Server) driveState(runID string) (going bool, changed <-chan struct{}, last error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.driving[runID], s.changed, s.driveErr[runID]
}

// await waits for the call's run to settle and turns it into the result:
// the output, a definite failure, or past Config.Wait of waiting for a
// person, a result saying the call waits.
func (s *Server) await(ctx context.Context, req *mcp.CallToolRequest, runID, actionID string) (*mcp.CallToolResult, error) {
	sub, err := s.led.Subscribe(ctx, runID, 0)
	if err != nil {
		return nil, fmt.Errorf("docket: following run %s: %w", runID, err)
	}
	w := &waiter{s: s, req: req, runID: runID, actionID: actionID, sub: sub, token: req.Params.GetProgressToken()}
	defer w.close()
	for {
		going, changed, lastErr := s.driveState(runID)
		doc, err := s.led.Doc(ctx, runID)
		if err != nil {
			return nil, fmt.Errorf("docket: reading run %s: %w", runID, err)
		}
		act, ok := actionOf(doc, actionID)
		if !ok {
			return errorResult("docket: run %s has no action %s (was it replayed with another plan?)", runID, actionID), nil
		}
		var res *mcp.CallToolResult
		switch doc.Run.Status {
		case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled:
			return settledResult(doc, act), nil
		case ledger.RunAwaitingApproval, ledger.RunPaused:
			res = w.waiting(ctx, doc, act, going)
		default: // running, planning
			res = w.running(act, going, lastErr, &changed)
		}
		if res != nil {
			return res, nil
		}
		if res, err := w.next(ctx, changed, doc, act); res != nil || err != nil {
			return res, err
		}
	}
}

// waiter is one call's wait for its run (await).
type waiter struct {
	s               *Server
	req             *mcp.CallToolRequest
	runID, actionID string
	sub             *ledger.Subscription
	token           any // the client's progress token; nil: it wants none
	waitingSince    time.Time
	bound           *time.Timer // Config.Wait from waitingSince
	tick            *time.Ticker
	tickC           <-chan time.Time
	lastKick        string
	progress        float64
	idleDrives      int
}

func (w *waiter) close() {
	w.sub.Close()
	if w.bound != nil {
		w.bound.Stop()
	}
	if w.tick != nil {
		w.tick.Stop()
	}
}

// waiting handles a run that waits for a person: from the first time it is
// seen so, Config.Wait runs and progress is notified; a decision a person
// made is driven on. It returns the result when the call answers now.
func (w *waiter) waiting(ctx context.Context, doc ledger.RunDoc, act ledger.Action, going bool) *mcp.CallToolResult {
	if w.waitingSince.IsZero() {
		w.waitingSince = time.Now()
		w.bound = time.NewTimer(max(w.s.cfg.Wait, 0))
		if w.token != nil {
			w.tick = time.NewTicker(w.s.cfg.Progress)
			w.tickC = w.tick.C
		}
	}
	if w.s.cfg.Wait < 0 {
		return w.s.waitingResult(doc, act)
	}
	// A person decided (approved, resolved): drive it on, once per state
	// seen, even where no service drives it on its own.
	if state := string(act.Status) + "/" + fmt.Sprint(act.Attempts); movable(act) && state != w.lastKick && !going {
		w.lastKick = state
		w.s.drive(w.runID)
	}
	if w.token != nil && w.progress == 0 {
		w.progress = w.s.notify(ctx, w.req, w.token, w.progress, w.waitingSince, doc, act)
	}
	return nil
}

// running handles a run that is running: without a drive of this server, a
// drive that failed ends the call, and one that ended with the run still
// running (another process drives it, or this one is stopping) is tried a
// few times, then the call says so instead of spinning. *changed follows the
// drive started here.
func (w *waiter) running(act ledger.Action, going bool, lastErr error, changed *<-chan struct{}) *mcp.CallToolResult {
	switch {
	case going:
		return nil
	case lastErr != nil:
		return errorResult("docket could not go on with this call (run %s, action %s): %v. Nothing more was done; call again with the same arguments to try again.", w.runID, w.actionID, lastErr)
	}
	if w.idleDrives++; w.idleDrives > maxIdleDrives {
		return errorResult("docket could not finish this call now: run %s is still running (action %s is %s; another docket process may be driving it). Call again with the same arguments later: it will not run twice.", w.runID, w.actionID, act.Status)
	}
	w.s.drive(w.runID)
	_, *changed, _ = w.s.driveState(w.runID)
	return nil
}

// next waits until something may have changed: an event of the run, a
// drive ending (changed), a progress tick; past Config.Wait it returns the
// result as the run is then.
func (w *waiter) next(ctx context.Context, changed <-chan struct{}, doc ledger.RunDoc, act ledger.Action) (*mcp.CallToolResult, error) {
	var bound <-chan time.Time
	if w.bound != nil {
		bound = w.bound.C
	}
	select {
	case _, open := <-w.sub.C:
		if !open {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			sub, err := w.s.led.Subscribe(ctx, w.runID, 0)
			if err != nil {
				return nil, fmt.Errorf("docket: following run %s: %w", w.runID, err)
			}
			w.sub = sub
		}
	case <-changed:
	case <-w.tickC:
		w.progress = w.s.notify(ctx, w.req, w.token, w.progress, w.waitingSince, doc, act)
	case <-bound:
		doc, err := w.s.led.Doc(ctx, w.runID)
		if err != nil {
			return nil, fmt.Errorf("docket: reading run %s: %w", w.runID, err)
		}
		act, _ := actionOf(doc, w.actionID)
		if finished(doc.Run.Status) {
			return settledResult(doc, act), nil
		}
		return w.s.waitingResult(doc, act), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

// maxIdleDrives bounds the drives a waiting call starts that end with the
// run still running.
const maxIdleDrives = 3

// movable says whether a waiting run's action was moved on by a person, so
// that a drive has something to do.
func movable(a ledger.Action) bool {
	switch a.Status {
	case ledger.StatusApproved, ledger.StatusSucceeded, ledger.StatusSkipped, ledger.StatusRejected:
		return true
	case ledger.StatusPending:
		return a.Attempts > 0 // a person asked for a retry
	}
	return false
}

// notify sends a progress notification (errors are the client's business:
// the call goes on) and returns the progress value sent.
func (s *Server) notify(ctx context.Context, req *mcp.CallToolRequest, token any, last float64, since time.Time, doc ledger.RunDoc, act ledger.Action) float64 {
	p := max(last+1, float64(time.Since(since)/time.Second))
	msg := "waiting for a person: " + waitReason(doc, act) + " (run " + doc.Run.ID + ", action " + act.ID + "), " + s.cfg.ReviewHint
	err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: token, Progress: p, Total: max(p, s.cfg.Wait.Seconds()), Message: msg,
	})
	if err != nil {
		s.log.Debug("progress notification failed", "run_id", doc.Run.ID, "err", err)
	}
	return p
}

func actionOf(doc ledger.RunDoc, id string) (ledger.Action, bool) {
	for _, a := range doc.Actions {
		if a.ID == id {
			return a, true
		}
	}
	return ledger.Action{}, false
}

// waitReason says what the call waits for.
func waitReason(doc ledger.RunDoc, act ledger.Action) string {
	switch {
	case act.Status == ledger.StatusNeedsReview:
		return "this call may or may not have happened: a person is checking (" + cmp.Or(act.Error, "outcome unknown") + ")"
	case doc.Run.Status == ledger.RunPaused && doc.Run.PausedBy != "":
		return "a person paused this call's run"
	case act.Status == ledger.StatusPending:
		return "this call needs a person's approval before it runs; nothing was done yet"
	}
	return "this call waits for a person"
}

// settledResult is the result of a finished run.
func settledResult(doc ledger.RunDoc, act ledger.Action) *mcp.CallToolResult {
	switch act.Status {
	case ledger.StatusSucceeded:
		return outputResult(doc, act)
	case ledger.StatusRejected:
		return withMeta(errorResult("a person rejected this call: it was not done. %s", act.Error), doc, act)
	case ledger.StatusSkipped:
		if doc.Run.Status == ledger.RunCompleted {
			return withMeta(errorResult("a person marked this call as skipped: docket did not perform it (run %s, action %s)", doc.Run.ID, act.ID), doc, act)
		}
	case ledger.StatusFailed:
		return withMeta(errorResult("the call failed and did not happen: %s", cmp.Or(act.Error, doc.Run.Error)), doc, act)
	case ledger.StatusCompensated:
		return withMeta(errorResult("the call happened and was then undone (compensated): %s", cmp.Or(doc.Run.Error, "see run "+doc.Run.ID)), doc, act)
	}
	if doc.Run.Status == ledger.RunCancelled {
		return withMeta(errorResult("a person cancelled this call's run before it ran (run %s)", doc.Run.ID), doc, act)
	}
	return withMeta(errorResult("the call did not happen: run %s %s: %s", doc.Run.ID, doc.Run.Status, cmp.Or(doc.Run.Error, act.Error, string(act.Status))), doc, act)
}

// outputResult is a succeeded call's recorded output.
func outputResult(doc ledger.RunDoc, act ledger.Action) *mcp.CallToolResult {
	out := act.Output
	if len(out) == 0 {
		out = json.RawMessage(`null`)
	}
	r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}
	var obj map[string]json.RawMessage
	if json.Unmarshal(out, &obj) == nil && obj != nil {
		r.StructuredContent = out
	}
	return withMeta(r, doc, act)
}

// waitingResult says plainly that the call waits for a person.
func (s *Server) waitingResult(doc ledger.RunDoc, act ledger.Action) *mcp.CallToolResult {
	text := fmt.Sprintf("WAITING FOR A PERSON — %s. Run %s, action %s. A person decides %s. "+
		"Call this tool again with the same arguments (and the same %s, if you gave one) to get the decision: it will not run twice.",
		waitReason(doc, act), doc.Run.ID, act.ID, s.cfg.ReviewHint, MetaIdempotencyKey)
	st, _ := json.Marshal(map[string]string{"status": "waiting_for_person", "run_id": doc.Run.ID, "action_id": act.ID, "reason": waitReason(doc, act)})
	r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(st)}
	return withMeta(r, doc, act)
}

func errorResult(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: strings.TrimSpace(fmt.Sprintf(format, a...))}}}
}

// withMeta says in the result's _meta which run, action and key it is about.
func withMeta(r *mcp.CallToolResult, doc ledger.RunDoc, act ledger.Action) *mcp.CallToolResult {
	r.Meta = mcp.Meta{"io.docket/run_id": doc.Run.ID, "io.docket/action_id": act.ID, "io.docket/status": string(act.Status)}
	if act.Key != "" {
		r.Meta["io.docket/key"] = act.Key
	}
	return r
}
