package ui

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/ledger"
)

// The all-runs stream (GET /v1/ws) carries the live events of every run this
// server creates, drives or reviews. The server holds the data directory, so
// every change of every run goes through it: it follows a run from the
// moment it touches it until the run ends with no drive going on, and
// resumes it from the last event it saw when it touches it again. It has no
// backlog: a client that needs every event of a run follows that run's own
// stream with ?after=SEQ.

// watcher follows one run for the all-runs stream.
type watcher struct {
	gen int // bumped by every watch while it runs
}

func isTerminalEvent(t ledger.EventType) bool {
	return t == ledger.EventRunCompleted || t == ledger.EventRunFailed || t == ledger.EventRunCancelled
}

// watch makes sure runID's events reach the all-runs stream. fromStart: the
// run is new, so every event it has is news.
func (s *Server) watch(runID string, fromStart bool) {
	s.metrics.ledger.touch(runID) // its share of the runs and actions gauges may change
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	if w := s.watchers[runID]; w != nil {
		w.gen++
		s.mu.Unlock()
		return
	}
	w := &watcher{gen: 1}
	s.watchers[runID] = w
	after, known := s.lastSeq[runID]
	if fromStart {
		after, known = 0, true
	}
	s.socketWG.Add(1)
	s.mu.Unlock()
	if !known {
		// Before the caller acts on the run: nothing it causes is missed.
		var err error
		if after, err = s.lastEventSeq(s.ctx, runID); err != nil {
			s.mu.Lock()
			delete(s.watchers, runID)
			s.mu.Unlock()
			s.socketWG.Done()
			return
		}
	}
	go s.follow(runID, w, after)
}

// lastEventSeq finds a run's last event seq with O(log n) point reads.
func (s *Server) lastEventSeq(ctx context.Context, runID string) (uint64, error) {
	exists := func(seq uint64) (bool, error) { // is there an event with seq > seq?
		evs, err := s.led.Events(ctx, runID, seq, 1)
		return len(evs) > 0, err
	}
	lo, hi := uint64(0), uint64(64)
	for {
		more, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !more {
			break
		}
		lo, hi = hi, hi*2
	}
	// The last seq is in (lo, hi]; events with seq > lo exist unless lo == 0.
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		more, err := exists(mid - 1)
		if err != nil {
			return 0, err
		}
		if more {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}

func (s *Server) follow(runID string, w *watcher, after uint64) {
	defer s.socketWG.Done()
	stop := func() {
		s.mu.Lock()
		delete(s.watchers, runID)
		s.lastSeq[runID] = after
		s.mu.Unlock()
	}
	s.mu.Lock()
	gen := w.gen
	s.mu.Unlock()
	for {
		sub, err := s.led.Subscribe(s.ctx, runID, after)
		if err != nil {
			stop()
			return
		}
		for ev := range sub.C {
			after = ev.Seq
			s.broadcast(ev)
			if !isTerminalEvent(ev.Type) {
				continue
			}
			s.mu.Lock()
			done := w.gen == gen && s.drives[runID] == 0
			gen = w.gen
			if done {
				delete(s.watchers, runID)
				s.lastSeq[runID] = after
			}
			s.mu.Unlock()
			if done {
				sub.Close()
				for range sub.C {
				}
				return
			}
		}
		if !errors.Is(sub.Err(), ledger.ErrLagged) {
			stop()
			return
		}
	}
}

// A joiner is an all-runs client whose upgrade is being answered: it is
// counted from before the answer goes out, so that a client that sends a
// request as soon as its upgrade is answered sees everything that request
// causes. What arrives meanwhile is kept (at most the socket's queue) and
// goes first to the socket's queue when it is registered.
type joiner struct {
	held     []outMsg
	overflow bool
}

// allRunsClients returns the clients of the all-runs stream (/v1/ws); m,
// when not nil, is kept for the clients joining (in the same critical
// section, so each client gets every message once, in order).
func (s *Server) allRunsClients(m *outMsg) []*socket {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m != nil {
		for j := range s.joining {
			if len(j.held) < s.cfg.WSBuffer {
				j.held = append(j.held, *m)
			} else {
				j.overflow = true
			}
		}
	}
	clients := make([]*socket, 0, len(s.sockets))
	for c := range s.sockets {
		if c.runID == "" {
			clients = append(clients, c)
		}
	}
	return clients
}

// anyAllRuns reports whether the all-runs stream has a client, joined or
// joining.
func (s *Server) anyAllRuns() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sockets) > 0 || len(s.joining) > 0
}

// broadcast sends an event to every all-runs client.
func (s *Server) broadcast(ev ledger.Event) {
	if !s.anyAllRuns() {
		return
	}
	b, err := s.encoded(ev)
	if err != nil {
		return
	}
	for _, c := range s.allRunsClients(&outMsg{b: b}) {
		c.send(outMsg{b: b})
	}
}

// serveAllWS is GET /v1/ws: live events of every run (see above).
func (s *Server) serveAllWS(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("after") {
		writeError(w, http.StatusBadRequest, "bad_request", "the all-runs stream is live only: follow one run's stream (/v1/runs/{id}/ws?after=SEQ) to read its backlog", nil)
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
	p, release, ok := s.claimSocket(w, r)
	if !ok {
		return
	}
	j := &joiner{}
	s.mu.Lock()
	s.joining[j] = struct{}{}
	s.mu.Unlock()
	conn, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		s.mu.Lock()
		delete(s.joining, j)
		s.mu.Unlock()
		release()
		return
	}
	if f := s.afterUpgrade.Load(); f != nil {
		(*f)()
	}
	ctx, cancel := context.WithCancel(s.ctx)
	c := &socket{s: s, conn: conn, who: approver(r), p: p, release: release, out: make(chan outMsg, s.cfg.WSBuffer), done: make(chan struct{}), cancel: cancel}
	s.mu.Lock()
	delete(s.joining, j)
	if s.closing {
		s.mu.Unlock()
		release()
		cancel()
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down"), time.Now().Add(time.Second))
		conn.Close()
		return
	}
	for _, m := range j.held {
		c.out <- m // room: at most the queue's size was kept
	}
	s.sockets[c] = struct{}{}
	s.socketWG.Add(2)
	s.mu.Unlock()
	s.metrics.subscribers.Add(1)
	go c.write()
	go c.read(ctx)
	if j.overflow {
		s.metrics.lagged.Add(1)
		c.close(CloseLagged, c.lagReason())
	}
}
