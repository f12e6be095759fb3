package postgres

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// countingTrips installs tripTracer in every Store opened after it is set:
// the package's tests set it (export_test.go); a Store in production pays
// nothing per statement for it.
var countingTrips bool

// tripsKey is the context key of a round-trip counter (countTrips).
type tripsKey struct{}

// countTrips returns ctx with a counter of the round trips that statements
// run with it (or a context made from it) make: a statement outside a
// batch is one, a batch is one. Preparing a statement the first time a
// connection runs it is not counted (once per statement and connection).
func countTrips(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, tripsKey{}, n)
}

// tripTracer counts round trips for contexts made by countTrips.
type tripTracer struct{}

func count(ctx context.Context) {
	if n, ok := ctx.Value(tripsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}

func (tripTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	count(ctx)
	return ctx
}

func (tripTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tripTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	count(ctx)
	return ctx
}

func (tripTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (tripTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
