package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// hideDocApplier is the store without its ApplyDoc: the executor reads the
// finished run's document with Doc, after the commit that completed it.
type hideDocApplier struct{ ledger.Store }

// An engine's Run on the shared ledger returns the run's document as the
// commit that completed it left it (read in that commit's round trip): the
// same document a Doc read after it returns, and one round trip fewer than
// a run whose store does not read it with the commit.
func TestRunReturnsTheDocumentOfItsLastCommit(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name())})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	world := tooltest.NewWorld()
	reg, err := tools.NewRegistry(world.Tool(tools.Spec{Name: "pay", Class: tools.Keyed}))
	if err != nil {
		t.Fatal(err)
	}
	// A chain (the last action's outcome completes the run), a diamond and
	// a fan of actions that finish together (the run's status may be set
	// on its own). The chain's commits are the same every time: its round
	// trips are compared.
	chain, err := plan.Decode([]byte(`{"goal":"chain","actions":[
		{"id":"a","tool":"pay","args":{"n":9}},
		{"id":"b","tool":"pay","args":{"n":10},"depends_on":["a"]},
		{"id":"c","tool":"pay","args":{"n":11},"depends_on":["b"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	diamond, err := plan.Decode([]byte(`{"goal":"diamond","actions":[
		{"id":"a","tool":"pay","args":{"n":1}},
		{"id":"b","tool":"pay","args":{"n":2},"depends_on":["a"]},
		{"id":"c","tool":"pay","args":{"n":3},"depends_on":["a"]},
		{"id":"d","tool":"pay","args":{"n":4},"depends_on":["b","c"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	fan, err := plan.Decode([]byte(`{"goal":"fan","actions":[
		{"id":"a","tool":"pay","args":{"n":5}},
		{"id":"b","tool":"pay","args":{"n":6}},
		{"id":"c","tool":"pay","args":{"n":7}},
		{"id":"d","tool":"pay","args":{"n":8}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	run := func(l ledger.Store, id string, p *plan.Plan) (ledger.RunDoc, int64) {
		t.Helper()
		e, err := executor.New(executor.Config{Ledger: l, Tools: reg, Logger: quiet, Clock: s})
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int64
		doc, err := e.Run(postgres.CountTrips(context.Background(), &n), id, p, &executor.RunOptions{Policy: executor.PolicyAll})
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		if doc.Run.Status != ledger.RunCompleted {
			t.Fatalf("run %s: %s", id, doc.Run.Status)
		}
		read, err := s.Doc(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(doc, read) {
			t.Fatalf("run %s: Run's document differs from Doc's read after it:\n got  %+v\n want %+v", id, doc, read)
		}
		return doc, n.Load()
	}
	// Run ids of their own (the schema outlives the test: -count).
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, p := range []*plan.Plan{chain, diamond, fan} {
		withDoc, trips := run(s, p.Goal+"-with-"+suffix, p)
		_, tripsAfter := run(hideDocApplier{s}, p.Goal+"-after-"+suffix, p)
		t.Logf("%s: round trips of the run: %d with the document in the last commit, %d reading it after", p.Goal, trips, tripsAfter)
		if p == chain && trips != tripsAfter-1 {
			t.Errorf("%s: round trips: %d with the document in the last commit, %d reading it after; want one fewer", p.Goal, trips, tripsAfter)
		}
		for _, a := range withDoc.Actions {
			if a.Status != ledger.StatusSucceeded || len(a.Output) == 0 {
				t.Errorf("%s: action %s: %s, output %s", p.Goal, a.ID, a.Status, a.Output)
			}
		}
	}
	if keys, dups := world.Keys(), world.Duplicates(); len(keys) != 22 || len(dups) != 0 {
		t.Errorf("six runs of 3, 4 and 4 actions took effect under %d keys, duplicates %v; want 22 and none", len(keys), dups)
	}
}
