package postgres_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// A node alone on its ledger sends no NOTIFY (nobody else listens); once
// another node is up (its hello tells the first at once), commits notify
// again.
func TestNotifyOnlyWithPeers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir())
	a := open(t, postgres.Config{Schema: schema})
	if n := a.Peers(); n != 0 {
		t.Fatalf("a alone knows %d peers", n)
	}
	// A bare listener: not a node, so a does not notify it.
	raw := rawConn(t)
	if _, err := raw.Exec(ctx, "LISTEN "+pgx.Identifier{"docket_events_" + schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}
	if _, _, err := a.CreateRun(ctx, ledger.Run{ID: "alone"}, p, nil); err != nil {
		t.Fatal(err)
	}

	b := open(t, postgres.Config{Schema: schema})
	if n := b.Peers(); n != 1 {
		t.Fatalf("b knows %d peers, want 1 (a)", n)
	}
	waitFor(t, "a to hear b's hello", func() bool { return a.Peers() == 1 })
	if _, _, err := a.CreateRun(ctx, ledger.Run{ID: "seen"}, p, nil); err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in the order they were sent: the first one for
	// a run is the second run's (the first run's was never sent).
	for {
		n, err := raw.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			RunID string `json:"r"`
		}
		if err := json.Unmarshal([]byte(n.Payload), &m); err != nil {
			t.Fatal(err)
		}
		if m.RunID == "" {
			continue // b's hello
		}
		if m.RunID != "seen" {
			t.Fatalf("a notified run %q while it was alone", m.RunID)
		}
		break
	}
}
