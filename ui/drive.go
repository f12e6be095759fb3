package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
)

var errShuttingDown = errors.New("ui: the server is shutting down")

// spawn runs fn (a drive of runID) in the background under the server's
// context. When it returns, the run is driven again if someone asked for it
// meanwhile (kick), and the webhook is told if the run waits for a person.
func (s *Server) spawn(runID string, fn func(ctx context.Context) error) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return errShuttingDown
	}
	s.driveWG.Add(1)
	s.drives[runID]++
	s.mu.Unlock()
	go s.loop(runID, fn)
	return nil
}

// kick drives runID in the background: at once if no drive of it is going
// on, else once more after the current one (which may have read the run's
// state before the change that asked for it).
func (s *Server) kick(runID string) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	if n := s.drives[runID]; n > 0 {
		s.drives[runID] = n | again
		s.mu.Unlock()
		return
	}
	s.driveWG.Add(1)
	s.drives[runID] = 1
	s.mu.Unlock()
	go s.loop(runID, s.resumeFn(runID))
}

// again marks a run whose drive must run once more; the low bits count drives.
const again = 1 << 30

func (s *Server) resumeFn(runID string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := s.eng.Resume(ctx, runID, nil)
		return err
	}
}

func (s *Server) loop(runID string, fn func(ctx context.Context) error) {
	defer s.driveWG.Done()
	wait := time.Second
	for {
		s.metrics.drives.Add(1)
		if err := fn(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("drive stopped with an error", "run_id", runID, "err", err)
			// Not when the shared ledger's tables moved past this binary
			// (ErrFormat too): this node writes nothing more, and the nodes
			// of the newer version adopt the run.
			if (errors.Is(err, ledger.ErrNoSpace) || errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, ledger.ErrLeaseExpired)) && !errors.Is(err, ledger.ErrFormat) {
				// The disk filled mid-run: nothing was lost, and the run
				// goes on by itself once space is back (no restart needed).
				if errors.Is(err, ledger.ErrNoSpace) {
					s.log.Warn("no space left: the run continues once space is freed", "run_id", runID, "retry_in", wait)
				} else {
					s.log.Warn("the ledger's database is unavailable or this node's lease lapsed: the run continues once it is back", "run_id", runID, "retry_in", wait)
				}
				select {
				case <-time.After(wait):
					wait = min(2*wait, 30*time.Second)
					fn = s.resumeFn(runID)
					continue
				case <-s.ctx.Done():
				}
			}
		}
		s.mu.Lock()
		n := s.drives[runID]
		if n&again != 0 && !s.closing && n&^again == 1 {
			s.drives[runID] = 1
			s.mu.Unlock()
			fn = s.resumeFn(runID)
			continue
		}
		if n&^again <= 1 {
			delete(s.drives, runID)
			if ch, ok := s.idle[runID]; ok {
				close(ch)
				delete(s.idle, runID)
			}
		} else {
			s.drives[runID] = n - 1
		}
		s.mu.Unlock()
		break
	}
	if s.ctx.Err() == nil {
		s.afterDrive(runID)
	}
}

// waitIdle returns once no drive of runID is going on in this server (or ctx
// ends).
func (s *Server) waitIdle(ctx context.Context, runID string) error {
	s.mu.Lock()
	if s.drives[runID] == 0 {
		s.mu.Unlock()
		return nil
	}
	ch, ok := s.idle[runID]
	if !ok {
		ch = make(chan struct{})
		s.idle[runID] = ch
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// afterDrive tells the webhook when the run now waits for a person.
func (s *Server) afterDrive(runID string) {
	if s.cfg.Notify == "" {
		return
	}
	doc, err := s.led.Doc(s.ctx, runID)
	if err != nil {
		return
	}
	if doc.Run.Status != ledger.RunAwaitingApproval && doc.Run.Status != ledger.RunPaused {
		return
	}
	var waiting []string
	for _, a := range doc.Actions {
		if a.Status == ledger.StatusPending || a.Status == ledger.StatusNeedsReview {
			waiting = append(waiting, a.ID)
		}
	}
	if len(waiting) == 0 {
		return
	}
	body, _ := json.Marshal(map[string]any{"run_id": runID, "status": doc.Run.Status, "waiting": waiting, "updated_at": doc.Run.UpdatedAt.UTC().Format(time.RFC3339)})
	s.notify(runID, body) // notify.go: signed, retried
}

// Drive drives one run in the background and follows its events, as
// ResumeRunning does for every running run: on a shared ledger, for a run
// another node left behind (its lease expired).
func (s *Server) Drive(runID string) {
	s.watch(runID, false)
	s.kick(runID)
}

// Follow streams a run's events, from its first, to the all-runs clients
// (/v1/ws) without driving it: on a shared ledger, for a run another node
// created.
func (s *Server) Follow(runID string) { s.watch(runID, true) }

// ResumeRunning drives every run that was running when the service stopped
// (in the background), every run a person's approval or resolution left to
// go on (recorded just before the service stopped, not driven yet) and every
// cancelled run with actions in flight, and returns how many it started.
func (s *Server) ResumeRunning(ctx context.Context) (int, error) {
	n := 0
	after := ""
	for {
		runs, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: ledger.RunRunning, After: after, Limit: 1000})
		if err != nil {
			return n, fmt.Errorf("ui: listing running runs: %w", err)
		}
		for _, r := range runs {
			s.watch(r.ID, false)
			s.kick(r.ID)
			n++
		}
		if next == "" {
			break
		}
		after = next
	}
	// A person's approval or resolution recorded by a process that stopped
	// before its drive went on: a run awaiting approval with an action
	// approved, or paused by the executor (not by a person) with nothing left
	// in needs_review. A drive takes it on from there (the shared ledger
	// adopts the same runs of a dead node).
	for _, st := range []ledger.RunStatus{ledger.RunAwaitingApproval, ledger.RunPaused} {
		after = ""
		for {
			runs, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: st, After: after, Limit: 1000})
			if err != nil {
				return n, fmt.Errorf("ui: listing %s runs: %w", st, err)
			}
			for _, r := range runs {
				if r.PausedBy != "" {
					continue // a person's pause: only a person's resume lifts it
				}
				rows, err := s.led.Actions(ctx, r.ID)
				if err != nil {
					return n, fmt.Errorf("ui: reading run %s: %w", r.ID, err)
				}
				if stranded(st, rows) {
					s.watch(r.ID, false)
					s.kick(r.ID)
					n++
				}
			}
			if next == "" {
				break
			}
			after = next
		}
	}
	// A run cancelled while actions were in flight, by a process that then
	// stopped, has actions whose outcome is unknown: a drive concludes them
	// (needs_review or skipped) and starts nothing.
	after = ""
	for {
		runs, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: ledger.RunCancelled, After: after, Limit: 1000})
		if err != nil {
			return n, fmt.Errorf("ui: listing cancelled runs: %w", err)
		}
		for _, r := range runs {
			rows, err := s.led.Actions(ctx, r.ID)
			if err != nil {
				return n, fmt.Errorf("ui: reading run %s: %w", r.ID, err)
			}
			if slices.ContainsFunc(rows, func(a ledger.Action) bool {
				return a.Status == ledger.StatusClaimed || (a.Key != "" && a.Attempts > 0 && (a.Status == ledger.StatusPending || a.Status == ledger.StatusApproved))
			}) {
				s.kick(r.ID)
				n++
			}
		}
		if next == "" {
			return n, nil
		}
		after = next
	}
}

// stranded reports whether a run waiting with status st has nothing left for
// a person: no action in needs_review, and when it awaits approval, an
// action approved and never claimed.
func stranded(st ledger.RunStatus, rows []ledger.Action) bool {
	if slices.ContainsFunc(rows, func(a ledger.Action) bool { return a.Status == ledger.StatusNeedsReview }) {
		return false
	}
	return st == ledger.RunPaused || slices.ContainsFunc(rows, func(a ledger.Action) bool {
		return a.Status == ledger.StatusApproved && a.Attempts == 0
	})
}

// Shutdown stops the server's work: no new drive starts, WebSockets are
// closed with "going away", drives in flight get until ctx ends to finish
// (their tool calls complete and are recorded), then they are cancelled and
// waited for. Close the ledger after it returns. Stop the HTTP server first
// (http.Server.Shutdown) so that no new request arrives.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	socks := make([]*socket, 0, len(s.sockets))
	for c := range s.sockets {
		socks = append(socks, c)
	}
	s.mu.Unlock()
	for _, c := range socks {
		c.close(websocket.CloseGoingAway, "server shutting down: reconnect later with after=<last seq>")
	}
	drained := make(chan struct{})
	go func() {
		s.driveWG.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = fmt.Errorf("ui: drives still running at the shutdown deadline were cancelled: %w", ctx.Err())
	}
	s.cancel()
	<-drained
	s.socketWG.Wait()
	s.notifyWG.Wait()
	return err
}

// signals is the server's live view of what the engine reports (part of its
// executor.Observer): a request that starts a drive (create, replay, fork)
// waits on it until the drive has begun its work, instead of hooking into
// the engine.
type signals struct {
	executor.NopObserver
	mu    sync.Mutex
	waits map[string]map[chan struct{}]struct{} // run id → waiters
}

func newSignals() *signals { return &signals{waits: map[string]map[chan struct{}]struct{}{}} }

// begun returns a channel that is closed when the engine next starts an
// attempt of runID, adopts a recorded output for it, looks up an effect or
// parks an action for a person; stop forgets the wait.
func (g *signals) begun(runID string) (ch <-chan struct{}, stop func()) {
	c := make(chan struct{})
	g.mu.Lock()
	if g.waits[runID] == nil {
		g.waits[runID] = map[chan struct{}]struct{}{}
	}
	g.waits[runID][c] = struct{}{}
	g.mu.Unlock()
	return c, func() {
		g.mu.Lock()
		if w, ok := g.waits[runID]; ok {
			delete(w, c)
			if len(w) == 0 {
				delete(g.waits, runID)
			}
		}
		g.mu.Unlock()
	}
}

func (g *signals) fire(runID string) {
	g.mu.Lock()
	w := g.waits[runID]
	delete(g.waits, runID)
	g.mu.Unlock()
	for c := range w {
		close(c)
	}
}

func (g *signals) AttemptStarted(a executor.AttemptInfo)        { g.fire(a.RunID) }
func (g *signals) Adopted(a executor.AttemptInfo)               { g.fire(a.RunID) }
func (g *signals) LookupDone(a executor.AttemptInfo, _ bool)    { g.fire(a.RunID) }
func (g *signals) NeedsReview(a executor.AttemptInfo, _ string) { g.fire(a.RunID) }
