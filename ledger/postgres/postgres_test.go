package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/ledger/postgres/pgtest"
)

// pg is the package's throwaway cluster (one for all tests).
var pg pgtest.Shared

func TestMain(m *testing.M) {
	if os.Getenv(resealChildEnv) != "" {
		os.Exit(resealChild())
	}
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

var (
	dbOnce sync.Once
	dbURL  string
	dbErr  error
)

// database returns the URL of the package's database, created on first use.
func database(t testing.TB) string {
	t.Helper()
	c := pg.Get(t)
	dbOnce.Do(func() { dbURL, dbErr = c.CreateDatabase(context.Background(), "ledger") })
	if dbErr != nil {
		t.Fatal(dbErr)
	}
	return dbURL
}

// rawConn is a connection of its own to the test database, closed when the
// test ends (or earlier by its caller).
func rawConn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

// schemaFor names a schema after a directory, so that a test's "reopen the
// same Dir" opens the same tables.
func schemaFor(dir string) string {
	h := sha256.Sum256([]byte(dir))
	return "t_" + hex.EncodeToString(h[:10])
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func open(t testing.TB, cfg postgres.Config) *postgres.Store {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = database(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.MaxConns = max(cfg.MaxConns, 6)
	s, err := postgres.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ledger.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, c ledgertest.Config) ledger.Store {
		return open(t, postgres.Config{Schema: schemaFor(c.Dir), Clock: c.Clock,
			SubscriberBuffer: c.SubscriberBuffer, MaxOutputBytes: c.MaxOutputBytes})
	}, ledgertest.Options{Durable: true})
}
