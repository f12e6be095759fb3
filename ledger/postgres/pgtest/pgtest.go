// Package pgtest starts a throwaway PostgreSQL cluster for tests, from the
// server binaries of the machine (Debian's /usr/lib/postgresql/N/bin, or
// initdb and pg_ctl on PATH): initdb into a temporary directory (as user
// postgres, or nobody, when the test runs as root), a free loopback port,
// password authentication over TCP (so tests can also check a wrong
// password), no Unix socket. One cluster serves a whole test package
// (Shared, started on first use and stopped from TestMain); each test takes
// a database or a schema of its own.
//
// A test that needs the cluster and finds no server binaries skips, saying
// what to install, unless extras are required (CI, DOCKET_REQUIRE_EXTRAS=1:
// evals/testextra), where it fails. StartBouncer puts a PgBouncer (in
// transaction mode by default) in front of a cluster the same way: without
// the pgbouncer binary the test skips, or fails where extras are required.
//
// Imports: the standard library, pgx and evals/testextra.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/evals/testextra"
)

// ErrNoPostgres means no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin")

// User is the cluster's superuser, who connects with Cluster.Password.
const User = "docket"

// Bins returns the directory holding initdb and pg_ctl.
func Bins() (string, error) {
	has := func(d string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(matches, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, m := range matches {
		if has(m) {
			return m, nil
		}
	}
	return "", ErrNoPostgres
}

// Cluster is a running throwaway cluster.
type Cluster struct {
	Port     int
	Password string // User's password

	bins string
	dir  string // parent of data; removed by Stop
	data string
	cred *syscall.Credential
}

// Start runs initdb into a new temporary directory and starts the server on
// a free loopback port. Errors: ErrNoPostgres, or what initdb/pg_ctl said.
func Start(ctx context.Context) (*Cluster, error) {
	bins, err := Bins()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "docket-pg-")
	if err != nil {
		return nil, err
	}
	var pw [12]byte
	rand.Read(pw[:])
	c := &Cluster{bins: bins, dir: dir, data: filepath.Join(dir, "data"), Password: "pw" + hex.EncodeToString(pw[:])}
	if err := c.init(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) init(ctx context.Context) error {
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		cred, err := runAsUser()
		if err != nil {
			return err
		}
		c.cred = cred
		if err := os.Chown(c.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	pwfile := filepath.Join(c.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(c.Password+"\n"), 0o600); err != nil {
		return err
	}
	if c.cred != nil {
		os.Chown(pwfile, int(c.cred.Uid), int(c.cred.Gid))
	}
	out, err := c.cmd(ctx, "initdb", "-D", c.data, "-U", User, "--pwfile", pwfile, "--auth-local=trust",
		"--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-instructions", "--no-sync").CombinedOutput()
	os.Remove(pwfile)
	if err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return err
		}
		c.Port = port
		// The durability settings stay at their defaults (fsync and
		// synchronous_commit on): what the tests prove holds on a real server.
		conf := fmt.Sprintf("\n# docket tests\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nmax_connections = 300\n", port)
		if err := c.writeConf(conf); err != nil {
			return err
		}
		if lastErr = c.pgctl(ctx, "start"); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

func (c *Cluster) writeConf(conf string) error {
	p := filepath.Join(c.data, "postgresql.auto.conf")
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		return err
	}
	if c.cred != nil {
		return os.Chown(p, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}

func (c *Cluster) pgctl(ctx context.Context, verb string, args ...string) error {
	logFile := filepath.Join(c.dir, "server.log")
	a := append([]string{"-D", c.data, "-l", logFile, "-w", "-t", "60"}, args...)
	out, err := c.cmd(ctx, "pg_ctl", append(a, verb)...).CombinedOutput()
	if err != nil {
		tail, _ := os.ReadFile(logFile)
		return fmt.Errorf("pg_ctl %s: %v\n%s\n%s", verb, err, out, lastLines(string(tail), 15))
	}
	return nil
}

// Restart restarts the server; mode is pg_ctl's -m (smart, fast,
// immediate: immediate is a crash, recovered from the WAL at start).
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	return c.pgctl(ctx, "restart", "-m", mode)
}

// StopServer stops the server (fast) without removing its data; Restart or
// StartServer brings it back.
func (c *Cluster) StopServer(ctx context.Context) error { return c.pgctl(ctx, "stop", "-m", "fast") }

// StartServer starts a stopped server again.
func (c *Cluster) StartServer(ctx context.Context) error { return c.pgctl(ctx, "start") }

// Stop stops the server and removes its directory.
func (c *Cluster) Stop() error {
	err := c.pgctl(context.Background(), "stop", "-m", "immediate")
	os.RemoveAll(c.dir)
	return err
}

func (c *Cluster) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bins, name), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

// URL is the connection URL of database db as User.
func (c *Cluster) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(User, c.Password), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)),
		Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Exec runs SQL statements in database db.
func (c *Cluster) Exec(ctx context.Context, db string, sql ...string) error {
	conn, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range sql {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// CreateDatabase creates a new database with a unique name made from prefix
// and returns its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, prefix string) (string, error) {
	var b [6]byte
	rand.Read(b[:])
	name := strings.ToLower(prefix) + "_" + hex.EncodeToString(b[:])
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return c.URL(name), nil
}

// runAsUser picks the user the cluster runs as when we are root.
func runAsUser() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and neither user postgres nor nobody exists to run the cluster as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Shared is one cluster for a test package, started by the first test
// that asks for it. Stop it from TestMain after m.Run:
//
//	var pg pgtest.Shared
//	func TestMain(m *testing.M) { code := m.Run(); pg.Stop(); os.Exit(code) }
type Shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Get returns the package's cluster, starting it on first use. Without
// server binaries the test skips (fails where extras are required); a
// cluster that fails to start fails the test.
func (s *Shared) Get(t testing.TB) *Cluster {
	t.Helper()
	s.once.Do(func() { s.c, s.err = Start(context.Background()) })
	if errors.Is(s.err, ErrNoPostgres) {
		testextra.Missing(t, "PostgreSQL's server binaries (initdb and pg_ctl on PATH or in /usr/lib/postgresql/*/bin), needed by the shared-ledger tests",
			"apt-get install -y postgresql (Debian's package; `make test` installs it when it runs as root or with passwordless sudo)")
	}
	if s.err != nil {
		t.Fatalf("starting a throwaway PostgreSQL cluster: %v", s.err)
	}
	return s.c
}

// Stop stops the cluster if one was started.
func (s *Shared) Stop() {
	if s.c != nil {
		if err := s.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
}
