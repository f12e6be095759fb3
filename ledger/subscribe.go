package ledger

import (
	"context"
	"fmt"
	"sync"
)

// Hub fans committed events out to live subscriptions, for every backend:
// a backend publishes each commit's events after the commit is durable and
// serves Subscribe with it. Publish never blocks: a subscription whose queue
// is full is ended with ErrLagged. The zero value is ready to use.
type Hub struct {
	mu     sync.Mutex
	subs   map[string]map[*Subscription]struct{}
	closed bool
	wg     sync.WaitGroup // subscription goroutines
}

func (h *Hub) add(s *Subscription) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if h.subs == nil {
		h.subs = make(map[string]map[*Subscription]struct{})
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

func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.subs[s.runID]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(h.subs, s.runID)
		}
	}
}

// Publish delivers committed events (in seq order per run) to the
// subscriptions of their runs.
func (h *Hub) Publish(events []Event) {
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

// Runs returns the ids of the runs that have live subscriptions (a shared
// ledger fetches other processes' events for these only).
func (h *Hub) Runs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.subs))
	for id := range h.subs {
		ids = append(ids, id)
	}
	return ids
}

// CloseAll ends every subscription with err and refuses new ones; it
// returns once their goroutines are done.
func (h *Hub) CloseAll(err error) {
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

// EventsFunc reads a run's stored events after seq after (a Store's Events).
type EventsFunc func(ctx context.Context, runID string, after uint64, limit int) ([]Event, error)

// Subscribe delivers the backlog after seq `after` (read with events) and
// then live events (Publish). A slow reader never blocks writers: when more
// than buffer live events wait for it, it is ended with ErrLagged instead.
// The caller checks that the run exists first. Errors: ErrClosed.
func (h *Hub) Subscribe(ctx context.Context, runID string, after uint64, buffer int, events EventsFunc) (*Subscription, error) {
	c := make(chan Event)
	s := &Subscription{C: c, runID: runID, c: c, live: make(chan Event, buffer), stop: make(chan struct{})}
	// Register before reading the backlog: every event committed after this
	// point is queued live; every event before it is in the store.
	if err := h.add(s); err != nil {
		return nil, err
	}
	go h.serve(ctx, s, after, events)
	return s, nil
}

func (h *Hub) serve(ctx context.Context, s *Subscription, last uint64, events EventsFunc) {
	defer h.wg.Done()
	defer close(s.c)
	defer h.remove(s)
	f := &feed{ctx: ctx, s: s, last: last, events: events}
	if !f.catchUp(0) {
		return
	}
	for {
		select {
		case ev := <-s.live:
			if !f.live(ev) {
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

// feed delivers a subscription's events in order: the stored backlog,
// then the live ones, reading the store again for a gap.
type feed struct {
	ctx    context.Context
	s      *Subscription
	last   uint64 // seq of the last event delivered
	events EventsFunc
}

// send delivers ev; false: the subscription ended.
func (f *feed) send(ev Event) bool {
	select {
	case f.s.c <- ev:
		f.last = ev.Seq
		return true
	case <-f.s.stop:
	case <-f.ctx.Done():
		f.s.end(f.ctx.Err())
	}
	return false
}

// catchUp delivers stored events after last, up to seq `upto` (0: all).
func (f *feed) catchUp(upto uint64) bool {
	for {
		evs, err := f.events(f.ctx, f.s.runID, f.last, 256)
		if err != nil {
			f.s.end(fmt.Errorf("ledger: subscription backlog: %w", err))
			return false
		}
		for _, ev := range evs {
			if upto > 0 && ev.Seq > upto {
				return true
			}
			if !f.send(ev) {
				return false
			}
		}
		if len(evs) < 256 {
			return true
		}
	}
}

// live delivers a live event: skipped when the backlog delivered it,
// after the stored events it skips over.
func (f *feed) live(ev Event) bool {
	if ev.Seq <= f.last {
		return true // already delivered from the backlog
	}
	if ev.Seq > f.last+1 && !f.catchUp(ev.Seq-1) {
		return false
	}
	if ev.Seq == f.last+1 && !f.send(ev) {
		return false
	}
	return true
}
