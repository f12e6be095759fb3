package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
)

// TestOutcomeUpdatesKeyInPlace: an outcome rewrites its key's record as a
// heap-only update (no index of keys names the state that changes, and the
// page has room), so it adds no index entries. PostgreSQL's statistics are
// read once they have counted every update (they are flushed after the
// transactions, not in them).
func TestOutcomeUpdatesKeyInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	s := open(t, postgres.Config{Schema: schema})
	claim := groupRuns(t, s, "h1", "h2")
	n := 0
	for _, run := range []string{"h1", "h2"} {
		for _, id := range []string{"a", "b"} {
			op, k := claim(run, id)
			if _, err := ledger.ApplyOne(ctx, s, op); err != nil {
				t.Fatal(err)
			}
			if _, err := ledger.ApplyOne(ctx, s, ledger.Succeed(k, 1, json.RawMessage(`{"id":"x-1","total":"12.50"}`))); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	conn := rawConn(t)
	var upd, hot int64
	for range 300 { // the statistics collector flushes within a second or so
		if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'keys'`,
			schema).Scan(&upd, &hot)
		if err != nil && err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		if upd >= int64(n) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if upd < int64(n) {
		t.Fatalf("the statistics counted %d updates of keys, want %d", upd, n)
	}
	if hot != upd {
		t.Fatalf("%d of %d updates of keys were heap-only: an outcome added index entries", hot, upd)
	}
}
