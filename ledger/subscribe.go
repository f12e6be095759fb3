package ledger

import (
	"context"
	"fmt"
	"sync"
)

// hub fans committed events out to live subscriptions. publish never blocks:
// a subscription whose queue is full is ended with ErrLagged.
type hub struct {
	mu     sync.Mutex
	subs   map[string]map[*Subscription]struct{}
	closed bool
	wg     sync.WaitGroup // subscription goroutines
}

func (h *hub) init() { h.subs = make(map[string]map[*Subscription]struct{}) }

func (h *hub) add(s *Subscription) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	m := h.subs[s.runID]
	if m == nil {
		m = make(map[*Subscription]struct{})
		h.subs[s.runID] = m
	}
	m[s] = struct{}{}
	h.wg.Add(1)
	return nil
}

func (h *hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.subs[s.runID]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(h.subs, s.runID)
		}
	}
}

func (h *hub) publish(events []Event) {
	if len(events) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range events {
		for s := range h.subs[ev.RunID] {
			select {
			case s.live <- ev:
			default:
				delete(h.subs[ev.RunID], s)
				s.end(ErrLagged)
			}
		}
	}
}

func (h *hub) closeAll(err error) {
	h.mu.Lock()
	h.closed = true
	for _, m := range h.subs {
		for s := range m {
			s.end(err)
		}
	}
	h.subs = make(map[string]map[*Subscription]struct{})
	h.mu.Unlock()
	h.wg.Wait()
}

// Subscription delivers a run's events in order, without gaps or duplicates.
type Subscription struct {
	C <-chan Event // closed when the subscription ends; then Err says why

	runID string
	c     chan Event
	live  chan Event // filled by the hub
	stop  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error
}

// end stops the subscription with err (the first reason wins).
func (s *Subscription) end(err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.stop)
	})
}

// Err is nil while running; after C is closed it says why: the context's
// error, ErrLagged when the subscriber fell behind (resubscribe from the last
// seq seen), ErrClosed when the ledger closed, nil after Close.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription. C is closed soon after.
func (s *Subscription) Close() { s.end(nil) }

// Subscribe delivers the backlog after seq `after` and then live events. A slow
// reader never blocks writers: when more than Config.SubscriberBuffer live
// events wait for it, it is ended with ErrLagged instead. Errors: ErrNotFound
// (no such run), ErrClosed.
func (l *Ledger) Subscribe(ctx context.Context, runID string, after uint64) (*Subscription, error) {
	if _, err := l.GetRun(ctx, runID); err != nil {
		return nil, err
	}
	c := make(chan Event)
	s := &Subscription{C: c, runID: runID, c: c, live: make(chan Event, l.cfg.SubscriberBuffer), stop: make(chan struct{})}
	// Register before reading the backlog: every event committed after this
	// point is queued live; every event before it is in the store.
	if err := l.hub.add(s); err != nil {
		return nil, err
	}
	go l.serve(ctx, s, after)
	return s, nil
}

func (l *Ledger) serve(ctx context.Context, s *Subscription, last uint64) {
	defer l.hub.wg.Done()
	defer close(s.c)
	defer l.hub.remove(s)
	send := func(ev Event) bool {
		select {
		case s.c <- ev:
			last = ev.Seq
			return true
		case <-s.stop:
		case <-ctx.Done():
			s.end(ctx.Err())
		}
		return false
	}
	// catchUp delivers stored events after last, up to seq `upto` (0: all).
	catchUp := func(upto uint64) bool {
		for {
			evs, err := l.Events(ctx, s.runID, last, 256)
			if err != nil {
				s.end(fmt.Errorf("ledger: subscription backlog: %w", err))
				return false
			}
			for _, ev := range evs {
				if upto > 0 && ev.Seq > upto {
					return true
				}
				if !send(ev) {
					return false
				}
			}
			if len(evs) < 256 {
				return true
			}
		}
	}
	if !catchUp(0) {
		return
	}
	for {
		select {
		case ev := <-s.live:
			if ev.Seq <= last {
				continue // already delivered from the backlog
			}
			if ev.Seq > last+1 && !catchUp(ev.Seq-1) {
				return
			}
			if ev.Seq == last+1 && !send(ev) {
				return
			}
		case <-s.stop:
			return
		case <-ctx.Done():
			s.end(ctx.Err())
			return
		}
	}
}
