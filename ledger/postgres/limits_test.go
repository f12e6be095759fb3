package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
)

// One token bucket for every node: takes on two Stores draw from the
// same allowance, a refused take takes nothing and says how long to wait,
// and buckets of other kinds or names are apart.
func TestTakeTokensShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	const rate, burst = 0.01, 5 // one token per 100s: nothing refills during the test
	took := 0
	for i := range 8 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wait, ok, err := s.TakeTokens(ctx, "req", "alice", 1, rate, burst)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			took++
		} else if wait < 50*time.Second || wait > 100*time.Second {
			t.Fatalf("refused take %d: wait %v, want up to 100s (one token at 0.01/s)", i, wait)
		}
	}
	if took != burst {
		t.Fatalf("%d takes allowed across two nodes, want %d (one bucket)", took, burst)
	}
	// More than a bucket can hold: refused, and nothing taken.
	if _, ok, err := a.TakeTokens(ctx, "bytes", "alice", 6, rate, burst); ok || err != nil {
		t.Fatalf("a take larger than the burst: %v, %v", ok, err)
	}
	if _, ok, err := b.TakeTokens(ctx, "bytes", "alice", 5, rate, burst); !ok || err != nil {
		t.Fatalf("the other kind's bucket is full: %v, %v", ok, err)
	}
	if _, ok, err := b.TakeTokens(ctx, "req", "bob", 1, rate, burst); !ok || err != nil {
		t.Fatalf("another token's bucket is full: %v, %v", ok, err)
	}
	// It refills at rate.
	if _, ok, err := a.TakeTokens(ctx, "fast", "alice", 2, 1000, 2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, ok, err := b.TakeTokens(ctx, "fast", "alice", 2, 1000, 2)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a bucket refilling at 1000/s stayed empty")
		}
	}
	if _, _, err := a.TakeTokens(ctx, "req", "x", 1, 1, math.NaN()); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("NaN burst: %v", err)
	}
}

// CapSessions keeps a token's newest sessions, whichever node made them.
func TestCapSessionsShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	now := time.Now()
	for i := range 6 {
		s := a
		if i%2 == 1 {
			s = b
		}
		if err := s.PutSession(ctx, fmt.Sprintf("h%d", i), "alice", now.Add(time.Hour+time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutSession(ctx, "other", "bob", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := a.CapSessions(ctx, "alice", 4); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		_, _, ok, err := b.Session(ctx, fmt.Sprintf("h%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if want := i >= 2; ok != want {
			t.Errorf("session h%d live: %v, want %v", i, ok, want)
		}
	}
	if _, _, ok, err := a.Session(ctx, "other"); !ok || err != nil {
		t.Fatalf("another token's session: %v, %v", ok, err)
	}
}

// BenchmarkTakeTokens measures one shared take, what every authenticated
// request of the service costs on a shared ledger (the limits table is
// unlogged: no WAL flush), sequential and 16 at once on 16 tokens.
//
//	go test ./ledger/postgres -run '^$' -bench TakeTokens -benchtime 2000x
func BenchmarkTakeTokens(b *testing.B) {
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("inflight=%d", par), func(b *testing.B) {
			ctx := context.Background()
			s := open(b, postgres.Config{Schema: schemaFor(fmt.Sprintf("%s-%d", b.Name(), time.Now().UnixNano())), MaxConns: max(8, par)})
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + par - 1) / par
			for w := range par {
				wg.Go(func() {
					for range min(per, b.N-per*w) {
						if _, _, err := s.TakeTokens(ctx, "requests", fmt.Sprintf("tok%d", w), 1, 1e9, 1e9); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// TokensLeft reads a bucket without taking from it; buckets full again are
// swept from the table (a sign-in bucket per client address must not pile
// up), and a swept bucket reads as full.
func TestTokensLeftAndSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	if left, err := a.TokensLeft(ctx, "signin", "10.0.0.1", 0.01, 20); err != nil || left != 20 {
		t.Fatalf("a bucket never taken from: %v, %v, want 20", left, err)
	}
	for range 3 {
		if _, ok, err := b.TakeTokens(ctx, "signin", "10.0.0.1", 1, 0.01, 20); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	for range 2 {
		left, err := a.TokensLeft(ctx, "signin", "10.0.0.1", 0.01, 20)
		if err != nil || left < 17 || left > 17.1 {
			t.Fatalf("after 3 takes on another node: %v, %v, want 17", left, err)
		}
	}
	// A bucket refilling at 1000/s is full again at once; one refilling at
	// 0.01/s is not. Enough takes elsewhere make a sweep.
	if _, _, err := a.TakeTokens(ctx, "signin", "10.0.0.2", 1, 1000, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		if _, _, err := a.TakeTokens(ctx, "requests", fmt.Sprintf("t%d", i%3), 1, 1e6, 1e6); err != nil {
			t.Fatal(err)
		}
	}
	conn := rawConn(t)
	var names []string
	rows, err := conn.Query(ctx, `SELECT name FROM `+pgx.Identifier{schema}.Sanitize()+`.limits WHERE kind = 'signin' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if rows.Err() != nil || len(names) != 1 || names[0] != "10.0.0.1" {
		t.Fatalf("sign-in buckets left after a sweep: %v, %v; want only 10.0.0.1 (not full again)", names, rows.Err())
	}
	if left, err := a.TokensLeft(ctx, "signin", "10.0.0.2", 1000, 1); err != nil || left != 1 {
		t.Fatalf("a swept bucket: %v, %v, want full", left, err)
	}
}
