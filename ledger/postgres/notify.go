package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// publish hands committed events to this Store's subscribers and notes the
// highest seq delivered per run.
func (s *Store) publish(events []ledger.Event) {
	if len(events) == 0 {
		return
	}
	s.hub.Publish(events)
	s.seenMu.Lock()
	for _, ev := range events {
		if ev.Seq > s.seen[ev.RunID] {
			s.seen[ev.RunID] = ev.Seq
		}
	}
	s.seenMu.Unlock()
}

// notifier sends the notifications of committed Applies, as many as are
// waiting, in one statement (one round trip, a transaction of its own) with
// synchronous_commit off (a node alone on its ledger sends none: peers).
// NOTIFY holds a global lock through its transaction's commit, so
// notifying inside every Apply would serialize all commits behind one
// another's WAL flush. A notification lost in a crash is
// covered by the subscribers' poll.
func (s *Store) notifier() {
	defer s.wg.Done()
	ctx, cancel := s.stopCtx()
	defer cancel()
	for {
		var batch []string
		select {
		case <-ctx.Done():
			return
		case b := <-s.notes:
			batch = append(batch, b...)
		}
	drain:
		for len(batch) < 1000 {
			select {
			case b := <-s.notes:
				batch = append(batch, b...)
			default:
				break drain
			}
		}
		if len(batch) == 0 {
			continue
		}
		_, err := s.pool.Exec(ctx, s.q.notify, s.q.channel, batch)
		if err != nil && ctx.Err() == nil {
			s.log.Debug("sending notifications failed; other nodes' subscribers get these events by polling", "err", s.redact(err))
		}
	}
}

// stopCtx is a context cancelled when the Store closes.
func (s *Store) stopCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// listenLoop LISTENs on a dedicated connection and publishes other
// processes' events for the runs this Store has subscribers for. A broken
// connection is opened again (after a poll covers what it missed).
func (s *Store) listenLoop() {
	defer s.wg.Done()
	ctx, cancel := s.stopCtx()
	defer cancel()
	// The poll loop runs beside it: it also covers the time the listening
	// connection is down.
	s.wg.Add(1)
	go s.pollLoop(ctx)
	if s.pooled && s.listenCfg == nil {
		// LISTEN through a pooler in transaction mode registers on a server
		// connection that goes back to the pool: nothing would arrive.
		// The poll alone serves subscribers (Open logged it).
		<-ctx.Done()
		return
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("the ledger's LISTEN connection broke; events of other nodes come by polling until it is back", "err", s.redact(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (s *Store) listen(ctx context.Context) error {
	cc := s.pool.Config().ConnConfig.Copy()
	if s.listenCfg != nil {
		cc = s.listenCfg.Copy()
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.q.channel}.Sanitize()); err != nil {
		return err
	}
	// Hello: the nodes already up learn at once that someone listens (else
	// at their next heartbeat), and notify from now on.
	hello, _ := json.Marshal(notification{Sender: s.id})
	if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", s.q.channel, string(hello)); err != nil {
		return err
	}
	s.pollOnce(ctx) // what was committed while nobody listened
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var p notification
		if json.Unmarshal([]byte(n.Payload), &p) != nil || p.Sender == s.id || p.Last < p.First {
			continue
		}
		if p.RunID == "" { // another node's hello
			s.peers.CompareAndSwap(0, 1)
			continue
		}
		if !slices.Contains(s.hub.Runs(), p.RunID) {
			continue
		}
		s.seenMu.Lock()
		seen := s.seen[p.RunID]
		s.seenMu.Unlock()
		if p.Last <= seen {
			continue
		}
		after := max(seen, p.First-1)
		evs, err := s.Events(ctx, p.RunID, after, int(p.Last-after))
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			continue // the poll delivers them
		}
		s.publish(evs)
	}
}

// pollLoop runs pollOnce every Config.Poll.
func (s *Store) pollLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.pollOnce(ctx)
		}
	}
}

// pollOnce compares the last seq of every subscribed run with what was
// delivered and publishes the newest event of each run that is behind: the
// subscription fills the gap before it from the table.
func (s *Store) pollOnce(ctx context.Context) {
	runs := s.hub.Runs()
	s.seenMu.Lock()
	for id := range s.seen {
		if !slices.Contains(runs, id) {
			delete(s.seen, id)
		}
	}
	s.seenMu.Unlock()
	if len(runs) == 0 {
		return
	}
	rows, err := s.pool.Query(ctx, s.q.lastSeqs, runs)
	if err != nil {
		return
	}
	behind := map[string]uint64{}
	for rows.Next() {
		var id string
		var last int64
		if rows.Scan(&id, &last) != nil {
			break
		}
		s.seenMu.Lock()
		seen := s.seen[id]
		s.seenMu.Unlock()
		if uint64(last) > seen {
			behind[id] = uint64(last)
		}
	}
	rows.Close()
	for id, last := range behind {
		evs, err := s.Events(ctx, id, last-1, 1)
		if err != nil {
			return
		}
		s.publish(evs)
	}
}
