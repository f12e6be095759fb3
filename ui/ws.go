package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/ledger"
)

// CloseLagged is the WebSocket close code sent to a client that fell behind
// (its bounded buffer filled up). The close reason says which sequence to
// resume after; nothing is lost: reconnect with ?after=<last seq received>.
const CloseLagged = 4000

// Message is what the server sends on a WebSocket, one JSON object per
// frame: "event" (Event is set), "ack" (ID echoes the client's id), "error"
// (ID and Error are set).
type Message struct {
	Type  string        `json:"type"`
	Event *ledger.Event `json:"event,omitempty"`
	ID    string        `json:"id,omitempty"`
	Op    string        `json:"op,omitempty"`
	Error *apiError     `json:"error,omitempty"`
}

type outMsg struct {
	b   []byte
	seq uint64 // the event's seq, 0 for acks and errors
}

// socket is one WebSocket client watching one run.
type socket struct {
	s       *Server
	conn    *websocket.Conn
	runID   string
	who     ledger.Approver // the caller, with its token's groups
	p       principal       // the token's name and scopes, for each op
	release func()          // gives back the token's socket slot
	out     chan outMsg
	done    chan struct{}
	once    sync.Once
	cancel  context.CancelFunc
	lastOut atomic.Uint64 // seq of the last event written to the client
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	after, ok := parseAfter(w, r)
	if !ok {
		return
	}
	if _, err := s.led.GetRun(r.Context(), runID); err != nil {
		s.fail(w, err)
		return
	}
	if !s.afterKnown(w, r, runID, after) {
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		writeError(w, http.StatusBadRequest, "bad_request", "this endpoint is a WebSocket: send an upgrade request", nil)
		return
	}
	if !s.originAllowed(r) {
		writeError(w, http.StatusForbidden, "bad_origin", "WebSocket upgrades are accepted from the service's own origin and the configured ones only", nil)
		return
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		writeError(w, http.StatusServiceUnavailable, "shutting_down", errShuttingDown.Error(), nil)
		return
	}
	p, release, ok := s.claimSocket(w, r)
	if !ok {
		return
	}
	conn, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		release()
		return // the upgrader answered
	}
	ctx, cancel := context.WithCancel(s.ctx)
	sub, err := s.led.Subscribe(ctx, runID, after)
	if err != nil {
		release()
		cancel()
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseInternalServerErr, "subscribing failed"), time.Now().Add(time.Second))
		conn.Close()
		return
	}
	c := &socket{s: s, conn: conn, runID: runID, who: approver(r), p: p, release: release, out: make(chan outMsg, s.cfg.WSBuffer), done: make(chan struct{}), cancel: cancel}
	c.lastOut.Store(after)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		release()
		sub.Close()
		cancel()
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down"), time.Now().Add(time.Second))
		conn.Close()
		return
	}
	s.sockets[c] = struct{}{}
	s.socketWG.Add(3)
	s.mu.Unlock()
	s.metrics.subscribers.Add(1)
	go c.pump(sub)
	go c.write()
	go c.read(ctx)
}

// close ends the socket once, telling the client why.
func (c *socket) close(code int, reason string) {
	c.once.Do(func() {
		if len(reason) > 120 {
			reason = reason[:120]
		}
		c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
		c.conn.Close()
		close(c.done)
		c.cancel()
		c.release()
		c.s.mu.Lock()
		delete(c.s.sockets, c)
		c.s.mu.Unlock()
		c.s.metrics.subscribers.Add(-1)
	})
}

// lagReason tells a client that fell behind where to resume.
func (c *socket) lagReason() string {
	if c.runID == "" {
		return "too slow: reconnect (this stream has no backlog: read missed events from each run's stream)"
	}
	return fmt.Sprintf("too slow: reconnect with after=%d", c.lastOut.Load())
}

// send queues a message. When the client's queue is full, it waits up to
// Config.WSSlowAfter for room (a backlog burst drains in far less), then
// disconnects the client as too slow, naming where to resume.
func (c *socket) send(m outMsg) bool {
	select {
	case c.out <- m:
		return true
	case <-c.done:
		return false
	default:
	}
	t := time.NewTimer(c.s.cfg.WSSlowAfter)
	defer t.Stop()
	select {
	case c.out <- m:
		return true
	case <-c.done:
		return false
	case <-t.C:
		c.s.metrics.lagged.Add(1)
		c.close(CloseLagged, c.lagReason())
		return false
	}
}

func (c *socket) sendJSON(m Message) bool {
	b, err := json.Marshal(m)
	if err != nil {
		c.close(websocket.CloseInternalServerErr, "encoding: "+err.Error())
		return false
	}
	return c.send(outMsg{b: b})
}

// pump moves the run's events from the ledger to the client's queue.
func (c *socket) pump(sub *ledger.Subscription) {
	defer c.s.socketWG.Done()
	defer sub.Close()
	for ev := range sub.C {
		b, err := c.s.encoded(ev)
		if err != nil {
			c.close(websocket.CloseInternalServerErr, "encoding: "+err.Error())
			return
		}
		if !c.send(outMsg{b: b, seq: ev.Seq}) {
			return
		}
	}
	switch err := sub.Err(); {
	case errors.Is(err, ledger.ErrLagged):
		c.s.metrics.lagged.Add(1)
		c.close(CloseLagged, c.lagReason())
	case errors.Is(err, ledger.ErrClosed):
		c.close(websocket.CloseGoingAway, "server shutting down")
	case err != nil && c.s.ctx.Err() == nil:
		select {
		case <-c.done:
		default:
			c.close(websocket.CloseInternalServerErr, err.Error())
		}
	}
}

// write sends queued messages and keepalive pings.
func (c *socket) write() {
	defer c.s.socketWG.Done()
	ping := time.NewTicker(c.s.cfg.WSPing)
	defer ping.Stop()
	for {
		select {
		case m := <-c.out:
			if c.s.beforeWrite != nil {
				c.s.beforeWrite()
			}
			c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := c.conn.WriteMessage(websocket.TextMessage, m.b); err != nil {
				c.close(websocket.CloseAbnormalClosure, "write failed")
				return
			}
			if m.seq > 0 {
				c.lastOut.Store(m.seq)
				c.s.metrics.eventsSent.Add(1)
			}
		case <-ping.C:
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)); err != nil {
				c.close(websocket.CloseAbnormalClosure, "ping failed")
				return
			}
		case <-c.done:
			return
		}
	}
}

// read takes the client's review messages and answers each with an ack or
// an error; it also notices pongs and the client going away.
func (c *socket) read(ctx context.Context) {
	defer c.s.socketWG.Done()
	wait := 2 * c.s.cfg.WSPing
	c.conn.SetReadLimit(c.s.cfg.WSReadLimit)
	c.conn.SetReadDeadline(time.Now().Add(wait))
	c.conn.SetPongHandler(func(string) error {
		c.conn.SetReadDeadline(time.Now().Add(wait))
		return nil
	})
	for {
		_, data, err := c.conn.ReadMessage()
		if err != nil {
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				c.close(websocket.CloseMessageTooBig, fmt.Sprintf("a client message may be at most %d bytes", c.s.cfg.WSReadLimit))
			case websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway):
				c.close(websocket.CloseNormalClosure, "")
			default:
				c.close(websocket.CloseGoingAway, "connection lost")
			}
			return
		}
		c.conn.SetReadDeadline(time.Now().Add(wait))
		// The same decoder as the HTTP endpoints: a field the op does not
		// take is refused, and the whole plan is only ever "all": true.
		op, err := decodeReview(data, reviewFrom{})
		if err != nil {
			if !c.sendJSON(Message{Type: "error", ID: op.ID, Op: op.Op, Error: &apiError{Code: "bad_request", Message: err.Error()}}) {
				return
			}
			continue
		}
		// The token's scope first: a refused op learns nothing of the run.
		if e := c.s.opAllowed(c.p, op.Op); e != nil {
			if !c.sendJSON(Message{Type: "error", ID: op.ID, Op: op.Op, Error: e}) {
				return
			}
			continue
		}
		runID := c.runID
		switch {
		case runID == "" && op.Run == "":
			if !c.sendJSON(Message{Type: "error", ID: op.ID, Op: op.Op, Error: &apiError{Code: "bad_request", Message: "on the all-runs stream, a message names its run"}}) {
				return
			}
			continue
		case runID == "":
			runID = op.Run
		case op.Run != "" && op.Run != runID:
			if !c.sendJSON(Message{Type: "error", ID: op.ID, Op: op.Op, Error: &apiError{Code: "bad_request", Message: "this stream is run " + runID + "'s, not " + op.Run + "'s"}}) {
				return
			}
			continue
		}
		m := Message{Type: "ack", ID: op.ID, Op: op.Op}
		if err := c.s.review(ctx, runID, op, c.who); err != nil {
			rec := &errorRecorder{}
			c.s.fail(rec, err)
			m = Message{Type: "error", ID: op.ID, Op: op.Op, Error: rec.err()}
		}
		if !c.sendJSON(m) {
			return
		}
	}
}

// claimSocket takes one of the caller's WebSocket slots before an upgrade;
// at its cap it answers 429 with Retry-After and false. release gives the
// slot back (once).
func (s *Server) claimSocket(w http.ResponseWriter, r *http.Request) (p principal, release func(), ok bool) {
	p, _ = caller(r)
	if !s.limits.openSocket(p.name) {
		s.tooMany(w, 30*time.Second, fmt.Sprintf("token %s holds %d WebSockets open, its cap: close one", p.name, s.cfg.MaxSocketsPerToken))
		return p, nil, false
	}
	var once sync.Once
	return p, func() { once.Do(func() { s.limits.closeSocket(p.name) }) }, true
}

// opAllowed checks a socket message's op against its token's scopes and
// rate limit: nil, or the error to answer with.
func (s *Server) opAllowed(p principal, op string) *apiError {
	sc, ok := opScopes[op]
	if !ok {
		sc = ScopeAdmin // fail closed: every op has a scope
	}
	if !p.has(sc) {
		s.metrics.forbidden.add(string(sc))
		return forbidden(p, sc, op)
	}
	if wait, ok := s.limits.allow(p.name); !ok {
		s.metrics.rateLimited.Add(1)
		secs := retryAfter(wait)
		return &apiError{Code: "rate_limited", Message: fmt.Sprintf("token %s is over its rate limit: retry after %ds", p.name, secs), Details: map[string]int{"retry_after": secs}}
	}
	return nil
}

// errorRecorder captures the error answer fail would send over HTTP.
type errorRecorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *errorRecorder) Header() http.Header {
	if r.header == nil {
		r.header = http.Header{}
	}
	return r.header
}
func (r *errorRecorder) Write(b []byte) (int, error) {
	r.body = append(r.body, b...)
	return len(b), nil
}
func (r *errorRecorder) WriteHeader(code int) { r.status = code }

func (r *errorRecorder) err() *apiError {
	var body struct {
		Error apiError `json:"error"`
	}
	if json.Unmarshal(r.body, &body) != nil || body.Error.Code == "" {
		return &apiError{Code: "internal", Message: fmt.Sprintf("status %d", r.status)}
	}
	return &body.Error
}

// encodedCache keeps the last events' WebSocket frames, so that an event
// fanned out to many subscribers of a run is encoded once.
type encodedCache struct {
	mu   sync.Mutex
	m    map[encodedKey][]byte
	ring []encodedKey
	next int
}

type encodedKey struct {
	run string
	seq uint64
}

const encodedCacheSize = 1024

// encoded returns the frame of an event (cached).
func (s *Server) encoded(ev ledger.Event) ([]byte, error) {
	k := encodedKey{ev.RunID, ev.Seq}
	c := &s.frames
	c.mu.Lock()
	if b, ok := c.m[k]; ok {
		c.mu.Unlock()
		return b, nil
	}
	c.mu.Unlock()
	// Message{Type: "event", Event: &ev}, with the event's data as stored.
	b, err := AppendEventJSON([]byte(`{"type":"event","event":`), ev)
	if err != nil {
		return nil, err
	}
	b = append(b, '}')
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[encodedKey][]byte, encodedCacheSize)
		c.ring = make([]encodedKey, encodedCacheSize)
	}
	if _, ok := c.m[k]; !ok {
		delete(c.m, c.ring[c.next])
		c.ring[c.next] = k
		c.next = (c.next + 1) % encodedCacheSize
		c.m[k] = b
	}
	return b, nil
}
