package ui_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

type wsMsg struct {
	Type  string        `json:"type"`
	Event *ledger.Event `json:"event"`
	ID    string        `json:"id"`
	Op    string        `json:"op"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (b *bundle) dial(runID string, after uint64, header http.Header) (*websocket.Conn, *http.Response, error) {
	u := b.wsURL(fmt.Sprintf("/v1/runs/%s/ws?after=%d", runID, after))
	if header == nil {
		header = http.Header{"Authorization": {"Bearer " + testToken}}
	}
	return b.dialer().Dial(u, header)
}

func (b *bundle) mustDial(runID string, after uint64) *websocket.Conn {
	b.t.Helper()
	c, resp, err := b.dial(runID, after, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		b.t.Fatalf("dial: %v (status %d)", err, status)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}

// read reads the next message within a deadline.
func read(t *testing.T, c *websocket.Conn) wsMsg {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var m wsMsg
	if err := c.ReadJSON(&m); err != nil {
		t.Fatalf("reading: %v", err)
	}
	return m
}

// collect reads events until stop says so, checking that sequence numbers
// follow each other from after+1, and returns them. Acks are returned too.
func collect(t *testing.T, c *websocket.Conn, after uint64, stop func(ledger.Event) bool, acks chan<- wsMsg) []ledger.Event {
	t.Helper()
	var evs []ledger.Event
	next := after + 1
	for {
		m := read(t, c)
		switch m.Type {
		case "event":
			if m.Event.Seq != next {
				t.Fatalf("event seq %d, want %d (gap or duplicate)", m.Event.Seq, next)
			}
			next++
			evs = append(evs, *m.Event)
			if stop(*m.Event) {
				return evs
			}
		case "ack", "error":
			if acks == nil {
				t.Fatalf("unexpected %s message %+v", m.Type, m)
			}
			acks <- m
		default:
			t.Fatalf("unknown message type %q", m.Type)
		}
	}
}

func isEnd(ev ledger.Event) bool {
	return ev.Type == "run.completed" || ev.Type == "run.failed" || ev.Type == "run.cancelled"
}

// The backlog, then live events, in order; reviewers approve over the socket
// and every message is acknowledged.
func TestWebSocketBacklogLiveAndReview(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "ws-1", "plan": onboardingPlan(t), "approve": "none"}, nil)
	c := b.mustDial("ws-1", 0)
	backlog := collect(t, c, 0, func(ev ledger.Event) bool { return ev.Type == "run.awaiting_approval" }, nil)
	if backlog[0].Type != "run.created" {
		t.Fatalf("first event %s", backlog[0].Type)
	}
	// A bad message gets a clear error; a good one an ack.
	if err := c.WriteJSON(map[string]any{"id": "m1", "op": "edit", "action": "contact", "args": map[string]any{"company": 1}}); err != nil {
		t.Fatal(err)
	}
	if m := read(t, c); m.Type != "error" || m.ID != "m1" || m.Error == nil || m.Error.Message == "" {
		t.Fatalf("invalid edit answered %+v", m)
	}
	if err := c.WriteJSON(map[string]any{"id": "m2", "op": "launch"}); err != nil {
		t.Fatal(err)
	}
	if m := read(t, c); m.Type != "error" || m.ID != "m2" || m.Error.Code != "bad_request" {
		t.Fatalf("unknown op answered %+v", m)
	}
	acks := make(chan wsMsg, 100)
	approve := func(id string) {
		if err := c.WriteJSON(map[string]any{"id": id, "op": "approve", "all": true}); err != nil {
			t.Fatal(err)
		}
	}
	approve("m3")
	last := backlog[len(backlog)-1].Seq
	// Approve again whenever the run waits (the email is shown again once
	// its reference resolves), until it completes.
	n := 4
	evs := collect(t, c, last, func(ev ledger.Event) bool {
		if ev.Type == "run.awaiting_approval" {
			approve(fmt.Sprintf("m%d", n))
			n++
		}
		return isEnd(ev)
	}, acks)
	if evs[len(evs)-1].Type != "run.completed" {
		t.Fatalf("last event %s", evs[len(evs)-1].Type)
	}
	close(acks)
	got := 0
	for m := range acks {
		if m.Type != "ack" || m.Op != "approve" {
			t.Fatalf("answer %+v", m)
		}
		got++
	}
	if got == 0 {
		t.Fatal("no ack for the approvals")
	}
}

// A subscriber that reconnects with after=SEQ misses nothing and sees
// nothing twice.
func TestWebSocketResumeAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "ws-2", "plan": onboardingPlan(t), "approve": "all"}, nil)
	var seen []ledger.Event
	var after uint64
	// Read a few events per connection, reconnecting each time.
	for !(len(seen) > 0 && isEnd(seen[len(seen)-1])) {
		c := b.mustDial("ws-2", after)
		k := 0
		evs := collect(t, c, after, func(ev ledger.Event) bool { k++; return k == 3 || isEnd(ev) }, nil)
		c.Close()
		seen = append(seen, evs...)
		after = seen[len(seen)-1].Seq
	}
	stored, err := b.led.Events(t.Context(), "ws-2", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(stored) {
		t.Fatalf("saw %d events across reconnects, the ledger has %d", len(seen), len(stored))
	}
	for i := range stored {
		if seen[i].Seq != stored[i].Seq || seen[i].Type != stored[i].Type {
			t.Fatalf("event %d: saw %d %s, stored %d %s", i, seen[i].Seq, seen[i].Type, stored[i].Seq, stored[i].Type)
		}
	}
}

func TestWebSocketRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.Origins = []string{"https://review.example.com"} }})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "ws-3", "plan": onboardingPlan(t), "approve": "none"}, nil)
	cases := []struct {
		name   string
		header http.Header
		status int
	}{
		{"no token", http.Header{}, http.StatusUnauthorized},
		{"wrong token", http.Header{"Authorization": {"Bearer not-the-token"}}, http.StatusUnauthorized},
		{"foreign origin", http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {"http://evil.example"}}, http.StatusForbidden},
	}
	for _, c := range cases {
		conn, resp, err := b.dial("ws-3", 0, c.header)
		if err == nil {
			conn.Close()
			t.Fatalf("%s: upgrade accepted", c.name)
		}
		if resp == nil || resp.StatusCode != c.status {
			t.Fatalf("%s: %v %+v, want status %d", c.name, err, resp, c.status)
		}
	}
	// The configured origin and the server's own are accepted.
	for _, o := range []string{"https://review.example.com", b.hs.URL} {
		conn, _, err := b.dial("ws-3", 0, http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {o}})
		if err != nil {
			t.Fatalf("origin %s refused: %v", o, err)
		}
		conn.Close()
	}
	if _, resp, err := b.dial("nope", 0, nil); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown run: %v", err)
	}
}

// A client that does not keep up is disconnected with a reason naming where
// to resume; resuming from there loses nothing.
func TestWebSocketSlowConsumer(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var once sync.Once
	b := setup(t, options{tune: func(c *ui.Config) { c.WSBuffer = 2; c.WSSlowAfter = 300 * time.Millisecond }})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "ws-4", "plan": onboardingPlan(t), "approve": "all"}, nil)
	b.waitStatus("ws-4", ledger.RunCompleted) // some 15 events stored
	entered := make(chan struct{})
	// Hold the first connection's writer on its first message.
	var held atomic.Bool
	b.srv.SetBeforeWrite(func() {
		if held.CompareAndSwap(false, true) {
			once.Do(func() { close(entered) })
			<-hold
		}
	})
	c := b.mustDial("ws-4", 0)
	<-entered
	// The writer is held on the first message; the pump fills the buffer of
	// two and, WSSlowAfter later, the server closes the connection.
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var closeErr *websocket.CloseError
	for {
		_, _, err := c.ReadMessage()
		if err != nil {
			if !errors.As(err, &closeErr) {
				t.Fatalf("read: %v, want a close frame", err)
			}
			break
		}
	}
	close(hold)
	if closeErr.Code != ui.CloseLagged || !strings.Contains(closeErr.Text, "after=0") {
		t.Fatalf("close %d %q, want %d naming after=0", closeErr.Code, closeErr.Text, ui.CloseLagged)
	}
	c2 := b.mustDial("ws-4", 0)
	evs := collect(t, c2, 0, isEnd, nil)
	if evs[0].Seq != 1 {
		t.Fatalf("resumed at %d", evs[0].Seq)
	}
}

// The server pings; a client message over the read limit closes the socket
// with "message too big".
func TestWebSocketPingAndReadLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.WSPing = 150 * time.Millisecond; c.WSReadLimit = 512 }})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "ws-5", "plan": onboardingPlan(t), "approve": "none"}, nil)
	c := b.mustDial("ws-5", 0)
	pings := make(chan struct{}, 10)
	c.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	done := make(chan error, 1)
	go func() {
		for {
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, _, err := c.ReadMessage(); err != nil {
				done <- err
				return
			}
		}
	}()
	for range 3 {
		select {
		case <-pings:
		case err := <-done:
			t.Fatalf("connection ended before 3 pings: %v", err)
		}
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"op":"approve","id":"`+strings.Repeat("x", 1000)+`"}`)); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
		t.Fatalf("after an oversized message: %v, want close 1009", err)
	}
}

// Many subscribers on one run all see every event once, in order.
func TestWebSocketManySubscribers(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "ws-6", "plan": onboardingPlan(t), "approve": "none"}, nil)
	const n = 20
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conns[i] = b.mustDial("ws-6", 0)
	}
	b.approveUntilDone("ws-6")
	stored, err := b.led.Events(t.Context(), "ws-6", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range stored {
				c.SetReadDeadline(time.Now().Add(20 * time.Second))
				var m wsMsg
				if err := c.ReadJSON(&m); err != nil {
					errs <- err
					return
				}
				if m.Event == nil || m.Event.Seq != stored[i].Seq {
					errs <- fmt.Errorf("message %d: %+v, want seq %d", i, m, stored[i].Seq)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// allRunsReader reads the all-runs stream c until an event of type typ of
// run runID, failing the test when a run's seqs skip or repeat.
func allRunsReader(t *testing.T, c *websocket.Conn) func(runID, typ string) {
	next := map[string]uint64{}
	return func(runID, typ string) {
		t.Helper()
		for {
			m := read(t, c)
			if m.Type != "event" {
				continue
			}
			ev := m.Event
			if ev.Seq != next[ev.RunID]+1 {
				t.Fatalf("run %s: seq %d after %d", ev.RunID, ev.Seq, next[ev.RunID])
			}
			next[ev.RunID] = ev.Seq
			if ev.RunID == runID && string(ev.Type) == typ {
				return
			}
		}
	}
}

// A client of the all-runs stream that creates a run as soon as its upgrade
// is answered sees every event of that run from its first, even when the
// server registers the socket only after the run's events were broadcast
// (the hook holds the registration back until another client saw them).
// Regression: they were lost, and a client could not know when it was safe
// to act.
func TestWebSocketAllRunsFromTheUpgradeAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	hdr := http.Header{"Authorization": {"Bearer " + testToken}}
	passed, held, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var upgrades atomic.Int32
	b.srv.SetAfterUpgrade(func() {
		switch upgrades.Add(1) {
		case 1: // the first client's
			close(passed)
		case 2: // the late client's
			close(held)
			<-release
		}
	})
	first, _, err := b.dialer().Dial(b.wsURL("/v1/ws"), hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first client's server side is past the hook before the late one
	// dials: the dial returns at the upgrade answer, and under load the late
	// client's hook could otherwise run first and hold the wrong socket.
	<-passed
	late, _, err := b.dialer().Dial(b.wsURL("/v1/ws"), hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	<-held
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "join-1", "plan": onboardingPlan(t), "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	allRunsReader(t, first)("join-1", "run.awaiting_approval") // broadcast, the late socket not registered yet
	close(release)
	allRunsReader(t, late)("join-1", "run.awaiting_approval") // from seq 1, in order
}

// The all-runs stream carries the live events of every run the server
// touches, in order per run, from a run's first event when it is created.
func TestWebSocketAllRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	c, _, err := b.dialer().Dial(b.wsURL("/v1/ws"), http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b.call("POST", "/v1/runs", map[string]any{"run_id": "all-1", "plan": onboardingPlan(t), "approve": "none"}, nil)
	readUntil := allRunsReader(t, c)
	readUntil("all-1", "run.awaiting_approval")
	// A review message names its run on this stream.
	if err := c.WriteJSON(map[string]any{"id": "x", "op": "approve", "all": true}); err != nil {
		t.Fatal(err)
	}
	for {
		m := read(t, c)
		if m.Type == "error" {
			if m.ID != "x" || m.Error == nil || !strings.Contains(m.Error.Message, "names its run") {
				t.Fatalf("error %+v", m)
			}
			break
		}
	}
	b.approveUntilDone("all-1")
	readUntil("all-1", "run.completed")
	// A second run, and a replay of the first (followed again from where the
	// stream left it).
	b.call("POST", "/v1/runs", map[string]any{"run_id": "all-2", "plan": onboardingPlan(t), "approve": "all"}, nil)
	readUntil("all-2", "run.completed")
	if code := b.call("POST", "/v1/runs/all-1/fork", map[string]any{"run_id": "all-3", "approve": "all"}, nil); code != http.StatusCreated {
		t.Fatalf("fork = %d", code)
	}
	readUntil("all-3", "run.completed")
}

// Shutdown closes WebSockets with "going away" and a reason.
func TestWebSocketClosedOnShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "ws-7", "plan": onboardingPlan(t), "approve": "none"}, nil)
	c := b.mustDial("ws-7", 0)
	collect(t, c, 0, func(ev ledger.Event) bool { return ev.Type == "run.awaiting_approval" }, nil)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		b.stop()
	}()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway || !strings.Contains(ce.Text, "after=") {
		t.Fatalf("on shutdown: %v, want close 1001 naming where to resume", err)
	}
	<-stopped
}
