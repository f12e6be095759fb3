package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// watchRun creates run "r" (one action) through a and subscribes to it
// through b. expect waits for the run's events up to seq upto, in order
// and each once, failing after 30s without the next one (why says what
// that would mean).
func watchRun(ctx context.Context, t *testing.T, a, b *postgres.Store) (expect func(upto uint64, why string)) {
	t.Helper()
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}
	if _, _, err := a.CreateRun(ctx, ledger.Run{ID: "r"}, p, nil); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	next := uint64(1)
	return func(upto uint64, why string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for next <= upto {
			select {
			case ev, ok := <-sub.C:
				if !ok {
					t.Fatalf("subscription ended: %v", sub.Err())
				}
				if ev.Seq != next {
					t.Fatalf("got seq %d, want %d", ev.Seq, next)
				}
				next++
			case <-timeout:
				t.Fatalf("seq %d did not arrive within 30s%s", next, why)
			}
		}
	}
}

// waitForLock waits until a statement of schema that matches like (a LIKE
// pattern) waits on a lock, and fails the test after 30 s ("no " + what).
// ended reports, with what to fail with, that the statement's caller
// returned first ("": not yet).
func waitForLock(ctx context.Context, t *testing.T, watch *pgx.Conn, schema, like, what string, ended func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $2 AND strpos(query, $1) > 0`, schema, like).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			return
		}
		if why := ended(); why != "" {
			t.Fatal(why)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
