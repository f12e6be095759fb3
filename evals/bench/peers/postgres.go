package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docketrun/docket/ledger/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres means no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's postgresql package or pass -pg-bin")

// findPostgres returns the directory holding initdb and pg_ctl.
func findPostgres(dir string) (string, error) {
	has := func(d string) bool {
		for _, b := range []string{"initdb", "pg_ctl"} {
			if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if dir != "" {
		if !has(dir) {
			return "", fmt.Errorf("-pg-bin %s: %w", dir, ErrNoPostgres)
		}
		return dir, nil
	}
	// The same search as the tests' throwaway clusters: PATH, then Debian's
	// one directory per major version outside PATH, newest first.
	if d, err := pgtest.Bins(); err == nil {
		return d, nil
	}
	return "", ErrNoPostgres
}

// postgres is a throwaway cluster.
type postgres struct {
	Port int
	bins string
	data string
	cred *syscall.Credential // set when we are root: the cluster runs as another user
	log  io.Writer
	pm   int // postmaster pid
}

// PGSettings are the cluster's durability-relevant settings, as reported by the server.
type PGSettings struct {
	Version           string `json:"version"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	WalSyncMethod     string `json:"wal_sync_method"`
	FullPageWrites    string `json:"full_page_writes"`
	SharedBuffers     string `json:"shared_buffers"`
}

// startPostgres runs initdb into dir and starts the server on a free loopback port.
func startPostgres(ctx context.Context, bins, dir string, log io.Writer) (*postgres, error) {
	pg := &postgres{bins: bins, data: filepath.Join(dir, "data"), log: log}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		cred, err := runAsUser()
		if err != nil {
			return nil, err
		}
		pg.cred = cred
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	if out, err := pg.cmd(ctx, "initdb", "-D", pg.data, "-A", "trust", "-U", "bench", "-E", "UTF8",
		"--locale=C", "--no-instructions").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		pg.Port = port
		// Only where to listen and how many connections: the durability
		// settings (fsync, synchronous_commit, wal_sync_method,
		// full_page_writes) stay at the defaults, and Settings reports them.
		conf := fmt.Sprintf("\n# docket peers benchmark\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nmax_connections = 200\n", port)
		if err := os.WriteFile(filepath.Join(pg.data, "postgresql.auto.conf"), []byte(conf), 0o600); err != nil {
			return nil, err
		}
		if pg.cred != nil {
			os.Chown(filepath.Join(pg.data, "postgresql.auto.conf"), int(pg.cred.Uid), int(pg.cred.Gid))
		}
		logFile := filepath.Join(dir, "server.log")
		out, err := pg.cmd(ctx, "pg_ctl", "-D", pg.data, "-l", logFile, "-w", "-t", "60", "start").CombinedOutput()
		if err == nil {
			pid, err := readPostmasterPID(pg.data)
			if err != nil {
				pg.Stop()
				return nil, err
			}
			pg.pm = pid
			return pg, nil
		}
		tail, _ := os.ReadFile(logFile)
		lastErr = fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, lastLines(string(tail), 15))
	}
	return nil, lastErr
}

func (pg *postgres) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, filepath.Join(pg.bins, name), args...)
	c.Dir = filepath.Dir(pg.data)
	c.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	if pg.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	}
	return c
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

func readPostmasterPID(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// DSN is the URL of database db; pool > 0 adds pgxpool's pool_max_conns.
func (pg *postgres) DSN(db string, pool int) string {
	u := fmt.Sprintf("postgres://bench@127.0.0.1:%d/%s?sslmode=disable", pg.Port, db)
	if pool > 0 {
		u += fmt.Sprintf("&pool_max_conns=%d", pool)
	}
	return u
}

// CreateDB creates database db (a plain identifier) on the cluster.
func (pg *postgres) CreateDB(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres", 0))
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return fmt.Errorf("CREATE DATABASE %s: %w", db, err)
	}
	return nil
}

// Settings asks the server for its durability settings.
func (pg *postgres) Settings(ctx context.Context) (PGSettings, error) {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres", 0))
	if err != nil {
		return PGSettings{}, fmt.Errorf("connecting to the cluster: %w", err)
	}
	defer conn.Close(ctx)
	var s PGSettings
	for _, q := range []struct {
		name string
		dst  *string
	}{
		{"server_version", &s.Version}, {"fsync", &s.Fsync}, {"synchronous_commit", &s.SynchronousCommit},
		{"wal_sync_method", &s.WalSyncMethod}, {"full_page_writes", &s.FullPageWrites}, {"shared_buffers", &s.SharedBuffers},
	} {
		if err := conn.QueryRow(ctx, "SHOW "+q.name).Scan(q.dst); err != nil {
			return s, fmt.Errorf("SHOW %s: %w", q.name, err)
		}
	}
	if s.Fsync != "on" || s.SynchronousCommit != "on" {
		return s, fmt.Errorf("the cluster is not durable (fsync=%s, synchronous_commit=%s): refusing to compare", s.Fsync, s.SynchronousCommit)
	}
	return s, nil
}

// Stop stops the cluster (fast shutdown).
func (pg *postgres) Stop() {
	out, err := pg.cmd(context.Background(), "pg_ctl", "-D", pg.data, "-m", "fast", "-w", "-t", "60", "stop").CombinedOutput()
	if err != nil {
		fmt.Fprintf(pg.log, "peers: pg_ctl stop: %v\n%s\n", err, out)
	}
}

// pgMonitor samples the cluster's memory while a child on it runs, and
// measures its CPU between the child's "start" and "end" marks.
type pgMonitor struct {
	pg         *postgres
	mu         sync.Mutex
	cpu0, cpu1 float64
	peakKiB    int64
	done       chan struct{}
	wg         sync.WaitGroup
}

func (pg *postgres) monitor() *pgMonitor {
	m := &pgMonitor{pg: pg, done: make(chan struct{})}
	m.wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				m.sample()
			}
		}
	})
	return m
}

func (m *pgMonitor) sample() {
	kib := m.pg.pssKiB()
	m.mu.Lock()
	m.peakKiB = max(m.peakKiB, kib)
	m.mu.Unlock()
}

// mark handles the child's window marks.
func (m *pgMonitor) mark(name string) {
	switch name {
	case "start":
		cpu := m.pg.cpuMS()
		m.mu.Lock()
		m.cpu0 = cpu
		m.mu.Unlock()
	case "end":
		// Every connection is still open: the memory is at its fullest.
		m.sample()
		cpu := m.pg.cpuMS()
		m.mu.Lock()
		m.cpu1 = cpu
		m.mu.Unlock()
	}
}

// stop ends sampling and returns the peak memory and the CPU of the window.
func (m *pgMonitor) stop() (peakKiB int64, cpuMS float64) {
	close(m.done)
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peakKiB, m.cpu1 - m.cpu0
}

// procs lists the postmaster and its children.
func (pg *postgres) procs() []int {
	pids := []int{pg.pm}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); len(f) > 1 && f[1] == strconv.Itoa(pg.pm) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat returns the fields of /proc/pid/stat after the command name
// (f[0] is the state, f[1] the parent pid, f[11] utime...).
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// pssKiB sums the proportional set size of the cluster's processes (shared
// buffers counted once across them, not once per backend).
func (pg *postgres) pssKiB() int64 {
	var sum int64
	for _, pid := range pg.procs() {
		sum += statusKiB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	}
	return sum
}

// cpuMS is the cluster's CPU so far: the postmaster's own and its reaped
// children's, plus the live children's.
func (pg *postgres) cpuMS() float64 {
	const hz = 100 // USER_HZ on Linux
	ticks := func(f []string, idx ...int) float64 {
		var t float64
		for _, i := range idx {
			if i < len(f) {
				v, _ := strconv.ParseFloat(f[i], 64)
				t += v
			}
		}
		return t
	}
	var total float64
	for i, pid := range pg.procs() {
		f := procStat(pid)
		if i == 0 {
			total += ticks(f, 11, 12, 13, 14) // utime stime cutime cstime
		} else {
			total += ticks(f, 11, 12)
		}
	}
	return total * 1000 / hz
}
