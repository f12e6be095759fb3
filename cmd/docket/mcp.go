package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/mcpserve"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/ui"
)

func init() {
	register("mcp", "serve the tools file's tools to any MCP client, every call recorded, keyed and reviewable", func(env Env) command { return &mcpCmd{env: env} })
}

const mcpUsage = "mcp --tools FILE [--data DIR] [--approve safe|all|none] [--wait 60s] [--session ID] [--listen ADDR | --addr ADDR] [--token [NAME=]T]... [--tokens FILE] [--host NAME]... [--trust-proxy] [--idle-timeout 2m] [--body-timeout 1m] [--max-conns-per-client 128]"

// mcpCmd is `docket mcp`: docket as an MCP server (executor/mcpserve). Over
// stdio by default (a desktop assistant starts it), with the review page and
// the API on --listen so that a person can decide while a call waits (the
// data directory is this process's alone); or over streamable HTTP at
// ADDR/mcp with --addr, the page and the API on the same address.
type mcpCmd struct{ env Env }

func (c *mcpCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("mcp", mcpUsage, c.env.Stderr)
	toolsPath := fs.String("tools", "", "tools file (required)")
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	approve := fs.String("approve", "safe", "approval policy stored with every call's run: safe (at_most_once calls and the tools file's rules wait for a person), all (only the tools file's rules), none (every call waits)")
	wait := fs.Duration("wait", 60*time.Second, "how long a call that waits for a person stays open (with progress notifications) before its result says it waits; 0: answer at once")
	session := fs.String("session", "", "session id of the stdio session (default: new for each process); give the same one across restarts so that a client's identical repeat is recognised")
	listen := fs.String("listen", "", "with stdio: also serve the review page and the API on this address (e.g. 127.0.0.1:8089), so a person can approve while a call waits")
	addr := fs.String("addr", "", "serve MCP over streamable HTTP at ADDR/mcp (instead of stdio), with the review page and the API at ADDR/")
	var tokens stringList
	fs.Var(&tokens, "token", "API token with every scope, optionally named (NAME=TOKEN); repeatable (default: $DOCKET_TOKEN, else one generated and kept in the data directory); at /mcp, calling a tool of the tools file needs the submit scope, reading runs (docket_run_status, docket_waiting) the read scope")
	tokensPath := fs.String("tokens", "", "tokens file, as for docket serve")
	hf := addHTTPFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("mcp takes no positional arguments (got %q)", pos)
	}
	if *toolsPath == "" {
		return usageError("--tools FILE is required")
	}
	pol, err := parsePolicy(*approve)
	if err != nil {
		return err
	}
	if *wait < 0 {
		return usageError("--wait must not be negative")
	}
	if err := hf.validate(); err != nil {
		return err
	}
	if *listen != "" && *addr != "" {
		return usageError("--listen (stdio, plus the page) and --addr (MCP over HTTP, plus the page) exclude each other")
	}
	// In stdio mode stdout is the MCP channel: everything else goes to stderr.
	out := c.env.Stdout
	if *addr == "" {
		out = c.env.Stderr
	}
	log := slog.New(slog.NewTextHandler(c.env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	reg, closeTools, err := loadTools(ctx, *toolsPath, c.env)
	if err != nil {
		return err
	}
	defer closeTools()
	l, err := openLedgerConfig(ctx, badgerdb.Config{Dir: *data, Logger: log, SubscriberBuffer: serveSubscriberBuffer}, key)
	if err != nil {
		return err
	}
	defer l.Close()
	if !postgres.IsURL(*data) {
		tightenDataDir(*data, log)
	}

	where := *addr + *listen
	var (
		page *ui.Server
		ln   net.Listener
		eng  *executor.Engine
		hint string
	)
	if where != "" {
		ln, err = net.Listen("tcp", where)
		if err != nil {
			return withCode(exitBad, fmt.Errorf("listening on %s: %w", where, err))
		}
		defer ln.Close()
		base, _, _ := serveURL(ln.Addr(), where, "http")
		var warnings []string
		if !loopback(ln.Addr()) {
			// The tokens and the page's session cross the network in clear.
			msg := fmt.Sprintf("plain HTTP on a non-loopback address (%s): tokens and session cookies cross the network unencrypted; listen on 127.0.0.1 behind a TLS-terminating proxy (with --trust-proxy), or use docket serve --mcp --tls-cert/--tls-key", ln.Addr())
			warnings = append(warnings, msg)
			fmt.Fprintf(c.env.Stderr, "docket mcp: warning: %s\n", msg)
		}
		if page, err = c.page(l, reg, *data, *tokensPath, tokens, out, base, func(cfg *ui.Config) {
			cfg.Warnings = warnings
			hf.apply(cfg, ln)
		}); err != nil {
			return err
		}
		eng = page.Engine()
		hint = "on docket's review page at " + base + "/ (or docket approve/resolve --server " + base + ")"
	} else {
		if eng, err = newEngine(c.env, l, reg); err != nil {
			return err
		}
		hint = "with docket approve / docket resolve once this docket mcp has stopped (it holds the data directory " + *data + "); start docket mcp with --listen ADDR to decide on the review page while calls wait"
		if postgres.IsURL(*data) {
			// The shared ledger: nothing is held, and the URL's password stays out.
			hint = "with docket approve / docket resolve --ledger '" + postgres.Redact(*data) + "' (or on the review page of a docket serve on the same ledger)"
		}
	}
	srv, err := newMCPServer(c.env, eng, l, reg, pol, *wait, *session, hint, log)
	if err != nil {
		return err
	}
	defer func() {
		// Calls in flight finish and are recorded, within a bound.
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	}()

	// Runs left running by a crash go on (a call repeated after a restart
	// waits for the same drive).
	if page != nil {
		_, err = page.ResumeRunning(ctx)
	} else {
		_, err = srv.ResumeRunning(ctx)
	}
	if err != nil {
		return err
	}

	var served chan error
	if ln != nil {
		h := http.Handler(page.Handler())
		if *addr != "" {
			h = mountMCP(page, srv, ui.MCPOptions{})
			fmt.Fprintf(out, "docket mcp: MCP (streamable HTTP) at http://%s/mcp, review page at http://%s/\n", ln.Addr(), ln.Addr())
		} else {
			fmt.Fprintf(out, "docket mcp: review page and API at http://%s/\n", ln.Addr())
		}
		hs, sln := hf.server(h, ln, log)
		served = make(chan error, 1)
		go func() { served <- hs.Serve(sln) }()
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := hs.Shutdown(shutdownCtx); err != nil {
				hs.Close()
			}
			page.Shutdown(shutdownCtx)
		}()
	}
	if *addr != "" {
		select {
		case err := <-served:
			return fmt.Errorf("serving: %w", err)
		case <-ctx.Done():
			return nil
		}
	}
	// stdio: until the client closes stdin (or a signal).
	t := &mcp.IOTransport{Reader: io.NopCloser(c.env.Stdin), Writer: nopWriteCloser{c.env.Stdout}}
	err = srv.MCP().Run(ctx, t)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("serving MCP over stdio: %w", err)
	}
	return nil
}

// page builds the review page and API service for docket mcp.
func (c *mcpCmd) page(l ledger.Store, reg *tools.Registry, data, tokensPath string, tokens []string, out io.Writer, base string, tune func(*ui.Config)) (*ui.Server, error) {
	var scoped []ui.Token
	if tokensPath != "" {
		raw, err := os.ReadFile(tokensPath)
		if err != nil {
			return nil, usageError("reading the tokens file: %v", err)
		}
		if scoped, err = ui.ParseTokensFile(raw, c.env.Getenv); err != nil {
			return nil, usageError("%s:%v", tokensPath, err)
		}
	}
	var named map[string]string
	if len(scoped) == 0 || len(tokens) > 0 {
		var generated string
		var err error
		kept := data + "/" + tokenFile
		if postgres.IsURL(data) && len(tokens) == 0 && c.env.Getenv("DOCKET_TOKEN") == "" {
			var admin ui.Token
			admin, generated, _, err = sharedServeToken(context.Background(), l)
			scoped = append(scoped, admin)
			kept = "the shared ledger by its SHA-256"
		} else {
			named, generated, _, err = serveTokens(tokens, c.env.Getenv("DOCKET_TOKEN"), data)
		}
		if err != nil {
			return nil, err
		}
		if generated != "" {
			fmt.Fprintf(out, "docket mcp: token (generated, kept in %s, shown this once): %s\n", kept, generated)
		}
	}
	ecfg := executor.Config{Hooks: c.env.Hooks}
	if c.env.Tune != nil {
		c.env.Tune(&ecfg)
	}
	ucfg := ui.Config{
		Ledger: l, Tools: reg, Executor: ecfg, Tokens: named, ScopedTokens: scoped,
		Logger: slog.New(slog.NewTextHandler(c.env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	tune(&ucfg)
	page, err := ui.New(ucfg)
	if err != nil {
		return nil, withCode(exitBad, err)
	}
	return page, nil
}

// newMCPServer builds docket's MCP server on eng.
func newMCPServer(env Env, eng *executor.Engine, l ledger.Store, reg *tools.Registry, pol executor.Policy, wait time.Duration, session, hint string, log *slog.Logger) (*mcpserve.Server, error) {
	cfg := mcpserve.Config{Engine: eng, Ledger: l, Tools: reg, Policy: pol, Wait: wait, Session: session, ReviewHint: hint, Logger: log, Version: buildVersion().module}
	if wait == 0 {
		cfg.Wait = -1 // answer at once (mcpserve: a zero Wait is its default)
	}
	srv, err := mcpserve.New(cfg)
	if err != nil {
		return nil, withCode(exitBad, err)
	}
	return srv, nil
}

// mountMCP serves MCP at /mcp beside the page and the API: any token
// connects, and each tool needs its scope (calls of the tools file's tools
// and docket_propose_plan submit, docket_run_status and docket_waiting
// read; an agent's token needs read and submit, never review), with the
// protected-resource metadata and, with o.TokenInPath, /mcp/t/{token}.
func mountMCP(page *ui.Server, srv *mcpserve.Server, o ui.MCPOptions) http.Handler {
	mux := http.NewServeMux()
	page.MountMCP(mux, srv, o)
	mux.Handle("/", page.Handler())
	return mux
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
