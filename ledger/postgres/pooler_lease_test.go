package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres/pgtest"
)

// The database restarts behind PgBouncer, which then refuses every client
// for its server_login_retry: every node's heartbeat fails meanwhile. A
// node that holds a claim through it keeps the claim (its lease outlasts
// the pooler's wait), another node cannot take it over, and the node
// reports its outcome; a node that really stopped renewing still has its
// claim taken over once its lease expired.
func TestPoolerOutageKeepsLiveClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var own pgtest.Shared // this test stops and starts its server
	t.Cleanup(own.Stop)
	c := own.Get(t)
	bouncer := pgtest.StartBouncer(t, c, pgtest.BouncerOptions{LoginRetry: 2 * time.Second})
	direct, err := c.CreateDatabase(ctx, "outage")
	if err != nil {
		t.Fatal(err)
	}
	cfg := shortLease(schemaFor(t.Name())) // a 1.5s lease, shorter than the pooler's wait
	cfg.URL = bouncer.Rewrite(direct)
	cfg.PoolerLoginRetry = 3 * time.Second
	a := open(t, cfg)
	b := open(t, cfg)
	if !a.Pooled() {
		t.Fatal("the pooler was not found")
	}
	if a.LeaseDuration() != 2*cfg.PoolerLoginRetry+cfg.SkewMargin {
		t.Fatalf("A's lease behind the pooler: %v, want 2*PoolerLoginRetry + SkewMargin", a.LeaseDuration())
	}
	l, err := b.Lease(ctx, a.Incarnation())
	if err != nil {
		t.Fatal(err)
	}
	if l.Left() < 4*time.Second {
		t.Fatalf("A's lease behind the pooler: %v left, want it raised above twice the login retry", l.Left())
	}
	k, args := onePlanRun(t, a, "r")
	if _, err := ledger.ApplyOne(ctx, a, ledger.Claim("r", "a1", "pay", k, args, 1)); err != nil {
		t.Fatalf("claim on node A: %v", err)
	}
	inc := a.Incarnation()

	// The database goes away and comes back; PgBouncer fails a login
	// meanwhile and then refuses clients for its server_login_retry.
	if err := c.StopServer(ctx); err != nil {
		t.Fatal(err)
	}
	probe := func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(pctx, cfg.URL+"&default_query_exec_mode=simple_protocol")
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(pctx, "SELECT 1")
		return err
	}
	if err := probe(); err == nil {
		t.Fatal("a query through the pooler succeeded with the server stopped")
	}
	if err := c.StartServer(ctx); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	refused := false
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := probe()
		if err == nil {
			break
		}
		if strings.Contains(err.Error(), "login") {
			refused = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pooler did not serve again within 60s: %v\n%s", err, bouncer.Log())
		}
		<-tick.C
	}
	t.Logf("the pooler refused clients after the restart: %v", refused)
	// Two of A's heartbeats after the pooler is back.
	waitRenewed := time.Now().Add(30 * time.Second)
	for {
		l, err := b.Lease(ctx, inc)
		if err == nil && l.Live() && l.Left() > cfg.PoolerLoginRetry {
			break
		}
		if time.Now().After(waitRenewed) {
			t.Fatalf("A's lease after the outage: %+v, %v (A's incarnation now %s)", l, err, a.Incarnation())
		}
		<-tick.C
	}

	if a.Incarnation() != inc {
		t.Fatalf("A lost its incarnation in the outage (%s, now %s): its claims looked dead", inc, a.Incarnation())
	}
	_, err = ledger.ApplyOne(ctx, b, ledger.Claim("r", "a1", "pay", k, args, 2))
	var ce *ledger.ConflictError
	if !errors.As(err, &ce) || !strings.Contains(ce.Msg, "another node") {
		t.Fatalf("B's takeover of live node A's claim after the outage: %v, want a conflict naming another node", err)
	}
	if _, err := ledger.ApplyOne(ctx, a, ledger.Succeed(k, 1, json.RawMessage(`{"id":"ch_1"}`))); err != nil {
		t.Fatalf("A's outcome after the outage: %v", err)
	}

	// A node that really stops renewing loses its claim.
	k2, args2 := onePlanRun(t, a, "r2")
	if _, err := ledger.ApplyOne(ctx, a, ledger.Claim("r2", "a1", "pay", k2, args2, 1)); err != nil {
		t.Fatal(err)
	}
	dead := a.Incarnation()
	a.PauseHeartbeat(true)
	waitExpired(t, b, dead)
	res, err := ledger.ApplyOne(ctx, b, ledger.Claim("r2", "a1", "pay", k2, args2, 2))
	if err != nil || res.Key.Owner != b.Incarnation() || res.Key.Attempt != 2 {
		t.Fatalf("takeover of a dead node's claim: %+v, %v", res.Key, err)
	}
}
