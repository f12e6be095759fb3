package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
)

// TestServeTokensFileAgentCannotApprove: docket serve --tokens FILE (one
// token by hash, one from the environment, none in clear): the agent's
// token (read, submit) creates a run that needs a person; docket approve and
// docket resolve --server with it exit 2 naming the review scope; the
// person's token approves it to the end.
func TestServeTokensFileAgentCannotApprove(t *testing.T) {
	t.Parallel()
	const agent, person = "agent-token-0123456789abc", "person-token-0123456789ab"
	sum := sha256.Sum256([]byte(agent))
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	os.WriteFile(file, []byte(`{"version": 1, "tokens": [
  {"name": "agent", "scopes": ["read", "submit"], "sha256": "`+hex.EncodeToString(sum[:])+`"},
  {"name": "rita", "scopes": ["read", "review", "control"], "env": "RITA_TOKEN"}
]}`), 0o600)
	s := startServe(t, map[string]string{"RITA_TOKEN": person}, "--data", filepath.Join(dir, "data"), "--tokens", file)
	out := strings.Join(s.lines, "\n")
	if s.token != "" || !strings.Contains(out, "agent: read+submit") || !strings.Contains(out, "rita: read+review+control") {
		t.Fatalf("serve said:\n%s", out)
	}
	if strings.Contains(s.stderr.String(), "every scope") || strings.Contains(out+s.stderr.String(), person) {
		t.Fatalf("stderr: %s", s.stderr)
	}
	s.token = agent
	var doc struct {
		RunID string `json:"run_id"`
	}
	if code := s.post(t, "/v1/runs", map[string]any{"run_id": "split", "plan": json.RawMessage(demoworld.OnboardingPlan())}, &doc); code != http.StatusCreated {
		t.Fatalf("agent's POST /v1/runs = %d", code)
	}
	for _, args := range [][]string{
		{"approve", "split"},
		{"approve", "split", "welcome"},
		{"resolve", "split", "welcome", "--skip"},
		{"pause", "split"},
	} {
		r := inproc(t, append(args, "--server", s.base, "--token", agent)...)
		want := "review"
		if args[0] == "pause" {
			want = "control"
		}
		if r.code != exitBad || !strings.Contains(r.stderr, "lacks the "+want+" scope") || r.stdout != "" {
			t.Fatalf("%v with the agent's token: %s", args, r)
		}
	}
	var last result
	for range 4 {
		last = inproc(t, "approve", "split", "--server", s.base, "--token", person)
		if last.code == exitOK {
			break
		}
		if last.code != exitPaused {
			t.Fatalf("the person's approve: %s\nthe service's log:\n%s", last, s.stderr)
		}
	}
	if last.code != exitOK || !strings.Contains(last.stdout, `"status": "completed"`) {
		t.Fatalf("the person's approve: %s\nthe service's log:\n%s", last, s.stderr)
	}
}

func TestServeSecurityFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clear := filepath.Join(dir, "clear.json")
	os.WriteFile(clear, []byte(`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "token": "in-clear-0123456789"}]}`), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokens", clear}, clear + ":1:27: tokens[0]: token: a token is never kept in clear"},
		{[]string{"--tokens", filepath.Join(dir, "missing.json")}, "reading the tokens file"},
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", "nope.pem", "--tls-key", "nope.key"}, "reading the TLS certificate"},
		{[]string{"--notify-secret", "0123456789abcdef0"}, "give --notify URL too"},
		{[]string{"--rate", "-1"}, "--rate"},
	} {
		r := inproc(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "d")}, c.args...)...)
		if r.code != exitBad || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %s", c.args, r)
		}
	}
}

// writeServeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeServeCert(t *testing.T, certPath, keyPath string) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "docket-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	// Written whole then renamed: a reload never reads half a file.
	for path, block := range map[string]*pem.Block{certPath: {Type: "CERTIFICATE", Bytes: der}, keyPath: {Type: "EC PRIVATE KEY", Bytes: kb}} {
		if err := os.WriteFile(path+".tmp", pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Rename(keyPath+".tmp", keyPath)
	os.Rename(certPath+".tmp", certPath)
	return serial
}

// TestServeTLSReloadsOnSIGHUP: --tls-cert/--tls-key serve HTTPS (on every
// interface without the plain-HTTP warning); a SIGHUP after the files were
// renewed is picked up: new connections get the new certificate.
func TestServeTLSReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := writeServeCert(t, certPath, keyPath)
	s := startServe(t, nil, "--data", filepath.Join(dir, "data"), "--addr", "0.0.0.0:0", "--tls-cert", certPath, "--tls-key", keyPath)
	if !strings.HasPrefix(s.base, "https://127.0.0.1:") {
		t.Fatalf("base %q", s.base)
	}
	host := strings.TrimPrefix(s.base, "https://")
	served := func() *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if got := served(); got.Cmp(first) != 0 {
		t.Fatalf("served %v, want %v", got, first)
	}
	pool := x509.NewCertPool()
	pemCert, _ := os.ReadFile(certPath)
	pool.AppendCertsFromPEM(pemCert)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := cl.Get(s.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(body), "warnings") || strings.Contains(s.stderr.String(), "plain HTTP") {
		t.Fatalf("/readyz over TLS: %d %s\nstderr: %s", resp.StatusCode, body, s.stderr)
	}

	second := writeServeCert(t, certPath, keyPath)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for served().Cmp(second) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served after SIGHUP\nstderr: %s", s.stderr)
		}
		<-time.After(20 * time.Millisecond)
	}
	if !strings.Contains(s.stderr.String(), "TLS certificate reloaded") {
		t.Fatalf("stderr: %s", s.stderr)
	}
}

// TestServePlainHTTPWarnsInReadyz: plain HTTP on every interface is said at
// start and in /readyz.
func TestServePlainHTTPWarnsInReadyz(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"), "--addr", "0.0.0.0:0")
	resp, err := http.Get(s.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "plain HTTP on a non-loopback address") {
		t.Fatalf("/readyz: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(s.stderr.String(), "hold every scope (admin)") {
		t.Fatalf("no admin note: %s", s.stderr)
	}
}

// TestServeUnsignedWebhookWarns: --notify without a secret is said at start
// and in /readyz; with $DOCKET_NOTIFY_SECRET it is not.
func TestServeUnsignedWebhookWarns(t *testing.T) {
	t.Parallel()
	for _, signed := range []bool{false, true} {
		env := map[string]string{}
		if signed {
			env["DOCKET_NOTIFY_SECRET"] = "whsec-0123456789abcdef"
		}
		s := startServe(t, env, "--data", filepath.Join(t.TempDir(), "data"), "--notify", "http://127.0.0.1:9/hook")
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		warned := strings.Contains(s.stderr.String(), "--notify calls are unsigned")
		inReadyz := strings.Contains(string(body), "--notify calls are unsigned")
		if resp.StatusCode != 200 || warned == signed || inReadyz == signed {
			t.Errorf("signed=%v: warned at start %v, in /readyz %v (%d %s)\nstderr: %s", signed, warned, inReadyz, resp.StatusCode, body, s.stderr)
		}
	}
}
