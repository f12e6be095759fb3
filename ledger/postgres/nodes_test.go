package postgres_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
)

// Lease reads another incarnation's lease by the database's clock: live
// with the time it has left while its heartbeat runs, expired once it
// stopped, ended at once by Close, and ErrNotFound for an incarnation that
// never registered.
func TestNodeLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))

	l, err := b.Lease(ctx, a.Incarnation())
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if !l.Live() || l.Left() <= 0 || l.Left() > 1500*time.Millisecond || l.Incarnation != a.Incarnation() ||
		l.PID != os.Getpid() || l.Host != host || l.Stopped {
		t.Fatalf("a live node's lease: %+v (left %v)", l, l.Left())
	}

	old := a.Incarnation()
	a.PauseHeartbeat(true)
	waitExpired(t, b, old)
	if l, err = b.Lease(ctx, old); err != nil || l.Live() || l.Left() != 0 || l.Expires.After(l.Now) {
		t.Fatalf("an expired lease: %+v, %v", l, err)
	}

	c := open(t, shortLease(schema))
	inc := c.Incarnation()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = b.Lease(ctx, inc); err != nil || l.Live() || !l.Stopped {
		t.Fatalf("the lease of a closed store: %+v, %v", l, err)
	}

	if _, err := b.Lease(ctx, "inc_never"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an unknown incarnation: %v, want ErrNotFound", err)
	}
	b.Close()
	if _, err := b.Lease(ctx, old); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("Lease on a closed store: %v, want ErrClosed", err)
	}
}

// Registering prunes the rows of nodes whose lease ended over a day ago, up
// to a thousand per registration, and keeps every other row: the live
// nodes', and the ones that ended within the day. A node that lost its row
// is gone as one whose lease ended is (Lease: ErrNotFound), and the live
// ones go on committing.
func TestNodesPruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir())
	a := open(t, postgres.Config{Schema: schema})
	conn := rawConn(t)
	defer conn.Close(ctx)
	nodes := pgx.Identifier{schema, "nodes"}.Sanitize()
	if _, err := conn.Exec(ctx, `INSERT INTO `+nodes+` (incarnation, host, pid, started_at, renewed_at, lease_expires, stopped_at)
		SELECT 'inc_old_' || i, 'h', i, now() - interval '3 days', now() - interval '2 days', now() - interval '2 days',
			CASE WHEN i % 2 = 0 THEN now() - interval '2 days' END FROM generate_series(1, 1500) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+nodes+` (incarnation, host, pid, started_at, renewed_at, lease_expires)
		SELECT 'inc_recent_' || i, 'h', i, now() - interval '2 hours', now() - interval '23 hours', now() - interval '23 hours' FROM generate_series(1, 3) AS i`); err != nil {
		t.Fatal(err)
	}
	count := func(like string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+nodes+` WHERE incarnation LIKE $1`, like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	b := open(t, postgres.Config{Schema: schema})
	if old, recent := count("inc_old_%"), count("inc_recent_%"); old != 500 || recent != 3 {
		t.Fatalf("after one registration: %d rows of nodes that ended two days ago (want 500), %d that ended within the day (want 3)", old, recent)
	}
	c := open(t, postgres.Config{Schema: schema})
	if old, recent := count("inc_old_%"), count("inc_recent_%"); old != 0 || recent != 3 {
		t.Fatalf("after two registrations: %d rows of nodes that ended two days ago (want 0), %d that ended within the day (want 3)", old, recent)
	}
	if _, err := c.Lease(ctx, "inc_old_7"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the lease of a pruned node: %v, want ErrNotFound", err)
	}
	for _, s := range []*postgres.Store{a, b, c} {
		l, err := c.Lease(ctx, s.Incarnation())
		if err != nil || !l.Live() {
			t.Fatalf("a live node's lease after the pruning: %+v %v", l, err)
		}
	}
	claim := groupRuns(t, a, "p1")
	op, _ := claim("p1", "a")
	if res, err := a.Apply(ctx, op); err != nil || res[0].Err != nil {
		t.Fatalf("a claim by the first node after the pruning: %v %+v", err, res)
	}
}
