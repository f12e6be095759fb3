package executor

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// BenchmarkWakeLatency measures how late a timer fires: 200 runs on a
// Badger ledger with the real clock, each with one action due 2s from now
// plus 5ms per run, are recorded and left waiting; a loop like docket
// serve's (one timer on the earliest wake time, Engine.WakeDue) wakes
// them. Latency is the action's first claim (the ledger's record) minus its
// due time; p50 and p99 over the runs, in milliseconds.
//
//	go test ./executor -run '^$' -bench WakeLatency -benchtime=1x
func BenchmarkWakeLatency(b *testing.B) {
	const runs = 200
	for range b.N {
		ctx := context.Background()
		l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: b.TempDir(), Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		w := tooltest.NewWorld()
		reg, err := tools.NewRegistry(w.Tool(spec("send", tools.Idempotent)))
		if err != nil {
			b.Fatal(err)
		}
		e, err := New(Config{Ledger: l, Tools: reg, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		first := time.Now().Add(2 * time.Second)
		due := map[string]time.Time{}
		for i := range runs {
			id := fmt.Sprintf("r%03d", i)
			at := first.Add(time.Duration(i) * 5 * time.Millisecond).UTC()
			a := pa("send", "send", fmt.Sprintf(`{"i":%d}`, i))
			a.NotBefore = at.Format(time.RFC3339Nano)
			due[id] = at
			doc, err := e.Run(ctx, id, &plan.Plan{Goal: "later", Actions: []plan.Action{a}}, &RunOptions{Policy: PolicyAll})
			if err != nil || doc.Run.WakeAt.IsZero() {
				b.Fatalf("run %s: %v, waiting until %s", id, err, doc.Run.WakeAt)
			}
		}
		for {
			next, err := e.WakeDue(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if next.IsZero() {
				break
			}
			time.Sleep(time.Until(next))
		}
		var lat []time.Duration
		for id, at := range due {
			doc, err := l.Doc(ctx, id)
			if err != nil || doc.Run.Status != ledger.RunCompleted {
				b.Fatalf("run %s: %v %s", id, err, doc.Run.Status)
			}
			rec, err := l.Key(ctx, doc.Actions[0].Key)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, rec.FirstClaimedAt.Sub(at))
		}
		slices.Sort(lat)
		if lat[0] < 0 {
			b.Fatalf("a timer fired %s early", -lat[0])
		}
		b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
		l.Close()
	}
}
