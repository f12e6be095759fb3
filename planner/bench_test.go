package planner_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/planner"
)

// zeroLatency is a fake model without a network: it answers each request at
// once with the next of its scripted bodies (cycling), so a benchmark measures
// the planner's own time (and go-openai's encoding), not the model's.
type zeroLatency struct {
	bodies [][]byte
	n      atomic.Int64
}

func (z *zeroLatency) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	b := z.bodies[int(z.n.Add(1)-1)%len(z.bodies)]
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: r}, nil
}

// BenchmarkPlan plans n actions: the model queues them in one message (half
// of them referencing an earlier read-only lookup's values, half plain), then
// closes with a summary. Two model turns per plan.
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1, 20, 200} {
		b.Run(fmt.Sprintf("actions=%d", n), func(b *testing.B) {
			reg, _, _, _, _ := registry(b)
			calls := make([]call, n)
			for i := range calls {
				calls[i] = call{fmt.Sprintf("call_%d", i), "crm_create_contact",
					fmt.Sprintf(`{"name":"Person %d","email":"p%d@example.com","note":null,"tags":[{"label":"batch","color":null}]}`, i, i)}
			}
			z := &zeroLatency{bodies: [][]byte{[]byte(toolCalls("", calls...).body), []byte(text("Queued.").body)}}
			p, err := planner.New(planner.Config{
				BaseURL: "http://model.invalid/v1", APIKey: testKey, Model: "gpt-test", Tools: reg,
				HTTPClient: &http.Client{Transport: z},
				Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			var model time.Duration
			start, cpu0 := time.Now(), cpuTime()
			for b.Loop() {
				res, err := p.Plan(ctx, planner.Request{Goal: "add the people"})
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Plan.Actions) != n || !strings.HasPrefix(res.Plan.ID, "plan_") {
					b.Fatalf("%d actions", len(res.Plan.Actions))
				}
				model += res.ModelTime
			}
			// own-ns/op: the planning's time minus the time inside the model
			// requests (go-openai's encoding and decoding and the in-process
			// transport): the planner's own overhead.
			total, cpu := time.Since(start), cpuTime()-cpu0
			// cpu-ns/op: CPU time of the whole process per plan (the planner,
			// go-openai and the fake transport, GC included); unlike the wall
			// clock it does not grow when other processes load the machine.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64((total-model).Nanoseconds())/float64(b.N), "own-ns/op")
			b.ReportMetric(float64(model.Nanoseconds())/float64(b.N), "model-ns/op")
		})
	}
}
