package ui_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/docketrun/docket/executor/schedule"
)

// BenchmarkSchedulerJitter measures how late a slot's run is created: a
// schedule every second on a Badger ledger with the real clock, from each
// slot to its run's created_at, for 20 slots (run with -benchtime=1x; the
// measurement takes about 20s whatever b.N is).
func BenchmarkSchedulerJitter(b *testing.B) {
	bd := setup(b, options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := bd.srv.RunScheduler(ctx, 0); err != nil {
			b.Error(err)
		}
	}()
	defer func() { cancel(); <-done }()
	var view struct {
		CreatedAt time.Time `json:"created_at"`
	}
	if st := bd.call("POST", "/v1/schedules", map[string]any{"id": "jitter", "spec": "every 1s", "plan": invoicePlan("jitter")}, &view); st != 201 {
		b.Fatalf("POST /v1/schedules = %d", st)
	}
	const slots = 20
	first := view.CreatedAt.Truncate(time.Second).Add(time.Second)
	var lateness []time.Duration
	for i := range slots {
		slot := first.Add(time.Duration(i) * time.Second)
		id := schedule.RunID("jitter", slot)
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := bd.led.GetRun(ctx, id)
			if err == nil {
				lateness = append(lateness, r.CreatedAt.Sub(slot))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("slot %v: no run %s: %v", slot, id, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	slices.Sort(lateness)
	p := func(q float64) float64 {
		return float64(lateness[int(q*float64(len(lateness)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(p(0.5), "slot-to-run-p50-ms")
	b.ReportMetric(p(0.99), "slot-to-run-p99-ms")
	b.ReportMetric(float64(slots), "slots")
}
