package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/docketrun/docket/ledger"
)

// maxGroupOps bounds the ops of one group commit (an Apply with more runs
// alone when nothing else is waiting).
const maxGroupOps = 256

// grouper runs this node's Applies: each in a transaction of its own while
// fewer than Config.Writers transactions are running, and the Applies that
// arrive while that many run wait, then commit together in one transaction
// (group commit: one BEGIN, one set of locking reads, one lease check, one
// COMMIT and one WAL flush for all of them). In that transaction each
// Apply's ops are evaluated after the ones before, exactly as if they had
// come one by one, so every rule sees what the Applies before it wrote.
type grouper struct {
	s   *Store
	max int

	mu      sync.Mutex
	running int
	pending []*applyReq

	groups, grouped, fallbacks atomic.Int64 // groups committed, Applies in them, groups run again one by one
}

// applyReq is one Apply waiting for a group.
type applyReq struct {
	ctx     context.Context
	ops     []ledger.Op
	doc     string // the run whose document the commit reads ("": none)
	results []ledger.Result
	read    docRead
	err     error
	done    chan struct{}
}

func (r *applyReq) finish(results []ledger.Result, read docRead, err error) {
	r.results, r.read, r.err = results, read, err
	close(r.done)
}

// apply commits ops and reads run doc's document in the same transaction
// after them (doc "": none).
func (g *grouper) apply(ctx context.Context, ops []ledger.Op, doc string) ([]ledger.Result, docRead, error) {
	g.mu.Lock()
	if g.running < g.max {
		g.running++
		g.mu.Unlock()
		defer g.release()
		return g.s.applyAlone(ctx, ops, doc)
	}
	r := &applyReq{ctx: ctx, ops: ops, doc: doc, done: make(chan struct{})}
	g.pending = append(g.pending, r)
	g.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		// Still waiting: it leaves the queue, and nothing of it is written.
		// Already taken into a group: that group's COMMIT decides, so it
		// waits for the outcome like any other member.
		g.mu.Lock()
		if i := slices.Index(g.pending, r); i >= 0 {
			g.pending = slices.Delete(g.pending, i, i+1)
			g.mu.Unlock()
			err := ctx.Err()
			return ledger.FailedResults(len(ops), err), docRead{}, err
		}
		g.mu.Unlock()
		<-r.done
	}
	return r.results, r.read, r.err
}

// release ends one running transaction: the Applies waiting, if any, take
// its place as one group.
func (g *grouper) release() {
	g.mu.Lock()
	if len(g.pending) == 0 {
		g.running--
		g.mu.Unlock()
		return
	}
	n, ops := 0, 0
	for n < len(g.pending) && (n == 0 || ops+len(g.pending[n].ops) <= maxGroupOps) {
		ops += len(g.pending[n].ops)
		n++
	}
	take := g.pending[:n:n]
	g.pending = append([]*applyReq(nil), g.pending[n:]...)
	g.mu.Unlock()
	go g.run(take)
}

// run commits reqs as one group, then releases its place.
func (g *grouper) run(reqs []*applyReq) {
	defer g.release()
	live := reqs[:0]
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			r.finish(ledger.FailedResults(len(r.ops), err), docRead{}, err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 1 {
		r := live[0]
		r.finish(g.s.applyAlone(r.ctx, r.ops, r.doc))
		return
	}
	if len(live) == 0 {
		return
	}
	applies := make([][]ledger.Op, len(live))
	docs := make([]string, len(live))
	ctxs := make([]context.Context, len(live))
	for i, r := range live {
		applies[i], docs[i], ctxs[i] = r.ops, r.doc, r.ctx
	}
	ctx, stop := allDone(ctxs)
	results, events, reads, err := g.s.applyOnce(ctx, applies, docs)
	stop()
	if err == nil {
		g.groups.Add(1)
		g.grouped.Add(int64(len(live)))
		g.s.publish(events)
		for i, r := range live {
			r.finish(results[i], reads[i], nil)
		}
		return
	}
	var cu *commitUnknownError
	if errors.As(err, &cu) || refused(err) || errors.Is(err, ledger.ErrClosed) {
		// Decided for all of them: the same COMMIT, the same lease, the
		// same tables.
		for _, r := range live {
			e := g.s.applyErr(r.ctx, err)
			r.finish(ledger.FailedResults(len(r.ops), e), docRead{}, e)
		}
		return
	}
	// A lost race, a hard error of one of them, the database away: each
	// on its own, as if it had never waited for the others.
	g.fallbacks.Add(1)
	for _, r := range live {
		r.finish(g.s.applyAlone(r.ctx, r.ops, r.doc))
	}
}

// allDone returns a context that is cancelled once every one of ctxs is
// (a group's transaction goes on while one of its Applies still waits).
func allDone(ctxs []context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	left := atomic.Int64{}
	left.Store(int64(len(ctxs)))
	stops := make([]func() bool, len(ctxs))
	for i, c := range ctxs {
		stops[i] = context.AfterFunc(c, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}
