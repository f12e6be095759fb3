package main

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/docketrun/docket/ui"
)

// httpFlags are the settings of a service open to a network, shared by
// docket serve and docket mcp --addr/--listen.
type httpFlags struct {
	hosts       stringList
	trustProxy  *bool
	idleTimeout *time.Duration
	bodyTimeout *time.Duration
	maxConns    *int
	submitRate  *int
}

func addHTTPFlags(fs *flag.FlagSet) *httpFlags {
	f := &httpFlags{}
	fs.Var(&f.hosts, "host", "a host name the service answers to (the Host header), besides IP addresses, localhost and the hosts of --origin; other names get 421 (DNS rebinding); repeatable; * answers to every name")
	f.trustProxy = fs.Bool("trust-proxy", false, "the service is reached only through a proxy that sets X-Forwarded-Proto and X-Forwarded-For: X-Forwarded-Proto: https makes the session cookie Secure (__Host-) and adds Strict-Transport-Security, and failed sign-ins are counted per X-Forwarded-For address")
	f.idleTimeout = fs.Duration("idle-timeout", 2*time.Minute, "a kept-alive connection waiting for its next request is closed after this long")
	f.bodyTimeout = fs.Duration("body-timeout", time.Minute, "a request body must arrive within this long after its headers, or the connection is closed")
	f.maxConns = fs.Int("max-conns-per-client", 128, "connections one client address may hold open at once; more are closed at once (0: no cap; behind a proxy every connection comes from its address)")
	f.submitRate = fs.Int("submit-rate", 1<<20, "bytes of submitted plans (POST /v1/runs) each token may send per second on average, in bursts of four of the largest plans; past it 429 with Retry-After, before the body is read (0: no budget)")
	return f
}

func (f *httpFlags) validate() error {
	if *f.idleTimeout <= 0 || *f.bodyTimeout <= 0 {
		return usageError("--idle-timeout and --body-timeout must be positive")
	}
	if *f.submitRate < 0 {
		return usageError("--submit-rate must not be negative (0: no budget)")
	}
	if *f.maxConns < 0 {
		return usageError("--max-conns-per-client must not be negative (0: no cap)")
	}
	return nil
}

// apply sets the Server's part of the flags: the Host allowlist (plus this
// machine's name when the listener is not on loopback, so the URL printed
// for other machines opens), the proxy and the body timeout.
func (f *httpFlags) apply(cfg *ui.Config, ln net.Listener) {
	cfg.Hosts = append(cfg.Hosts, f.hosts...)
	if !loopback(ln.Addr()) {
		if h, err := os.Hostname(); err == nil && h != "" && ui.ValidHost(h) {
			cfg.Hosts = append(cfg.Hosts, h)
		}
	}
	cfg.TrustProxy = *f.trustProxy
	cfg.BodyTimeout = *f.bodyTimeout
	cfg.SubmitBytesPerSecond = float64(*f.submitRate)
	if *f.submitRate == 0 {
		cfg.SubmitBytesPerSecond = -1
	}
}

// server is the http.Server for h and the listener it serves, wrapped in
// the per-client connection cap.
func (f *httpFlags) server(h http.Handler, ln net.Listener, log *slog.Logger) (*http.Server, net.Listener) {
	hc := ui.HTTPConfig{IdleTimeout: *f.idleTimeout, MaxConnsPerClient: *f.maxConns, Logger: log}
	if *f.maxConns == 0 {
		hc.MaxConnsPerClient = -1
	}
	return ui.NewHTTPServer(h, hc), ui.LimitListener(ln, hc)
}

// tightenDataDir makes a data directory its owner's alone (0700): the
// ledger holds every run's arguments and results, and the generated token.
// A directory that cannot be changed (not ours) is logged, not fatal.
func tightenDataDir(dir string, log *slog.Logger) {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() == 0o700 {
		return
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		log.Warn("the data directory could not be made private (0700): other users of this machine may read the ledger", "dir", dir, "err", err)
	}
}
