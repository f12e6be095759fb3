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

// TestStepUpdatesInPlace: a claim and an outcome rewrite the action's row,
// and an outcome its key's record, as heap-only updates (no index of
// actions or keys names a column that changes, and the pages have room),
// so they add no index entries. PostgreSQL's statistics are read once they
// have counted every update (they are flushed after the transactions, not
// in them).
func TestStepUpdatesInPlace(t *testing.T) {
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
	// keys: one update per outcome; actions: one per claim, one per outcome.
	for table, want := range map[string]int64{"keys": int64(n), "actions": int64(2 * n)} {
		var upd, hot int64
		for range 300 { // the statistics collector flushes within a second or so
			if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
				t.Fatal(err)
			}
			err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`,
				schema, table).Scan(&upd, &hot)
			if err != nil && err != pgx.ErrNoRows {
				t.Fatal(err)
			}
			if upd >= want {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if upd < want {
			t.Fatalf("the statistics counted %d updates of %s, want %d", upd, table, want)
		}
		if hot != upd {
			t.Errorf("%d of %d updates of %s were heap-only: a step added index entries", hot, upd, table)
		}
	}
}
