package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
)

// openBadger opens a Badger-backed ledger; the suite chooses cfg.Dir.
func openBadger(t *testing.T, cfg ledger.Config) *ledger.Ledger {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := ledger.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil && !errors.Is(err, ledger.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, openBadger)
}
