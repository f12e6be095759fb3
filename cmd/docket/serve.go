package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/planner/demomodel"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/ui"
)

func init() {
	register("serve", "run the service: HTTP API, live review over WebSocket, the review page", func(env Env) command { return &serveCmd{env: env} })
}

// tokenFile is where serve keeps the token it generated, in the data
// directory, readable by its owner only.
const tokenFile = "serve-token"

// serveSubscriberBuffer bounds each WebSocket client's live-event queue in the
// ledger (the default, 4096, costs ~0.4 MiB per client).
const serveSubscriberBuffer = 256

const serveUsage = "serve [--data DIR] [--tools FILE] [--addr 127.0.0.1:8080] [--mcp [--mcp-approve safe] [--mcp-wait 60s] [--mcp-url-token]] [--tokens FILE] [--token [NAME=]T]... [--tls-cert FILE --tls-key FILE] [--origin URL]... [--notify URL [--notify-secret S]] [--rate 50] [--burst 100] [--max-sockets 32] [--host NAME]... [--trust-proxy] [--idle-timeout 2m] [--body-timeout 1m] [--max-conns-per-client 128] [--grace 25s] [--memory-limit 128MiB] [--model NAME] [--base-url URL]"

// serveCmd is `docket serve`.
type serveCmd struct{ env Env }

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func (c *serveCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("serve", serveUsage, c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	ledgerFlag(fs, data, c.env.Getenv)
	toolsPath := fs.String("tools", "", "tools file (default: the built-in demo world, simulated in-process)")
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	policyPath := policyFlag(fs)
	var tokens, origins stringList
	fs.Var(&tokens, "token", "API token with every scope (admin), optionally named (NAME=TOKEN); repeatable (default, without --tokens: $DOCKET_TOKEN, else one generated and kept in the data directory)")
	tokensPath := fs.String("tokens", "", `tokens file: {"version": 1, "tokens": [{"name", "scopes": [...], "sha256" | "env"}]} (scopes: read, submit, review, control, admin)`)
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM; reloaded on SIGHUP); with --tls-key")
	tlsKey := fs.String("tls-key", "", "the certificate's private key (PEM; reloaded on SIGHUP); with --tls-cert")
	fs.Var(&origins, "origin", "another origin whose pages may use the API with a session (e.g. https://review.example.com); repeatable")
	notify := fs.String("notify", "", "URL to POST to when a run waits for a person")
	notifySecret := fs.String("notify-secret", "", "sign every --notify call with this secret (Docket-Signature: t=…,v2=…, over the delivery id, the time and the body) (default $DOCKET_NOTIFY_SECRET)")
	rate := fs.Float64("rate", 50, "requests per second each token may make on average (HTTP and socket messages; 0: no limit)")
	burst := fs.Int("burst", 100, "requests a token may make at once before --rate applies")
	maxSockets := fs.Int("max-sockets", 32, "WebSockets one token may hold open (0: no cap)")
	hf := addHTTPFlags(fs)
	grace := fs.Duration("grace", defaultGrace, "on SIGTERM or Ctrl-C: no new attempt starts, and calls in flight get this long to finish; calls still running near its end are cut off and recorded with an unknown outcome (the next start decides by the tool's class), and the process exits within it")
	mcpOn := fs.Bool("mcp", false, "also serve the tools to MCP clients over streamable HTTP at /mcp (each tool needs its scope: submit to call a tool, read for docket_run_status and docket_waiting), on the same engine, page and tokens (see docket mcp)")
	mcpApprove := fs.String("mcp-approve", "safe", "with --mcp: the approval policy of MCP calls' runs (safe, all, none)")
	mcpURLToken := fs.Bool("mcp-url-token", false, "with --mcp: also serve MCP at /mcp/t/TOKEN, for clients that cannot send an Authorization header (the token then shows in URLs: proxies' logs, shell history)")
	mcpWait := fs.Duration("mcp-wait", 60*time.Second, "with --mcp: how long an MCP call that waits for a person stays open; 0: answer at once")
	lease := fs.Duration("lease", postgres.DefaultLease, "with --ledger: this node's lease; after it, other nodes adopt the runs this node drove (renewed every lease/5)")
	memLimit := fs.String("memory-limit", "", "soft memory limit of the process (256MiB, 1GiB, off) (default $GOMEMLIMIT, else 128MiB)")
	mf := addModelFlags(fs)
	pos, err := parseArgs(fs, args)
	c.env.PolicyFile = *policyPath
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("serve takes no positional arguments (got %q)", pos)
	}
	if *grace <= 0 {
		return usageError("--grace must be positive")
	}
	mcpPolicy, err := parsePolicy(*mcpApprove)
	if err != nil {
		return err
	}
	if *mcpURLToken && !*mcpOn {
		return usageError("--mcp-url-token serves MCP at /mcp/t/TOKEN: it needs --mcp")
	}
	if *mcpWait < 0 {
		return usageError("--mcp-wait must not be negative")
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return usageError("--tls-cert and --tls-key go together")
	}
	if *rate < 0 || *burst < 1 || *maxSockets < 0 {
		return usageError("--rate and --max-sockets must not be negative, --burst must be at least 1")
	}
	if err := hf.validate(); err != nil {
		return err
	}
	secret := cmp.Or(*notifySecret, c.env.Getenv("DOCKET_NOTIFY_SECRET"))
	if secret != "" && *notify == "" {
		return usageError("--notify-secret (or $DOCKET_NOTIFY_SECRET) signs --notify calls: give --notify URL too")
	}
	if secret != "" && len(secret) < 16 {
		return usageError("the webhook secret must be at least 16 characters")
	}
	limit, limitFrom, err := memoryLimit(*memLimit, c.env.Getenv)
	if err != nil {
		return err
	}
	out, errOut := c.env.Stdout, c.env.Stderr
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	defer setMemoryLimit(limit)()
	log.Info("memory limit", "soft_limit", sizeLabel(limit), "from", limitFrom)

	// Tools: the given file, or the demo world.
	var (
		reg   *tools.Registry
		file  []byte
		world *demoworld.World
	)
	if *toolsPath != "" {
		var closeTools func()
		if reg, closeTools, err = loadTools(ctx, *toolsPath, c.env); err != nil {
			return err
		}
		defer closeTools()
		if file, err = os.ReadFile(*toolsPath); err != nil {
			return usageError("reading tools file: %v", err)
		}
	} else {
		world = demoworld.Start()
		defer world.Close()
		file = world.ToolsFile(demoworld.ToolsOptions{})
		f, err := httptool.Parse(file, c.env.Getenv)
		if err != nil {
			return fmt.Errorf("the demo world's tools file: %w", err)
		}
		if reg, err = tools.NewRegistry(f.Tools...); err != nil {
			return fmt.Errorf("the demo world's tools: %w", err)
		}
	}

	// The model: the configured endpoint, or the demo model with the demo world.
	pcfg, err := mf.config(c.env, reg)
	if err != nil {
		return err
	}
	pcfg.Logger = log
	var pl *planner.Planner
	switch {
	case pcfg.Model != "":
		if pl, err = planner.New(pcfg); err != nil {
			return withCode(exitBad, err)
		}
	case world != nil:
		pcfg.Model, pcfg.BaseURL, pcfg.APIKey = demomodel.Model, demomodel.BaseURL, ""
		pcfg.HTTPClient = &http.Client{Transport: demomodel.Transport()}
		if pl, err = planner.New(pcfg); err != nil {
			return fmt.Errorf("the demo model: %w", err)
		}
	}

	// A subscription (one per WebSocket client) queues at most this many
	// live events in the ledger; the WebSocket adds its own bounded queue.
	var l ledger.Store
	var pg *postgres.Store
	if postgres.IsURL(*data) {
		if *lease < time.Second {
			return usageError("--lease must be at least 1s")
		}
		// Behind a pooler in transaction mode, $DOCKET_LEDGER_LISTEN is a direct
		// connection to LISTEN on (prompt events on the sockets).
		pg, err = openSharedLedger(ctx, postgres.Config{URL: *data, Logger: log, SubscriberBuffer: serveSubscriberBuffer, Lease: *lease,
			ListenURL: c.env.Getenv(ledgerListenEnv)})
		l = pg
	} else {
		l, err = openLedgerConfig(ctx, badgerdb.Config{Dir: *data, Logger: log, SubscriberBuffer: serveSubscriberBuffer})
		if err == nil {
			tightenDataDir(*data, log)
		}
	}
	if err != nil {
		return err
	}
	defer l.Close()
	var scoped []ui.Token
	if *tokensPath != "" {
		raw, err := os.ReadFile(*tokensPath)
		if err != nil {
			return usageError("reading the tokens file: %v", err)
		}
		if scoped, err = ui.ParseTokensFile(raw, c.env.Getenv); err != nil {
			return usageError("%s:%v", *tokensPath, err)
		}
	}
	var (
		named             map[string]string
		sharedAdmin       []ui.Token // the generated token of a shared ledger, by its hash
		generated, source string
	)
	shared := postgres.IsURL(*data)
	if len(scoped) == 0 || len(tokens) > 0 {
		if shared && len(tokens) == 0 && c.env.Getenv("DOCKET_TOKEN") == "" {
			// Every node of a shared ledger signs in with the same token.
			var t ui.Token
			t, generated, source, err = sharedServeToken(ctx, l)
			sharedAdmin = []ui.Token{t}
		} else {
			named, generated, source, err = serveTokens(tokens, c.env.Getenv("DOCKET_TOKEN"), *data)
		}
		if err != nil {
			return err
		}
	}
	for _, t := range scoped {
		if _, dup := named[t.Name]; dup {
			return usageError("token %q is named both in %s and by --token", t.Name, *tokensPath)
		}
	}
	var certs *ui.CertReloader
	if *tlsCert != "" {
		if certs, err = ui.NewCertReloader(*tlsCert, *tlsKey, log); err != nil {
			return usageError("%v", err)
		}
		// SIGHUP reads the certificate and key again: a renewed certificate
		// needs no restart; a bad new one keeps the old (and is logged).
		// Listened for before anything is printed, so a SIGHUP sent once
		// the service says where it listens never ends the process.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		stopHup := make(chan struct{})
		defer close(stopHup)
		go func() {
			for {
				select {
				case <-hup:
					certs.Reload()
				case <-stopHup:
					return
				}
			}
		}()
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return withCode(exitBad, fmt.Errorf("listening on %s: %w", *addr, err))
	}
	defer ln.Close()
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	base, other, everywhere := serveURL(ln.Addr(), *addr, scheme)
	var warnings []string
	if certs == nil && !loopback(ln.Addr()) {
		warnings = append(warnings, fmt.Sprintf("plain HTTP on a non-loopback address (%s): tokens and session cookies cross the network unencrypted; serve with --tls-cert/--tls-key or listen on 127.0.0.1 behind a TLS-terminating proxy", ln.Addr()))
	}
	if *notify != "" && secret == "" {
		warnings = append(warnings, "--notify calls are unsigned: a receiver cannot tell docket's call from anyone's; set --notify-secret or $DOCKET_NOTIFY_SECRET")
	}
	ecfg := executor.Config{Logger: log}
	if shared {
		ecfg.Clock = l // lookup windows and key_ttl by the database's clock, as the claims
	}
	if c.env.Tune != nil {
		c.env.Tune(&ecfg)
	}
	ucfg := ui.Config{
		Ledger:             l,
		Tools:              reg,
		Executor:           ecfg,
		Planner:            pl,
		Tokens:             named,
		ScopedTokens:       append(slices.Clone(scoped), sharedAdmin...),
		RateLimit:          *rate,
		RateBurst:          *burst,
		MaxSocketsPerToken: *maxSockets,
		Warnings:           warnings,
		Origins:            origins,
		ToolsFile:          file,
		Notify:             *notify,
		NotifySecret:       secret,
		Logger:             log,
		TraceID:            c.env.traceIDs(),
	}
	hf.apply(&ucfg, ln)
	srv, err := ui.New(ucfg)
	if err != nil {
		return withCode(exitBad, err)
	}

	handBackStartupGarbage()
	fmt.Fprintf(out, "docket serve: listening on %s/\n", base)
	if everywhere {
		fmt.Fprintf(out, "  on every network interface (--addr %s); other machines: %s/\n", *addr, other)
	}
	if certs == nil && !loopback(ln.Addr()) {
		where := "beyond this machine"
		if everywhere {
			where = "on every network interface"
		}
		fmt.Fprintf(errOut, "docket serve: warning: --addr %s serves the API and the review page in plain HTTP %s: anyone who can reach it can try tokens, and tokens and session cookies cross the network unencrypted. Serve HTTPS with --tls-cert FILE --tls-key FILE, or listen on 127.0.0.1 (the default) and put a TLS-terminating proxy in front. /readyz says so too.\n", *addr, where)
	}
	if *notify != "" && secret == "" {
		fmt.Fprintln(errOut, "docket serve: warning: --notify calls are unsigned; set --notify-secret or $DOCKET_NOTIFY_SECRET so the receiver can verify them")
	}
	if shared {
		fmt.Fprintf(out, "  ledger: %s (shared: other nodes may serve it too)\n", postgres.Redact(*data))
	} else {
		fmt.Fprintf(out, "  data directory: %s\n", *data)
	}
	if *mcpOn {
		fmt.Fprintf(out, "  MCP (streamable HTTP): %s/mcp (calls need the submit scope, reading runs the read scope)\n", base)
	}
	switch {
	case world != nil && pcfg.Model == demomodel.Model:
		fmt.Fprintln(out, "  no model endpoint configured (OPENAI_MODEL is not set): planning with docket's demo model")
		fmt.Fprintln(out, "  (scripted replies) against the demo world (simulated CRM, payments, settings, email, in-process).")
		fmt.Fprintln(out, "  Try the goal: onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack")
	case world != nil:
		fmt.Fprintf(out, "  model: %s at %s, tools: the demo world (simulated, in-process)\n", pcfg.Model, pcfg.BaseURL)
	case pl == nil:
		fmt.Fprintf(out, "  tools: %s; no model endpoint configured (OPENAI_MODEL is not set): runs are created from plans only\n", *toolsPath)
	default:
		fmt.Fprintf(out, "  model: %s at %s, tools: %s\n", pcfg.Model, pcfg.BaseURL, *toolsPath)
	}
	if len(scoped) > 0 {
		fmt.Fprintf(out, "  tokens: %d from %s (%s)\n", len(scoped), *tokensPath, describeScoped(scoped))
	}
	if generated != "" {
		kept := filepath.Join(*data, tokenFile)
		if shared {
			kept = "the shared ledger by its SHA-256 (memos, run_id " + sharedTokenRun + ")"
		}
		fmt.Fprintf(out, "  token (generated, kept in %s, shown this once): %s\n", kept, generated)
		fmt.Fprintf(out, "  open %s/ and sign in with this token\n", base)
	} else {
		if source != "" {
			fmt.Fprintf(out, "  token: %s\n", source)
		}
		fmt.Fprintf(out, "  open %s/ and sign in with your token\n", base)
	}
	if len(named)+len(sharedAdmin) > 0 {
		// Said once per start: such a token may also approve what it submits.
		fmt.Fprintf(errOut, "docket serve: note: %s hold every scope (admin): a program holding one can approve what it submits. Give agents a token with only read and submit in a --tokens file (README: Deploying safely).\n", plural(len(named), "the --token/$DOCKET_TOKEN/generated token", "the --token/$DOCKET_TOKEN/generated tokens"))
	}

	if pg != nil {
		// Other nodes drive their own runs: this one adopts the runs whose
		// driver is gone (now, then every second).
		fmt.Fprintf(out, "  runs of nodes gone for --lease (%v) are adopted by another node\n", pg.LeaseDuration()) // raised behind a pooler
		sweepCtx, stopSweep := context.WithCancel(ctx)
		defer stopSweep()
		go sweepOrphans(sweepCtx, pg, srv, log)
	} else {
		n, err := srv.ResumeRunning(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			fmt.Fprintf(out, "  resuming %d %s that %s running\n", n, plural(n, "run", "runs"), plural(n, "was", "were"))
		}
	}

	handler := srv.Handler()
	stopMCP := func(context.Context) {}
	if *mcpOn {
		ms, err := newMCPServer(c.env, srv.Engine(), l, reg, mcpPolicy, *mcpWait, "", "on docket's review page at "+base+"/", log)
		if err != nil {
			return err
		}
		stopMCP = func(ctx context.Context) { ms.Shutdown(ctx) }
		handler = mountMCP(srv, ms, ui.MCPOptions{TokenInPath: *mcpURLToken})
	}
	hs, sln := hf.server(handler, ln, log)
	if certs != nil {
		hs.TLSConfig = certs.TLSConfig()
	}
	served := make(chan error, 1)
	go func() {
		if certs != nil {
			served <- hs.ServeTLS(sln, "", "")
			return
		}
		served <- hs.Serve(sln)
	}()
	select {
	case err := <-served:
		srv.Engine().Drain()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), *grace)
		defer cancel()
		stopMCP(shutdownCtx)
		srv.Shutdown(shutdownCtx)
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdown(errOut, *grace, srv, hs, stopMCP)
	return nil
}

// defaultGrace is --grace's default: below Kubernetes' default termination
// grace period (30s), so the process exits by itself before it is killed.
const defaultGrace = 25 * time.Second

// shutdown stops the service within grace: the engine starts no new attempt
// (no claim, no retry, no takeover), the listener closes, and calls in flight
// get until the end of the grace less a reserve; then they are cut off and
// their outcomes recorded as unknown (decided at the next start by each
// tool's class). Requests still open (a client waiting for a run) are
// answered when the drives end, or closed at the end of the grace.
func shutdown(errOut io.Writer, grace time.Duration, srv *ui.Server, hs *http.Server, stopMCP func(context.Context)) {
	began := time.Now()
	srv.Engine().Drain()
	deadline := began.Add(grace)
	// The reserve is for recording what the cut-off calls did and for
	// answering the requests that waited for them.
	cutoff := deadline.Add(-shutdownReserve(grace))
	fmt.Fprintf(errOut, "docket serve: shutting down: no new attempt starts; calls in flight get until %s (%v) to finish, then are cut off and recorded as unknown\n",
		cutoff.UTC().Format(time.RFC3339), cutoff.Sub(began).Round(time.Millisecond))
	httpDone := make(chan struct{})
	hctx, hcancel := context.WithDeadline(context.Background(), deadline)
	defer hcancel()
	go func() {
		defer close(httpDone)
		if err := hs.Shutdown(hctx); err != nil {
			hs.Close()
		}
	}()
	mctx, mcancel := context.WithDeadline(context.Background(), cutoff)
	stopMCP(mctx)
	mcancel()
	dctx, dcancel := context.WithDeadline(context.Background(), cutoff)
	if err := srv.Shutdown(dctx); err != nil {
		fmt.Fprintf(errOut, "docket serve: %v\n", err)
	}
	dcancel()
	<-httpDone
	fmt.Fprintf(errOut, "docket serve: stopped after %v\n", time.Since(began).Round(time.Millisecond))
}

// shutdownReserve is the part of the grace kept for after the cut-off:
// a fifth of it, at most 5s.
func shutdownReserve(grace time.Duration) time.Duration { return min(grace/5, 5*time.Second) }

var tokenNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// serveTokens builds the named tokens: the flags, else DOCKET_TOKEN, else the
// token kept in the data directory, else a new one (returned as generated,
// to be shown once). source says where the tokens came from, for the
// start-up message (never the token itself).
func serveTokens(flags []string, env, dataDir string) (named map[string]string, generated, source string, err error) {
	named = map[string]string{}
	add := func(v string) error {
		name, secret := "default", v
		if n, s, ok := strings.Cut(v, "="); ok && tokenNamePattern.MatchString(n) && s != "" {
			name, secret = n, s
		}
		if len(secret) < 16 {
			return usageError("a token must be at least 16 characters")
		}
		if _, dup := named[name]; dup {
			return usageError("two tokens are named %q", name)
		}
		named[name] = secret
		return nil
	}
	for _, v := range flags {
		if err := add(v); err != nil {
			return nil, "", "", err
		}
	}
	if len(named) > 0 {
		return named, "", "from --token", nil
	}
	if env != "" {
		if err := add(env); err != nil {
			return nil, "", "", fmt.Errorf("DOCKET_TOKEN: %w", err)
		}
		return named, "", "from $DOCKET_TOKEN", nil
	}
	path := filepath.Join(dataDir, tokenFile)
	if b, err := os.ReadFile(path); err == nil {
		if err := add(strings.TrimSpace(string(b))); err != nil {
			return nil, "", "", fmt.Errorf("%s: %w", path, err)
		}
		return named, "", fmt.Sprintf("generated at first start and kept in %s (read it there: cat %s)", path, path), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, "", "", fmt.Errorf("reading the token: %w", err)
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, "", "", fmt.Errorf("generating a token: %w", err)
	}
	tok := "dkt_" + hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return nil, "", "", fmt.Errorf("storing the generated token: %w", err)
	}
	named["default"] = tok
	return named, tok, "generated, kept in " + path, nil
}

// sweepEvery is how often a node of a shared ledger looks for runs whose
// driver is gone.
const sweepEvery = time.Second

// sweepOrphans adopts and drives the runs whose driver's lease expired, at
// once and then every sweepEvery, until ctx ends. It also follows the runs
// other nodes create from then on, so this node's all-runs stream (/v1/ws,
// the page's live list) shows them too.
func sweepOrphans(ctx context.Context, pg *postgres.Store, srv *ui.Server, log *slog.Logger) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var known map[string]bool // the newest runs seen by the last sweep (nil: none yet)
	for {
		ids, err := pg.AdoptOrphans(ctx, 100)
		if err != nil && ctx.Err() == nil {
			log.Warn("looking for runs whose node is gone failed; trying again", "err", err)
		}
		for _, id := range ids {
			log.Info("adopting a run whose node is gone", "run_id", id)
			srv.Drive(id)
		}
		if runs, _, err := pg.ListRuns(ctx, ledger.ListOptions{Limit: 100}); err == nil {
			seen := make(map[string]bool, len(runs))
			for _, r := range runs {
				seen[r.ID] = true
				if known != nil && !known[r.ID] {
					srv.Follow(r.ID) // new since the last sweep (here or on another node)
				}
			}
			known = seen
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sharedTokenRun and sharedTokenMemo name the memo that keeps the SHA-256
// of the token generated for the nodes of a shared ledger (never the token:
// whoever reads the database must not be able to sign in with it).
const (
	sharedTokenRun  = "docket.serve"
	sharedTokenMemo = "token_sha256"
)

// sharedServeToken is serveTokens for a shared ledger without --token or
// $DOCKET_TOKEN: the first node to start generates the token, shows it once
// and records its SHA-256 in the ledger (a memo: the first value wins);
// every node accepts the token by that hash. The token is named "default"
// and holds every scope.
func sharedServeToken(ctx context.Context, l ledger.Store) (admin ui.Token, generated, source string, err error) {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return ui.Token{}, "", "", fmt.Errorf("generating a token: %w", err)
	}
	tok := "dkt_" + hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(tok))
	mine := hex.EncodeToString(sum[:])
	v, err := l.Memo(ctx, sharedTokenRun, sharedTokenMemo, json.RawMessage(strconv.Quote(mine)))
	if err != nil {
		return ui.Token{}, "", "", fmt.Errorf("storing the generated token's hash: %w", err)
	}
	var stored string
	if err := json.Unmarshal(v, &stored); err != nil || len(stored) != 64 {
		return ui.Token{}, "", "", fmt.Errorf("the token hash kept in the shared ledger is not a SHA-256 (memo %s/%s)", sharedTokenRun, sharedTokenMemo)
	}
	admin = ui.Token{Name: "default", Scopes: []ui.Scope{ui.ScopeAdmin}, SHA256: stored}
	if stored == mine {
		return admin, tok, "generated, its SHA-256 kept in the shared ledger", nil
	}
	return admin, "", "generated by the first node and shown there once; the shared ledger keeps only its SHA-256 (memos table, run_id " + sharedTokenRun + ")", nil
}

// serveURL is the URL to open for a listener started with --addr flagAddr.
// A listener on every interface (0.0.0.0, ::, or no host) prints as
// [::]:PORT, which no browser opens: the URL names the loopback address
// instead, other is the URL for other machines (by host name), and
// everywhere says so.
func serveURL(a net.Addr, flagAddr, scheme string) (base, other string, everywhere bool) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return scheme + "://" + a.String(), "", false
	}
	port := strconv.Itoa(tcp.Port)
	loopback := "127.0.0.1"
	if h, _, err := net.SplitHostPort(flagAddr); err == nil && strings.Contains(h, ":") {
		loopback = "::1" // an IPv6 wildcard such as [::]
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "HOST"
	}
	return scheme + "://" + net.JoinHostPort(loopback, port), scheme + "://" + net.JoinHostPort(host, port), true
}

// loopback says whether a listener is reachable from this machine only.
func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// describeScoped lists a tokens file's names, scopes and groups for the start-up
// message (never a token or its hash).
func describeScoped(toks []ui.Token) string {
	parts := make([]string, len(toks))
	for i, t := range toks {
		sc := make([]string, len(t.Scopes))
		for j, s := range t.Scopes {
			sc[j] = string(s)
		}
		parts[i] = t.Name + ": " + strings.Join(sc, "+")
		if len(t.Groups) > 0 {
			parts[i] += " (groups " + strings.Join(t.Groups, ", ") + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// --- acting through a running service (--server URL --token T) ---

// serverFlags are --server and --token, on every command that touches a run.
type serverFlags struct {
	url   *string
	token *string
}

func addServerFlags(fs *flag.FlagSet) *serverFlags {
	return &serverFlags{
		url:   fs.String("server", "", "act through a running docket serve at this URL instead of the data directory"),
		token: fs.String("token", "", "the service's API token (default $DOCKET_TOKEN); with --server"),
	}
}

func (f *serverFlags) remote() bool { return *f.url != "" }

// client is a small API client for the CLI.
type client struct {
	base  string
	token string
	http  *http.Client
}

func (f *serverFlags) client(env Env) (*client, error) {
	u, err := url.Parse(*f.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError("--server must be the service's URL, e.g. http://127.0.0.1:8080")
	}
	tok := *f.token
	if tok == "" {
		tok = env.Getenv("DOCKET_TOKEN")
	}
	if tok == "" {
		return nil, usageError("--server needs the service's token: --token T or $DOCKET_TOKEN")
	}
	return &client{base: strings.TrimRight(u.String(), "/"), token: tok, http: &http.Client{}}, nil
}

// serverError is an error answer of the service.
type serverError struct {
	status  int
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details"`
}

func (e *serverError) Error() string {
	if e.status == http.StatusForbidden && e.Code == "forbidden" {
		// The token lacks a scope: name it first, it is what to fix.
		var d struct {
			MissingScope string `json:"missing_scope"`
		}
		if json.Unmarshal(e.Details, &d) == nil && d.MissingScope != "" {
			return fmt.Sprintf("forbidden: this token lacks the %s scope (the service answered 403: %s); act with a token that holds %s", d.MissingScope, e.Message, d.MissingScope)
		}
	}
	msg := fmt.Sprintf("the service answered %d (%s): %s", e.status, e.Code, e.Message)
	if len(e.Details) > 0 && string(e.Details) != "null" {
		msg += " " + string(e.Details)
	}
	return msg
}

// exitCode of a server error: refused input is 2, and so is a token the
// service does not know (401) or one that lacks the scope (403 forbidden): a
// retry cannot succeed; a service that cannot take the request now (503:
// shutting down; 429: the token is over its rate limit) is 4, retry later;
// out of space (503 no_space) is 5, as locally; the rest 1.
func (e *serverError) exit() int {
	switch e.status {
	case http.StatusTooManyRequests:
		return exitBusy
	case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotImplemented:
		return exitBad
	case http.StatusServiceUnavailable:
		if e.Code == "no_space" {
			return exitNoSpace // the service's disk is full: someone must free space
		}
		return exitBusy
	}
	return exitFailed
}

// errUnreachable is the error of a command whose --server could not be
// reached, or whose answer was lost on the way: not a failed run, so it exits
// 4 like a busy data directory (retry later).
var errUnreachable = errors.New("the docket service is unreachable")

// errNotSent marks an unreachable service whose connection was never made:
// nothing was sent.
var errNotSent = errors.New("nothing was sent")

// unreachable explains a request that got no answer. A connection that was
// never made sent nothing (exit 4, errNotSent); one that broke after the
// request was written may have been carried out: exit 6 for a request that
// changes something, 4 for a read (nothing to be carried out).
func (c *client) unreachable(ctx context.Context, method string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("calling %s: %w", c.base, err) // interrupted here, not there
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return withCode(exitBusy, fmt.Errorf("%w: could not connect to %s (%w), so %w; is docket serve running there? Retry when it is", errUnreachable, c.base, op, errNotSent))
	}
	code := exitSentUnknown
	if method == http.MethodGet || method == http.MethodHead {
		code = exitBusy
	}
	return withCode(code, fmt.Errorf("%w: the connection to %s broke before its answer (%w); the request may have been carried out: see where the run is with docket runs show --server %s RUN before acting again", errUnreachable, c.base, err, c.base))
}

// do sends one request and decodes a 2xx answer into out.
func (c *client) do(ctx context.Context, method, path string, body any, header map[string]string, out any) error {
	_, err := c.doHeader(ctx, method, path, body, header, out)
	return err
}

// doHeader is do that also returns the answer's header.
func (c *client) doHeader(ctx context.Context, method, path string, body any, header map[string]string, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, usageError("building the request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.unreachable(ctx, method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", c.base, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error serverError `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			e.Error = serverError{Code: "http", Message: strings.TrimSpace(string(raw))}
		}
		e.Error.status = resp.StatusCode
		return resp.Header, withCode(e.Error.exit(), &e.Error)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.Header, fmt.Errorf("the answer of %s is not the expected JSON: %w", c.base, err)
		}
	}
	return resp.Header, nil
}

// settled reads the run once the service has no drive of it going on, so the
// CLI reports where the run stopped, as the local commands do.
func (c *client) settled(ctx context.Context, runID string) (ledger.RunDoc, error) {
	var doc ledger.RunDoc
	for {
		var raw json.RawMessage
		h, err := c.doHeader(ctx, "GET", "/v1/runs/"+url.PathEscape(runID)+"?wait=5m", nil, nil, &raw)
		if err != nil {
			return doc, err
		}
		if doc, err = decodeDoc(raw); err != nil {
			return doc, err
		}
		// Stopped, or nothing drives it any more (the service's log says why).
		if doc.Run.Status != ledger.RunRunning || h.Get("Docket-Settled") == "true" {
			return doc, nil
		}
		// Still running after five minutes of waiting: wait again.
		if err := ctx.Err(); err != nil {
			return doc, err
		}
	}
}

// remoteFinish prints the run and maps its status to the exit code, like
// finish does for local commands.
func remoteFinish(env Env, doc ledger.RunDoc, err error, server string) error {
	if doc.Run.ID != "" {
		if werr := writeDoc(env.Stdout, doc); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	return outcome(doc, " --server "+server)
}

// decodeDoc reads the Run JSON (ledger.RunDoc only writes it).
func decodeDoc(raw []byte) (ledger.RunDoc, error) {
	var doc ledger.RunDoc
	if err := json.Unmarshal(raw, &doc.Run); err != nil {
		return doc, fmt.Errorf("reading the run: %w", err)
	}
	var acts struct {
		Actions []ledger.Action `json:"actions"`
	}
	if err := json.Unmarshal(raw, &acts); err != nil {
		return doc, fmt.Errorf("reading the run's actions: %w", err)
	}
	doc.Actions = acts.Actions
	if doc.Actions == nil {
		doc.Actions = []ledger.Action{}
	}
	return doc, nil
}
