package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The figures of README "Past one machine": docket serve nodes on one
// PostgreSQL database (a throwaway cluster on this machine).
//
//	go test -run '^$' -bench 'Nodes' -benchtime 1x ./cmd/docket/
//
// BenchmarkNodesThroughput: runs of four keyed HTTP actions (a loopback
// provider that answers at once), 16 in flight, submitted round-robin to 1,
// 2 and 3 nodes; each client waits for its run on the node it submitted to.
// Reports actions/s and the run latency (submit to completed) p50/p99.
//
// BenchmarkNodesTakeover: three nodes with --lease 2s; 20 times a run's
// only action is in flight on a node (the provider holds the call), the
// node is SIGKILLed, and the time from the kill to the provider receiving
// the action again, claimed and sent by another node, is measured (then
// the node starts again). Reports p50/p99 and the lease.

// benchProvider is a loopback payments API. A charge whose reference
// starts with "hold-" is held on its first request (announced on first)
// until the caller goes away; every other request answers at once, and a
// second request for a held reference is announced on again.
type benchProvider struct {
	srv     *httptest.Server
	mu      sync.Mutex
	effects map[string]int // Idempotency-Key → charges
	seen    map[string]int // reference → requests
	first   chan string
	again   chan string
}

func newBenchProvider(tb testing.TB) *benchProvider {
	p := &benchProvider{effects: map[string]int{}, seen: map[string]int{}, first: make(chan string, 64), again: make(chan string, 64)}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reference string `json:"reference"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &body) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		p.mu.Lock()
		p.seen[body.Reference]++
		n := p.seen[body.Reference]
		p.mu.Unlock()
		if strings.HasPrefix(body.Reference, "hold-") {
			if n == 1 {
				p.first <- body.Reference
				<-r.Context().Done()
				return
			}
			p.again <- body.Reference
		}
		p.mu.Lock()
		p.effects[key]++
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id": "ch_%s"}`, key[:min(12, len(key))])
	}))
	tb.Cleanup(p.srv.Close)
	return p
}

func (p *benchProvider) toolsFile(tb testing.TB) string {
	tb.Helper()
	tools := fmt.Sprintf(`{"version": 1, "tools": [{
  "name": "charge", "description": "Charge; deduplicated by Idempotency-Key.", "effect": "keyed",
  "input_schema": {"type": "object", "properties": {"reference": {"type": "string"}, "amount": {"type": "integer"}},
                   "required": ["reference", "amount"], "additionalProperties": false},
  "request": {"method": "POST", "url": %q}, "key_header": "Idempotency-Key", "key_ttl": "24h", "timeout": "60s"}]}`, p.srv.URL+"/charges")
	path := filepath.Join(tb.TempDir(), "tools.json")
	if err := os.WriteFile(path, []byte(tools), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

func (p *benchProvider) duplicates() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := 0
	for _, n := range p.effects {
		d += max(0, n-1)
	}
	return d
}

// benchLedger is a new database on the package's cluster.
func benchLedger(b *testing.B) string {
	b.Helper()
	u, err := sharedPG.Get(b).CreateDatabase(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// benchCall sends one request and decodes the Run JSON's status.
func benchCall(client *http.Client, method, url, token, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var doc struct {
		Status string `json:"status"`
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	return resp.StatusCode, doc.Status, nil
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func BenchmarkNodesThroughput(b *testing.B) {
	const (
		runs     = 160
		actions  = 4
		inFlight = 16
		token    = "bench-nodes-token-0123456789"
	)
	for _, nodes := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			p := newBenchProvider(b)
			args := []string{"--ledger", benchLedger(b), "--tools", p.toolsFile(b), "--token", token, "--rate", "0", "--max-sockets", "0"}
			var srv []*servedChild
			for range nodes {
				srv = append(srv, startServeChildEnv(b, os.Environ(), args...))
			}
			client := &http.Client{Timeout: 3 * time.Minute}
			one := func(id string, node int) (time.Duration, error) {
				var acts []string
				for i := range actions {
					acts = append(acts, fmt.Sprintf(`{"id": "a%d", "tool": "charge", "args": {"reference": "%s-%d", "amount": 5}}`, i, id, i))
				}
				body := fmt.Sprintf(`{"run_id": %q, "approve": "all", "plan": {"goal": "bench", "actions": [%s]}}`, id, strings.Join(acts, ","))
				t0 := time.Now()
				base := srv[node].base
				if code, _, err := benchCall(client, "POST", base+"/v1/runs", token, body); err != nil || code != http.StatusCreated {
					return 0, fmt.Errorf("POST %s: %d %v", id, code, err)
				}
				code, st, err := benchCall(client, "GET", base+"/v1/runs/"+id+"?wait=2m", token, "")
				if err != nil || code != http.StatusOK || st != "completed" {
					return 0, fmt.Errorf("GET %s: %d %s %v", id, code, st, err)
				}
				return time.Since(t0), nil
			}
			for i := range inFlight { // warm-up: connections, plans cached, tables warm
				if _, err := one(fmt.Sprintf("warm-%d", i), i%nodes); err != nil {
					b.Fatal(err)
				}
			}
			var lat []time.Duration
			var elapsed time.Duration
			b.ResetTimer()
			for iter := range b.N {
				var mu sync.Mutex
				var wg sync.WaitGroup
				next := make(chan int)
				errs := make(chan error, inFlight)
				t0 := time.Now()
				for range inFlight {
					wg.Go(func() {
						for i := range next {
							d, err := one(fmt.Sprintf("run-%d-%d", iter, i), i%nodes)
							if err != nil {
								errs <- err
								return
							}
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
					})
				}
				for i := range runs {
					next <- i
				}
				close(next)
				wg.Wait()
				elapsed += time.Since(t0)
				select {
				case err := <-errs:
					b.Fatal(err)
				default:
				}
			}
			b.StopTimer()
			if d := p.duplicates(); d != 0 {
				b.Fatalf("%d duplicate charges", d)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(runs*actions*b.N)/elapsed.Seconds(), "actions/s")
			b.ReportMetric(float64(runs*b.N)/elapsed.Seconds(), "runs/s")
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}

func BenchmarkNodesTakeover(b *testing.B) {
	const (
		kills = 20
		lease = 2 * time.Second
		token = "bench-takeover-token-0123456789"
	)
	p := newBenchProvider(b)
	args := []string{"--ledger", benchLedger(b), "--tools", p.toolsFile(b), "--token", token, "--rate", "0", "--lease", lease.String()}
	srv := []*servedChild{startServeChildEnv(b, os.Environ(), args...), startServeChildEnv(b, os.Environ(), args...), startServeChildEnv(b, os.Environ(), args...)}
	client := &http.Client{Timeout: time.Minute}
	var took []time.Duration
	b.ResetTimer()
	for iter := range b.N {
		for k := range kills {
			victim := k % len(srv)
			ref := fmt.Sprintf("hold-%d-%d", iter, k)
			body := fmt.Sprintf(`{"run_id": %q, "approve": "all", "plan": {"goal": "takeover", "actions": [
				{"id": "pay", "tool": "charge", "args": {"reference": %q, "amount": 5}}]}}`, ref, ref)
			if code, _, err := benchCall(client, "POST", srv[victim].base+"/v1/runs", token, body); err != nil || code != http.StatusCreated {
				b.Fatalf("POST %s: %d %v", ref, code, err)
			}
			select {
			case got := <-p.first:
				if got != ref {
					b.Fatalf("the provider got %s first, want %s", got, ref)
				}
			case <-time.After(time.Minute):
				b.Fatalf("the call of %s never reached the provider", ref)
			}
			t0 := time.Now()
			if err := srv[victim].cmd.Process.Kill(); err != nil {
				b.Fatal(err)
			}
			select {
			case got := <-p.again:
				took = append(took, time.Since(t0))
				if got != ref {
					b.Fatalf("the provider got %s again, want %s", got, ref)
				}
			case <-time.After(time.Minute):
				b.Fatalf("no other node took %s over within a minute", ref)
			}
			srv[victim] = startServeChildEnv(b, os.Environ(), args...)
		}
	}
	b.StopTimer()
	if d := p.duplicates(); d != 0 {
		b.Fatalf("%d duplicate charges", d)
	}
	slices.Sort(took)
	b.ReportMetric(float64(len(took)), "kills")
	b.ReportMetric(lease.Seconds(), "lease-s")
	b.ReportMetric(percentile(took, 0.5).Seconds(), "p50-s")
	b.ReportMetric(percentile(took, 0.99).Seconds(), "p99-s")
	b.ReportMetric(took[0].Seconds(), "min-s")
}
