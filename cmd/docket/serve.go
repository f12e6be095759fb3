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
	o, err := c.parseFlags(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.env.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	defer setMemoryLimit(o.memLimit)()
	log.Info("memory limit", "soft_limit", sizeLabel(o.memLimit), "from", o.memLimitFrom)

	st := &serveState{o: o, log: log}
	closeTools, err := c.loadServeTools(ctx, st)
	if err != nil {
		return err
	}
	defer closeTools()
	if err := c.servePlanner(st); err != nil {
		return err
	}
	if err := c.openServeLedger(ctx, st); err != nil {
		return err
	}
	defer st.l.Close()
	if err := c.serveAuth(ctx, st); err != nil {
		return err
	}
	stopCerts, err := serveCerts(st)
	if err != nil {
		return err
	}
	defer stopCerts()
	if st.ln, err = net.Listen("tcp", o.addr); err != nil {
		return withCode(exitBad, fmt.Errorf("listening on %s: %w", o.addr, err))
	}
	defer st.ln.Close()
	if err := c.newServeUI(st); err != nil {
		return err
	}
	handBackStartupGarbage()
	c.announce(st)
	stopDrives, err := c.startDrives(ctx, st)
	if err != nil {
		return err
	}
	defer stopDrives()
	defer startScheduler(ctx, st)()
	defer startRetentionSweep(ctx, st)()
	return c.serveUntilSignal(ctx, st)
}

// serveOpts are serve's flags, checked.
type serveOpts struct {
	key                                                                *ledgerKey // the ledger's encryption key
	data, toolsPath, addr, tokensPath, tlsCert, tlsKey, notify, secret string
	tokens, origins                                                    stringList
	rate                                                               float64
	burst, maxSockets                                                  int
	hf                                                                 *httpFlags
	grace, mcpWait, lease                                              time.Duration
	retention, gcEvery                                                 time.Duration
	mcpOn, mcpURLToken                                                 bool
	mcpPolicy                                                          executor.Policy
	memLimit                                                           int64
	memLimitFrom                                                       string
	mf                                                                 *modelFlags
}

// parseFlags reads serve's flags (and the environment's defaults for them)
// and refuses bad combinations with a usage error.
func (c *serveCmd) parseFlags(args []string) (*serveOpts, error) {
	o := &serveOpts{}
	fs := newFlags("serve", serveUsage, c.env.Stderr)
	fs.StringVar(&o.data, "data", defaultDataDir, "data directory (the ledger)")
	o.key = ledgerFlag(fs, &o.data, c.env.Getenv)
	fs.StringVar(&o.toolsPath, "tools", "", "tools file (default: the built-in demo world, simulated in-process)")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	policyPath := policyFlag(fs)
	fs.Var(&o.tokens, "token", "API token with every scope (admin), optionally named (NAME=TOKEN); repeatable (default, without --tokens: $DOCKET_TOKEN, else one generated and kept in the data directory)")
	fs.StringVar(&o.tokensPath, "tokens", "", `tokens file: {"version": 1, "tokens": [{"name", "scopes": [...], "sha256" | "env"}]} (scopes: read, submit, review, control, admin)`)
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; reloaded on SIGHUP); with --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the certificate's private key (PEM; reloaded on SIGHUP); with --tls-cert")
	fs.Var(&o.origins, "origin", "another origin whose pages may use the API with a session (e.g. https://review.example.com); repeatable")
	fs.StringVar(&o.notify, "notify", "", "URL to POST to when a run waits for a person")
	notifySecret := fs.String("notify-secret", "", "sign every --notify call with this secret (Docket-Signature: t=…,v2=…, over the delivery id, the time and the body) (default $DOCKET_NOTIFY_SECRET)")
	fs.Float64Var(&o.rate, "rate", 50, "requests per second each token may make on average (HTTP and socket messages; 0: no limit)")
	fs.IntVar(&o.burst, "burst", 100, "requests a token may make at once before --rate applies")
	fs.IntVar(&o.maxSockets, "max-sockets", 32, "WebSockets one token may hold open (0: no cap)")
	o.hf = addHTTPFlags(fs)
	fs.DurationVar(&o.grace, "grace", defaultGrace, "on SIGTERM or Ctrl-C: no new attempt starts, and calls in flight get this long to finish; calls still running near its end are cut off and recorded with an unknown outcome (the next start decides by the tool's class), and the process exits within it")
	fs.BoolVar(&o.mcpOn, "mcp", false, "also serve the tools to MCP clients over streamable HTTP at /mcp (each tool needs its scope: submit to call a tool, read for docket_run_status and docket_waiting), on the same engine, page and tokens (see docket mcp)")
	mcpApprove := fs.String("mcp-approve", "safe", "with --mcp: the approval policy of MCP calls' runs (safe, all, none)")
	fs.BoolVar(&o.mcpURLToken, "mcp-url-token", false, "with --mcp: also serve MCP at /mcp/t/TOKEN, for clients that cannot send an Authorization header (the token then shows in URLs: proxies' logs, shell history)")
	fs.DurationVar(&o.mcpWait, "mcp-wait", 60*time.Second, "with --mcp: how long an MCP call that waits for a person stays open; 0: answer at once")
	fs.DurationVar(&o.lease, "lease", postgres.DefaultLease, "with --ledger: this node's lease; after it, other nodes adopt the runs this node drove (renewed every lease/5)")
	retentionFlag(fs, &o.retention, "delete ended runs this long after they ended (30d, 2w; never before their own retention or while a key of theirs is honoured: see docket gc); default: keep them, except runs with a retention of their own")
	fs.DurationVar(&o.gcEvery, "gc-every", 10*time.Minute, "how often to delete what retention no longer keeps, and budget windows that have passed (0: never; docket gc does it once)")
	memLimit := fs.String("memory-limit", "", "soft memory limit of the process (256MiB, 1GiB, off) (default $GOMEMLIMIT, else 128MiB)")
	o.mf = addModelFlags(fs)
	pos, err := parseArgs(fs, args)
	c.env.PolicyFile = *policyPath
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageError("serve takes no positional arguments (got %q)", pos)
	}
	if o.mcpPolicy, err = o.check(*mcpApprove); err != nil {
		return nil, err
	}
	o.secret = cmp.Or(*notifySecret, c.env.Getenv("DOCKET_NOTIFY_SECRET"))
	if o.secret != "" && o.notify == "" {
		return nil, usageError("--notify-secret (or $DOCKET_NOTIFY_SECRET) signs --notify calls: give --notify URL too")
	}
	if o.secret != "" && len(o.secret) < 16 {
		return nil, usageError("the webhook secret must be at least 16 characters")
	}
	if o.memLimit, o.memLimitFrom, err = memoryLimit(*memLimit, c.env.Getenv); err != nil {
		return nil, err
	}
	return o, nil
}

// check refuses flags that contradict each other or are out of range, and
// parses --mcp-approve.
func (o *serveOpts) check(mcpApprove string) (executor.Policy, error) {
	if o.grace <= 0 {
		return "", usageError("--grace must be positive")
	}
	mcpPolicy, err := parsePolicy(mcpApprove)
	if err != nil {
		return "", err
	}
	switch {
	case o.mcpURLToken && !o.mcpOn:
		return "", usageError("--mcp-url-token serves MCP at /mcp/t/TOKEN: it needs --mcp")
	case o.gcEvery < 0:
		return "", usageError("--gc-every must not be negative")
	case o.mcpWait < 0:
		return "", usageError("--mcp-wait must not be negative")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return "", usageError("--tls-cert and --tls-key go together")
	case o.rate < 0 || o.burst < 1 || o.maxSockets < 0:
		return "", usageError("--rate and --max-sockets must not be negative, --burst must be at least 1")
	}
	return mcpPolicy, o.hf.validate()
}

// serveState is what serve builds, step by step, from its flags.
type serveState struct {
	o   *serveOpts
	log *slog.Logger

	reg   *tools.Registry
	file  []byte           // the tools file, as the page shows it
	world *demoworld.World // the demo world, without --tools
	pcfg  planner.Config
	pl    *planner.Planner // nil: no model configured
	l     ledger.Store
	pg    *postgres.Store // l, when it is a shared ledger
	// Tokens: the --tokens file's, the named ones (--token, $DOCKET_TOKEN,
	// the data directory's), the shared ledger's generated one.
	scoped, sharedAdmin []ui.Token
	named               map[string]string
	generated, source   string
	certs               *ui.CertReloader // nil: plain HTTP
	ln                  net.Listener
	srv                 *ui.Server
	warnings            []string
}

func (st *serveState) shared() bool { return st.pg != nil }

// loadServeTools loads the tools: the given file, or the demo world's.
func (c *serveCmd) loadServeTools(ctx context.Context, st *serveState) (closeTools func(), err error) {
	if st.o.toolsPath != "" {
		if st.reg, closeTools, err = loadTools(ctx, st.o.toolsPath, c.env); err != nil {
			return nil, err
		}
		if st.file, err = os.ReadFile(st.o.toolsPath); err != nil {
			closeTools()
			return nil, usageError("reading tools file: %v", err)
		}
		return closeTools, nil
	}
	st.world = demoworld.Start()
	st.file = st.world.ToolsFile(demoworld.ToolsOptions{})
	f, err := httptool.Parse(st.file, c.env.Getenv)
	if err != nil {
		st.world.Close()
		return nil, fmt.Errorf("the demo world's tools file: %w", err)
	}
	if st.reg, err = tools.NewRegistry(f.Tools...); err != nil {
		st.world.Close()
		return nil, fmt.Errorf("the demo world's tools: %w", err)
	}
	return st.world.Close, nil
}

// servePlanner builds the planner: the configured model endpoint, or the
// demo model with the demo world; none without either.
func (c *serveCmd) servePlanner(st *serveState) error {
	pcfg, err := st.o.mf.config(c.env, st.reg)
	if err != nil {
		return err
	}
	pcfg.Logger = st.log
	switch {
	case pcfg.Model != "":
		if st.pl, err = planner.New(pcfg); err != nil {
			return withCode(exitBad, err)
		}
	case st.world != nil:
		pcfg.Model, pcfg.BaseURL, pcfg.APIKey = demomodel.Model, demomodel.BaseURL, ""
		pcfg.HTTPClient = &http.Client{Transport: demomodel.Transport()}
		if st.pl, err = planner.New(pcfg); err != nil {
			return fmt.Errorf("the demo model: %w", err)
		}
	}
	st.pcfg = pcfg
	return nil
}

// openServeLedger opens the ledger: the shared one (--ledger postgres://…)
// or the data directory. A subscription (one per WebSocket client) queues at
// most serveSubscriberBuffer live events in the ledger; the WebSocket adds
// its own bounded queue.
func (c *serveCmd) openServeLedger(ctx context.Context, st *serveState) error {
	o := st.o
	if postgres.IsURL(o.data) {
		if o.lease < time.Second {
			return usageError("--lease must be at least 1s")
		}
		kr, err := o.key.keyring()
		if err != nil {
			return err
		}
		// Behind a pooler in transaction mode, $DOCKET_LEDGER_LISTEN is a direct
		// connection to LISTEN on (prompt events on the sockets).
		pg, err := openSharedLedger(ctx, postgres.Config{URL: o.data, Logger: st.log, SubscriberBuffer: serveSubscriberBuffer, Lease: o.lease,
			ListenURL: c.env.Getenv(ledgerListenEnv), Keyring: kr})
		if err != nil {
			return err
		}
		st.l, st.pg = pg, pg
		return nil
	}
	l, err := openLedgerConfig(ctx, badgerdb.Config{Dir: o.data, Logger: st.log, SubscriberBuffer: serveSubscriberBuffer}, o.key)
	if err != nil {
		return err
	}
	tightenDataDir(o.data, st.log)
	st.l = l
	return nil
}

// serveAuth reads the tokens: the --tokens file's, and unless it is the only
// source, the named tokens (--token, else $DOCKET_TOKEN, else the one kept
// in the data directory or generated; on a shared ledger without either,
// the one every node shares).
func (c *serveCmd) serveAuth(ctx context.Context, st *serveState) error {
	o := st.o
	if o.tokensPath != "" {
		raw, err := os.ReadFile(o.tokensPath)
		if err != nil {
			return usageError("reading the tokens file: %v", err)
		}
		if st.scoped, err = ui.ParseTokensFile(raw, c.env.Getenv); err != nil {
			return usageError("%s:%v", o.tokensPath, err)
		}
	}
	if len(st.scoped) == 0 || len(o.tokens) > 0 {
		var err error
		if st.shared() && len(o.tokens) == 0 && c.env.Getenv("DOCKET_TOKEN") == "" {
			// Every node of a shared ledger signs in with the same token.
			var t ui.Token
			t, st.generated, st.source, err = sharedServeToken(ctx, st.l)
			st.sharedAdmin = []ui.Token{t}
		} else {
			st.named, st.generated, st.source, err = serveTokens(o.tokens, c.env.Getenv("DOCKET_TOKEN"), o.data)
		}
		if err != nil {
			return err
		}
	}
	for _, t := range st.scoped {
		if _, dup := st.named[t.Name]; dup {
			return usageError("token %q is named both in %s and by --token", t.Name, o.tokensPath)
		}
	}
	return nil
}

// serveCerts loads the TLS certificate and key (--tls-cert, --tls-key), if
// given. SIGHUP reads them again: a renewed certificate needs no restart; a
// bad new one keeps the old (and is logged). It is listened for before
// anything is printed, so a SIGHUP sent once the service says where it
// listens never ends the process. stop ends the listening.
func serveCerts(st *serveState) (stop func(), err error) {
	if st.o.tlsCert == "" {
		return func() {}, nil
	}
	if st.certs, err = ui.NewCertReloader(st.o.tlsCert, st.o.tlsKey, st.log); err != nil {
		return nil, usageError("%v", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	stopHup := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				st.certs.Reload()
			case <-stopHup:
				return
			}
		}
	}()
	return func() {
		close(stopHup)
		signal.Stop(hup)
	}, nil
}

// plainRemote says whether serve listens in plain HTTP beyond this machine.
func (st *serveState) plainRemote() bool { return st.certs == nil && !loopback(st.ln.Addr()) }

// newServeUI builds the service (ui.Server, with its engine) over what the
// earlier steps built.
func (c *serveCmd) newServeUI(st *serveState) error {
	o := st.o
	if st.plainRemote() {
		st.warnings = append(st.warnings, fmt.Sprintf("plain HTTP on a non-loopback address (%s): tokens and session cookies cross the network unencrypted; serve with --tls-cert/--tls-key or listen on 127.0.0.1 behind a TLS-terminating proxy", st.ln.Addr()))
	}
	if o.notify != "" && o.secret == "" {
		st.warnings = append(st.warnings, "--notify calls are unsigned: a receiver cannot tell docket's call from anyone's; set --notify-secret or $DOCKET_NOTIFY_SECRET")
	}
	ecfg := executor.Config{Logger: st.log}
	if st.shared() {
		ecfg.Clock = st.l // lookup windows and key_ttl by the database's clock, as the claims
	}
	if c.env.Tune != nil {
		c.env.Tune(&ecfg)
	}
	ucfg := ui.Config{
		Ledger:             st.l,
		Tools:              st.reg,
		Executor:           ecfg,
		Planner:            st.pl,
		Tokens:             st.named,
		ScopedTokens:       append(slices.Clone(st.scoped), st.sharedAdmin...),
		RateLimit:          o.rate,
		RateBurst:          o.burst,
		MaxSocketsPerToken: o.maxSockets,
		Warnings:           st.warnings,
		Origins:            o.origins,
		ToolsFile:          st.file,
		Notify:             o.notify,
		NotifySecret:       o.secret,
		Logger:             st.log,
		TraceID:            c.env.traceIDs(),
	}
	o.hf.apply(&ucfg, st.ln)
	srv, err := ui.New(ucfg)
	if err != nil {
		return withCode(exitBad, err)
	}
	st.srv = srv
	return nil
}

// baseURL is the URL to open, the one for other machines, and whether serve
// listens on every interface.
func (st *serveState) baseURL() (base, other string, everywhere bool) {
	scheme := "http"
	if st.certs != nil {
		scheme = "https"
	}
	return serveURL(st.ln.Addr(), st.o.addr, scheme)
}

// announce says where the service listens, what it serves with, and how
// to sign in (stdout), and warns of what is unsafe (stderr).
func (c *serveCmd) announce(st *serveState) {
	o, out, errOut := st.o, c.env.Stdout, c.env.Stderr
	base, other, everywhere := st.baseURL()
	fmt.Fprintf(out, "docket serve: listening on %s/\n", base)
	if everywhere {
		fmt.Fprintf(out, "  on every network interface (--addr %s); other machines: %s/\n", o.addr, other)
	}
	if st.plainRemote() {
		where := "beyond this machine"
		if everywhere {
			where = "on every network interface"
		}
		fmt.Fprintf(errOut, "docket serve: warning: --addr %s serves the API and the review page in plain HTTP %s: anyone who can reach it can try tokens, and tokens and session cookies cross the network unencrypted. Serve HTTPS with --tls-cert FILE --tls-key FILE, or listen on 127.0.0.1 (the default) and put a TLS-terminating proxy in front. /readyz says so too.\n", o.addr, where)
	}
	if o.notify != "" && o.secret == "" {
		fmt.Fprintln(errOut, "docket serve: warning: --notify calls are unsigned; set --notify-secret or $DOCKET_NOTIFY_SECRET so the receiver can verify them")
	}
	if st.shared() {
		fmt.Fprintf(out, "  ledger: %s (shared: other nodes may serve it too)\n", postgres.Redact(o.data))
	} else {
		fmt.Fprintf(out, "  data directory: %s\n", o.data)
	}
	if kr, _ := o.key.keyring(); kr != nil {
		fmt.Fprintf(out, "  encrypted at rest: key %s (the key itself is never shown)\n", kr.Current().ID())
	}
	if o.mcpOn {
		fmt.Fprintf(out, "  MCP (streamable HTTP): %s/mcp (calls need the submit scope, reading runs the read scope)\n", base)
	}
	c.announceModel(st)
	c.announceTokens(st, base)
}

// announceModel says which model plans and over which tools.
func (c *serveCmd) announceModel(st *serveState) {
	out := c.env.Stdout
	switch {
	case st.world != nil && st.pcfg.Model == demomodel.Model:
		fmt.Fprintln(out, "  no model endpoint configured (OPENAI_MODEL is not set): planning with docket's demo model")
		fmt.Fprintln(out, "  (scripted replies) against the demo world (simulated CRM, payments, settings, email, in-process).")
		fmt.Fprintln(out, "  Try the goal: onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack")
	case st.world != nil:
		fmt.Fprintf(out, "  model: %s at %s, tools: the demo world (simulated, in-process)\n", st.pcfg.Model, st.pcfg.BaseURL)
	case st.pl == nil:
		fmt.Fprintf(out, "  tools: %s; no model endpoint configured (OPENAI_MODEL is not set): runs are created from plans only\n", st.o.toolsPath)
	default:
		fmt.Fprintf(out, "  model: %s at %s, tools: %s\n", st.pcfg.Model, st.pcfg.BaseURL, st.o.toolsPath)
	}
}

// announceTokens says where the tokens come from and how to sign in; a
// generated token is shown this once.
func (c *serveCmd) announceTokens(st *serveState, base string) {
	o, out := st.o, c.env.Stdout
	if len(st.scoped) > 0 {
		fmt.Fprintf(out, "  tokens: %d from %s (%s)\n", len(st.scoped), o.tokensPath, describeScoped(st.scoped))
	}
	if st.generated != "" {
		kept := filepath.Join(o.data, tokenFile)
		if st.shared() {
			kept = "the shared ledger by its SHA-256 (memos, run_id " + sharedTokenRun + ")"
		}
		fmt.Fprintf(out, "  token (generated, kept in %s, shown this once): %s\n", kept, st.generated)
		fmt.Fprintf(out, "  open %s/ and sign in with this token\n", base)
	} else {
		if st.source != "" {
			fmt.Fprintf(out, "  token: %s\n", st.source)
		}
		fmt.Fprintf(out, "  open %s/ and sign in with your token\n", base)
	}
	if len(st.named)+len(st.sharedAdmin) > 0 {
		// Said once per start: such a token may also approve what it submits.
		fmt.Fprintf(c.env.Stderr, "docket serve: note: %s hold every scope (admin): a program holding one can approve what it submits. Give agents a token with only read and submit in a --tokens file (README: Deploying safely).\n", plural(len(st.named), "the --token/$DOCKET_TOKEN/generated token", "the --token/$DOCKET_TOKEN/generated tokens"))
	}
}

// startDrives starts driving the runs left running: on a shared ledger, the
// runs of nodes gone (now, then every second, until stop); else every run
// that was running when the service stopped.
func (c *serveCmd) startDrives(ctx context.Context, st *serveState) (stop func(), err error) {
	stopDrives, err := c.startDrivesOnly(ctx, st)
	if err != nil {
		return nil, err
	}
	wakeCtx, stopWakes := context.WithCancel(ctx)
	woke := make(chan struct{})
	go func() {
		defer close(woke)
		wakeLoop(wakeCtx, st.l, st.srv.Drive, st.log) // wake.go
	}()
	return func() { stopWakes(); <-woke; stopDrives() }, nil
}

func (c *serveCmd) startDrivesOnly(ctx context.Context, st *serveState) (stop func(), err error) {
	out := c.env.Stdout
	if st.pg != nil {
		// Other nodes drive their own runs: this one adopts the runs whose
		// driver is gone (now, then every second).
		fmt.Fprintf(out, "  runs of nodes gone for --lease (%v) are adopted by another node\n", st.pg.LeaseDuration()) // raised behind a pooler
		sweepCtx, stopSweep := context.WithCancel(ctx)
		go sweepOrphans(sweepCtx, st.pg, st.srv, st.log)
		return stopSweep, nil
	}
	n, err := st.srv.ResumeRunning(ctx)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		fmt.Fprintf(out, "  resuming %d %s that %s running\n", n, plural(n, "run", "runs"), plural(n, "was", "were"))
	}
	return func() {}, nil
}

// serveUntilSignal serves HTTP (and MCP with --mcp) until ctx ends (SIGTERM,
// Ctrl-C: then it drains within --grace) or serving fails.
func (c *serveCmd) serveUntilSignal(ctx context.Context, st *serveState) error {
	o, srv := st.o, st.srv
	handler := srv.Handler()
	stopMCP := func(context.Context) {}
	if o.mcpOn {
		base, _, _ := st.baseURL()
		ms, err := newMCPServer(c.env, srv.Engine(), st.l, st.reg, o.mcpPolicy, o.mcpWait, "", "on docket's review page at "+base+"/", st.log)
		if err != nil {
			return err
		}
		stopMCP = func(ctx context.Context) { ms.Shutdown(ctx) }
		handler = mountMCP(srv, ms, ui.MCPOptions{TokenInPath: o.mcpURLToken})
	}
	hs, sln := o.hf.server(handler, st.ln, st.log)
	if st.certs != nil {
		hs.TLSConfig = st.certs.TLSConfig()
	}
	served := make(chan error, 1)
	go func() {
		if st.certs != nil {
			served <- hs.ServeTLS(sln, "", "")
			return
		}
		served <- hs.Serve(sln)
	}()
	select {
	case err := <-served:
		srv.Engine().Drain()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), o.grace)
		defer cancel()
		stopMCP(shutdownCtx)
		srv.Shutdown(shutdownCtx)
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdown(c.env.Stderr, o.grace, srv, hs, stopMCP)
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
