package badgerdb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

// TestSetToolsHash: an accepted tools change is durable (it survives a
// reopen), says so with one run.tools_changed event, and an identical repeat
// writes nothing.
func TestSetToolsHash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	l := openBadger(t, badgerdb.Config{Dir: dir})
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", ToolsHash: "sha256:old"}, p, nil); err != nil {
		t.Fatal(err)
	}
	apply := func(o ledger.Op) error {
		t.Helper()
		res, err := l.Apply(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Err
	}
	for i := 0; i < 2; i++ { // the second time is an identical repeat
		if err := apply(ledger.SetToolsHash("r", "sha256:new")); err != nil {
			t.Fatalf("SetToolsHash #%d: %v", i+1, err)
		}
	}
	if err := apply(ledger.SetToolsHash("nope", "sha256:new")); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	if err := apply(ledger.SetToolsHash("r", "")); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("empty hash: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openBadger(t, badgerdb.Config{Dir: dir})
	run, err := l.GetRun(ctx, "r")
	if err != nil || run.ToolsHash != "sha256:new" {
		t.Fatalf("after reopen: %+v %v", run, err)
	}
	evs, err := l.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var changed []ledger.Event
	for _, e := range evs {
		if e.Type == "run.tools_changed" {
			changed = append(changed, e)
		}
	}
	if len(changed) != 1 || string(changed[0].Data) != `{"from":"sha256:old","to":"sha256:new"}` {
		t.Fatalf("run.tools_changed events: %+v", changed)
	}
}
