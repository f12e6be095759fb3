package ui_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/ledger"
)

// Environment of the WebSocket load client (a child process: this test
// binary running TestLoadClient).
const (
	loadClientEnv = "DOCKET_WS_LOAD_CLIENT" // ws URL of the run's stream
	loadTokenEnv  = "DOCKET_WS_LOAD_TOKEN"
	loadConnsEnv  = "DOCKET_WS_LOAD_CONNS"
	loadEventsEnv = "DOCKET_WS_LOAD_EVENTS"
	loadAfterEnv  = "DOCKET_WS_LOAD_AFTER" // seq before the first measured event
	loadCertEnv   = "DOCKET_WS_LOAD_CERT"  // PEM of the server's certificate, over TLS
)

// loadResult is what the client process reports on stdout.
type loadResult struct {
	Conns    int     `json:"conns"`
	Received int64   `json:"received"`
	P50ms    float64 `json:"p50_ms"` // from the event's time (before its durable commit)
	P99ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	// from the producer's acknowledgement (the commit is durable): the
	// delivery latency of the service itself
	AckP50ms  float64 `json:"ack_p50_ms"`
	AckP99ms  float64 `json:"ack_p99_ms"`
	Lost      int     `json:"lost"` // connections that ended before the last event
	Duplicate int     `json:"duplicate"`
}

// TestLoadClient is the client side of BenchmarkWebSocketFanout, run in a
// child process; it does nothing in a normal test run.
func TestLoadClient(t *testing.T) {
	url := os.Getenv(loadClientEnv)
	if url == "" {
		t.Skip("only the client process of BenchmarkWebSocketFanout")
	}
	conns, _ := strconv.Atoi(os.Getenv(loadConnsEnv))
	events, _ := strconv.Atoi(os.Getenv(loadEventsEnv))
	after, _ := strconv.ParseUint(os.Getenv(loadAfterEnv), 10, 64)
	header := http.Header{"Authorization": {"Bearer " + os.Getenv(loadTokenEnv)}}
	d := *websocket.DefaultDialer
	if pem := os.Getenv(loadCertEnv); pem != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(pem)) {
			t.Fatalf("%s: no certificate", loadCertEnv)
		}
		d.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	cs := make([]*websocket.Conn, conns)
	for i := range cs {
		c, _, err := d.Dial(url, header)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		cs[i] = c
	}
	fmt.Println("READY")
	lat := make([][]float64, conns)
	recv := make([][]int64, conns) // receipt time (unix ns) per event index
	var res loadResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			last := uint64(0)
			l := make([]float64, 0, events)
			r := make([]int64, events)
			for len(l) < events {
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				var m struct { // only what the measure needs
					Type  string `json:"type"`
					Event *struct {
						Seq  uint64    `json:"seq"`
						Type string    `json:"type"`
						At   time.Time `json:"at"`
					} `json:"event"`
				}
				if err := c.ReadJSON(&m); err != nil {
					mu.Lock()
					res.Lost++
					mu.Unlock()
					break
				}
				if m.Event == nil || m.Event.Type != "action.attempt_failed" {
					continue
				}
				if m.Event.Seq <= last {
					mu.Lock()
					res.Duplicate++
					mu.Unlock()
					continue
				}
				last = m.Event.Seq
				now := time.Now()
				l = append(l, float64(now.Sub(m.Event.At).Microseconds())/1000)
				if k := m.Event.Seq - after - 1; k < uint64(events) {
					r[k] = now.UnixNano()
				}
			}
			lat[i] = l
			recv[i] = r
		}()
	}
	wg.Wait()
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.Conns = conns
	res.Received = int64(len(all))
	if len(all) > 0 {
		res.P50ms = all[len(all)/2]
		res.P99ms = all[len(all)*99/100]
		res.MaxMs = all[len(all)-1]
	}
	// The producer's acknowledgement times arrive on stdin once it is done.
	var acks []int64
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the acknowledgement times: %v", err)
	}
	if err := json.Unmarshal([]byte(line), &acks); err != nil || len(acks) != events {
		t.Fatalf("acknowledgement times: %v (%d)", err, len(acks))
	}
	var ack []float64
	for _, r := range recv {
		for k, at := range r {
			if at != 0 {
				ack = append(ack, float64(at-acks[k])/1e6)
			}
		}
	}
	slices.Sort(ack)
	if len(ack) > 0 {
		res.AckP50ms = ack[len(ack)/2]
		res.AckP99ms = ack[len(ack)*99/100]
	}
	b, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(b))
}

// rssKB reads a field (VmRSS, VmHWM) of this process's /proc status.
func rssKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkWebSocketFanout: 1,000 WebSocket subscribers (in a separate
// process) on one run receive 1,000 events appended at a steady 25 events/s (each a durable commit)
// (DOCKET_FANOUT=CONNS,EVENTS,RATE changes them).
// Reports delivery latency (event time to client receipt) p50/p99 and the
// server process's peak RSS. Run it with -benchtime=1x:
//
//	go test ./ui -run '^$' -bench WebSocketFanout -benchtime=1x
func BenchmarkWebSocketFanout(b *testing.B) {
	conns, events, rate := 1000, 1000, 25
	if v := os.Getenv("DOCKET_FANOUT"); v != "" { // CONNS,EVENTS,RATE
		fmt.Sscanf(v, "%d,%d,%d", &conns, &events, &rate)
	}
	bb := setupBench(b)
	runID := "load"
	if code := bb.call("POST", "/v1/runs", map[string]any{"run_id": runID, "plan": onboardingPlan(b), "approve": "none"}, nil); code != http.StatusCreated {
		b.Fatalf("create = %d", code)
	}
	after := uint64(0)
	evs, _ := bb.led.Events(context.Background(), runID, 0, 0)
	if len(evs) > 0 {
		after = evs[len(evs)-1].Seq
	}
	for i := 0; i < b.N; i++ {
		url := bb.wsURL(fmt.Sprintf("/v1/runs/%s/ws?after=%d", runID, after))
		cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestLoadClient$", "-test.v"}, clientFlags()...)...)
		cmd.Env = append(os.Environ(), loadClientEnv+"="+url, loadTokenEnv+"="+testToken, loadAfterEnv+"="+strconv.FormatUint(after, 10),
			loadConnsEnv+"="+strconv.Itoa(conns), loadEventsEnv+"="+strconv.Itoa(events))
		if c := bb.hs.Certificate(); c != nil {
			cmd.Env = append(cmd.Env, loadCertEnv+"="+string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})))
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		ready := false
		for !ready && sc.Scan() {
			ready = sc.Text() == "READY"
		}
		if !ready {
			cmd.Wait()
			b.Fatal("the client process did not connect")
		}
		b.ResetTimer()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		start := time.Now()
		acks := make([]int64, events)
		for k := range events {
			<-tick.C
			data, _ := json.Marshal(map[string]any{"bench": k})
			res, err := bb.led.Apply(context.Background(), ledger.Note(runID, "action.attempt_failed", "price", data))
			if err == nil {
				err = res[0].Err
			}
			if err != nil {
				b.Fatal(err)
			}
			acks[k] = time.Now().UnixNano()
		}
		tick.Stop()
		ackLine, _ := json.Marshal(acks)
		if _, err := stdin.Write(append(ackLine, '\n')); err != nil {
			b.Fatal(err)
		}
		var result loadResult
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
				json.Unmarshal([]byte(rest), &result)
			}
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("client process: %v", err)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if result.Received != int64(conns*events) || result.Lost > 0 || result.Duplicate > 0 {
			b.Fatalf("delivery: %+v, want %d events, none lost or twice", result, conns*events)
		}
		b.ReportMetric(result.AckP50ms, "after-commit-p50-ms")
		b.ReportMetric(result.AckP99ms, "after-commit-p99-ms")
		b.ReportMetric(result.P50ms, "from-event-p50-ms")
		b.ReportMetric(result.P99ms, "from-event-p99-ms")
		b.ReportMetric(result.MaxMs, "from-event-max-ms")
		b.ReportMetric(float64(rssKB("VmHWM"))/1024, "server-peak-RSS-MiB")
		b.ReportMetric(float64(result.Received)/elapsed.Seconds(), "deliveries/s")
		after += uint64(events)
	}
}

// BenchmarkGetRun200: GET /v1/runs/{id} of a 200-action run on loopback.
func BenchmarkGetRun200(b *testing.B) {
	bb := setupBench(b)
	actions := make([]map[string]any, 200)
	for i := range actions {
		a := map[string]any{"id": fmt.Sprintf("s%d", i), "tool": "settings_put",
			"args": map[string]any{"account": fmt.Sprintf("acct-%d", i), "settings": map[string]any{"plan": "pro", "seats": i}}}
		if i > 0 {
			a["depends_on"] = []string{fmt.Sprintf("s%d", i-1)}
		}
		actions[i] = a
	}
	if code := bb.call("POST", "/v1/runs", map[string]any{"run_id": "big", "plan": map[string]any{"goal": "200 settings", "actions": actions}, "approve": "all"}, nil); code != http.StatusCreated {
		b.Fatalf("create = %d", code)
	}
	bb.waitStatus("big", ledger.RunCompleted)
	client := bb.client()
	url := bb.hs.URL + "/v1/runs/big"
	b.ResetTimer()
	start := time.Now()
	b.SetParallelism(1)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			var doc struct {
				Actions []json.RawMessage `json:"actions"`
			}
			err = json.NewDecoder(resp.Body).Decode(&doc)
			io.Copy(io.Discard, resp.Body) // to EOF: the connection is reused
			resp.Body.Close()
			if err != nil || len(doc.Actions) != 200 {
				b.Errorf("answer: %v, %d actions", err, len(doc.Actions))
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// setupBench is setup for benchmarks (a *testing.B has the same helpers).
func setupBench(b *testing.B) *bundle {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	// The queues `docket serve` uses: 256 live events per subscription in
	// the ledger, the default WebSocket buffer.
	return setup(b, options{subBuffer: 256})
}

// clientFlags passes DOCKET_FANOUT_CLIENT_PROFILE on as the client's CPU
// profile path (to see where the client process spends its time).
func clientFlags() []string {
	if p := os.Getenv("DOCKET_FANOUT_CLIENT_PROFILE"); p != "" {
		return []string{"-test.cpuprofile=" + p}
	}
	return nil
}
