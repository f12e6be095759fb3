package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// syncBuffer is a log destination tests read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func openErr(cfg postgres.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, cfg)
	if err == nil {
		s.Close()
		return errors.New("Open succeeded")
	}
	return err
}

// Database faults at open give errors that say what is wrong, never the
// password.
func TestOpenFaults(t *testing.T) {
	t.Parallel()
	c := pg.Get(t)
	url := database(t)
	ctx := context.Background()

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		u := fmt.Sprintf("postgres://docket:sekret-pw-1@127.0.0.1:%d/x?sslmode=disable&connect_timeout=5", port)
		err = openErr(postgres.Config{URL: u})
		if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), fmt.Sprint(port)) {
			t.Fatalf("connection refused: %v", err)
		}
		if strings.Contains(err.Error(), "sekret-pw-1") {
			t.Fatalf("the password leaked: %v", err)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		var log syncBuffer
		u := strings.Replace(url, c.Password, "wrong-sekret-pw", 1)
		err := openErr(postgres.Config{URL: u, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("wrong password: %v", err)
		}
		for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), log.String()} {
			if strings.Contains(s, "wrong-sekret-pw") || strings.Contains(s, c.Password) {
				t.Fatalf("the password leaked: %s", s)
			}
		}
	})

	t.Run("bad URL", func(t *testing.T) {
		err := openErr(postgres.Config{URL: "postgres://docket:sekret-pw-2@127.0.0.1:notaport/x"})
		if !errors.Is(err, ledger.ErrInvalid) || strings.Contains(err.Error(), "sekret-pw-2") {
			t.Fatalf("bad URL: %v", err)
		}
	})

	t.Run("read-only database", func(t *testing.T) {
		ro, err := c.CreateDatabase(ctx, "ro")
		if err != nil {
			t.Fatal(err)
		}
		name := ro[strings.LastIndex(ro, "/")+1 : strings.Index(ro, "?")]
		if err := c.Exec(ctx, "postgres", "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET default_transaction_read_only = on"); err != nil {
			t.Fatal(err)
		}
		err = openErr(postgres.Config{URL: ro})
		if !strings.Contains(err.Error(), "read-only") {
			t.Fatalf("read-only database: %v", err)
		}
	})

	t.Run("newer schema", func(t *testing.T) {
		schema := schemaFor(t.Name())
		s := open(t, postgres.Config{Schema: schema})
		s.Close()
		if err := c.Exec(ctx, url[strings.LastIndex(url, "/")+1:strings.Index(url, "?")],
			fmt.Sprintf(`UPDATE %s.meta SET value = '%d' WHERE name = 'schema_version'`, pgx.Identifier{schema}.Sanitize(), postgres.SchemaVersion+1)); err != nil {
			t.Fatal(err)
		}
		err := openErr(postgres.Config{URL: url, Schema: schema})
		if !errors.Is(err, ledger.ErrFormat) || !strings.Contains(err.Error(), "newer") {
			t.Fatalf("newer schema: %v", err)
		}
	})
}

// Nodes opening together create the schema once (the advisory lock).
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	schema := schemaFor(t.Name())
	url := database(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	stores := make([]*postgres.Store, 6)
	for i := range stores {
		wg.Go(func() {
			stores[i], errs[i] = postgres.Open(context.Background(), postgres.Config{URL: url, Schema: schema, MaxConns: 2})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		stores[i].Close()
	}
}

// A subscriber on one node sees the events another node commits, in order,
// also when the LISTEN connection breaks (the fallback poll and the
// re-LISTEN cover what its notifications missed).
func TestSubscribeAcrossNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	cfg := postgres.Config{Schema: schema, Poll: 200 * time.Millisecond}
	a := open(t, cfg)
	b := open(t, cfg)
	watch := watchRun(ctx, t, a, b)
	expect := func(upto uint64) { t.Helper(); watch(upto, "") }
	expect(2) // run.created, plan.recorded
	note := func(i int) {
		if _, err := ledger.ApplyOne(ctx, a, ledger.Note("r", "test.note", "", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		note(i)
	}
	expect(7)
	// Break B's LISTEN connection: notifications sent meanwhile are lost.
	c := pg.Get(t)
	if err := c.Exec(ctx, "postgres", `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN "docket_events_`+schema+`"%'`); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		note(10 + i)
	}
	expect(12)
}

// The database crashing mid-run (pg_ctl restart -m immediate): writers
// wait for it and go on; every acknowledged write is there afterwards; a
// write whose COMMIT the crash cut says that its outcome is unknown. Not
// parallel: the other tests' cluster restarts too.
func TestDatabaseRestart(t *testing.T) {
	ctx := context.Background()
	c := pg.Get(t)
	s := open(t, postgres.Config{Schema: schemaFor(t.Name())})
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}
	if _, _, err := s.CreateRun(ctx, ledger.Run{ID: "r"}, p, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acked []string
	unknown := 0
	stop := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				_, err := s.Memo(ctx, "r", name, json.RawMessage(`1`))
				mu.Lock()
				switch {
				case err == nil:
					acked = append(acked, name)
					if len(acked) == 20 {
						close(started)
					}
				case strings.Contains(err.Error(), "outcome is unknown") && errors.Is(err, ledger.ErrUnavailable):
					unknown++
				default:
					t.Errorf("memo %s: %v", name, err)
				}
				mu.Unlock()
			}
		})
	}
	<-started
	if err := c.Restart(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	// Writes go on after the restart.
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		m := len(acked)
		mu.Unlock()
		if m >= n+20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no write succeeded within 60s of the restart")
		}
		if _, err := s.GetRun(ctx, "r"); err != nil {
			t.Fatalf("read after the restart: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	for _, name := range acked {
		v, err := s.Memo(ctx, "r", name, json.RawMessage(`2`))
		if err != nil || string(v) != "1" {
			t.Fatalf("acknowledged memo %s after the crash: %s, %v", name, v, err)
		}
	}
	t.Logf("%d writes acknowledged, %d cut by the crash (outcome unknown), none lost", len(acked), unknown)
}
