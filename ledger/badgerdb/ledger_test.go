package badgerdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/ledgertest"
)

// openBadger opens a Badger-backed ledger; the suite chooses cfg.Dir.
func openBadger(t *testing.T, cfg badgerdb.Config) *badgerdb.Ledger {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := badgerdb.Open(context.Background(), cfg)
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
	ledgertest.Run(t, func(t *testing.T, c ledgertest.Config) ledger.Store {
		return openBadger(t, badgerdb.Config{Dir: c.Dir, Clock: c.Clock,
			SubscriberBuffer: c.SubscriberBuffer, MaxOutputBytes: c.MaxOutputBytes})
	}, ledgertest.Options{Durable: true, ApplyLimit: true})
}

// Apply racing Close: every call either commits or gets ErrClosed; none hangs.
func TestCloseWhileApplying(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Memo(ctx, "r", "x", json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var committed atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := l.Memo(ctx, "r", fmt.Sprintf("g%d-%d", g, i), json.RawMessage(`1`))
				if errors.Is(err, ledger.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if committed.Add(1) == 50 {
					once.Do(func() { close(enough) })
				}
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("no progress before Close")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Everything acknowledged before Close is there.
	l, err = badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := int64(0)
	for g := 0; g < 16; g++ {
		for i := 0; ; i++ {
			v, err := l.Memo(ctx, "r", fmt.Sprintf("g%d-%d", g, i), json.RawMessage(`2`))
			if err != nil {
				t.Fatal(err)
			}
			if string(v) != "1" {
				break
			}
			n++
		}
	}
	if n < committed.Load() {
		t.Fatalf("%d memos acknowledged, %d found after reopen", committed.Load(), n)
	}
}
