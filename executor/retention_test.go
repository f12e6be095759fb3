package executor

import (
	"context"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// A keyed tool's key_ttl keeps its run in the ledger after the run ended:
// the executor passes it with the claim, and the collector keeps the run
// until the key's first claim plus key_ttl, even past the retention. A
// keyed tool without key_ttl and the other classes do not extend it; the
// run's own retention (RunOptions.Retention) is stored with it.
func TestKeyTTLKeepsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	keyed := spec("k", tools.Keyed)
	keyed.KeyTTL = 48 * time.Hour
	b.useTools(nil, b.world.Tool(keyed), b.world.Tool(spec("i", tools.Idempotent)))
	ctx := context.Background()
	for _, tc := range []struct {
		run, tool string
		opts      RunOptions
	}{
		{"keyed", "k", RunOptions{Policy: PolicyAll}},
		{"plain", "i", RunOptions{Policy: PolicyAll, Retention: 3 * time.Hour}},
	} {
		doc, err := b.eng.Run(ctx, tc.run, mkPlan(t, pa("a", tc.tool, `{"n":1}`)), &tc.opts)
		if err != nil {
			t.Fatalf("Run(%s): %v", tc.run, err)
		}
		wantStatus(t, doc, ledger.RunCompleted)
	}
	if r, _ := b.led.GetRun(ctx, "plain"); time.Duration(r.Retention) != 3*time.Hour {
		t.Fatalf("the run's own retention = %v, want 3h", r.Retention)
	}
	c := b.led.(ledger.Collector)
	present := func(id string) bool {
		_, err := b.led.GetRun(ctx, id)
		return err == nil
	}
	b.clock.Advance(2 * time.Hour)
	rep, err := c.Collect(ctx, ledger.CollectOptions{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 0 || rep.Kept != 1 || !present("keyed") || !present("plain") {
		t.Fatalf("after 2h with a retention of 1h: %+v; want the keyed run kept by its key, the other by its own 3h", rep)
	}
	b.clock.Advance(2 * time.Hour)
	if rep, err = c.Collect(ctx, ledger.CollectOptions{Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 1 || present("plain") || !present("keyed") {
		t.Fatalf("after 4h: %+v; want only the run past its own retention deleted", rep)
	}
	b.clock.Advance(45 * time.Hour)
	if rep, err = c.Collect(ctx, ledger.CollectOptions{Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 1 || present("keyed") {
		t.Fatalf("past the key's 48h: %+v; want the keyed run deleted", rep)
	}
}
