package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/ledger/postgres/pgtest"
	"github.com/docketrun/docket/plan"
)

// The conformance suite through PgBouncer in transaction mode, with a URL
// that says nothing about the pooler.
func TestConformanceThroughPgBouncer(t *testing.T) {
	url := database(t)
	b := pgtest.StartBouncer(t, pg.Get(t), pgtest.BouncerOptions{})
	url = b.Rewrite(url)
	ledgertest.Run(t, func(t *testing.T, c ledgertest.Config) ledger.Store {
		return open(t, postgres.Config{URL: url, Schema: "b" + schemaFor(c.Dir), Clock: c.Clock,
			SubscriberBuffer: c.SubscriberBuffer, MaxOutputBytes: c.MaxOutputBytes})
	}, ledgertest.Options{Durable: true})
}

// Open finds a pooler in transaction mode, says so in its log, and not a
// direct connection or a pooler in session mode (where prepared statements
// and LISTEN work as on the server).
func TestPoolerDetected(t *testing.T) {
	t.Parallel()
	url := database(t)
	c := pg.Get(t)
	tx := pgtest.StartBouncer(t, c, pgtest.BouncerOptions{})
	session := pgtest.StartBouncer(t, c, pgtest.BouncerOptions{PoolMode: "session"})
	schema := schemaFor(t.Name())
	for _, tc := range []struct {
		name   string
		url    string
		pooled bool
	}{
		{"direct", url, false},
		{"transaction", tx.Rewrite(url), true},
		{"session", session.Rewrite(url), false},
		// The URL's own exec mode is kept; the pooler is still found.
		{"transaction, exec mode in the URL", tx.Rewrite(url) + "&default_query_exec_mode=exec", true},
	} {
		var log syncBuffer
		s := open(t, postgres.Config{URL: tc.url, Schema: schema, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if s.Pooled() != tc.pooled {
			t.Errorf("%s: Pooled() = %v, want %v", tc.name, s.Pooled(), tc.pooled)
		}
		said := strings.Contains(log.String(), "pooler in transaction mode")
		if said != tc.pooled {
			t.Errorf("%s: logged the pooler: %v, want %v; log:\n%s", tc.name, said, tc.pooled, log.String())
		}
		// Writes and reads work, more than once on each pooled connection.
		id := strings.ReplaceAll(tc.name, " ", "_")
		for i := range 3 {
			p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}
			run := fmt.Sprintf("%s_%d", id, i)
			if _, _, err := s.CreateRun(context.Background(), ledger.Run{ID: run}, p, nil); err != nil {
				t.Fatalf("%s: CreateRun: %v", tc.name, err)
			}
			if _, err := s.GetRun(context.Background(), run); err != nil {
				t.Fatalf("%s: GetRun: %v", tc.name, err)
			}
		}
	}
}

// Through a pooler in transaction mode LISTEN cannot work: a subscriber on
// one node still sees, in order, what another node commits (the poll).
func TestSubscribeAcrossNodesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.StartBouncer(t, pg.Get(t), pgtest.BouncerOptions{}).Rewrite(database(t))
	cfg := postgres.Config{URL: url, Schema: schemaFor(t.Name()), Poll: 100 * time.Millisecond}
	a := open(t, cfg)
	b := open(t, cfg)
	if !a.Pooled() || !b.Pooled() {
		t.Fatal("the pooler was not found")
	}
	watch := watchRun(ctx, t, a, b)
	expect := func(upto uint64) { t.Helper(); watch(upto, "") }
	expect(2)
	for round := range 3 {
		for i := range 4 {
			if _, err := ledger.ApplyOne(ctx, a, ledger.Note("r", "test.note", "", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))); err != nil {
				t.Fatal(err)
			}
		}
		expect(uint64(2 + 4*(round+1)))
	}
}

// With ListenURL (a direct connection) beside a URL through PgBouncer, a
// node LISTENs there: another node's events reach its subscriber with the
// poll far away (10 minutes). A ListenURL through the same pooler is
// refused.
func TestListenURLBesidePgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := database(t)
	bouncer := pgtest.StartBouncer(t, pg.Get(t), pgtest.BouncerOptions{})
	var log syncBuffer
	// A lease far longer than a heartbeat held up by a loaded machine: a
	// node that finds no other node's lease live sends no NOTIFY (the poll,
	// ten minutes away here, would deliver), which is not what this tests.
	cfg := postgres.Config{URL: bouncer.Rewrite(direct), ListenURL: direct, Schema: schemaFor(t.Name()), Poll: 10 * time.Minute,
		Lease: time.Minute, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	a := open(t, cfg)
	b := open(t, cfg)
	if !b.Pooled() || !strings.Contains(log.String(), "LISTENs for other nodes' events on ListenURL") {
		t.Fatalf("pooled %v; log:\n%s", b.Pooled(), log.String())
	}
	expect := watchRun(ctx, t, a, b)
	for round := range 3 {
		if _, err := ledger.ApplyOne(ctx, a, ledger.Note("r", "test.note", "", json.RawMessage(fmt.Sprintf(`{"i":%d}`, round)))); err != nil {
			t.Fatal(err)
		}
		expect(uint64(3+round), " (the poll is 10 minutes away: LISTEN on ListenURL did not deliver)")
	}
	bad := cfg
	bad.ListenURL = bouncer.Rewrite(direct)
	bad.Logger = nil
	if _, err := postgres.Open(ctx, bad); !errors.Is(err, ledger.ErrInvalid) || !strings.Contains(err.Error(), "ListenURL") {
		t.Fatalf("a ListenURL through the pooler: %v, want ErrInvalid", err)
	}
}
