package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/ledger/postgres/pgtest"
	"github.com/docketrun/docket/plan"
)

// BenchmarkStepExecMode measures what sending queries without named
// prepared statements costs (pgx's cache_describe, the mode a Store uses
// behind a pooler in transaction mode) against the default statement
// cache, on a direct connection, and the same through PgBouncer: one step
// is a claim then its outcome, two durable commits, sequential and 16 in
// flight.
//
//	go test ./ledger/postgres -run '^$' -bench StepExecMode -benchtime 2000x
func BenchmarkStepExecMode(b *testing.B) {
	url := database(b)
	bouncer := pgtest.StartBouncer(b, pg.Get(b), pgtest.BouncerOptions{})
	for _, tc := range []struct{ name, mode string }{
		{"direct/cache_statement", "cache_statement"},
		{"direct/cache_describe", "cache_describe"},
		{"pgbouncer/cache_describe", ""},
	} {
		for _, inflight := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/inflight=%d", tc.name, inflight), func(b *testing.B) {
				u := url + "&default_query_exec_mode=" + tc.mode
				if tc.mode == "" {
					u = bouncer.Rewrite(url)
				}
				ctx := context.Background()
				s := open(b, postgres.Config{URL: u, Schema: schemaFor(fmt.Sprintf("%s-%d-%d", b.Name(), b.N, time.Now().UnixNano())), MaxConns: max(8, inflight)})
				per := (b.N + inflight - 1) / inflight
				for w := range inflight {
					p := &plan.Plan{Goal: "bench"}
					for i := range per {
						p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
					}
					if _, _, err := s.CreateRun(ctx, ledger.Run{ID: fmt.Sprintf("w%d", w), Policy: "all"}, p, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for w := range inflight {
					n := min(per, b.N-per*w)
					wg.Go(func() {
						run := fmt.Sprintf("w%d", w)
						for i := range max(n, 0) {
							id := fmt.Sprintf("a%d", i)
							args := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
							k, _ := plan.Key(run, id, "t", args)
							if _, err := ledger.ApplyOne(ctx, s, ledger.Claim(run, id, "t", k, args, 1)); err != nil {
								b.Error(err)
								return
							}
							if _, err := ledger.ApplyOne(ctx, s, ledger.Succeed(k, 1, json.RawMessage(`{"ok":true}`))); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "steps/s")
			})
		}
	}
}
