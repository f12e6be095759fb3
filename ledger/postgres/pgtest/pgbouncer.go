package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/testextra"
)

// ErrNoPgBouncer means no pgbouncer binary was found.
var ErrNoPgBouncer = errors.New("pgbouncer not found on PATH or at /usr/sbin/pgbouncer")

// BouncerOptions configures a PgBouncer started by Cluster.StartBouncer.
// Zero values take the documented defaults.
type BouncerOptions struct {
	// PoolMode is pgbouncer's pool_mode; default "transaction".
	PoolMode string
	// PoolSize is default_pool_size: server connections per database and
	// user; default 40.
	PoolSize int
	// LoginRetry is server_login_retry: how long pgbouncer waits after a
	// failed login to the server before trying again; default 15s (its own
	// default).
	LoginRetry time.Duration
}

// Bouncer is a running PgBouncer in front of a Cluster, on a free loopback
// port, authenticating User with the cluster's password (scram-sha-256).
type Bouncer struct {
	Port int

	c    *Cluster
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// BouncerBin returns the pgbouncer binary's path.
func BouncerBin() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if st, err := os.Stat("/usr/sbin/pgbouncer"); err == nil && !st.IsDir() {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoPgBouncer
}

// StartBouncer starts a PgBouncer in front of c (every database of the
// cluster, as database "*"). Errors: ErrNoPgBouncer, or what pgbouncer said.
func (c *Cluster) StartBouncer(ctx context.Context, opt BouncerOptions) (*Bouncer, error) {
	bin, err := BouncerBin()
	if err != nil {
		return nil, err
	}
	if opt.PoolMode == "" {
		opt.PoolMode = "transaction"
	}
	if opt.PoolSize == 0 {
		opt.PoolSize = 40
	}
	if opt.LoginRetry == 0 {
		opt.LoginRetry = 15 * time.Second
	}
	dir, err := os.MkdirTemp("", "docket-pgbouncer-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		b := &Bouncer{Port: port, c: c, dir: dir, done: make(chan struct{})}
		if lastErr = b.start(ctx, bin, opt); lastErr == nil {
			return b, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (b *Bouncer) start(ctx context.Context, bin string, opt BouncerOptions) error {
	c := b.c
	if err := os.Chmod(b.dir, 0o755); err != nil {
		return err
	}
	ini := filepath.Join(b.dir, "pgbouncer.ini")
	users := filepath.Join(b.dir, "userlist.txt")
	logFile := filepath.Join(b.dir, "pgbouncer.log")
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 2000
server_login_retry = %d
ignore_startup_parameters = extra_float_digits
logfile = %s
`, c.Port, b.Port, users, opt.PoolMode, opt.PoolSize, max(1, int(opt.LoginRetry/time.Second)), logFile)
	files := map[string]string{ini: conf, users: fmt.Sprintf("%q %q\n", User, c.Password)}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			return err
		}
	}
	if c.cred != nil {
		for _, p := range []string{b.dir, ini, users} {
			if err := os.Chown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return err
			}
		}
	}
	cmd := exec.Command(bin, ini) // not CommandContext: it outlives ctx, stopped by Stop
	cmd.Dir = b.dir
	if c.cred != nil {
		// pgbouncer refuses to run as root.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting pgbouncer: %w", err)
	}
	b.cmd = cmd
	go func() { cmd.Wait(); close(b.done) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(logFile)
			return fmt.Errorf("pgbouncer exited at start: %s\n%s", out.String(), lastLines(string(log), 15))
		case <-ctx.Done():
			b.kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.kill()
			return fmt.Errorf("pgbouncer did not listen on %s within 30s", addr)
		}
	}
}

func (b *Bouncer) kill() {
	b.cmd.Process.Kill()
	<-b.done
}

// URL is the connection URL of database db as User, through the bouncer.
func (b *Bouncer) URL(db string) string { return b.Rewrite(b.c.URL(db)) }

// Rewrite points a URL of the cluster (as Cluster.URL or CreateDatabase
// returned it) at the bouncer.
func (b *Bouncer) Rewrite(clusterURL string) string {
	u, err := url.Parse(clusterURL)
	if err != nil {
		return clusterURL
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
	return u.String()
}

// Log returns what pgbouncer logged so far.
func (b *Bouncer) Log() string {
	log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	return string(log)
}

// Stop kills the bouncer and removes its directory.
func (b *Bouncer) Stop() {
	b.kill()
	os.RemoveAll(b.dir)
}

// StartBouncer starts a PgBouncer in front of c for test t, stopped when t
// ends. Without the pgbouncer binary the test skips (fails where extras
// are required).
func StartBouncer(t testing.TB, c *Cluster, opt BouncerOptions) *Bouncer {
	t.Helper()
	b, err := c.StartBouncer(context.Background(), opt)
	if errors.Is(err, ErrNoPgBouncer) {
		testextra.Missing(t, "PgBouncer (pgbouncer on PATH or at /usr/sbin/pgbouncer), needed by the shared-ledger tests through a pooler",
			"apt-get install -y pgbouncer (Debian's package; `make test` installs it when it runs as root or with passwordless sudo)")
	}
	if err != nil {
		t.Fatalf("starting PgBouncer: %v", err)
	}
	t.Cleanup(b.Stop)
	return b
}
