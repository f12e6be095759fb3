package mcpserve_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor/mcpserve"
)

// BenchmarkMCPCall measures one tools/call through docket mcp (streamable
// HTTP, go-sdk client, Badger ledger with synced commits) against the HTTP
// world: a new keyed charge per call (recorded, claimed, called, outcome
// recorded), an identical repeat (the recorded outcome, no request), and
// the same charge sent straight to the world, for comparison.
func BenchmarkMCPCall(b *testing.B) {
	bb := setup(b, opts{})
	cs := bb.client(b, nil)
	ctx := context.Background()
	b.Run("new keyed call", func(b *testing.B) {
		for i := range b.N {
			r, err := call(ctx, cs, "charge", map[string]any{"customer": "c", "amount": i}, mcp.Meta{mcpserve.MetaIdempotencyKey: fmt.Sprintf("bench-%d-%d", b.N, i)})
			if err != nil || r.IsError {
				b.Fatal(err, r)
			}
		}
	})
	b.Run("identical repeat", func(b *testing.B) {
		args := map[string]any{"customer": "c", "amount": 1}
		if r, err := call(ctx, cs, "charge", args, nil); err != nil || r.IsError {
			b.Fatal(err, r)
		}
		b.ResetTimer()
		for range b.N {
			if r, err := call(ctx, cs, "charge", args, nil); err != nil || r.IsError {
				b.Fatal(err, r)
			}
		}
	})
	b.Run("direct HTTP (no docket)", func(b *testing.B) {
		for i := range b.N {
			req, _ := http.NewRequest("POST", bb.world.URL+"/charges", strings.NewReader(fmt.Sprintf(`{"customer":"c","amount":%d}`, i)))
			req.Header.Set("Idempotency-Key", fmt.Sprintf("direct-%d-%d", b.N, i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
	})
}
