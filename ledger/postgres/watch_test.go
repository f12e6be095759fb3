package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// watchRun creates run "r" (one action) through a and subscribes to it
// through b. expect waits for the run's events up to seq upto, in order
// and each once, failing after 30s without the next one (why says what
// that would mean).
func watchRun(ctx context.Context, t *testing.T, a, b *postgres.Store) (expect func(upto uint64, why string)) {
	t.Helper()
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}
	if _, _, err := a.CreateRun(ctx, ledger.Run{ID: "r"}, p, nil); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	next := uint64(1)
	return func(upto uint64, why string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for next <= upto {
			select {
			case ev, ok := <-sub.C:
				if !ok {
					t.Fatalf("subscription ended: %v", sub.Err())
				}
				if ev.Seq != next {
					t.Fatalf("got seq %d, want %d", ev.Seq, next)
				}
				next++
			case <-timeout:
				t.Fatalf("seq %d did not arrive within 30s%s", next, why)
			}
		}
	}
}
