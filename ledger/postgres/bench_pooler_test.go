package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/ledger/postgres/pgtest"
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
				s := open(b, postgres.Config{URL: u, Schema: schemaFor(fmt.Sprintf("%s-%d-%d", b.Name(), b.N, time.Now().UnixNano())), MaxConns: max(8, inflight)})
				benchSteps(b, s, inflight)
			})
		}
	}
}
